//! [`SqliteStore`]: packages, grants, secrets and provider keys in one
//! SQLite file, secrets and keys sealed at rest (`seal.rs`).

use std::path::Path;
use std::sync::Mutex;

use async_trait::async_trait;
use rusqlite::{params, Connection, OptionalExtension};
use serde::Serialize;

use super::schema::{migrate, schema_version};
use super::seal::{Sealer, StoreKey};
use super::{
    ApiKey, KeySource, PackageStore, PermissionStore, ProviderConfig, ProviderResolver,
    ResolvedProvider, SecretStore, StoreError,
};
use crate::package::{Package, PackageStatus, Permission, ProviderRequirement};

/// What the key check row seals: opening it proves the key is this
/// database's before anything is read or written.
const KEY_CHECK: &[u8] = b"cordon store key check";

/// Whose provider key a [`SqliteStore::set_provider`] sets (the chain a
/// call resolves: user, then channel, then package, then host).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProviderScope {
    /// One user's own key.
    User(String),
    /// A channel's pinned key.
    Channel(String),
    /// A package's key.
    Package(String),
    /// The host's default.
    Host,
}

impl ProviderScope {
    fn parts(&self) -> (&'static str, &str) {
        match self {
            ProviderScope::User(u) => ("user", u),
            ProviderScope::Channel(c) => ("channel", c),
            ProviderScope::Package(p) => ("package", p),
            ProviderScope::Host => ("host", ""),
        }
    }
}

/// What [`SqliteStore::install`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum InstallOutcome {
    /// A new package.
    Installed,
    /// The same sources were installed already.
    Unchanged,
    /// Changed sources replaced the installed ones (`upgrade` was given).
    Upgraded,
}

/// One grant, with who made it and when.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GrantRecord {
    /// The permission.
    pub permission: Permission,
    /// Who granted it.
    pub granted_by: String,
    /// When (Unix seconds).
    pub granted_at: i64,
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
    /// Permissions granted and not revoked.
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
/// Secrets and provider keys are sealed with the [`StoreKey`]
/// (XChaCha20-Poly1305, bound to their row); everything else is plain.
/// Opening checks the key against the database first: a wrong key is an
/// error before anything is read or written. Every change is one
/// transaction.
pub struct SqliteStore {
    conn: Mutex<Connection>,
    sealer: Sealer,
}

impl std::fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SqliteStore")
    }
}

fn db_err(e: rusqlite::Error) -> StoreError {
    format!("store database: {e}")
}

fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

fn secret_aad(package: &str, name: &str) -> String {
    format!("secret {package:?}/{name:?}")
}

fn provider_aad(scope: &str, id: &str) -> String {
    format!("provider key {scope}/{id:?}")
}

