//! What only a database several hosts share has to show, on the real
//! server: hosts migrating at once run each migration once; what one
//! host revokes, upgrades or sets is what the next call on another sees;
//! hosts installing one package at once end with one version; and a
//! server that is slow, stopped or silent fails calls with a clear error
//! within their deadline.

use std::collections::BTreeMap;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use cordon_starlark::*;

fn package(id: &str, src: &str) -> Package {
    let mut m = Manifest::minimal(id, "main.star");
    m.permissions = vec![Permission::SecretsRead, Permission::ApiHttp];
    Package::new(
        m,
        BTreeMap::from([("main.star".to_owned(), src.to_owned())]),
    )
}

async fn connect(url: &str, key: &StoreKey, timeout: Duration) -> Result<PgStore, String> {
    let cluster = TestCluster::shared();
    let cfg = PgConfig::from_url(&cluster.with_password(url), PasswordSource::Private)?;
    let opts = PgOptions {
        timeout,
        ..PgOptions::default()
    };
    PgStore::connect(&cfg, key, opts).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hosts_migrating_at_once_run_each_migration_once() {
    let url = TestCluster::shared().database();
    let key = StoreKey::generate().unwrap();
    let hosts: Vec<_> = (0..4)
        .map(|_| {
            let (url, key) = (url.clone(), key.clone());
            tokio::spawn(async move { connect(&url, &key, Duration::from_secs(30)).await })
        })
        .collect();
    let mut from_scratch = 0;
    for h in hosts {
        let store = h.await.unwrap().unwrap();
        assert_eq!(store.migration().to, 2);
        if store.migration().from == 0 {
            from_scratch += 1;
        } else {
            assert_eq!(store.migration().from, 2);
        }
    }
    assert_eq!(from_scratch, 1, "exactly one host migrated");
    let name = url.rsplit('/').next().unwrap();
    let applied = TestCluster::shared()
        .psql(
            name,
            "SELECT string_agg(version::text, ',' ORDER BY version) FROM cordon_schema",
        )
        .unwrap();
    assert_eq!(applied.trim(), "1,2");
    let checks = TestCluster::shared()
        .psql(name, "SELECT count(*) FROM meta WHERE name = 'key_check'")
        .unwrap();
    assert_eq!(checks.trim(), "1");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_one_host_changes_the_next_call_on_another_sees() {
    let url = TestCluster::shared().database();
    let key = StoreKey::generate().unwrap();
    let a = connect(&url, &key, Duration::from_secs(10)).await.unwrap();
    let b = connect(&url, &key, Duration::from_secs(10)).await.unwrap();
    let v1 = package("p", "def main():\n    return 1\n");
    a.install(&v1, false).await.unwrap();
    a.grant("p", &[Permission::SecretsRead], "ops", &[])
        .await
        .unwrap();
    a.set_secret("p", "tok", "one").await.unwrap();
    // B has read everything once (its pool warm, nothing kept).
    assert_eq!(b.grants_for_package("p").await.unwrap().len(), 1);
    assert_eq!(PackageStore::get(&b, "p").await.unwrap().unwrap(), v1);
    assert_eq!(
        SecretStore::get(&b, "p", "tok").await.unwrap().as_deref(),
        Some("one")
    );
    // A revokes, upgrades, rotates: B's next calls see each.
    assert!(a.revoke("p", Permission::SecretsRead, "ops").await.unwrap());
    assert!(b.grants_for_package("p").await.unwrap().is_empty());
    let v2 = package("p", "def main():\n    return secrets.get('tok')\n");
    a.install(&v2, true).await.unwrap();
    assert_eq!(PackageStore::get(&b, "p").await.unwrap().unwrap(), v2);
    a.set_secret("p", "tok", "two").await.unwrap();
    assert_eq!(
        SecretStore::get(&b, "p", "tok").await.unwrap().as_deref(),
        Some("two")
    );
    // And a host on B admits each call by what the store says then.
    let host = StarlarkHost::builder(Arc::new(b).services())
        .trusted_isolation(Isolation::InProcess)
        .build()
        .unwrap();
    let call = || host.call(&v2, TrustTier::Trusted, Call::new("main"));
    assert!(call().await.is_err(), "no grant: no secrets module");
    a.grant("p", &[Permission::SecretsRead], "ops", &[])
        .await
        .unwrap();
    assert_eq!(call().await.unwrap().value, serde_json::json!("two"));
    a.revoke("p", Permission::SecretsRead, "ops").await.unwrap();
    let e = call().await.unwrap_err();
    assert!(e.to_string().contains("secrets"), "{e}");
    host.shutdown().await;
}

/// Two hosts install different versions of one package at once, many
/// times: each ends with one of the two versions, verified, and exactly
/// one host reports the install (the other the upgrade it made on top).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hosts_installing_one_package_at_once_end_with_one_version() {
    let url = TestCluster::shared().database();
    let key = StoreKey::generate().unwrap();
    let a = Arc::new(connect(&url, &key, Duration::from_secs(30)).await.unwrap());
    let b = Arc::new(connect(&url, &key, Duration::from_secs(30)).await.unwrap());
    for round in 0..20 {
        let id = format!("p{round}");
        let va = package(&id, "def main():\n    return 'a'\n");
        let vb = package(&id, "def main():\n    return 'b'\n");
        let (sa, sb) = (a.clone(), b.clone());
        let (pa, pb) = (va.clone(), vb.clone());
        let ta = tokio::spawn(async move { sa.install(&pa, true).await });
        let tb = tokio::spawn(async move { sb.install(&pb, true).await });
        let mut outcomes = vec![ta.await.unwrap().unwrap(), tb.await.unwrap().unwrap()];
        outcomes.sort_by_key(|o| format!("{o:?}"));
        assert_eq!(
            outcomes,
            vec![InstallOutcome::Installed, InstallOutcome::Upgraded],
            "round {round}"
        );
        let now = PackageStore::get(&*a, &id).await.unwrap().unwrap();
        assert!(now == va || now == vb, "round {round}");
        assert_eq!(PackageStore::get(&*b, &id).await.unwrap().unwrap(), now);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_database_fails_the_call_within_its_deadline() {
    let cluster = TestCluster::shared();
    let url = cluster.database();
    let name = url.rsplit('/').next().unwrap().to_owned();
    let key = StoreKey::generate().unwrap();
    let store = connect(&url, &key, Duration::from_secs(1)).await.unwrap();
    store
        .install(&package("p", "x = 1\n"), false)
        .await
        .unwrap();
    // Another session holds the grants table, so reading it waits.
    let mut holder = Command::new(cluster.bin_dir().join("psql"))
        .env("PGPASSWORD", cluster.password())
        .args([
            "-X",
            "-q",
            "-h",
            "127.0.0.1",
            "-p",
            &cluster.port().to_string(),
        ])
        .args(["-U", "cordon", "-d", &name])
        .args([
            "-c",
            "BEGIN",
            "-c",
            "LOCK TABLE grants IN ACCESS EXCLUSIVE MODE",
        ])
        .args(["-c", "SELECT pg_sleep(120)"])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    loop {
        let held = cluster
            .psql(
                &name,
                "SELECT count(*) FROM pg_locks WHERE relation = 'grants'::regclass \
                 AND mode = 'AccessExclusiveLock' AND granted",
            )
            .unwrap();
        if held.trim() == "1" {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let e = store.grants_for_package("p").await.unwrap_err();
    assert!(
        e.contains(&name) && (e.contains("did not answer within") || e.contains("timeout")),
        "{e}"
    );
    // The holder's session ends (its server process too: it sleeps).
    cluster
        .psql(
            &name,
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
             WHERE wait_event = 'PgSleep'",
        )
        .unwrap();
    let _ = holder.wait();
    // The store serves again once the server does.
    let mut tries = 0;
    while store.grants_for_package("p").await.is_err() {
        tries += 1;
        assert!(tries < 100, "the store did not recover");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_or_silent_server_fails_calls_with_a_clear_error() {
    // A cluster of its own, to stop.
    let cluster = TestCluster::start().unwrap_or_else(|e| panic!("{e}"));
    let url = cluster.with_password(&cluster.url("postgres"));
    let cfg = PgConfig::from_url(&url, PasswordSource::Private).unwrap();
    let key = StoreKey::generate().unwrap();
    let opts = PgOptions {
        timeout: Duration::from_secs(2),
        ..PgOptions::default()
    };
    let store = PgStore::connect(&cfg, &key, opts.clone()).await.unwrap();
    store
        .install(&package("p", "x = 1\n"), false)
        .await
        .unwrap();
    store
        .grant("p", &[Permission::SecretsRead], "ops", &[])
        .await
        .unwrap();
    assert_eq!(store.grants_for_package("p").await.unwrap().len(), 1);
    cluster.stop();
    let e = store.grants_for_package("p").await.unwrap_err();
    assert!(
        e.contains("store database") && e.contains(&format!(":{}", cluster.port())),
        "{e}"
    );
    let e = PgStore::connect(&cfg, &key, opts.clone())
        .await
        .unwrap_err();
    assert!(e.contains("cannot reach the store database"), "{e}");

    // A server that accepts and never answers.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = silent.local_addr().unwrap().port();
    let cfg = PgConfig::from_url(
        &format!("postgres://cordon:x@127.0.0.1:{port}/postgres"),
        PasswordSource::Private,
    )
    .unwrap();
    let e = PgStore::connect(&cfg, &key, opts).await.unwrap_err();
    assert!(
        e.contains(&format!("127.0.0.1:{port}"))
            && (e.contains("within") || e.contains("timed out")),
        "{e}"
    );
    drop(silent);
}

/// A server that takes TLS only: the store connects with its CA's
/// certificate and works; with another CA it is refused (the server's
/// certificate is verified, never just accepted), and without TLS the
/// server refuses it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_to_the_server_verifies_its_certificate() {
    let cluster = TestCluster::start_tls().unwrap_or_else(|e| panic!("{e}"));
    let key = StoreKey::generate().unwrap();
    let base = cluster.with_password(&cluster.url("postgres"));
    let connect = |query: String| {
        let (key, url) = (key.clone(), format!("{base}?{query}"));
        async move {
            let cfg = PgConfig::from_url(&url, PasswordSource::Private)?;
            PgStore::connect(&cfg, &key, PgOptions::default()).await
        }
    };
    let ca = cluster.ca_file();
    let store = connect(format!("sslmode=require&sslrootcert={}", ca.display()))
        .await
        .unwrap();
    store
        .install(&package("p", "x = 1\n"), false)
        .await
        .unwrap();
    assert!(PackageStore::get(&store, "p").await.unwrap().is_some());

    // Another CA: the certificate does not verify.
    let other = TestCluster::start_tls().unwrap_or_else(|e| panic!("{e}"));
    let e = connect(format!(
        "sslmode=require&sslrootcert={}",
        other.ca_file().display()
    ))
    .await
    .unwrap_err();
    assert!(e.contains("certificate"), "{e}");
    drop(other);
    // The WebPKI roots do not know a test CA either.
    let e = connect("sslmode=require".into()).await.unwrap_err();
    assert!(e.contains("certificate"), "{e}");
    // No TLS: the server refuses.
    let e = connect("sslmode=disable".into()).await.unwrap_err();
    assert!(
        e.contains("no encryption") || e.contains("pg_hba.conf"),
        "{e}"
    );
}
