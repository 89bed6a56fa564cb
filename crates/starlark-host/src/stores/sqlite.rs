//! [`SqliteStore`]: packages, grants, secrets and provider keys in one
//! SQLite file that only its owner could have written (`fs_checks.rs`),
//! every package, grant and provider row authenticated (`rows.rs`), secrets
//! and keys sealed (`seal.rs`). This file opens the store and keeps the
//! packages; `sqlite_grants.rs` keeps what they are given.

use std::path::Path;
use std::sync::Mutex;

use async_trait::async_trait;
use rusqlite::{params, Connection, OpenFlags, OptionalExtension};

use super::fs_checks::{open_checked, Kind};
use super::records::{InstallStep, Keys, PackageRow};
use super::schema::{migrate, schema_version};
use super::seal::StoreKey;
use super::{InstallOutcome, PackageRecord, PackageStore, StoreError};
use cordon_starlark_protocol::Package;

/// Packages, grants, secrets and provider keys in one SQLite file: the
/// persistent implementation of the store traits, and the operator's
/// commands (`cordon star install`, `grant`, `secret set`, …).
///
/// The file is used only if no other user could have written it (it, and
/// its directory, are the caller's or root's and writable by nobody else;
/// no symlink). Secrets and provider keys are sealed with the
/// [`StoreKey`] (XChaCha20-Poly1305, bound to their row); every other row
/// carries a MAC under a key derived from it, so a row changed outside
/// cordon is refused. Opening checks the key against the database first:
/// a wrong key is an error before anything is read or written. Every
/// change is one transaction.
pub struct SqliteStore {
    pub(super) conn: Mutex<Connection>,
    pub(super) keys: Keys,
}

impl std::fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SqliteStore")
    }
}

pub(super) fn db_err(e: rusqlite::Error) -> StoreError {
    format!("store database: {e}")
}

impl SqliteStore {
    /// Opens (or creates, mode 0600) the database at `path` after checking
    /// that nobody else could have written it, brings its schema up to
    /// date and checks `key` against it.
    pub fn open(path: &Path, key: &StoreKey) -> Result<Self, StoreError> {
        let checked = open_checked(path, Kind::Database, true)?
            .ok_or_else(|| format!("cannot create the store database {}", path.display()))?;
        let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_NO_MUTEX
            | OpenFlags::SQLITE_OPEN_NOFOLLOW;
        let mut conn = Connection::open_with_flags(&checked.path, flags).map_err(|e| {
            format!(
                "cannot open the store database {}: {e}",
                checked.path.display()
            )
        })?;
        checked.still_there()?;
        conn.execute_batch("PRAGMA foreign_keys = ON; PRAGMA busy_timeout = 5000;")
            .map_err(db_err)?;
        let keys = Keys::new(key);
        // The key first: a wrong one must not even migrate the schema.
        let check = if schema_version(&conn)? > 0 {
            conn.query_row("SELECT value FROM meta WHERE name = 'key_check'", [], |r| {
                r.get::<_, Vec<u8>>(0)
            })
            .optional()
            .map_err(db_err)?
        } else {
            None
        };
        if let Some(sealed) = &check {
            if !keys.opens_key_check(sealed) {
                return Err(format!(
                    "the store key does not open {}: it was created with another key \
                     (set {} to that key, or restore its key file)",
                    path.display(),
                    super::seal::STORE_KEY_ENV
                ));
            }
        } else if schema_version(&conn)? > 0 {
            return Err(format!(
                "{} has a schema but no key check: it was not made by cordon, or was changed \
                 outside it; refusing it",
                path.display()
            ));
        }
        migrate(&mut conn)?;
        if check.is_none() {
            conn.execute(
                "INSERT INTO meta (name, value) VALUES ('key_check', ?1)",
                params![keys.seal_key_check()?],
            )
            .map_err(db_err)?;
        }
        Ok(SqliteStore {
            conn: Mutex::new(conn),
            keys,
        })
    }

    /// The schema version of the database (`PRAGMA user_version`).
    pub fn schema_version(&self) -> Result<usize, StoreError> {
        schema_version(&self.conn())
    }

