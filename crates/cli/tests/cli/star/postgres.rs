//! `cordon star --db postgres://…` end to end against a throwaway
//! PostgreSQL cluster (one for this test binary): migrate, install,
//! grant, secret and provider set, run — each a separate process, the
//! password never on argv — and a `pg_dump` holding no secret or key;
//! two processes racing to install one package; a revocation by one
//! process holding for the next run of another; a server that is not
//! there failing the command with a clear error.

use std::process::{Command, Output};

use cordon_starlark::TestCluster;

use super::common::text;
use super::operator::{feed, package_dir, Operator, Who};

const SECRET: &str = "pg-secret-value-that-must-not-be-in-the-database";
const API_KEY: &str = "sk-pg-provider-key-that-must-not-be-in-the-database";

/// `cordon star ARGS --db URL --key-file KEY`, the password in
/// `PGPASSWORD` (never on argv).
fn star(op: &Operator, url: &str, args: &[&str], stdin: Option<&str>) -> Output {
    let mut c: Command = op.command();
    c.env("PGPASSWORD", TestCluster::shared().password())
        .arg("star")
        .args(args)
        .args(["--db", url, "--key-file"])
        .arg(op.key());
    feed(&mut c, stdin)
}

fn ok(out: Output) -> Output {
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    out
}

fn json(out: Output) -> serde_json::Value {
    serde_json::from_slice(&ok(out).stdout).unwrap()
}

#[test]
fn install_grant_secret_and_run_on_postgres_leave_no_secret_in_the_database() {
    let cluster = TestCluster::shared();
    let url = cluster.database();
    let dir = tempfile::tempdir().unwrap();
    let op = Operator::new(dir.path(), Who::Root);
    let pkg = package_dir(
        &op.dir,
        "p",
        "id = \"p\"\npermissions = [\"secrets.read\"]\n",
        "def main():\n    return secrets.get('tok')\n",
    );
    // Without the key, no command but migrate makes one.
    let out = star(&op, &url, &["list"], None);
    assert_eq!(out.status.code(), Some(125));
    assert!(!op.key().exists());
    let v = json(star(&op, &url, &["migrate", "--json"], None));
    assert_eq!(v["schema_version"], 2);
    assert!(op.key().exists());
    // Again: nothing to do, the same version.
    assert_eq!(
        json(star(&op, &url, &["migrate", "--json"], None))["schema_version"],
        2
    );
    let v = json(star(
        &op,
        &url,
        &["install", pkg.to_str().unwrap(), "--json"],
        None,
    ));
    assert_eq!(v["outcome"], "installed");
    ok(star(&op, &url, &["grant", "p", "secrets.read"], None));
    ok(star(
        &op,
        &url,
        &["secret", "set", "p", "tok"],
        Some(SECRET),
    ));
    ok(star(
        &op,
        &url,
        &[
            "provider",
            "set",
            "--package",
            "p",
            "--base-url",
            "https://api.example.com/v1",
            "--model",
            "m",
        ],
        Some(API_KEY),
    ));
    let out = ok(star(&op, &url, &["run", "p", "--entry", "main"], None));
    assert_eq!(text(&out.stdout).trim(), format!("{SECRET:?}"));
    let v = json(star(&op, &url, &["show", "p", "--json"], None));
    assert_eq!(v["grants"][0]["permission"], "secrets.read");
    assert_eq!(v["secrets"][0], "tok");
    // The URL with its password from the environment works too.
    let mut c = op.command();
    c.env("CORDON_STORE_URL", cluster.with_password(&url))
        .args(["star", "list", "--key-file"])
        .arg(op.key());
    assert!(text(&ok(feed(&mut c, None)).stdout).contains("p\t"));

    // Nothing the database holds is a secret or a key, or their hex.
    let name = url.rsplit('/').next().unwrap();
    let dump = cluster.dump(name).unwrap();
    assert!(dump.contains("secrets.read"), "the dump is empty");
    for plain in [SECRET, API_KEY] {
        assert!(!dump.contains(plain), "{plain} is in the database");
        assert!(
            !dump.contains(&hex::encode(plain)),
            "{plain} is in the database"
        );
    }
    let key = std::fs::read_to_string(op.key()).unwrap();
    assert!(
        !dump.contains(key.trim()),
        "the store key is in the database"
    );
}

