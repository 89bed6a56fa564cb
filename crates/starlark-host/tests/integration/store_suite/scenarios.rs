//! The store conformance scenarios, written once against `StoreAdmin`
//! and run on both backends: what survives reopening, that the database
//! holds no plaintext secret or key, that a wrong key touches nothing,
//! that rows changed outside cordon are refused, and that an upgrade
//! which widens a package's reach suspends its grant.

use std::collections::BTreeMap;

use cordon_starlark::*;

use crate::store_suite::backends::Db;

fn package(id: &str, network: &[&str], src: &str) -> Package {
    let mut m = Manifest::minimal(id, "main.star");
    m.permissions = vec![
        Permission::SecretsRead,
        Permission::ApiHttp,
        Permission::ProviderComplete,
    ];
    m.network_access = network.iter().map(|s| s.to_string()).collect();
    m.requires_provider = Some(ProviderRequirement::default());
    Package::new(
        m,
        BTreeMap::from([("main.star".to_owned(), src.to_owned())]),
    )
}

const SECRET: &str = "s3cret-value-that-must-not-be-on-disk";
const API_KEY: &str = "sk-provider-key-that-must-not-be-on-disk";

fn provider(url: &str, key: &str) -> ProviderConfig {
    ProviderConfig {
        base_url: url.into(),
        api_key: ApiKey::new(key),
        model: "m".into(),
    }
}

pub async fn everything_survives_reopening_and_secrets_are_sealed(db: Db) {
    let key = StoreKey::generate().unwrap();
    let pkg = package("p", &[], "def main():\n    return secrets.get('tok')\n");
    {
        let store = db.open(&key).await.unwrap();
        assert_eq!(
            store.install(&pkg, false).await.unwrap(),
            InstallOutcome::Installed
        );
        assert_eq!(
            store.install(&pkg, false).await.unwrap(),
            InstallOutcome::Unchanged
        );
        store
            .grant("p", &[Permission::SecretsRead], "alice", &[])
            .await
            .unwrap();
        store.set_secret("p", "tok", SECRET).await.unwrap();
        store
            .set_provider(
                &ProviderScope::User("u1".into()),
                &provider("http://127.0.0.1:9/v1", API_KEY),
            )
            .await
            .unwrap();
        // Unknown package: a clear error, nothing written.
        let e = store
            .grant("nope", &[Permission::ApiHttp], "alice", &[])
            .await
            .unwrap_err();
        assert!(e.contains("not installed"), "{e}");
        let e = store.set_secret("nope", "tok", SECRET).await.unwrap_err();
        assert!(e.contains("not installed"), "{e}");
        assert_eq!(store.schema_version().await.unwrap(), 2);
    }
    // A second process (or host) sees the same: open again.
    let store = db.open(&key).await.unwrap();
    assert_eq!(PackageStore::get(&*store, "p").await.unwrap().unwrap(), pkg);
    assert!(PackageStore::get(&*store, "nope").await.unwrap().is_none());
    let grants = store.grants_for_package("p").await.unwrap();
    assert_eq!(grants.len(), 1);
    assert_eq!(grants[0].permission, Permission::SecretsRead);
    assert_eq!(
        grants[0].approval,
        Some(Approval::of(&pkg.manifest).unwrap())
    );
    assert_eq!(
        SecretStore::get(&*store, "p", "tok")
            .await
            .unwrap()
            .as_deref(),
        Some(SECRET)
    );
    let r = store
        .resolve("u1", None, "p", &ProviderRequirement::default())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (r.config.api_key.expose(), r.source),
        (API_KEY, KeySource::User)
    );
    assert!(store
        .resolve("u2", None, "p", &ProviderRequirement::default())
        .await
        .unwrap()
        .is_none());
    let rec = store.package_record("p").await.unwrap().unwrap();
    assert_eq!(rec.grants[0].granted_by, "alice");
    assert_eq!(rec.secrets, vec!["tok".to_owned()]);
    assert_eq!(store.packages().await.unwrap(), vec![rec]);
    // Changed sources need an upgrade; grants and secrets stay.
    let changed = package("p", &[], "def main():\n    return 2\n");
    let e = store.install(&changed, false).await.unwrap_err();
    assert!(e.contains("--upgrade"), "{e}");
    assert_eq!(
        store.install(&changed, true).await.unwrap(),
        InstallOutcome::Upgraded
    );
    assert_eq!(store.grants_for_package("p").await.unwrap().len(), 1);
    // Revocation takes effect and is recorded; a second one finds nothing.
    assert!(store
        .revoke("p", Permission::SecretsRead, "bob")
        .await
        .unwrap());
    assert!(!store
        .revoke("p", Permission::SecretsRead, "bob")
        .await
        .unwrap());
    assert!(store.grants_for_package("p").await.unwrap().is_empty());
    assert!(store.remove_secret("p", "tok").await.unwrap());
    assert!(!store.remove_secret("p", "tok").await.unwrap());
    store.set_secret("p", "tok", SECRET).await.unwrap();
    drop(store);
    // The database holds neither the secret nor the key, nor their hex.
    let bytes = db.contents();
    for plain in [SECRET, API_KEY] {
        for needle in [plain.as_bytes().to_vec(), hex::encode(plain).into_bytes()] {
            assert!(
                !bytes.windows(needle.len()).any(|w| w == needle.as_slice()),
                "{plain} is in the database"
            );
        }
    }
    assert!(
        bytes.windows(3).any(|w| w == b"tok"),
        "the view of the database is empty"
    );
}