impl SqliteStore {
    /// Opens (or creates, mode 0600) the database at `path`, brings its
    /// schema up to date and checks `key` against it.
    pub fn open(path: &Path, key: &StoreKey) -> Result<Self, StoreError> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)
                .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        }
        if !path.exists() {
            // Made 0600 from the start: SQLite would create it with the
            // umask's mode, readable by others until a chmod.
            use std::os::unix::fs::OpenOptionsExt;
            match std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .custom_flags(libc::O_NOFOLLOW)
                .open(path)
            {
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(format!("cannot create {}: {e}", path.display())),
            }
        }
        let mut conn = Connection::open(path)
            .map_err(|e| format!("cannot open the store database {}: {e}", path.display()))?;
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
        }
        migrate(&mut conn)?;
        match check {
            Some(_) => {}
            None => {
                let sealed = sealer.seal("key check", KEY_CHECK)?;
                conn.execute(
                    "INSERT INTO meta (name, value) VALUES ('key_check', ?1)",
                    params![sealed],
                )
                .map_err(db_err)?;
            }
        }
        Ok(SqliteStore {
            conn: Mutex::new(conn),
            sealer,
        })
    }

    fn conn(&self) -> std::sync::MutexGuard<'_, Connection> {
        self.conn.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records `pkg` (its manifest, sources and their hash). Installing
    /// changed sources over an installed package needs `upgrade`; grants
    /// and secrets are kept across an upgrade.
    pub fn install(&self, pkg: &Package, upgrade: bool) -> Result<InstallOutcome, StoreError> {
        let hash = pkg.script_hash();
        let json = serde_json::to_string(pkg).map_err(|e| format!("cannot encode: {e}"))?;
        let status = serde_json::to_value(pkg.status)
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_default();
        let mut conn = self.conn();
        let tx = conn.transaction().map_err(db_err)?;
        let old: Option<String> = tx
            .query_row(
                "SELECT source_hash FROM packages WHERE id = ?1",
                params![pkg.id],
                |r| r.get(0),
            )
            .optional()
            .map_err(db_err)?;
        let outcome = match old {
            Some(h) if h == hash => return Ok(InstallOutcome::Unchanged),
            Some(_) if !upgrade => {
                return Err(format!(
                    "package {:?} is installed with other sources; pass --upgrade to replace them",
                    pkg.id
                ))
            }
            Some(_) => {
                tx.execute(
                    "UPDATE packages SET version = ?2, source_hash = ?3, status = ?4, package = ?5,
                     updated_at = ?6 WHERE id = ?1",
                    params![pkg.id, pkg.version, hash, status, json, now()],
                )
                .map_err(db_err)?;
                InstallOutcome::Upgraded
            }
            None => {
                tx.execute(
                    "INSERT INTO packages (id, version, source_hash, status, package,
                     installed_at, updated_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?6)",
                    params![pkg.id, pkg.version, hash, status, json, now()],
                )
                .map_err(db_err)?;
                InstallOutcome::Installed
            }
        };
        tx.commit().map_err(db_err)?;
        Ok(outcome)
    }

    fn installed(conn: &Connection, id: &str) -> Result<Package, StoreError> {
        let json: Option<String> = conn
            .query_row(
                "SELECT package FROM packages WHERE id = ?1",
                params![id],
                |r| r.get(0),
            )
            .optional()
            .map_err(db_err)?;
        let json = json.ok_or_else(|| {
            format!("package {id:?} is not installed (cordon star install PATH first)")
        })?;
        serde_json::from_str(&json).map_err(|e| format!("package {id:?} is unreadable: {e}"))
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
        let row: Option<(String, String, i64, i64)> = conn
            .query_row(
                "SELECT version, source_hash, installed_at, updated_at FROM packages WHERE id = ?1",
                params![id],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
            )
            .optional()
            .map_err(db_err)?;
        let Some((version, source_hash, installed_at, updated_at)) = row else {
            return Ok(None);
        };
        let pkg = Self::installed(&conn, id)?;
        let mut q = conn
            .prepare(
                "SELECT permission, granted_by, granted_at FROM grants
                 WHERE package_id = ?1 AND revoked_at IS NULL ORDER BY permission",
            )
            .map_err(db_err)?;
        let grants = q
            .query_map(params![id], |r| {
                Ok((r.get::<_, String>(0)?, r.get(1)?, r.get(2)?))
            })
            .map_err(db_err)?
            .filter_map(|r| r.ok())
            .filter_map(|(p, granted_by, granted_at)| {
                Some(GrantRecord {
                    permission: Permission::parse(&p)?,
                    granted_by,
                    granted_at,
                })
            })
            .collect();
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
            version,
            source_hash,
            status: pkg.status,
            requested: pkg.manifest.permissions.clone(),
            grants,
            secrets,
            installed_at,
            updated_at,
        }))
    }

    /// Grants `permission` to an installed package, recording `by`.
    pub fn grant(&self, id: &str, permission: Permission, by: &str) -> Result<(), StoreError> {
        let conn = self.conn();
        Self::installed(&conn, id)?;
        conn.execute(
            "INSERT INTO grants (package_id, permission, granted_by, granted_at)
             VALUES (?1, ?2, ?3, ?4)
             ON CONFLICT (package_id, permission) DO UPDATE SET
               granted_by = ?3, granted_at = ?4, revoked_by = NULL, revoked_at = NULL",
            params![id, permission.as_str(), by, now()],
        )
        .map_err(db_err)?;
        Ok(())
    }

    /// Revokes `permission` (kept in the table with who revoked it and
    /// when). False when it was not granted.
    pub fn revoke(&self, id: &str, permission: Permission, by: &str) -> Result<bool, StoreError> {
        let conn = self.conn();
        Self::installed(&conn, id)?;
        let n = conn
            .execute(
                "UPDATE grants SET revoked_by = ?3, revoked_at = ?4
                 WHERE package_id = ?1 AND permission = ?2 AND revoked_at IS NULL",
                params![id, permission.as_str(), by, now()],
            )
            .map_err(db_err)?;
        Ok(n > 0)
    }

    /// Sets a secret of an installed package (sealed).
    pub fn set_secret(&self, id: &str, name: &str, value: &str) -> Result<(), StoreError> {
        if name.is_empty() {
            return Err("a secret needs a name".into());
        }
        let sealed = self.sealer.seal(&secret_aad(id, name), value.as_bytes())?;
        let conn = self.conn();
        Self::installed(&conn, id)?;
        conn.execute(
            "INSERT INTO secrets (package_id, name, sealed, updated_at) VALUES (?1, ?2, ?3, ?4)
             ON CONFLICT (package_id, name) DO UPDATE SET sealed = ?3, updated_at = ?4",
            params![id, name, sealed, now()],
        )
        .map_err(db_err)?;
        Ok(())
    }

    /// Removes a secret; false when there was none.
    pub fn remove_secret(&self, id: &str, name: &str) -> Result<bool, StoreError> {
        let conn = self.conn();
        Self::installed(&conn, id)?;
        let n = conn
            .execute(
                "DELETE FROM secrets WHERE package_id = ?1 AND name = ?2",
                params![id, name],
            )
            .map_err(db_err)?;
        Ok(n > 0)
    }

    /// Sets the provider for `scope` (its key sealed).
    pub fn set_provider(
        &self,
        scope: &ProviderScope,
        cfg: &ProviderConfig,
    ) -> Result<(), StoreError> {
        let (kind, id) = scope.parts();
        if cfg.base_url.is_empty() || cfg.model.is_empty() {
            return Err("a provider needs a base URL and a model".into());
        }
        let sealed = self
            .sealer
            .seal(&provider_aad(kind, id), cfg.api_key.expose().as_bytes())?;
        self.conn()
            .execute(
                "INSERT INTO providers (scope, scope_id, base_url, model, sealed_key, updated_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)
                 ON CONFLICT (scope, scope_id) DO UPDATE SET
                   base_url = ?3, model = ?4, sealed_key = ?5, updated_at = ?6",
                params![kind, id, cfg.base_url, cfg.model, sealed, now()],
            )
            .map_err(db_err)?;
        Ok(())
    }

    fn provider(&self, scope: &ProviderScope) -> Result<Option<ProviderConfig>, StoreError> {
        let (kind, id) = scope.parts();
        let row: Option<(String, String, Vec<u8>)> = self
            .conn()
            .query_row(
                "SELECT base_url, model, sealed_key FROM providers WHERE scope = ?1 AND scope_id = ?2",
                params![kind, id],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
            )
            .optional()
            .map_err(db_err)?;
        let Some((base_url, model, sealed)) = row else {
            return Ok(None);
        };
        let key = self.sealer.open(&provider_aad(kind, id), &sealed)?;
        let key = String::from_utf8(key).map_err(|_| "a provider key is not text".to_owned())?;
        Ok(Some(ProviderConfig {
            base_url,
            api_key: ApiKey::new(key),
            model,
        }))
    }
}

