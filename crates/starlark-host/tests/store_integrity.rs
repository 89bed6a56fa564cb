//! The store as an attacker who could write its file meets it: rows
//! changed outside cordon (code, manifest, grants, a provider's URL), rows
//! copied to another identity, sealed values moved to another row, rows
//! without a MAC, and files or directories another user could write or
//! swap are all refused; an upgrade that widens a package's reach
//! suspends its grants.
#![cfg(feature = "sqlite")]

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use cordon_starlark::*;

fn package(id: &str, network: &[&str], src: &str) -> Package {
    let mut m = Manifest::minimal(id, "main.star");
    m.permissions = vec![Permission::SecretsRead, Permission::ApiHttp];
    m.network_access = network.iter().map(|s| s.to_string()).collect();
    Package::new(
        m,
        BTreeMap::from([("main.star".to_owned(), src.to_owned())]),
    )
}

/// What the attacker does: SQL on the file, outside cordon.
fn tamper(db: &Path, sql: &str) {
    let c = rusqlite::Connection::open(db).unwrap();
    c.execute_batch(sql).unwrap();
}

fn store_with_everything(db: &Path, key: &StoreKey) -> SqliteStore {
    let store = SqliteStore::open(db, key).unwrap();
    let pkg = package(
        "p",
        &["https://api.example.com"],
        "def main():\n    return 1\n",
    );
    store.install(&pkg, false).unwrap();
    store.install(&package("q", &[], "x = 1\n"), false).unwrap();
    store
        .grant(
            "p",
            &[Permission::SecretsRead, Permission::ApiHttp],
            "ops",
            &[],
        )
        .unwrap();
    store.set_secret("p", "a", "secret-a").unwrap();
    store.set_secret("p", "b", "secret-b").unwrap();
    store
        .set_provider(
            &ProviderScope::Host,
            &ProviderConfig {
                base_url: "https://api.example.com/v1".into(),
                api_key: ApiKey::new("sk-host"),
                model: "m".into(),
            },
        )
        .unwrap();
    store
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rows_changed_outside_cordon_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("star.db");
    let key = StoreKey::generate().unwrap();
    drop(store_with_everything(&db, &key));
    let snapshot = std::fs::read(&db).unwrap();
    let reopen = || SqliteStore::open(&db, &key).unwrap();
    let restore = || std::fs::write(&db, &snapshot).unwrap();
    let changed = |e: String, who: &str| {
        assert!(
            e.contains("changed outside cordon") && e.contains(who),
            "{e}"
        );
    };

    // The untouched store reads back.
    let s = reopen();
    assert!(PackageStore::get(&s, "p").await.unwrap().is_some());
    assert_eq!(s.grants_for_package("p").await.unwrap().len(), 2);
    drop(s);

    // Code and allowlist rewritten.
    tamper(
        &db,
        "UPDATE packages SET package = json_set(package, '$.manifest.network_access', \
         json_array('http://127.0.0.1:9')) WHERE id = 'p';",
    );
    let s = reopen();
    changed(
        PackageStore::get(&s, "p").await.unwrap_err(),
        "package \"p\"",
    );
    changed(s.package_record("p").unwrap_err(), "package \"p\"");
    changed(s.packages().unwrap_err(), "package \"p\"");
    // Reinstalling needs --upgrade, and then replaces the row.
    let good = package(
        "p",
        &["https://api.example.com"],
        "def main():\n    return 1\n",
    );
    let e = s.install(&good, false).unwrap_err();
    assert!(e.contains("--upgrade"), "{e}");
    assert_eq!(s.install(&good, true).unwrap(), InstallOutcome::Upgraded);
    assert_eq!(PackageStore::get(&s, "p").await.unwrap().unwrap(), good);
    drop(s);
    restore();

    // A column outside the JSON: the version, the timestamps.
    tamper(
        &db,
        "UPDATE packages SET updated_at = updated_at + 1 WHERE id = 'q';",
    );
    changed(
        PackageStore::get(&reopen(), "q").await.unwrap_err(),
        "package \"q\"",
    );
    restore();

    // A row copied to another identity: its MAC binds its id.
    tamper(
        &db,
        "DELETE FROM packages WHERE id = 'q';
         INSERT INTO packages SELECT 'q', version, source_hash, status,
             json_set(package, '$.id', 'q', '$.manifest.id', 'q'), installed_at, updated_at, mac
         FROM packages WHERE id = 'p';",
    );
    assert!(PackageStore::get(&reopen(), "q").await.is_err());
    restore();

    // A grant's approval widened, a revoked grant revived, a grant forged.
    for sql in [
        "UPDATE grants SET approval = replace(approval, 'api.example.com', 'evil.example');",
        "UPDATE grants SET granted_by = 'someone else';",
    ] {
        tamper(&db, sql);
        changed(
            reopen().grants_for_package("p").await.unwrap_err(),
            "to package \"p\"",
        );
        restore();
    }
    let s = reopen();
    assert!(s.revoke("p", Permission::SecretsRead, "ops").unwrap());
    drop(s);
    tamper(
        &db,
        "UPDATE grants SET revoked_at = NULL, revoked_by = NULL;",
    );
    changed(
        reopen().grants_for_package("p").await.unwrap_err(),
        "secrets.read",
    );
    restore();
    tamper(
        &db,
        "INSERT INTO grants (package_id, permission, granted_by, granted_at, approval, mac)
         SELECT 'q', permission, granted_by, granted_at, approval, mac FROM grants
         WHERE package_id = 'p' AND permission = 'api.http';",
    );
    assert!(reopen().grants_for_package("q").await.is_err());
    restore();

    // A provider's URL pointed elsewhere: its sealed key must not go there.
    tamper(
        &db,
        "UPDATE providers SET base_url = 'http://127.0.0.1:9/v1';",
    );
    let e = reopen()
        .resolve("u", None, "p", &ProviderRequirement::default())
        .await
        .unwrap_err();
    changed(e, "host provider");
    restore();

    // A sealed secret moved to another row does not open there.
    tamper(
        &db,
        "UPDATE secrets SET sealed = (SELECT sealed FROM secrets WHERE name = 'b') WHERE name = 'a';",
    );
    let e = SecretStore::get(&reopen(), "p", "a").await.unwrap_err();
    assert!(e.contains("cannot open the sealed value"), "{e}");
    restore();
    tamper(
        &db,
        "INSERT INTO secrets SELECT 'q', name, sealed, updated_at FROM secrets WHERE name = 'a';",
    );
    assert!(SecretStore::get(&reopen(), "q", "a").await.is_err());
    restore();

    // A row without a MAC (written before rows were authenticated, or
    // stripped) is refused, and says how to write it again.
    tamper(&db, "UPDATE packages SET mac = NULL WHERE id = 'p';");
    let e = PackageStore::get(&reopen(), "p").await.unwrap_err();
    assert!(
        e.contains("has none") && e.contains("install --upgrade"),
        "{e}"
    );
    restore();

    // Another key cannot forge a MAC that this one accepts.
    let other = StoreKey::generate().unwrap();
    let dir2 = tempfile::tempdir().unwrap();
    let db2 = dir2.path().join("star.db");
    drop(store_with_everything(&db2, &other));
    tamper(
        &db,
        &format!(
            "ATTACH '{}' AS o; UPDATE packages SET mac = (SELECT mac FROM o.packages WHERE id = 'p') \
             WHERE id = 'p';",
            db2.display()
        ),
    );
    changed(
        PackageStore::get(&reopen(), "p").await.unwrap_err(),
        "package \"p\"",
    );
}

