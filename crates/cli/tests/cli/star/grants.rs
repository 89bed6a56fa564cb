//! A grant is bound to the manifest it approved: an upgrade that widens
//! what `api.http` reaches suspends the grant until the operator grants
//! again, and a target on loopback or a private address needs the
//! operator's `--allow-private`, never the manifest alone. Every step is a
//! separate `cordon` process on one store, as root and as uid 65534.

use super::common::text;
use super::operator::{package_dir, Operator, Who};
use super::serve;

fn upgrade_widening_the_allowlist_suspends_the_grant(who: Who) {
    let dir = tempfile::tempdir().unwrap();
    let op = Operator::new(dir.path(), who);
    let (port, seen) = serve(r#"{"ok": true}"#);
    let target = format!("http://127.0.0.1:{port}");
    let main = "def main(u):\n    return http.get(u).status\n";
    let v1 = package_dir(
        &op.dir,
        "v1",
        "id = \"up\"\nversion = \"1.0.0\"\npermissions = [\"api.http\"]\n\
         network_access = [\"https://api.example.com\"]\n",
        main,
    );
    let v2 = package_dir(
        &op.dir,
        "v2",
        &format!(
            "id = \"up\"\nversion = \"2.0.0\"\npermissions = [\"api.http\"]\n\
             network_access = [\"{target}\"]\n"
        ),
        main,
    );
    let ok = |out: std::process::Output| {
        assert_eq!(out.status.code(), Some(0), "{who:?}: {}", text(&out.stderr));
        out
    };
    ok(op.star(&["install", v1.to_str().unwrap()], None));
    ok(op.star(&["grant", "up", "api.http"], None));
    ok(op.star(&["install", "--upgrade", v2.to_str().unwrap()], None));

    // `show` says the grant is suspended, and why.
    let shown = ok(op.star(&["show", "up", "--json"], None));
    let v: serde_json::Value = serde_json::from_slice(&shown.stdout).unwrap();
    let grant = &v["grants"][0];
    assert_eq!(grant["permission"], "api.http", "{who:?}: {v}");
    assert_eq!(grant["status"], "suspended", "{who:?}: {v}");
    assert!(
        grant["suspended"].as_str().unwrap_or("").contains(&target),
        "{who:?}: {v}"
    );

    // `run` refuses, naming the new target, and nothing reaches the server.
    let url = format!("{target}/x");
    let args = format!("[\"{url}\"]");
    let run_it = || op.star(&["run", "up", "--entry", "main", "--args", &args], None);
    let out = run_it();
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "{who:?}: {err}");
    assert!(err.contains(&target), "{who:?}: {err}");
    assert!(
        err.contains("cordon star grant up api.http"),
        "{who:?}: {err}"
    );
    assert!(seen.try_recv().is_err(), "{who:?}: the server was reached");

    // Granting again approves the new manifest, but a loopback target
    // needs the operator's own word for its address.
    let out = op.star(&["grant", "up", "api.http"], None);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "{who:?}: {err}");
    assert!(
        err.contains("--allow-private 127.0.0.1/32"),
        "{who:?}: {err}"
    );
    let out = run_it();
    assert_eq!(
        out.status.code(),
        Some(125),
        "{who:?}: {}",
        text(&out.stderr)
    );
    assert!(seen.try_recv().is_err(), "{who:?}: the server was reached");

    ok(op.star(
        &["grant", "up", "api.http", "--allow-private", "127.0.0.1/32"],
        None,
    ));
    let out = ok(run_it());
    assert_eq!(text(&out.stdout).trim(), "200", "{who:?}");
    let request = seen
        .recv_timeout(std::time::Duration::from_secs(5))
        .unwrap();
    assert!(request.starts_with("GET /x"), "{request}");
    let shown = ok(op.star(&["show", "up", "--json"], None));
    let v: serde_json::Value = serde_json::from_slice(&shown.stdout).unwrap();
    assert_eq!(v["grants"][0]["status"], "active", "{who:?}: {v}");
    assert_eq!(v["grants"][0]["private"][0], "127.0.0.1/32", "{who:?}: {v}");
}

#[test]
fn an_upgrade_that_widens_the_allowlist_suspends_the_grant_as_root() {
    upgrade_widening_the_allowlist_suspends_the_grant(Who::Root);
}

#[test]
fn an_upgrade_that_widens_the_allowlist_suspends_the_grant_as_nobody() {
    upgrade_widening_the_allowlist_suspends_the_grant(Who::Nobody);
}

/// A first grant is held to the same rule: the manifest alone never
/// approves a loopback target, and a grant for a permission the manifest
/// does not request is refused (it would approve a later request unseen).
#[test]
fn the_manifest_alone_never_approves_a_private_target() {
    let dir = tempfile::tempdir().unwrap();
    let op = Operator::new(dir.path(), Who::Root);
    let p = package_dir(
        &op.dir,
        "p",
        "id = \"lo\"\npermissions = [\"api.http\"]\n\
         network_access = [\"http://localhost:8080\", \"http://[::1]:9\", \"10.1.2.3:8443\"]\n",
        "def main():\n    return 1\n",
    );
    assert_eq!(
        op.star(&["install", p.to_str().unwrap()], None)
            .status
            .code(),
        Some(0)
    );
    let out = op.star(&["grant", "lo", "api.http"], None);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "{err}");
    for flag in [
        "--allow-private 127.0.0.1/32",
        "--allow-private ::1/128",
        "--allow-private 10.1.2.3/32",
    ] {
        assert!(err.contains(flag), "{flag}: {err}");
    }
    // A range that holds only some of them is not enough.
    let out = op.star(
        &["grant", "lo", "api.http", "--allow-private", "127.0.0.0/8"],
        None,
    );
    assert_eq!(out.status.code(), Some(125), "{}", text(&out.stderr));
    let out = op.star(&["show", "lo", "--json"], None);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        v["grants"].as_array().map(Vec::len),
        Some(0),
        "nothing was granted: {v}"
    );
    let out = op.star(
        &[
            "grant",
            "lo",
            "api.http",
            "--allow-private",
            "127.0.0.0/8",
            "--allow-private",
            "::1/128",
            "--allow-private",
            "10.0.0.0/8",
        ],
        None,
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let out = op.star(&["grant", "lo", "secrets.read"], None);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "{err}");
    assert!(err.contains("does not request"), "{err}");
}