pub async fn a_wrong_key_is_refused_before_anything_is_touched(db: Db) {
    let store = db.open(&StoreKey::generate().unwrap()).await.unwrap();
    store
        .install(&package("p", &[], "def main():\n    return 1\n"), false)
        .await
        .unwrap();
    drop(store);
    let before = db.contents();
    let Err(e) = db.open(&StoreKey::generate().unwrap()).await else {
        panic!("another key opened the store")
    };
    assert!(
        e.contains("does not open") && e.contains(STORE_KEY_ENV),
        "{e}"
    );
    let after = db.contents();
    assert!(
        after == before,
        "nothing was written: {}",
        String::from_utf8_lossy(&after)
    );
}

/// A store with two packages, grants, two secrets and a host provider.
async fn store_with_everything(db: &Db, key: &StoreKey) {
    let store = db.open(key).await.unwrap();
    let p = package(
        "p",
        &["https://api.example.com"],
        "def main():\n    return 1\n",
    );
    store.install(&p, false).await.unwrap();
    store
        .install(&package("q", &[], "x = 1\n"), false)
        .await
        .unwrap();
    store
        .grant(
            "p",
            &[Permission::SecretsRead, Permission::ApiHttp],
            "ops",
            &[],
        )
        .await
        .unwrap();
    store.set_secret("p", "a", "secret-a").await.unwrap();
    store.set_secret("p", "b", "secret-b").await.unwrap();
    store
        .set_provider(
            &ProviderScope::Host,
            &provider("https://api.example.com/v1", "sk-host"),
        )
        .await
        .unwrap();
}

fn changed(e: String, who: &str) {
    assert!(
        e.contains("changed outside cordon") && e.contains(who),
        "{e}"
    );
}

