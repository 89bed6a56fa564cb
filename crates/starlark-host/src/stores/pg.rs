//! [`PgStore`]: the persistent stores in PostgreSQL, for several hosts
//! serving the same packages, grants, secrets and provider keys — the
//! connection pool, the deadline every call runs under, and the packages
//! (`pg_grants.rs` has grants, secrets and providers). The rows and the
//! rules that read and write them are `records.rs`'s, the same as the
//! SQLite store's.
//!
//! Nothing is cached: every call reads what it needs in its own
//! statements (each sees what was committed before it began), so a
//! revocation or an upgrade committed on one host is seen by the next
//! call on every host. A call already admitted keeps the grants it was
//! admitted with until it ends (at most its own timeout).

use std::future::Future;
use std::time::Duration;

use async_trait::async_trait;
use deadpool_postgres::{Manager, ManagerConfig, Pool, PoolError, RecyclingMethod, Runtime};
use tokio_postgres::GenericClient;

use super::pg_config::{tls_config, PgConfig};
use super::pg_schema::{migrate, schema_version, Migration};
use super::records::{InstallStep, Keys, PackageRow};
use super::seal::StoreKey;
use super::sqlite::not_installed;
use super::{InstallOutcome, PackageRecord, PackageStore, StoreError};
use cordon_starlark_protocol::Package;

/// How a [`PgStore`] uses the server.
#[derive(Debug, Clone)]
pub struct PgOptions {
    /// Connections in the pool at most (the default 8).
    pub max_connections: usize,
    /// The deadline of every store call: connecting, waiting for a pooled
    /// connection, and the statements together (the default 5 s). A call
    /// that does not finish within it fails, and the server is told to
    /// stop its statements after as long (`statement_timeout`).
    pub timeout: Duration,
}

impl Default for PgOptions {
    fn default() -> Self {
        PgOptions {
            max_connections: 8,
            timeout: Duration::from_secs(5),
        }
    }
}

/// Packages, grants, secrets and provider keys in a PostgreSQL database:
/// the same traits, rules and row MACs as [`super::SqliteStore`], behind
/// a bounded pool. Every change is one transaction; installs of one
/// package are serialized by an advisory lock on its id, so hosts
/// installing or upgrading it at once end with one of their versions,
/// and each reports what it did to the row it found.
pub struct PgStore {
    pub(super) pool: Pool,
    pub(super) keys: Keys,
    timeout: Duration,
    label: String,
    migration: Migration,
}

impl std::fmt::Debug for PgStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PgStore({})", self.label)
    }
}

/// How [`pg_err`]'s errors start; [`PgStore::within`] names the
/// database and the call in their place.
const DB_ERROR: &str = "store database: ";

/// A driver error, with the server's own message when it sent one.
pub(super) fn pg_err(e: tokio_postgres::Error) -> StoreError {
    if let Some(db) = e.as_db_error() {
        return format!("{DB_ERROR}{}: {}", db.severity(), db.message());
    }
    // The driver's own message names the step; its sources say why (a
    // refused connection, a certificate that does not verify).
    let mut text = format!("{DB_ERROR}{e}");
    let mut source = std::error::Error::source(&e);
    while let Some(s) = source {
        text.push_str(&format!(": {s}"));
        source = s.source();
    }
    text
}