    pub(super) fn conn(&self) -> std::sync::MutexGuard<'_, Connection> {
        self.conn.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn package_row(conn: &Connection, id: &str) -> Result<Option<PackageRow>, StoreError> {
        conn.query_row(
            "SELECT id, version, source_hash, status, package, installed_at, updated_at, mac
             FROM packages WHERE id = ?1",
            params![id],
            |r| {
                Ok(PackageRow {
                    id: r.get(0)?,
                    version: r.get(1)?,
                    source_hash: r.get(2)?,
                    status: r.get(3)?,
                    package: r.get(4)?,
                    installed_at: r.get(5)?,
                    updated_at: r.get(6)?,
                    mac: r.get(7)?,
                })
            },
        )
        .optional()
        .map_err(db_err)
    }

    /// Records `pkg` (its manifest, sources and their hash). Installing a
    /// changed manifest or changed sources over an installed package needs
    /// `upgrade`, as does replacing a row that was changed outside cordon;
    /// grants and secrets are kept across an upgrade (a grant whose package
    /// now reaches more is suspended: [`crate::grant_status`]).
    pub fn install(&self, pkg: &Package, upgrade: bool) -> Result<InstallOutcome, StoreError> {
        let mut conn = self.conn();
        let tx = conn.transaction().map_err(db_err)?;
        let old = Self::package_row(&tx, &pkg.id)?;
        let (row, outcome) = match self.keys.install_step(old.as_ref(), pkg, upgrade)? {
            InstallStep::Unchanged => return Ok(InstallOutcome::Unchanged),
            InstallStep::Write(row, outcome) => (row, outcome),
        };
        tx.execute(
            "INSERT INTO packages (id, version, source_hash, status, package, installed_at,
                                   updated_at, mac)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)
             ON CONFLICT (id) DO UPDATE SET version = ?2, source_hash = ?3, status = ?4,
                package = ?5, installed_at = ?6, updated_at = ?7, mac = ?8",
            params![
                row.id,
                row.version,
                row.source_hash,
                row.status,
                row.package,
                row.installed_at,
                row.updated_at,
                row.mac
            ],
        )
        .map_err(db_err)?;
        tx.commit().map_err(db_err)?;
        Ok(outcome)
    }

    /// The installed package `id`, its row verified.
    pub(super) fn installed(&self, conn: &Connection, id: &str) -> Result<Package, StoreError> {
        let row = Self::package_row(conn, id)?.ok_or_else(|| not_installed(id))?;
        self.keys.verified_package(&row)
    }

    /// Every installed package, by id.
    pub fn packages(&self) -> Result<Vec<PackageRecord>, StoreError> {
        let ids: Vec<String> = {
            let conn = self.conn();
            let mut q = conn
                .prepare("SELECT id FROM packages ORDER BY id")
                .map_err(db_err)?;
            let rows = q.query_map([], |r| r.get(0)).map_err(db_err)?;
            rows.collect::<Result<_, _>>().map_err(db_err)?
        };
        ids.iter()
            .map(|id| {
                self.package_record(id)?
                    .ok_or_else(|| format!("package {id:?} vanished"))
            })
            .collect()
    }

    /// One installed package, or `None`.
    pub fn package_record(&self, id: &str) -> Result<Option<PackageRecord>, StoreError> {
        let conn = self.conn();
        let Some(row) = Self::package_row(&conn, id)? else {
            return Ok(None);
        };
        let grants = Self::grant_rows(&conn, id)?;
        let mut q = conn
            .prepare("SELECT name FROM secrets WHERE package_id = ?1 ORDER BY name")
            .map_err(db_err)?;
        let secrets = q
            .query_map(params![id], |r| r.get(0))
            .map_err(db_err)?
            .collect::<Result<_, _>>()
            .map_err(db_err)?;
        self.keys.package_record(row, grants, secrets).map(Some)
    }
}

/// The error for a package that is not there.
pub(super) fn not_installed(id: &str) -> StoreError {
    format!("package {id:?} is not installed (cordon star install PATH first)")
}

#[async_trait]
impl PackageStore for SqliteStore {
    async fn get(&self, id: &str) -> Result<Option<Package>, StoreError> {
        let conn = self.conn();
        match Self::package_row(&conn, id)? {
            None => Ok(None),
            Some(row) => self.keys.verified_package(&row).map(Some),
        }
    }
}