/// An upgrade whose manifest reaches more suspends `api.http` (the new
/// targets named) until granted again; one that reaches less keeps it.
/// The manifest alone counts as a change: same sources, new allowlist.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upgrade_that_widens_the_reach_suspends_the_grant() {
    let dir = tempfile::tempdir().unwrap();
    let store =
        SqliteStore::open(&dir.path().join("star.db"), &StoreKey::generate().unwrap()).unwrap();
    let src = "def main():\n    return 1\n";
    let v1 = package(
        "p",
        &["https://api.example.com", "https://b.example.com"],
        src,
    );
    store.install(&v1, false).unwrap();
    store
        .grant(
            "p",
            &[Permission::ApiHttp, Permission::SecretsRead],
            "ops",
            &[],
        )
        .unwrap();
    let narrower = package("p", &["https://api.example.com"], src);
    let e = store.install(&narrower, false).unwrap_err();
    assert!(
        e.contains("--upgrade"),
        "a manifest change needs --upgrade: {e}"
    );
    assert_eq!(
        store.install(&narrower, true).unwrap(),
        InstallOutcome::Upgraded
    );
    let rec = store.package_record("p").unwrap().unwrap();
    assert!(rec.grants.iter().all(|g| g.status == "active"), "{rec:?}");

    let wider = package(
        "p",
        &["https://api.example.com", "http://127.0.0.1:8080"],
        src,
    );
    store.install(&wider, true).unwrap();
    let rec = store.package_record("p").unwrap().unwrap();
    let http = rec
        .grants
        .iter()
        .find(|g| g.permission == Permission::ApiHttp)
        .unwrap();
    assert_eq!(http.status, "suspended");
    let why = http.suspended.as_deref().unwrap();
    assert!(
        why.contains("http://127.0.0.1:8080") && why.contains("cordon star grant p api.http"),
        "{why}"
    );
    // The other grant's reach did not change.
    let secrets = rec
        .grants
        .iter()
        .find(|g| g.permission == Permission::SecretsRead)
        .unwrap();
    assert_eq!(secrets.status, "active");
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
        .unwrap_err();
    assert!(e.contains("--allow-private 127.0.0.1/32"), "{e}");
    store
        .grant(
            "p",
            &[Permission::ApiHttp],
            "ops",
            &["127.0.0.1/32".parse().unwrap()],
        )
        .unwrap();
    let rec = store.package_record("p").unwrap().unwrap();
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
        .unwrap_err();
    assert!(e.contains("does not request"), "{e}");
}