impl PgStore {
    /// Connects to the database `cfg` names, checks `key` against it (a
    /// wrong key changes nothing), and brings its schema up to date (the
    /// migrations of `schema.rs`, once however many hosts start at once).
    pub async fn connect(
        cfg: &PgConfig,
        key: &StoreKey,
        opts: PgOptions,
    ) -> Result<PgStore, StoreError> {
        let mut pg = cfg.pg.clone();
        let ms = opts.timeout.as_millis().max(1);
        let server_limits = format!("-c statement_timeout={ms} -c lock_timeout={ms}");
        let options = match pg.get_options() {
            Some(o) => format!("{o} {server_limits}"),
            None => server_limits,
        };
        pg.options(&options)
            .connect_timeout(opts.timeout)
            .application_name("cordon");
        let manager_config = ManagerConfig {
            recycling_method: RecyclingMethod::Fast,
        };
        let manager = if cfg.requires_tls() || cfg.root_cert.is_some() {
            let tls = tokio_postgres_rustls::MakeRustlsConnect::new(tls_config(cfg)?);
            Manager::from_config(pg, tls, manager_config)
        } else {
            Manager::from_config(pg, tokio_postgres::NoTls, manager_config)
        };
        let pool = Pool::builder(manager)
            .max_size(opts.max_connections.max(1))
            .wait_timeout(Some(opts.timeout))
            .create_timeout(Some(opts.timeout))
            .recycle_timeout(Some(opts.timeout))
            .runtime(Runtime::Tokio1)
            .build()
            .map_err(|e| format!("store database pool: {e}"))?;
        let mut store = PgStore {
            pool,
            keys: Keys::new(key),
            timeout: opts.timeout,
            label: cfg.label().to_owned(),
            migration: Migration { from: 0, to: 0 },
        };
        store.migration = store
            .within("migrating the schema", async {
                let mut client = store.client().await?;
                let tx = client.transaction().await.map_err(pg_err)?;
                let m = migrate(&tx, &store.keys, &store.label).await?;
                tx.commit().await.map_err(pg_err)?;
                Ok(m)
            })
            .await?;
        Ok(store)
    }

    /// What connecting found and did to the schema.
    pub fn migration(&self) -> &Migration {
        &self.migration
    }

    /// The URL the store is at, without its password.
    pub fn label(&self) -> &str {
        &self.label
    }

    /// The schema version of the database.
    pub async fn schema_version(&self) -> Result<usize, StoreError> {
        self.within("reading the schema version", async {
            let mut client = self.client().await?;
            let tx = client.transaction().await.map_err(pg_err)?;
            schema_version(&tx).await
        })
        .await
    }

    /// A pooled connection.
    pub(super) async fn client(&self) -> Result<deadpool_postgres::Client, StoreError> {
        self.pool.get().await.map_err(|e| match e {
            PoolError::Timeout(_) => format!(
                "the store database {} gave no connection within {:?}",
                self.label, self.timeout
            ),
            PoolError::Backend(e) => {
                format!(
                    "cannot reach the store database {}: {}",
                    self.label,
                    pg_err(e)
                )
            }
            e => format!("the store database {}: {e}", self.label),
        })
    }

    /// Runs `f` (what the call does with the database) within the call's
    /// deadline: late is an error, never a stale answer.
    pub(super) async fn within<T>(
        &self,
        what: &str,
        f: impl Future<Output = Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        match tokio::time::timeout(self.timeout, f).await {
            Ok(Err(e)) => Err(match e.strip_prefix(DB_ERROR) {
                Some(e) => format!("the store database {}: {e} ({what})", self.label),
                None => e,
            }),
            Ok(r) => r,
            Err(_) => Err(format!(
                "the store database {} did not answer within {:?} ({what}); nothing was \
                 decided on what it holds",
                self.label, self.timeout
            )),
        }
    }

    async fn package_row(
        c: &(impl GenericClient + Sync),
        id: &str,
    ) -> Result<Option<PackageRow>, StoreError> {
        let row = c
            .query_opt(
                "SELECT id, version, source_hash, status, package, installed_at, updated_at, mac
                 FROM packages WHERE id = $1",
                &[&id],
            )
            .await
            .map_err(pg_err)?;
        Ok(row.map(|r| PackageRow {
            id: r.get(0),
            version: r.get(1),
            source_hash: r.get(2),
            status: r.get(3),
            package: r.get(4),
            installed_at: r.get(5),
            updated_at: r.get(6),
            mac: r.get(7),
        }))
    }

    /// The installed package `id`, its row verified.
    pub(super) async fn installed(
        &self,
        c: &(impl GenericClient + Sync),
        id: &str,
    ) -> Result<Package, StoreError> {
        let row = Self::package_row(c, id)
            .await?
            .ok_or_else(|| not_installed(id))?;
        self.keys.verified_package(&row)
    }

