//! `CallOutcome::denials` / `EvalError::denials`: a hostile package tries
//! what its grants, its allowlist and its limits refuse, and the host's
//! own record names each, with the grant or setting that would allow it.
//! The sandboxed worker's calls are recorded the same way
//! (`tests/sandboxed/hostile.rs`).

use cordon_core::explain::{DenialKind, Remedy};
use cordon_starlark::*;

use crate::server::start;
use crate::{harness, package};

/// The one denial of a failed call, as (kind, object, access, remedy).
async fn refused(h: &crate::Harness, pkg: &Package) -> (DenialKind, String, String, Remedy) {
    let e = h
        .runner
        .call_keeping_output(pkg, "main", vec![])
        .await
        .expect_err("the call must be refused");
    let [d] = e.denials.denials.as_slice() else {
        panic!(
            "one denial expected for {}: {:?} ({})",
            pkg.id, e.denials, e.error
        )
    };
    assert_eq!(d.count, 1);
    (d.kind, d.object.clone(), d.access.clone(), d.remedy.clone())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_refusal_is_named_with_what_allows_it() {
    let srv = start().await;
    let mut limits = EvalLimits::default();
    limits.http.max_requests_per_invocation = 1;
    limits.max_ticks = 100_000;
    let h = harness(limits);
    let (base, port) = (srv.base(), srv.port);
    let listed = vec![format!("http://127.0.0.1:{port}")];
    let get = |url: String| format!("def main():\n    return http.get({url:?}).status\n");

    // A host the allowlist does not list, and a listed host on another port.
    for (id, url, target) in [
        (
            "d-host",
            "http://127.0.0.2:9/x".to_string(),
            "127.0.0.2:9".to_string(),
        ),
        (
            "d-port",
            format!("http://127.0.0.1:{}/x", port + 1),
            format!("127.0.0.1:{}", port + 1),
        ),
    ] {
        let pkg = package(id, &[Permission::ApiHttp], &listed, &get(url));
        h.grant_all(&pkg);
        assert_eq!(
            refused(&h, &pkg).await,
            (
                DenialKind::Network,
                format!(
                    "{target} (not in the package's network_access; a private address also \
                     needs its range approved by the operator)"
                ),
                "connect".to_string(),
                Remedy::AllowHost(format!("http://{target}"))
            ),
            "{id}"
        );
    }

    // Request rules: the GET a rule names passes; a POST to it, or
    // another path on the same host, is refused with the rule to add.
    let ruled = vec![format!("GET http://127.0.0.1:{port}/hello")];
    let pkg = package(
        "d-rule-ok",
        &[Permission::ApiHttp],
        &ruled,
        &get(format!("{base}/hello")),
    );
    h.grant_all(&pkg);
    let ok = h.runner.call_keeping_output(&pkg, "main", vec![]).await;
    assert!(
        ok.is_ok(),
        "the allowed GET: {:?}",
        ok.err().map(|e| e.error)
    );
    for (id, code, method, path) in [
        (
            "d-rule-post",
            format!(
                "def main():\n    return http.post({:?}, body='x').status\n",
                format!("{base}/hello")
            ),
            "POST",
            "/hello",
        ),
        ("d-rule-path", get(format!("{base}/other")), "GET", "/other"),
    ] {
        let pkg = package(id, &[Permission::ApiHttp], &ruled, &code);
        h.grant_all(&pkg);
        let (kind, object, _, remedy) = refused(&h, &pkg).await;
        assert_eq!(kind, DenialKind::Network, "{id}");
        assert!(
            object.contains(&format!(
                "no request rule of the package allows {method} {path}"
            )),
            "{id}: {object}"
        );
        assert_eq!(
            remedy,
            Remedy::AllowRequest(format!("{method} http://127.0.0.1:{port}{path}")),
            "{id}"
        );
    }
    let seen = srv.seen.lock().unwrap().clone();
    assert!(
        !seen
            .iter()
            .any(|s| s.path.contains("other") || s.method == "POST"),
        "a refused request reached the server: {seen:?}"
    );

    // More requests than the invocation's budget.
    let twice = format!(
        "def main():\n    http.get('{base}/hello')\n    return http.get('{base}/hello').status\n"
    );
    let pkg = package("d-budget", &[Permission::ApiHttp], &listed, &twice);
    h.grant_all(&pkg);
    let (kind, object, _, remedy) = refused(&h, &pkg).await;
    assert_eq!(kind, DenialKind::Limit);
    assert!(object.contains("more than 1 HTTP requests"), "{object}");
    assert_eq!(
        remedy,
        Remedy::RaiseLimit("EvalLimits::http.max_requests_per_invocation".into())
    );

    // A module the package requested but was not granted.
    let pkg = package(
        "d-module",
        &[Permission::SecretsRead],
        &[],
        "def main():\n    return secrets.get('k')\n",
    );
    assert_eq!(
        refused(&h, &pkg).await,
        (
            DenialKind::Module,
            "secrets".to_string(),
            "use".to_string(),
            Remedy::GrantPermission("secrets.read".into())
        )
    );

    // The instruction budget.
    let pkg = package(
        "d-ticks",
        &[],
        &[],
        "def main():\n    n = 0\n    for i in range(10000000):\n        n += i\n    return n\n",
    );
    assert_eq!(
        refused(&h, &pkg).await,
        (
            DenialKind::Limit,
            "ticks 100000".to_string(),
            "reached".to_string(),
            Remedy::RaiseLimit("EvalLimits::max_ticks".into())
        )
    );

    // A script's own fail() text cannot pose as a refusal.
    let pkg = package(
        "d-forge",
        &[Permission::SecretsRead],
        &[],
        "def main():\n    fail('Variable `secrets` not found')\n",
    );
    let e = h
        .runner
        .call_keeping_output(&pkg, "main", vec![])
        .await
        .unwrap_err();
    assert_eq!(e.denials, Default::default(), "{}", e.error);
    // Nor can any error that echoes the script's words: each is the
    // script's own error, never a limit.
    for (i, body) in [
        "fail('ticks has been exceeded')",
        "return {}['Execution duration limit of 100000 ticks has been exceeded']",
        "return int('Heap memory limit of 1 bytes exceeded.')",
        "return getattr(struct(), 'nesting limit: x')",
        "return {}['x: cancelled']",
        "return {}['Evaluation cancelled']",
        "return {}['call stack overflow']",
    ]
    .iter()
    .enumerate()
    {
        let pkg = package(
            &format!("d-forge-{i}"),
            &[],
            &[],
            &format!("def main():\n    {body}\n"),
        );
        let e = h
            .runner
            .call_keeping_output(&pkg, "main", vec![])
            .await
            .unwrap_err();
        assert!(
            matches!(e.error, StarlarkHostError::Script { .. }),
            "{body}: {:?}",
            e.error
        );
        assert_eq!(e.denials, Default::default(), "{body}");
    }

    // A call that was refused nothing says so.
    let pkg = package(
        "d-none",
        &[Permission::ApiHttp],
        &listed,
        &get(format!("{base}/hello")),
    );
    h.grant_all(&pkg);
    let ok = h.call(&pkg, "main", None).await.unwrap();
    assert_eq!(ok.denials, Default::default());
}
