//! [`SqliteStore`]: packages, grants, secrets and provider keys in one
//! SQLite file that only its owner could have written (`fs_checks.rs`),
//! every package, grant and provider row authenticated (`rows.rs`), secrets
//! and keys sealed (`seal.rs`). This file opens the store and keeps the
//! packages; `sqlite_grants.rs` keeps what they are given.

use std::path::Path;
use std::sync::Mutex;

use async_trait::async_trait;
use rusqlite::{params, Connection, OpenFlags, OptionalExtension};
use serde::Serialize;

use super::fs_checks::{open_checked, Kind};
use super::rows::{Field, RowMac};
use super::schema::{migrate, schema_version};
use super::seal::{Sealer, StoreKey};
use super::{PackageStore, StoreError};
use cordon_starlark_protocol::{Package, PackageStatus, Permission};

pub use super::sqlite_grants::{GrantRecord, ProviderScope};

/// What the key check row seals: opening it proves the key is this
/// database's before anything is read or written.
const KEY_CHECK: &[u8] = b"cordon store key check";

/// What [`SqliteStore::install`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum InstallOutcome {
    /// A new package.
    Installed,
    /// The same package (manifest and sources) was installed already.
    Unchanged,
    /// A changed manifest or changed sources replaced the installed ones
    /// (`upgrade` was given).
    Upgraded,
}

/// An installed package, as `list`/`show` report it (no secret values).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PackageRecord {
    /// Package id.
    pub id: String,
    /// Version from the manifest.
    pub version: String,
    /// SHA-256 of its sources.
    pub source_hash: String,
    /// `active` or another status.
    pub status: PackageStatus,
    /// Permissions its manifest requests.
    pub requested: Vec<Permission>,
    /// Its `network_access` targets.
    pub network_access: Vec<String>,
    /// Permissions granted and not revoked, each with whether it still
    /// covers the manifest.
    pub grants: Vec<GrantRecord>,
    /// Names of its secrets (never their values).
    pub secrets: Vec<String>,
    /// When it was installed, and last changed (Unix seconds).
    pub installed_at: i64,
    /// When its sources or status last changed.
    pub updated_at: i64,
}

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
    pub(super) sealer: Sealer,
    pub(super) mac: RowMac,
}

impl std::fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SqliteStore")
    }
}

pub(super) fn db_err(e: rusqlite::Error) -> StoreError {
    format!("store database: {e}")
}

pub(super) fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

/// One package row, every column.
struct PackageRow {
    id: String,
    version: String,
    source_hash: String,
    status: String,
    package: String,
    installed_at: i64,
    updated_at: i64,
    mac: Option<Vec<u8>>,
}