pub async fn rows_changed_outside_cordon_are_refused(db: Db) {
    let key = StoreKey::generate().unwrap();
    // Each attack on a store of its own.
    let fresh = || async {
        let d = db.another();
        store_with_everything(&d, &key).await;
        d
    };

    // The untouched store reads back.
    let d = fresh().await;
    let s = d.open(&key).await.unwrap();
    assert!(PackageStore::get(&*s, "p").await.unwrap().is_some());
    assert_eq!(s.grants_for_package("p").await.unwrap().len(), 2);

    // Code and allowlist rewritten.
    let d = fresh().await;
    d.tamper(
        "UPDATE packages SET package = json_set(package, '$.manifest.network_access', \
         json_array('http://127.0.0.1:9')) WHERE id = 'p';",
        "UPDATE packages SET package = jsonb_set(package::jsonb, '{manifest,network_access}', \
         '[\"http://127.0.0.1:9\"]')::text WHERE id = 'p';",
    );
    let s = d.open(&key).await.unwrap();
    changed(
        PackageStore::get(&*s, "p").await.unwrap_err(),
        "package \"p\"",
    );
    changed(s.package_record("p").await.unwrap_err(), "package \"p\"");
    changed(s.packages().await.unwrap_err(), "package \"p\"");
    // Reinstalling needs --upgrade, and then replaces the row.
    let good = package(
        "p",
        &["https://api.example.com"],
        "def main():\n    return 1\n",
    );
    let e = s.install(&good, false).await.unwrap_err();
    assert!(e.contains("--upgrade"), "{e}");
    assert_eq!(
        s.install(&good, true).await.unwrap(),
        InstallOutcome::Upgraded
    );
    assert_eq!(PackageStore::get(&*s, "p").await.unwrap().unwrap(), good);

    // A column outside the JSON: the timestamps.
    let d = fresh().await;
    d.tamper_both("UPDATE packages SET updated_at = updated_at + 1 WHERE id = 'q';");
    changed(
        PackageStore::get(&*d.open(&key).await.unwrap(), "q")
            .await
            .unwrap_err(),
        "package \"q\"",
    );

    // A row copied to another identity: its MAC binds its id.
    let d = fresh().await;
    d.tamper(
        "DELETE FROM packages WHERE id = 'q';
         INSERT INTO packages SELECT 'q', version, source_hash, status,
             json_set(package, '$.id', 'q', '$.manifest.id', 'q'), installed_at, updated_at, mac
         FROM packages WHERE id = 'p';",
        "DELETE FROM packages WHERE id = 'q';
         INSERT INTO packages SELECT 'q', version, source_hash, status,
             jsonb_set(jsonb_set(package::jsonb, '{id}', '\"q\"'), '{manifest,id}', '\"q\"')::text,
             installed_at, updated_at, mac
         FROM packages WHERE id = 'p';",
    );
    assert!(PackageStore::get(&*d.open(&key).await.unwrap(), "q")
        .await
        .is_err());

    // A grant's approval widened, its granter changed.
    for sql in [
        "UPDATE grants SET approval = replace(approval, 'api.example.com', 'evil.example');",
        "UPDATE grants SET granted_by = 'someone else';",
    ] {
        let d = fresh().await;
        d.tamper_both(sql);
        changed(
            d.open(&key)
                .await
                .unwrap()
                .grants_for_package("p")
                .await
                .unwrap_err(),
            "to package \"p\"",
        );
    }
    // A revoked grant revived.
    let d = fresh().await;
    let s = d.open(&key).await.unwrap();
    assert!(s.revoke("p", Permission::SecretsRead, "ops").await.unwrap());
    d.tamper_both("UPDATE grants SET revoked_at = NULL, revoked_by = NULL;");
    changed(s.grants_for_package("p").await.unwrap_err(), "secrets.read");
    // A grant copied to another package.
    let d = fresh().await;
    d.tamper_both(
        "INSERT INTO grants (package_id, permission, granted_by, granted_at, approval, mac)
         SELECT 'q', permission, granted_by, granted_at, approval, mac FROM grants
         WHERE package_id = 'p' AND permission = 'api.http';",
    );
    assert!(d
        .open(&key)
        .await
        .unwrap()
        .grants_for_package("q")
        .await
        .is_err());

    // A provider's URL pointed elsewhere: its sealed key must not go there.
    let d = fresh().await;
    d.tamper_both("UPDATE providers SET base_url = 'http://127.0.0.1:9/v1';");
    let e = d
        .open(&key)
        .await
        .unwrap()
        .resolve("u", None, "p", &ProviderRequirement::default())
        .await
        .unwrap_err();
    changed(e, "host provider");

    // A sealed secret moved to another row does not open there.
    let d = fresh().await;
    d.tamper_both(
        "UPDATE secrets SET sealed = (SELECT sealed FROM secrets WHERE name = 'b') WHERE name = 'a';",
    );
    let e = SecretStore::get(&*d.open(&key).await.unwrap(), "p", "a")
        .await
        .unwrap_err();
    assert!(e.contains("cannot open the sealed value"), "{e}");
    let d = fresh().await;
    d.tamper_both(
        "INSERT INTO secrets SELECT 'q', name, sealed, updated_at FROM secrets WHERE name = 'a';",
    );
    assert!(SecretStore::get(&*d.open(&key).await.unwrap(), "q", "a")
        .await
        .is_err());

    // A row without a MAC (written before rows were authenticated, or
    // stripped) is refused, and says how to write it again.
    let d = fresh().await;
    d.tamper_both("UPDATE packages SET mac = NULL WHERE id = 'p';");
    let e = PackageStore::get(&*d.open(&key).await.unwrap(), "p")
        .await
        .unwrap_err();
    assert!(
        e.contains("has none") && e.contains("install --upgrade"),
        "{e}"
    );

    // Another key cannot forge a MAC that this one accepts.
    let other = db.another();
    store_with_everything(&other, &StoreKey::generate().unwrap()).await;
    let mac = other.package_mac_hex("p");
    let d = fresh().await;
    d.tamper(
        &format!("UPDATE packages SET mac = X'{mac}' WHERE id = 'p';"),
        &format!("UPDATE packages SET mac = decode('{mac}', 'hex') WHERE id = 'p';"),
    );
    changed(
        PackageStore::get(&*d.open(&key).await.unwrap(), "p")
            .await
            .unwrap_err(),
        "package \"p\"",
    );
}