/// The checks on the files, at the library's door (the CLI tests drive
/// the same as other uids).
#[test]
fn files_others_could_write_or_swap_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let key = StoreKey::generate().unwrap();
    let good = dir.path().join("good.db");
    drop(SqliteStore::open(&good, &key).unwrap());
    assert_eq!(
        std::fs::metadata(&good).unwrap().permissions().mode() & 0o777,
        0o600
    );
    let refused = |p: &Path, needle: &str| {
        let e = SqliteStore::open(p, &key).unwrap_err();
        assert!(
            e.contains(needle) && e.contains("refusing the store database"),
            "{e}"
        );
    };
    // A symlink, even to a good store, and a dangling one (not followed,
    // its target not created).
    let link = dir.path().join("link.db");
    std::os::unix::fs::symlink(&good, &link).unwrap();
    refused(&link, "symlink");
    let dangling = dir.path().join("dangling.db");
    let target = dir.path().join("target.db");
    std::os::unix::fs::symlink(&target, &dangling).unwrap();
    refused(&dangling, "symlink");
    assert!(!target.exists());
    // Writable by others.
    std::fs::set_permissions(&good, std::fs::Permissions::from_mode(0o660)).unwrap();
    refused(&good, "writable by group or others");
    std::fs::set_permissions(&good, std::fs::Permissions::from_mode(0o600)).unwrap();
    // In a directory others can write (sticky or not).
    for mode in [0o777, 0o1777, 0o770] {
        let open = dir.path().join(format!("open{mode:o}"));
        std::fs::create_dir(&open).unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(mode)).unwrap();
        refused(&open.join("star.db"), "writable by other users");
    }
    // A directory above that others can write, unless sticky (/tmp is).
    let above = dir.path().join("above");
    std::fs::create_dir_all(above.join("mine")).unwrap();
    std::fs::set_permissions(&above, std::fs::Permissions::from_mode(0o777)).unwrap();
    refused(&above.join("mine/star.db"), "not sticky");
    std::fs::set_permissions(&above, std::fs::Permissions::from_mode(0o1777)).unwrap();
    assert!(SqliteStore::open(&above.join("mine/star.db"), &key).is_ok());
    // Not a regular file.
    let fifo = dir.path().join("fifo.db");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: mkfifo with a valid path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    refused(&fifo, "not a regular file");
    // Another user's file and directory (made with chown: as root, as the
    // tests run; the CLI tests run the same as uid 65534).
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        let theirs = dir.path().join("theirs.db");
        std::fs::write(&theirs, b"").unwrap();
        std::fs::set_permissions(&theirs, std::fs::Permissions::from_mode(0o600)).unwrap();
        std::os::unix::fs::chown(&theirs, Some(65534), Some(65534)).unwrap();
        refused(&theirs, "owned by uid 65534");
        assert_eq!(std::fs::read(&theirs).unwrap(), b"", "nothing was written");
        let their_dir = dir.path().join("their-dir");
        std::fs::create_dir(&their_dir).unwrap();
        std::os::unix::fs::chown(&their_dir, Some(65534), Some(65534)).unwrap();
        refused(&their_dir.join("star.db"), "owned by uid 65534");
    }
}
