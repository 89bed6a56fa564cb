//! The `http` module against a real server on 127.0.0.1: the allowlist,
//! the loopback guard, redirects, and the size, time and count caps.

use std::time::Duration;

use cordon_starlark::*;
use serde_json::json;

use crate::server::start;
use crate::{assert_err_contains, harness, package};

fn http_pkg(id: &str, network: &[String], body: &str) -> Package {
    package(id, &[Permission::ApiHttp], network, body)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_post_json_and_headers_over_allowlisted_loopback() {
    let srv = start().await;
    let h = harness(EvalLimits::default());
    let base = srv.base();
    let pkg = http_pkg(
        "h1",
        &[format!("http://127.0.0.1:{}", srv.port)],
        &format!(
            r#"
def main():
    r = http.get("{base}/hello", headers = {{"X-Test": "1"}})
    j = http.get("{base}/json").json()
    p = http.post("{base}/echo", json = {{"k": [1, 2]}}, headers = {{"X-Test": "yes"}})
    q = http.request("PUT", "{base}/echo", body = "raw")
    return {{"status": r.status, "ok": r.ok, "body": r.body, "ctype": r.headers["content-type"],
             "json": j, "post": p.json(), "put": q.json()["method"]}}
"#
        ),
    );
    h.grant_all(&pkg);
    let v = h.call(&pkg, "main", None).await.unwrap().value;
    assert_eq!(v["status"], json!(200));
    assert_eq!(v["ok"], json!(true));
    assert_eq!(v["body"], json!("hello"));
    assert_eq!(v["ctype"], json!("text/plain"));
    assert_eq!(
        v["json"],
        json!({"a": [1, 2.5, null], "b": "x", "ok": true})
    );
    assert_eq!(v["post"]["method"], json!("POST"));
    assert_eq!(v["post"]["x_test"], json!("yes"));
    assert_eq!(v["post"]["content_type"], json!("application/json"));
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(v["post"]["body"].as_str().unwrap()).unwrap(),
        json!({"k": [1, 2]})
    );
    assert_eq!(v["put"], json!("PUT"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hosts_outside_the_allowlist_are_refused() {
    let srv = start().await;
    let h = harness(EvalLimits::default());
    let base = srv.base();
    // No entry at all.
    let none = http_pkg(
        "h-none",
        &[],
        &format!("def main():\n    return http.get('{base}/hello').status\n"),
    );
    h.grant_all(&none);
    assert_err_contains(h.call(&none, "main", None).await, "add \"http://127.0.0.1:");
    // Entry without http:// only allows https.
    let https_only = http_pkg(
        "h-https",
        &[format!("127.0.0.1:{}", srv.port)],
        &format!("def main():\n    return http.get('{base}/hello').status\n"),
    );
    h.grant_all(&https_only);
    assert_err_contains(h.call(&https_only, "main", None).await, "plain HTTP");
    // Wrong port.
    let port = http_pkg(
        "h-port",
        &[format!("http://127.0.0.1:{}", srv.port + 1)],
        &format!("def main():\n    return http.get('{base}/hello').status\n"),
    );
    h.grant_all(&port);
    assert_err_contains(h.call(&port, "main", None).await, "network_access");
    // Non-http scheme.
    let file = http_pkg(
        "h-file",
        &["http://127.0.0.1:1".into()],
        "def main():\n    return http.get('file:///etc/passwd').status\n",
    );
    h.grant_all(&file);
    assert_err_contains(h.call(&file, "main", None).await, "scheme");
    assert_eq!(srv.hits(), 0, "no refused request may reach the server");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn loopback_by_name_is_refused_but_literal_ip_entry_allows_it() {
    let srv = start().await;
    let h = harness(EvalLimits::default());
    // `localhost` is allowlisted by name, but resolves to loopback: refused.
    let by_name = http_pkg(
        "h-localhost",
        &[format!("http://localhost:{}", srv.port)],
        &format!(
            "def main():\n    return http.get('http://localhost:{}/hello').status\n",
            srv.port
        ),
    );
    h.grant_all(&by_name);
    let e = assert_err_contains(h.call(&by_name, "main", None).await, "loopback");
    assert!(
        e.to_string()
            .contains("cordon star grant h-localhost api.http --allow-private 127.0.0.1/32"),
        "the refusal says what works: {e}"
    );
    // Wildcard entries never allow private literals either.
    let metadata = http_pkg(
        "h-meta",
        &["http://*.example.com".into()],
        "def main():\n    return http.get('http://169.254.169.254/latest/meta-data').status\n",
    );
    h.grant_all(&metadata);
    assert_err_contains(h.call(&metadata, "main", None).await, "network_access");
    // A literal entry the operator did not approve: refused, the manifest
    // alone never reaches the host's loopback.
    let literal = http_pkg(
        "h-literal",
        &[format!("http://127.0.0.1:{}", srv.port)],
        &format!(
            "def main():\n    return http.get('{}/hello').body\n",
            srv.base()
        ),
    );
    h.perms.grant(&literal.id, Permission::ApiHttp);
    assert_err_contains(
        h.call(&literal, "main", None).await,
        "--allow-private 127.0.0.1/32",
    );
    assert_eq!(srv.hits(), 0);
    // Approved (grant_all approves the literals a manifest names): allowed.
    h.grant_all(&literal);
    assert_eq!(
        h.call(&literal, "main", None).await.unwrap().value,
        json!("hello")
    );
    assert_eq!(srv.hits(), 1);
    // And the name, once its range is approved.
    h.perms
        .allow_private(&by_name.id, "127.0.0.0/8".parse().unwrap());
    h.perms
        .allow_private(&by_name.id, "::1/128".parse().unwrap());
    assert_eq!(
        h.call(&by_name, "main", None).await.unwrap().value,
        json!(200)
    );
    assert_eq!(srv.hits(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redirects_are_checked_on_every_hop() {
    let allowed = start().await;
    let denied = start().await;
    let h = harness(EvalLimits::default());
    let a = allowed.base();
    let d = denied.base();
    let pkg = http_pkg(
        "h-redir",
        &[format!("http://127.0.0.1:{}", allowed.port)],
        &format!(
            r#"
def same():
    r = http.get("{a}/redirect?to=/hello")
    return [r.status, r.body, r.url]
def away():
    return http.get("{a}/redirect?to={d}/hello").status
def see_other():
    return http.post("{a}/redirect303", body = "x").json()["method"]
def too_many():
    return http.get("{a}/loop").status
"#
        ),
    );
    h.grant_all(&pkg);
    let v = h.call(&pkg, "same", None).await.unwrap().value;
    assert_eq!(v, json!([200, "hello", format!("{a}/hello")]));
    assert_err_contains(h.call(&pkg, "away", None).await, "network access denied");
    assert_eq!(denied.hits(), 0, "the denied host must never be contacted");
    assert_eq!(
        h.call(&pkg, "see_other", None).await.unwrap().value,
        json!("GET")
    );
    let last = allowed.last();
    assert_eq!((last.method.as_str(), last.path.as_str()), ("GET", "/echo"));
    assert_err_contains(h.call(&pkg, "too_many", None).await, "redirects");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn response_size_time_and_request_count_caps() {
    let srv = start().await;
    let mut limits = EvalLimits::default();
    limits.http.max_response_bytes = 64 * 1024;
    limits.http.max_request_time = Duration::from_millis(400);
    limits.http.max_requests_per_invocation = 3;
    let h = harness(limits);
    let b = srv.base();
    let pkg = http_pkg(
        "h-caps",
        &[format!("http://127.0.0.1:{}", srv.port)],
        &format!(
            r#"
def big():
    return len(http.get("{b}/big").body)
def slow():
    return http.get("{b}/slow").body
def slow_script_timeout():
    return http.get("{b}/slow", timeout = 0.1).body
def many():
    for i in range(5):
        http.get("{b}/hello")
    return "done"
"#
        ),
    );
    h.grant_all(&pkg);
    assert_err_contains(h.call(&pkg, "big", None).await, "larger than 65536 bytes");
    assert_err_contains(h.call(&pkg, "slow", None).await, "longer than 400 ms");
    assert_err_contains(
        h.call(&pkg, "slow_script_timeout", None).await,
        "longer than 100 ms",
    );
    assert_err_contains(
        h.call(&pkg, "many", None).await,
        "more than 3 HTTP requests",
    );
    // The budget is per invocation: a new call gets a fresh one.
    let e = h.call(&pkg, "many", None).await.unwrap_err();
    assert!(e.to_string().contains("more than 3"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blocking_call_honours_invocation_deadline_and_cancellation() {
    let srv = start().await;
    let mut limits = EvalLimits::default();
    limits.timeout = Duration::from_millis(500);
    let h = harness(limits);
    let pkg = http_pkg(
        "h-deadline",
        &[format!("http://127.0.0.1:{}", srv.port)],
        &format!(
            "def main():\n    return http.get('{}/slow').body\n",
            srv.base()
        ),
    );
    h.grant_all(&pkg);
    assert_err_contains(h.call(&pkg, "main", None).await, "deadline");

    let h = harness(EvalLimits::default());
    h.grant_all(&pkg);
    let cancel = CancelToken::new();
    let c2 = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(200)).await;
        c2.cancel();
    });
    let r = h
        .runner
        .call_entry_point_with_cancel(&pkg, "main", vec![], Default::default(), None, cancel)
        .await;
    assert!(
        matches!(r, Err(StarlarkHostError::Cancelled { .. })),
        "{r:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_arguments_are_starlark_errors() {
    let h = harness(EvalLimits::default());
    let pkg = http_pkg(
        "h-args",
        &["http://127.0.0.1:9".into()],
        r#"
def both():
    return http.post("http://127.0.0.1:9/", body = "a", json = {})
def badheader():
    return http.get("http://127.0.0.1:9/", headers = {"Host": "evil"})
def badurl():
    return http.get("not a url")
"#,
    );
    h.grant_all(&pkg);
    assert_err_contains(h.call(&pkg, "both", None).await, "either body= or json=");
    assert_err_contains(
        h.call(&pkg, "badheader", None).await,
        "cannot be overridden",
    );
    assert_err_contains(h.call(&pkg, "badurl", None).await, "bad URL");
}

// The default #[tokio::test] runtime is current-thread: module calls block
// on the runtime handle from the evaluation thread while the test thread
// awaits the result, which must not deadlock.
#[tokio::test]
async fn works_on_a_current_thread_runtime() {
    let srv = start().await;
    let h = harness(EvalLimits::default());
    let pkg = http_pkg(
        "h-current",
        &[format!("http://127.0.0.1:{}", srv.port)],
        &format!(
            "def main():\n    return http.get('{}/hello').body\n",
            srv.base()
        ),
    );
    h.grant_all(&pkg);
    let r = tokio::time::timeout(Duration::from_secs(10), h.call(&pkg, "main", None)).await;
    assert_eq!(r.expect("deadlocked").unwrap().value, json!("hello"));
}
