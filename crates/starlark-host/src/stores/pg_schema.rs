//! The PostgreSQL store's schema and its migrations: the SQLite store's
//! (`schema.rs`) in PostgreSQL's types, the same versions, each recorded in `cordon_schema`,
//! run under a transaction-scoped advisory lock so that hosts starting at
//! once run each migration once (the others wait, then find it applied).

use tokio_postgres::Transaction;

use super::pg::pg_err;
use super::records::{now, Keys};
use super::schema::MIGRATIONS;
use super::StoreError;

/// The advisory lock every migration holds ("cordon01" as a number):
/// one migrating host at a time per database.
const MIGRATION_LOCK: i64 = i64::from_be_bytes(*b"cordon01");

/// The version this build's schema is at: SQLite's (`schema.rs`).
pub(super) const LATEST: usize = MIGRATIONS.len();

/// SQLite's migration in PostgreSQL's types: the two schemas are one, so
/// a version means the same tables on both.
fn in_postgres_types(sqlite: &str) -> String {
    sqlite
        .replace(" BLOB", " BYTEA")
        .replace(" INTEGER", " BIGINT")
}

/// What connecting found of the schema and did to it ([`crate::PgStore::migration`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Migration {
    /// The version before.
    pub from: usize,
    /// The version after (this build's).
    pub to: usize,
}

async fn version(tx: &Transaction<'_>) -> Result<usize, StoreError> {
    let exists: bool = tx
        .query_one("SELECT to_regclass('cordon_schema') IS NOT NULL", &[])
        .await
        .map_err(pg_err)?
        .get(0);
    if !exists {
        return Ok(0);
    }
    let v: i32 = tx
        .query_one("SELECT COALESCE(MAX(version), 0) FROM cordon_schema", &[])
        .await
        .map_err(pg_err)?
        .get(0);
    Ok(v.max(0) as usize)
}

/// The schema version of the database.
pub(super) async fn schema_version(tx: &Transaction<'_>) -> Result<usize, StoreError> {
    version(tx).await
}

/// Checks the store key against the database's key check (a wrong key
/// touches nothing), brings the schema to [`LATEST`] and records the key
/// check on a new database: one transaction under the migration lock.
pub(super) async fn migrate(
    tx: &Transaction<'_>,
    keys: &Keys,
    label: &str,
) -> Result<Migration, StoreError> {
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])
        .await
        .map_err(pg_err)?;
    let from = version(tx).await?;
    if from > LATEST {
        return Err(format!(
            "the store database {label} has schema version {from}, newer than this cordon's \
             {LATEST}: upgrade cordon"
        ));
    }
    let check: Option<Vec<u8>> = if from > 0 {
        tx.query_opt("SELECT value FROM meta WHERE name = 'key_check'", &[])
            .await
            .map_err(pg_err)?
            .map(|r| r.get(0))
    } else {
        None
    };
    match &check {
        Some(sealed) if !keys.opens_key_check(sealed) => {
            return Err(format!(
                "the store key does not open {label}: it was created with another key (set {} \
                 to that key on this host)",
                super::seal::STORE_KEY_ENV
            ))
        }
        None if from > 0 => {
            return Err(format!(
                "{label} has a schema but no key check: it was not made by cordon, or was \
                 changed outside it"
            ))
        }
        _ => {}
    }
    if from == 0 {
        tx.batch_execute(
            "CREATE TABLE cordon_schema (version INTEGER PRIMARY KEY, applied_at BIGINT NOT NULL)",
        )
        .await
        .map_err(pg_err)?;
    }
    for (i, sql) in MIGRATIONS.iter().enumerate().skip(from) {
        tx.batch_execute(&in_postgres_types(sql))
            .await
            .map_err(pg_err)?;
        tx.execute(
            "INSERT INTO cordon_schema (version, applied_at) VALUES ($1, $2)",
            &[&((i + 1) as i32), &now()],
        )
        .await
        .map_err(pg_err)?;
    }
    if check.is_none() {
        tx.execute(
            "INSERT INTO meta (name, value) VALUES ('key_check', $1)",
            &[&keys.seal_key_check()?],
        )
        .await
        .map_err(pg_err)?;
    }
    Ok(Migration { from, to: LATEST })
}