impl PackageRow {
    fn fields(&self) -> [Field<'_>; 7] {
        [
            Field::Text(&self.id),
            Field::Text(&self.version),
            Field::Text(&self.source_hash),
            Field::Text(&self.status),
            Field::Text(&self.package),
            Field::Int(self.installed_at),
            Field::Int(self.updated_at),
        ]
    }
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
        let sealer = key.sealer();
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
            sealer.open("key check", sealed).map_err(|_| {
                format!(
                    "the store key does not open {}: it was created with another key \
                     (set {} to that key, or restore its key file)",
                    path.display(),
                    super::seal::STORE_KEY_ENV
                )
            })?;
        } else if schema_version(&conn)? > 0 {
            return Err(format!(
                "{} has a schema but no key check: it was not made by cordon, or was changed \
                 outside it; refusing it",
                path.display()
            ));
        }
        migrate(&mut conn)?;
        if check.is_none() {
            let sealed = sealer.seal("key check", KEY_CHECK)?;
            conn.execute(
                "INSERT INTO meta (name, value) VALUES ('key_check', ?1)",
                params![sealed],
            )
            .map_err(db_err)?;
        }
        Ok(SqliteStore {
            conn: Mutex::new(conn),
            sealer,
            mac: RowMac::new(key.row_mac_key()),
        })
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

    /// The package of a row whose MAC verifies, and whose contents agree
    /// with its columns.
    fn verified(&self, row: &PackageRow) -> Result<Package, StoreError> {
        let id = &row.id;
        self.mac.check(
            "packages",
            &row.fields(),
            row.mac.as_deref(),
            &format!("package {id:?}'s row"),
            "install it again from a source you trust (cordon star install --upgrade PATH), \
             or remove the database",
        )?;
        let pkg: Package = serde_json::from_str(&row.package)
            .map_err(|e| format!("package {id:?} is unreadable: {e}"))?;
        if pkg.id != *id || pkg.script_hash() != row.source_hash {
            return Err(format!("package {id:?}'s row does not agree with itself"));
        }
        Ok(pkg)
    }

    /// Records `pkg` (its manifest, sources and their hash). Installing a
    /// changed manifest or changed sources over an installed package needs
    /// `upgrade`, as does replacing a row that was changed outside cordon;
    /// grants and secrets are kept across an upgrade (a grant whose package
    /// now reaches more is suspended: [`crate::grant_status`]).
    pub fn install(&self, pkg: &Package, upgrade: bool) -> Result<InstallOutcome, StoreError> {
        let json = serde_json::to_string(pkg).map_err(|e| format!("cannot encode: {e}"))?;
        let status = serde_json::to_value(pkg.status)
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_default();
        let mut conn = self.conn();
        let tx = conn.transaction().map_err(db_err)?;
        let old = Self::package_row(&tx, &pkg.id)?;
        let t = now();
        let installed_at = match &old {
            None => t,
            Some(row) => match self.verified(row) {
                Ok(same) if same == *pkg => return Ok(InstallOutcome::Unchanged),
                Ok(_) if !upgrade => {
                    return Err(format!(
                        "package {:?} is installed with another manifest or other sources; pass \
                         --upgrade to replace them",
                        pkg.id
                    ))
                }
                Err(e) if !upgrade => return Err(format!("{e} (with --upgrade)")),
                _ => row.installed_at,
            },
        };
        let row = PackageRow {
            id: pkg.id.clone(),
            version: pkg.version.clone(),
            source_hash: pkg.script_hash(),
            status,
            package: json,
            installed_at,
            updated_at: t,
            mac: None,
        };
        let mac = self.mac.mac("packages", &row.fields());
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
                mac
            ],
        )
        .map_err(db_err)?;
        tx.commit().map_err(db_err)?;
        Ok(if old.is_some() {
            InstallOutcome::Upgraded
        } else {
            InstallOutcome::Installed
        })
    }

    /// The installed package `id`, its row verified.
    pub(super) fn installed(&self, conn: &Connection, id: &str) -> Result<Package, StoreError> {
        let row = Self::package_row(conn, id)?.ok_or_else(|| {
            format!("package {id:?} is not installed (cordon star install PATH first)")
        })?;
        self.verified(&row)
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
        let pkg = self.verified(&row)?;
        let grants = self.grant_records(&conn, &pkg)?;
        let mut q = conn
            .prepare("SELECT name FROM secrets WHERE package_id = ?1 ORDER BY name")
            .map_err(db_err)?;
        let secrets = q
            .query_map(params![id], |r| r.get(0))
            .map_err(db_err)?
            .collect::<Result<_, _>>()
            .map_err(db_err)?;
        Ok(Some(PackageRecord {
            id: id.to_owned(),
            version: row.version,
            source_hash: row.source_hash,
            status: pkg.status,
            requested: pkg.manifest.permissions.clone(),
            network_access: pkg.manifest.network_access.clone(),
            grants,
            secrets,
            installed_at: row.installed_at,
            updated_at: row.updated_at,
        }))
    }
}

#[async_trait]
impl PackageStore for SqliteStore {
    async fn get(&self, id: &str) -> Result<Option<Package>, StoreError> {
        let conn = self.conn();
        match Self::package_row(&conn, id)? {
            None => Ok(None),
            Some(row) => self.verified(&row).map(Some),
        }
    }
}
