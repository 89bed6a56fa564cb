//! `provider.complete` against a real server on 127.0.0.1: which key is
//! used (package, channel, user or host), and that no key ever reaches
//! the script.

use cordon_starlark::*;
use serde_json::json;

use crate::server::start;
use crate::{assert_err_contains, harness, package};

fn cfg(base: &str, key: &str) -> ProviderConfig {
    ProviderConfig {
        base_url: format!("{base}/v1"),
        api_key: ApiKey::new(key),
        model: "host-model".into(),
    }
}

fn prov_pkg(id: &str) -> Package {
    let mut p = package(
        id,
        &[Permission::ProviderComplete],
        &[],
        r#"
def ask():
    r = provider.complete("hello there", max_tokens = 20, temperature = 0.5)
    return {"content": r.content, "model": r.model, "src": r.key_source, "usage": r.usage, "finish": r.finish_reason}
def chat():
    r = provider.complete(messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "2+2?"}], model = "override")
    return [r.content, r.model]
"#,
    );
    p.manifest.requires_provider = Some(ProviderRequirement {
        kind: Some("openai".into()),
        model: Some("pkg-model".into()),
    });
    p
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn byok_chain_user_channel_package_host() {
    let srv = start().await;
    let h = harness(EvalLimits::default());
    let pkg = prov_pkg("prov");
    h.grant_all(&pkg);
    let ctx = RunContext::for_user("alice").with_channel("general");

    // Nothing configured anywhere: clear error.
    assert_err_contains(h.call(&pkg, "ask", Some(&ctx)).await, "no provider key");

    h.providers.set_host_default(cfg(&srv.base(), "sk-host"));
    let v = h.call(&pkg, "ask", Some(&ctx)).await.unwrap().value;
    assert_eq!(v["src"], json!("host"));
    assert_eq!(v["content"], json!("echo: hello there"));
    assert_eq!(
        v["model"],
        json!("pkg-model"),
        "requires_provider.model wins over the provider default"
    );
    assert_eq!(v["usage"]["total_tokens"], json!(7));
    assert_eq!(v["finish"], json!("stop"));
    let seen = srv.last();
    assert_eq!(seen.headers["authorization"], "Bearer sk-host");
    let body: serde_json::Value = serde_json::from_str(&seen.body).unwrap();
    assert_eq!(body["max_tokens"], json!(20));
    assert_eq!(body["temperature"], json!(0.5));

    h.providers
        .set_package("prov", cfg(&srv.base(), "sk-package"));
    assert_eq!(
        h.call(&pkg, "ask", Some(&ctx)).await.unwrap().value["src"],
        json!("package")
    );
    h.providers
        .set_channel("general", cfg(&srv.base(), "sk-channel"));
    assert_eq!(
        h.call(&pkg, "ask", Some(&ctx)).await.unwrap().value["src"],
        json!("channel")
    );
    h.providers.set_user("alice", cfg(&srv.base(), "sk-user"));
    assert_eq!(
        h.call(&pkg, "ask", Some(&ctx)).await.unwrap().value["src"],
        json!("user")
    );
    assert_eq!(srv.last().headers["authorization"], "Bearer sk-user");
    // Another user falls back to the channel key.
    let bob = RunContext::for_user("bob").with_channel("general");
    assert_eq!(
        h.call(&pkg, "ask", Some(&bob)).await.unwrap().value["src"],
        json!("channel")
    );

    let v = h.call(&pkg, "chat", Some(&ctx)).await.unwrap().value;
    assert_eq!(v, json!(["echo: 2+2?", "override"]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_key_never_reaches_the_script() {
    let srv = start().await;
    let h = harness(EvalLimits::default());
    let pkg = prov_pkg("prov-secret");
    h.grant_all(&pkg);
    // The mock server echoes a wrong key back in its error body; it must be redacted.
    h.providers
        .set_host_default(cfg(&srv.base(), "sk-wrong-key-123"));
    let e = h
        .call(&pkg, "ask", Some(&RunContext::for_user("u")))
        .await
        .unwrap_err();
    let msg = e.to_string();
    assert!(msg.contains("401"), "{msg}");
    assert!(!msg.contains("sk-wrong-key-123"), "key leaked: {msg}");
    assert!(msg.contains("<redacted>"), "{msg}");
    // Without a user the module is absent.
    assert_err_contains(h.call(&pkg, "ask", None).await, "provider");
}

/// A model call that takes longer than the script's whole timeout (the
/// server answers 3 s late; the script has 1 s) completes: a package with
/// `provider` gets the provider's timeout on top of its own (`http` waits
/// count against the script's own deadline: `http.rs`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_model_is_not_cut_at_the_scripts_deadline() {
    let srv = start().await;
    let mut limits = EvalLimits::default();
    limits.timeout = std::time::Duration::from_secs(1);
    let h = harness(limits);
    let pkg = prov_pkg("prov-slow");
    h.grant_all(&pkg);
    h.providers
        .set_host_default(cfg(&format!("{}/after-3", srv.base()), "sk-host"));
    let v = h
        .call(&pkg, "ask", Some(&RunContext::for_user("u")))
        .await
        .unwrap()
        .value;
    assert_eq!(v["content"], json!("echo: hello there"));
}
