//! The shipped examples under `examples/starlark/` really run.

use std::path::PathBuf;

use cordon_starlark::*;
use serde_json::json;

use crate::server::start;
use crate::{assert_err_contains, harness};

fn examples_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../examples/starlark")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hello_package_uses_http_and_secrets_against_a_local_server() {
    let srv = start().await;
    let mut pkg = load_package_from_path(examples_dir().join("hello")).unwrap();
    assert_eq!(pkg.id, "hello");
    assert_eq!(
        pkg.manifest.permissions,
        vec![Permission::ApiHttp, Permission::SecretsRead]
    );
    assert!(pkg.sources.contains_key("lib/format.star"));
    // The test server listens on an ephemeral port instead of 8080.
    pkg.manifest.network_access = vec![format!("http://127.0.0.1:{}", srv.port)];
    let h = harness(EvalLimits::default());
    h.grant_all(&pkg);
    let args = serde_json::Map::from_iter([
        ("base_url".to_owned(), json!(srv.base())),
        ("path".to_owned(), json!("/json")),
    ]);
    // No secret yet: the script fails with its own message.
    assert_err_contains(
        h.runner
            .call_entry_point(&pkg, "main", vec![], args.clone(), None)
            .await,
        "greeting_token",
    );
    h.secrets.set("hello", "greeting_token", "tok-123");
    let out = h
        .runner
        .call_entry_point(&pkg, "main", vec![], args, None)
        .await
        .unwrap();
    assert_eq!(
        out.value,
        json!({"status": 200, "greeting": null, "authenticated": true})
    );
    assert!(out.output.contains("| hello |"), "{}", out.output);
    assert_eq!(srv.last().headers["authorization"], "Bearer tok-123");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn single_file_example_runs_without_permissions() {
    let pkg = load_package_from_path(examples_dir().join("single.star")).unwrap();
    assert_eq!(pkg.id, "single");
    let h = harness(EvalLimits::default());
    let out = h
        .runner
        .call_entry_point(&pkg, "main", vec![json!(20)], Default::default(), None)
        .await
        .unwrap();
    assert_eq!(
        out.value,
        json!({"n": 20, "fib": 6765, "encoded": "{\"n\":20}"})
    );
    assert_eq!(out.output, "computing fib(20)\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_package_from_disk_gets_only_what_is_granted() {
    let srv = start().await;
    // Copy the hello package so its network_access can point at the test server.
    let dir = tempfile::tempdir().unwrap();
    let src = examples_dir().join("hello");
    std::fs::create_dir_all(dir.path().join("lib")).unwrap();
    for f in ["main.star", "lib/format.star"] {
        std::fs::copy(src.join(f), dir.path().join(f)).unwrap();
    }
    let toml = std::fs::read_to_string(src.join("package.toml"))
        .unwrap()
        .replace(
            "http://127.0.0.1:8080",
            &format!("http://127.0.0.1:{}", srv.port),
        );
    std::fs::write(dir.path().join("package.toml"), toml).unwrap();
    let args = vec![json!(srv.base()), json!("/json")];

    // A package loaded from disk, as `cordon star run` does it; nothing is
    // granted but what is listed.
    let pkg = load_package_from_path(dir.path()).unwrap();
    let h = harness(EvalLimits::default());

    // Without grants the modules are absent.
    let e = h
        .runner
        .call_entry_point(&pkg, "main", args.clone(), Default::default(), None)
        .await
        .unwrap_err();
    assert!(e.to_string().contains("secrets"), "{e}");

    h.perms.grant(&pkg.id, Permission::ApiHttp);
    h.perms.grant(&pkg.id, Permission::SecretsRead);
    h.secrets.set(&pkg.id, "greeting_token", "t");
    // The server is on this host's loopback: the operator approves it.
    let refused = h
        .runner
        .call_entry_point(&pkg, "main", args.clone(), Default::default(), None)
        .await
        .unwrap_err();
    assert!(
        refused.to_string().contains("--allow-private 127.0.0.1/32"),
        "{refused}"
    );
    assert_eq!(srv.hits(), 0);
    h.perms
        .allow_private(&pkg.id, "127.0.0.1/32".parse().unwrap());
    let exec = h.runner.exec_package(&pkg, None).await.unwrap();
    let call = h
        .runner
        .call_entry_point(&pkg, "main", args, Default::default(), None)
        .await
        .unwrap();
    assert_eq!(exec.modules, vec!["secrets".to_owned(), "http".to_owned()]);
    assert_eq!(exec.globals["DEFAULT_BASE"], json!("http://127.0.0.1:8080"));
    assert_eq!(call.value["status"], json!(200));
    assert_eq!(srv.hits(), 1);
}