/// An upgrade whose manifest reaches more suspends `api.http` (the new
/// targets named) until granted again; one that reaches less keeps it.
/// The manifest alone counts as a change: same sources, new allowlist.
pub async fn an_upgrade_that_widens_the_reach_suspends_the_grant(db: Db) {
    let store = db.open(&StoreKey::generate().unwrap()).await.unwrap();
    let src = "def main():\n    return 1\n";
    let v1 = package(
        "p",
        &["https://api.example.com", "https://b.example.com"],
        src,
    );
    store.install(&v1, false).await.unwrap();
    store
        .grant(
            "p",
            &[Permission::ApiHttp, Permission::SecretsRead],
            "ops",
            &[],
        )
        .await
        .unwrap();
    let narrower = package("p", &["https://api.example.com"], src);
    let e = store.install(&narrower, false).await.unwrap_err();
    assert!(
        e.contains("--upgrade"),
        "a manifest change needs --upgrade: {e}"
    );
    assert_eq!(
        store.install(&narrower, true).await.unwrap(),
        InstallOutcome::Upgraded
    );
    let rec = store.package_record("p").await.unwrap().unwrap();
    assert!(rec.grants.iter().all(|g| g.status == "active"), "{rec:?}");

    let wider = package(
        "p",
        &["https://api.example.com", "http://127.0.0.1:8080"],
        src,
    );
    store.install(&wider, true).await.unwrap();
    let rec = store.package_record("p").await.unwrap().unwrap();
    let status = |p: Permission| {
        rec.grants
            .iter()
            .find(|g| g.permission == p)
            .unwrap()
            .clone()
    };
    let http = status(Permission::ApiHttp);
    assert_eq!(http.status, "suspended");
    let why = http.suspended.as_deref().unwrap();
    assert!(
        why.contains("http://127.0.0.1:8080") && why.contains("cordon star grant p api.http"),
        "{why}"
    );
    // The other grant's reach did not change.
    assert_eq!(status(Permission::SecretsRead).status, "active");
    // The host refuses the package, naming the grant and the target.
    let grants = store.grants_for_package("p").await.unwrap();
    let g = grants
        .iter()
        .find(|g| g.permission == Permission::ApiHttp)
        .unwrap();
    match grant_status(g, &wider.manifest).unwrap() {
        GrantStatus::Suspended { new_targets, .. } => {
            assert_eq!(new_targets, vec!["http://127.0.0.1:8080".to_owned()])
        }
        other => panic!("{other:?}"),
    }
    // Granting again needs the operator's word for the loopback address.
    let e = store
        .grant("p", &[Permission::ApiHttp], "ops", &[])
        .await
        .unwrap_err();
    assert!(e.contains("--allow-private 127.0.0.1/32"), "{e}");
    store
        .grant(
            "p",
            &[Permission::ApiHttp],
            "ops",
            &["127.0.0.1/32".parse().unwrap()],
        )
        .await
        .unwrap();
    let rec = store.package_record("p").await.unwrap().unwrap();
    assert!(rec.grants.iter().all(|g| g.status == "active"), "{rec:?}");
    // A grant of what the manifest does not request is refused, and a
    // refused grant grants nothing of its batch.
    let e = store
        .grant(
            "p",
            &[Permission::SecretsRead, Permission::NotificationsSend],
            "ops",
            &[],
        )
        .await
        .unwrap_err();
    assert!(e.contains("does not request"), "{e}");
}