#[async_trait]
impl PackageStore for SqliteStore {
    async fn get(&self, id: &str) -> Result<Option<Package>, StoreError> {
        let conn = self.conn();
        match Self::installed(&conn, id) {
            Ok(p) => Ok(Some(p)),
            Err(_)
                if conn
                    .query_row("SELECT 1 FROM packages WHERE id = ?1", params![id], |_| {
                        Ok(())
                    })
                    .optional()
                    .map_err(db_err)?
                    .is_none() =>
            {
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }
}

#[async_trait]
impl PermissionStore for SqliteStore {
    async fn granted_for_package(&self, package_id: &str) -> Result<Vec<Permission>, StoreError> {
        let conn = self.conn();
        let mut q = conn
            .prepare("SELECT permission FROM grants WHERE package_id = ?1 AND revoked_at IS NULL")
            .map_err(db_err)?;
        let names: Vec<String> = q
            .query_map(params![package_id], |r| r.get(0))
            .map_err(db_err)?
            .collect::<Result<_, _>>()
            .map_err(db_err)?;
        Ok(names.iter().filter_map(|n| Permission::parse(n)).collect())
    }
}

#[async_trait]
impl SecretStore for SqliteStore {
    async fn get(&self, package_id: &str, name: &str) -> Result<Option<String>, StoreError> {
        let sealed: Option<Vec<u8>> = self
            .conn()
            .query_row(
                "SELECT sealed FROM secrets WHERE package_id = ?1 AND name = ?2",
                params![package_id, name],
                |r| r.get(0),
            )
            .optional()
            .map_err(db_err)?;
        let Some(sealed) = sealed else {
            return Ok(None);
        };
        let plain = self.sealer.open(&secret_aad(package_id, name), &sealed)?;
        String::from_utf8(plain)
            .map(Some)
            .map_err(|_| "a secret is not text".to_owned())
    }
}

#[async_trait]
impl ProviderResolver for SqliteStore {
    async fn resolve(
        &self,
        user_id: &str,
        channel_id: Option<&str>,
        package_id: &str,
        requirement: &ProviderRequirement,
    ) -> Result<Option<ResolvedProvider>, StoreError> {
        let mut chain = vec![(ProviderScope::User(user_id.to_owned()), KeySource::User)];
        if let Some(c) = channel_id {
            chain.push((ProviderScope::Channel(c.to_owned()), KeySource::Channel));
        }
        chain.push((
            ProviderScope::Package(package_id.to_owned()),
            KeySource::Package,
        ));
        chain.push((ProviderScope::Host, KeySource::Host));
        for (scope, source) in chain {
            if let Some(mut config) = self.provider(&scope)? {
                if let Some(m) = &requirement.model {
                    config.model = m.clone();
                }
                return Ok(Some(ResolvedProvider { config, source }));
            }
        }
        Ok(None)
    }
}