    /// Records `pkg`, as [`super::SqliteStore::install`] does; installs of
    /// one id are serialized across hosts (an advisory lock on it).
    pub async fn install(
        &self,
        pkg: &Package,
        upgrade: bool,
    ) -> Result<InstallOutcome, StoreError> {
        self.within("installing a package", async {
            let mut client = self.client().await?;
            let tx = client.transaction().await.map_err(pg_err)?;
            tx.execute(
                "SELECT pg_advisory_xact_lock(hashtextextended($1, 0))",
                &[&format!("cordon package {}", pkg.id)],
            )
            .await
            .map_err(pg_err)?;
            let old = Self::package_row(&*tx, &pkg.id).await?;
            let (row, outcome) = match self.keys.install_step(old.as_ref(), pkg, upgrade)? {
                InstallStep::Unchanged => return Ok(InstallOutcome::Unchanged),
                InstallStep::Write(row, outcome) => (row, outcome),
            };
            tx.execute(
                "INSERT INTO packages (id, version, source_hash, status, package, installed_at,
                                       updated_at, mac)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
                 ON CONFLICT (id) DO UPDATE SET version = $2, source_hash = $3, status = $4,
                   package = $5, installed_at = $6, updated_at = $7, mac = $8",
                &[
                    &row.id,
                    &row.version,
                    &row.source_hash,
                    &row.status,
                    &row.package,
                    &row.installed_at,
                    &row.updated_at,
                    &row.mac,
                ],
            )
            .await
            .map_err(pg_err)?;
            tx.commit().await.map_err(pg_err)?;
            Ok(outcome)
        })
        .await
    }

    /// Every installed package, by id (one consistent snapshot).
    pub async fn packages(&self) -> Result<Vec<PackageRecord>, StoreError> {
        self.within("listing packages", async {
            let mut client = self.client().await?;
            let tx = snapshot(&mut client).await?;
            let ids: Vec<String> = tx
                .query("SELECT id FROM packages ORDER BY id", &[])
                .await
                .map_err(pg_err)?
                .iter()
                .map(|r| r.get(0))
                .collect();
            let mut out = Vec::new();
            for id in ids {
                out.extend(self.record_in(&*tx, &id).await?);
            }
            Ok(out)
        })
        .await
    }

    /// One installed package, or `None`.
    pub async fn package_record(&self, id: &str) -> Result<Option<PackageRecord>, StoreError> {
        self.within("reading a package", async {
            let mut client = self.client().await?;
            let tx = snapshot(&mut client).await?;
            self.record_in(&*tx, id).await
        })
        .await
    }

    async fn record_in(
        &self,
        c: &(impl GenericClient + Sync),
        id: &str,
    ) -> Result<Option<PackageRecord>, StoreError> {
        let Some(row) = Self::package_row(c, id).await? else {
            return Ok(None);
        };
        let grants = Self::grant_rows(c, id).await?;
        let secrets: Vec<String> = c
            .query(
                "SELECT name FROM secrets WHERE package_id = $1 ORDER BY name",
                &[&id],
            )
            .await
            .map_err(pg_err)?
            .iter()
            .map(|r| r.get(0))
            .collect();
        self.keys.package_record(row, grants, secrets).map(Some)
    }
}

/// A read-only transaction that sees one snapshot of the database.
async fn snapshot(
    client: &mut deadpool_postgres::Client,
) -> Result<deadpool_postgres::Transaction<'_>, StoreError> {
    client
        .build_transaction()
        .isolation_level(tokio_postgres::IsolationLevel::RepeatableRead)
        .read_only(true)
        .start()
        .await
        .map_err(pg_err)
}

#[async_trait]
impl PackageStore for PgStore {
    async fn get(&self, id: &str) -> Result<Option<Package>, StoreError> {
        self.within("reading a package", async {
            let client = self.client().await?;
            match Self::package_row(&**client, id).await? {
                None => Ok(None),
                Some(row) => self.keys.verified_package(&row).map(Some),
            }
        })
        .await
    }
}