#[test]
fn a_password_on_the_command_line_is_refused() {
    let cluster = TestCluster::shared();
    let url = cluster.with_password(&cluster.database());
    let dir = tempfile::tempdir().unwrap();
    let op = Operator::new(dir.path(), Who::Root);
    let mut c = op.command();
    c.args(["star", "migrate", "--db", &url, "--key-file"])
        .arg(op.key());
    let out = feed(&mut c, None);
    assert_eq!(out.status.code(), Some(125));
    let e = text(&out.stderr);
    assert!(
        e.contains("CORDON_STORE_URL") && !e.contains(cluster.password()),
        "{e}"
    );
    assert!(!op.key().exists(), "nothing was made");
}

/// Two `cordon star install --upgrade` processes race on one package,
/// round after round: both succeed, exactly one reports the install, and
/// the package is one of the two versions, whole.
#[test]
fn two_processes_installing_one_package_at_once_end_with_one_version() {
    let url = TestCluster::shared().database();
    let dir = tempfile::tempdir().unwrap();
    let op = Operator::new(dir.path(), Who::Root);
    ok(star(&op, &url, &["migrate"], None));
    for round in 0..5 {
        let id = format!("r{round}");
        let toml = format!("id = \"{id}\"\n");
        let a = package_dir(
            &op.dir,
            &format!("{id}a"),
            &toml,
            "def main():\n    return 'a'\n",
        );
        let b = package_dir(
            &op.dir,
            &format!("{id}b"),
            &toml,
            "def main():\n    return 'b'\n",
        );
        let spawn = |p: &std::path::Path| {
            let mut c = op.command();
            c.env("PGPASSWORD", TestCluster::shared().password())
                .args(["star", "install", "--upgrade", "--json"])
                .arg(p)
                .args(["--db", &url, "--key-file"])
                .arg(op.key())
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped());
            c.spawn().unwrap()
        };
        let (ca, cb) = (spawn(&a), spawn(&b));
        let mut outcomes: Vec<String> = [ca, cb]
            .into_iter()
            .map(|c| {
                json(c.wait_with_output().unwrap())["outcome"]
                    .as_str()
                    .unwrap()
                    .to_owned()
            })
            .collect();
        outcomes.sort();
        assert_eq!(outcomes, ["installed", "upgraded"], "round {round}");
        let out = ok(star(&op, &url, &["run", &id, "--entry", "main"], None));
        let said = text(&out.stdout);
        assert!(said.trim() == "\"a\"" || said.trim() == "\"b\"", "{said}");
    }
}

/// One process revokes; another's next run no longer gets the module.
#[test]
fn a_revocation_by_one_process_holds_for_the_next_run_of_another() {
    let url = TestCluster::shared().database();
    let dir = tempfile::tempdir().unwrap();
    let admin = Operator::new(&dir.path().join("admin"), Who::Root);
    let host = Operator::new(&dir.path().join("host"), Who::Root);
    ok(star(&admin, &url, &["migrate"], None));
    // The host has the same key (a fleet shares it), its own files.
    std::fs::copy(admin.key(), host.key()).unwrap();
    let pkg = package_dir(
        &admin.dir,
        "p",
        "id = \"p\"\npermissions = [\"secrets.read\"]\n",
        "def main():\n    return secrets.get('tok')\n",
    );
    ok(star(
        &admin,
        &url,
        &["install", pkg.to_str().unwrap()],
        None,
    ));
    ok(star(&admin, &url, &["grant", "p", "secrets.read"], None));
    ok(star(
        &admin,
        &url,
        &["secret", "set", "p", "tok"],
        Some("t"),
    ));
    let run = || star(&host, &url, &["run", "p", "--entry", "main"], None);
    assert_eq!(text(&ok(run()).stdout).trim(), "\"t\"");
    ok(star(&admin, &url, &["revoke", "p", "secrets.read"], None));
    let out = run();
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("secrets"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn a_server_that_is_not_there_fails_the_command_clearly() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let dir = tempfile::tempdir().unwrap();
    let op = Operator::new(dir.path(), Who::Root);
    let url = format!("postgres://cordon@127.0.0.1:{port}/x");
    let out = star(&op, &url, &["migrate"], None);
    assert_eq!(out.status.code(), Some(125));
    let e = text(&out.stderr);
    assert!(
        e.contains("cannot reach the store database") && e.contains(&url),
        "{e}"
    );
    assert!(!op.key().exists(), "no key for a store never reached");
}
