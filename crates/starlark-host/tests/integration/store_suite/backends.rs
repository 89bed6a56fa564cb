//! The two backends the shared store tests run on: a SQLite file in a
//! temporary directory, and a database of the throwaway PostgreSQL
//! cluster this test binary starts once (`TestCluster::shared`) — each
//! with the attacker's access (SQL outside cordon) and a view of
//! everything the database holds (the file's bytes, a `pg_dump`).

use std::path::PathBuf;
use std::sync::Arc;

use cordon_starlark::*;

/// One store database, fresh, on one backend.
pub enum Db {
    Sqlite(tempfile::TempDir),
    Pg(String),
}

impl Db {
    pub fn sqlite() -> Db {
        Db::Sqlite(tempfile::tempdir().unwrap())
    }

    pub fn pg() -> Db {
        Db::Pg(TestCluster::shared().database())
    }

    /// Another fresh database on the same backend.
    pub fn another(&self) -> Db {
        match self {
            Db::Sqlite(_) => Db::sqlite(),
            Db::Pg(_) => Db::pg(),
        }
    }

    fn path(&self) -> PathBuf {
        match self {
            Db::Sqlite(d) => d.path().join("star.db"),
            Db::Pg(_) => unreachable!(),
        }
    }

    fn name(&self) -> &str {
        match self {
            Db::Pg(url) => url.rsplit('/').next().unwrap(),
            Db::Sqlite(_) => unreachable!(),
        }
    }

    /// The store, opened (or connected) with `key`.
    pub async fn open(&self, key: &StoreKey) -> Result<Arc<dyn StoreAdmin>, String> {
        match self {
            Db::Sqlite(_) => Ok(Arc::new(SqliteStore::open(&self.path(), key)?)),
            Db::Pg(url) => {
                let cfg = PgConfig::from_url(
                    &TestCluster::shared().with_password(url),
                    PasswordSource::Private,
                )?;
                Ok(Arc::new(
                    PgStore::connect(&cfg, key, PgOptions::default()).await?,
                ))
            }
        }
    }

    /// The attacker's SQL, run outside cordon: `sqlite` on a SQLite
    /// file, `pg` on PostgreSQL.
    pub fn tamper(&self, sqlite: &str, pg: &str) {
        match self {
            Db::Sqlite(_) => {
                let c = rusqlite::Connection::open(self.path()).unwrap();
                c.execute_batch(sqlite).unwrap();
            }
            Db::Pg(_) => {
                TestCluster::shared()
                    .psql(self.name(), pg)
                    .unwrap_or_else(|e| panic!("{e}"));
            }
        }
    }

    /// The same SQL on both.
    pub fn tamper_both(&self, sql: &str) {
        self.tamper(sql, sql)
    }

    /// Everything the database holds, as bytes: the file, or a dump.
    pub fn contents(&self) -> Vec<u8> {
        match self {
            Db::Sqlite(_) => std::fs::read(self.path()).unwrap(),
            Db::Pg(_) => TestCluster::shared()
                .dump(self.name())
                .unwrap_or_else(|e| panic!("{e}"))
                .into_bytes(),
        }
    }
}

/// Runs the shared scenario `$name` (an `async fn(Db)`) once per backend:
/// `$name::sqlite` and `$name::postgres`.
#[macro_export]
macro_rules! on_both_backends {
    ($($name:ident),* $(,)?) => {
        $(
            mod $name {
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn sqlite() {
                    super::scenarios::$name($crate::store_suite::backends::Db::sqlite()).await
                }
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn postgres() {
                    super::scenarios::$name($crate::store_suite::backends::Db::pg()).await
                }
            }
        )*
    };
}

impl Db {
    /// The MAC of package `id`'s row, in hex (what an attacker copies).
    pub fn package_mac_hex(&self, id: &str) -> String {
        match self {
            Db::Sqlite(_) => rusqlite::Connection::open(self.path())
                .unwrap()
                .query_row("SELECT hex(mac) FROM packages WHERE id = ?1", [id], |r| {
                    r.get(0)
                })
                .unwrap(),
            Db::Pg(_) => TestCluster::shared()
                .psql(
                    self.name(),
                    &format!("SELECT encode(mac, 'hex') FROM packages WHERE id = '{id}'"),
                )
                .unwrap()
                .trim()
                .to_owned(),
        }
    }
}
