//! The store database's schema and its migrations (`PRAGMA user_version`).

use rusqlite::Connection;

use super::StoreError;

fn db_err(e: rusqlite::Error) -> StoreError {
    format!("store database: {e}")
}

/// The schema, one migration per version (`PRAGMA user_version`). Append;
/// never edit one that has shipped.
pub(super) const MIGRATIONS: &[&str] = &[
    // 1: the first schema.
    "CREATE TABLE meta (name TEXT PRIMARY KEY, value BLOB NOT NULL);
     CREATE TABLE packages (
         id TEXT PRIMARY KEY,
         version TEXT NOT NULL,
         source_hash TEXT NOT NULL,
         status TEXT NOT NULL,
         package TEXT NOT NULL,
         installed_at INTEGER NOT NULL,
         updated_at INTEGER NOT NULL);
     CREATE TABLE grants (
         package_id TEXT NOT NULL REFERENCES packages(id) ON DELETE CASCADE,
         permission TEXT NOT NULL,
         granted_by TEXT NOT NULL,
         granted_at INTEGER NOT NULL,
         revoked_by TEXT,
         revoked_at INTEGER,
         PRIMARY KEY (package_id, permission));
     CREATE TABLE secrets (
         package_id TEXT NOT NULL REFERENCES packages(id) ON DELETE CASCADE,
         name TEXT NOT NULL,
         sealed BLOB NOT NULL,
         updated_at INTEGER NOT NULL,
         PRIMARY KEY (package_id, name));
     CREATE TABLE providers (
         scope TEXT NOT NULL,
         scope_id TEXT NOT NULL,
         base_url TEXT NOT NULL,
         model TEXT NOT NULL,
         sealed_key BLOB NOT NULL,
         updated_at INTEGER NOT NULL,
         PRIMARY KEY (scope, scope_id));",
    // 2: rows carry a MAC under the store key (`rows.rs`), and a grant
    // records what it approved. Rows of version 1 have no MAC: they are
    // refused until written again (install --upgrade, grant, provider
    // set), since nothing says they were not changed.
    "ALTER TABLE packages ADD COLUMN mac BLOB;
     ALTER TABLE grants ADD COLUMN approval TEXT;
     ALTER TABLE grants ADD COLUMN mac BLOB;
     ALTER TABLE providers ADD COLUMN mac BLOB;",
];

pub(super) fn schema_version(conn: &Connection) -> Result<usize, StoreError> {
    conn.query_row("PRAGMA user_version", [], |r| r.get::<_, i64>(0))
        .map(|v| v.max(0) as usize)
        .map_err(db_err)
}

pub(super) fn migrate(conn: &mut Connection) -> Result<(), StoreError> {
    let version = schema_version(conn)?;
    if version > MIGRATIONS.len() {
        return Err(format!(
            "the store database has schema version {version}, newer than this cordon's {}: \
             upgrade cordon",
            MIGRATIONS.len()
        ));
    }
    for (i, sql) in MIGRATIONS.iter().enumerate().skip(version) {
        let tx = conn.transaction().map_err(db_err)?;
        tx.execute_batch(sql).map_err(db_err)?;
        tx.execute_batch(&format!("PRAGMA user_version = {}", i + 1))
            .map_err(db_err)?;
        tx.commit().map_err(db_err)?;
    }
    Ok(())
}
