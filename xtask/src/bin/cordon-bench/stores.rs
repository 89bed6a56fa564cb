//! The persistent stores under a warm call: a cached package whose entry
//! point reads a secret, in process, its grants (read at every call's
//! admission) and the secret coming from a SQLite file, then from
//! PostgreSQL on 127.0.0.1 (a throwaway cluster, `TestCluster`), the
//! PostgreSQL row against the SQLite one.

use std::sync::Arc;
use std::time::Instant;

use cordon_starlark::{
    Call, EvalLimits, Isolation, Package, PasswordSource, Permission, PgConfig, PgOptions, PgStore,
    SqliteStore, StarlarkHost, StoreAdmin, StoreKey, TestCluster, TrustTier,
};

use crate::stats::{not_built, row, Row};
use crate::Plan;

const S: &str = "4c. Starlark: a warm call's grants and secret from a persistent store";

const CALL: &str = "def ping():\n    return secrets.get('t')\n";

fn package() -> Package {
    let mut p = Package::from_script("bench-store", CALL.to_string());
    p.manifest.permissions = vec![Permission::SecretsRead];
    p
}

/// Installs the package with its grant and secret, then times warm calls
/// of a host over `store`.
async fn warm_calls(
    plan: &Plan,
    store: Arc<dyn StoreAdmin>,
) -> Result<Vec<std::time::Duration>, String> {
    let pkg = package();
    store.install(&pkg, false).await?;
    store
        .grant(&pkg.id, &[Permission::SecretsRead], "bench", &[])
        .await?;
    store.set_secret(&pkg.id, "t", "x").await?;
    let host = StarlarkHost::builder(store.services())
        .limits(EvalLimits::default())
        .trusted_isolation(Isolation::InProcess)
        .build()
        .map_err(|e| e.to_string())?;
    let call = || host.call(&pkg, TrustTier::Trusted, Call::new("ping"));
    for _ in 0..plan.star_iters.min(200) {
        call().await.map_err(|e| e.to_string())?;
    }
    let mut v = Vec::with_capacity(plan.star_iters);
    for _ in 0..plan.star_iters {
        let t = Instant::now();
        call().await.map_err(|e| e.to_string())?;
        v.push(t.elapsed());
    }
    host.shutdown().await;
    Ok(v)
}

pub async fn bench(plan: &Plan) -> Vec<Row> {
    let key = StoreKey::generate().expect("a store key");
    let dir = tempfile::tempdir().expect("a temporary directory");
    let sqlite = match SqliteStore::open(&dir.path().join("star.db"), &key) {
        Ok(s) => warm_calls(plan, Arc::new(s)).await,
        Err(e) => Err(e),
    };
    let base = match sqlite {
        Ok(v) => row(S, "in-process, warm, SQLite file", v).keyed("stores.sqlite_warm"),
        Err(e) => return vec![not_built(S, "in-process, warm, SQLite file", e)],
    };
    let pg_name = "in-process, warm, PostgreSQL on 127.0.0.1";
    let cluster = match TestCluster::start() {
        Ok(c) => c,
        Err(e) => return vec![base, not_built(S, pg_name, e)],
    };
    let url = cluster.with_password(&cluster.url("postgres"));
    let pg = async {
        let cfg = PgConfig::from_url(&url, PasswordSource::Private)?;
        let store = PgStore::connect(&cfg, &key, PgOptions::default()).await?;
        warm_calls(plan, Arc::new(store)).await
    }
    .await;
    let mut rows = vec![base.clone()];
    match pg {
        Ok(v) => {
            let mut r = row(S, pg_name, v).keyed("stores.pg_warm");
            r.ratio = Some(r.median / base.median);
            r.note = format!("{:.2}x the SQLite row", r.median / base.median);
            rows.push(r);
        }
        Err(e) => rows.push(not_built(S, pg_name, e)),
    }
    rows
}
