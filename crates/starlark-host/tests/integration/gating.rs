//! What a package can reach: a module only when granted and requested,
//! secrets and notifications per package, module calls at top level (run
//! per call, as in the seed),
//! and the compiled-package cache with a fresh heap per call.

use std::collections::BTreeMap;

use cordon_starlark::*;
use serde_json::json;

use crate::{assert_err_contains, harness, package};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn module_present_only_when_granted_and_requested() {
    let h = harness(EvalLimits::default());
    let src = "def main():\n    return http != None\n";
    // Requested, not granted.
    let requested = package("req-only", &[Permission::ApiHttp], &[], src);
    assert_err_contains(h.call(&requested, "main", None).await, "http");
    let out = h.runner.exec_package(&requested, None).await;
    assert!(out.is_err());
    // Granted, not requested.
    let granted = package("grant-only", &[], &[], src);
    h.perms.grant("grant-only", Permission::ApiHttp);
    assert_err_contains(h.call(&granted, "main", None).await, "http");
    // Both.
    let both = package("both", &[Permission::ApiHttp], &[], src);
    h.grant_all(&both);
    assert_eq!(
        h.call(&both, "main", None).await.unwrap().value,
        json!(true)
    );
    let ex = h.runner.exec_package(&both, None).await.unwrap();
    assert_eq!(ex.modules, vec!["http".to_owned()]);
    // Revoking takes effect on the next call (different module set → different cache entry).
    h.perms.revoke("both", Permission::ApiHttp);
    assert_err_contains(h.call(&both, "main", None).await, "http");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn provider_absent_without_user() {
    let h = harness(EvalLimits::default());
    let mut pkg = package(
        "prov",
        &[Permission::ProviderComplete],
        &[],
        "def main():\n    return 1\n",
    );
    pkg.manifest.requires_provider = Some(ProviderRequirement::default());
    h.grant_all(&pkg);
    let no_user = h.runner.exec_package(&pkg, None).await.unwrap();
    assert!(no_user.modules.is_empty(), "{:?}", no_user.modules);
    let with_user = h
        .runner
        .exec_package(&pkg, Some(&RunContext::for_user("u1")))
        .await
        .unwrap();
    assert_eq!(with_user.modules, vec!["provider".to_owned()]);
    // Without requires_provider in the manifest it is absent even with a user.
    pkg.manifest.requires_provider = None;
    let no_req = h
        .runner
        .exec_package(&pkg, Some(&RunContext::for_user("u1")))
        .await
        .unwrap();
    assert!(no_req.modules.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secrets_are_isolated_between_packages() {
    let h = harness(EvalLimits::default());
    let src = "def main():\n    return [secrets.get('token'), secrets.get('missing')]\n";
    let a = package("pkg-a", &[Permission::SecretsRead], &[], src);
    let b = package("pkg-b", &[Permission::SecretsRead], &[], src);
    h.grant_all(&a);
    h.grant_all(&b);
    h.secrets.set("pkg-a", "token", "a-secret");
    assert_eq!(
        h.call(&a, "main", None).await.unwrap().value,
        json!(["a-secret", null])
    );
    assert_eq!(
        h.call(&b, "main", None).await.unwrap().value,
        json!([null, null])
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn notifications_are_attributed_to_the_package() {
    let h = harness(EvalLimits::default());
    let pkg = package(
        "notify",
        &[Permission::NotificationsSend],
        &[],
        "def main():\n    notifications.send('T', 'B', level='warning')\n    return 'sent'\n",
    );
    h.grant_all(&pkg);
    let ctx = RunContext::for_user("u7").with_channel("c1");
    assert_eq!(
        h.call(&pkg, "main", Some(&ctx)).await.unwrap().value,
        json!("sent")
    );
    let sent = h.notifier.sent();
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].package_id, "notify");
    assert_eq!(sent[0].user_id.as_deref(), Some("u7"));
    assert_eq!(sent[0].level, "warning");
}

/// The same package written twice: in the seed's style (a secret read and
/// a notification sent at top level) and in Cordon's (inside the entry
/// point).
pub const SEED_STYLE: &str = "TOKEN = secrets.get('token')\nprint('loaded with', len(TOKEN))\nnotifications.send('load', 'top level ran')\ndef main(n):\n    print('call', n)\n    return {'token': TOKEN, 'n': n}\n";
pub const CALL_STYLE: &str = "print('loaded')\ndef main(n):\n    token = secrets.get('token')\n    print('loaded with', len(token))\n    notifications.send('load', 'top level ran')\n    print('call', n)\n    return {'token': token, 'n': n}\n";

/// A package whose top level calls a module runs its top level at the
/// start of every call (the seed's model) with that call's modules; one
/// that does not keeps the frozen, compiled-once path. Both give the same
/// results.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn top_level_module_calls_run_per_call_as_in_the_seed() {
    let h = harness(EvalLimits::default());
    let perms = [Permission::SecretsRead, Permission::NotificationsSend];
    let seed = package("seed-style", &perms, &[], SEED_STYLE);
    let ours = package("call-style", &perms, &[], CALL_STYLE);
    for pkg in [&seed, &ours] {
        h.grant_all(pkg);
        h.secrets.set(&pkg.id, "token", "first");
    }
    let ctx = RunContext::for_user("u1");
    for (pkg, per_call) in [(&seed, true), (&ours, false)] {
        let one = h
            .runner
            .call_entry_point(pkg, "main", vec![json!(1)], Default::default(), Some(&ctx))
            .await
            .unwrap();
        assert_eq!(one.value, json!({"token": "first", "n": 1}), "{}", pkg.id);
        // A changed secret is read again: the top level ran again.
        h.secrets.set(&pkg.id, "token", "second!");
        let two = h
            .runner
            .call_entry_point(pkg, "main", vec![json!(2)], Default::default(), Some(&ctx))
            .await
            .unwrap();
        assert_eq!(two.value, json!({"token": "second!", "n": 2}), "{}", pkg.id);
        assert!(two.cached, "{}: compiled once either way", pkg.id);
        if per_call {
            // The top level's output comes first in each call's output.
            assert_eq!(two.output, "loaded with 7\ncall 2\n");
            let ex = h.runner.exec_package(pkg, Some(&ctx)).await.unwrap();
            assert_eq!(ex.functions, vec!["main".to_owned()]);
            assert!(ex.globals.is_empty() && ex.output.is_empty(), "{ex:?}");
        } else {
            assert_eq!(two.output, "loaded with 7\ncall 2\n");
            let ex = h.runner.exec_package(pkg, Some(&ctx)).await.unwrap();
            assert_eq!(ex.output, "loaded\n");
        }
        h.secrets.set(&pkg.id, "token", "first");
    }
    // Both sent their notification on every call, as the caller's user.
    let sent = h.notifier.sent();
    assert_eq!(sent.len(), 4);
    assert!(sent.iter().all(|n| n.user_id.as_deref() == Some("u1")));
    // A module that is not granted is still absent at top level.
    let ungranted = package("ungranted-top", &[Permission::SecretsRead], &[], SEED_STYLE);
    assert_err_contains(h.call(&ungranted, "main", None).await, "secrets");
    // An entry point that the top level does not define is refused with the
    // list of those it does.
    h.grant_all(&seed);
    assert_err_contains(h.call(&seed, "nope", Some(&ctx)).await, "main");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cache_hit_on_second_call_and_fresh_heap_per_call() {
    let h = harness(EvalLimits::default());
    let pkg = package(
        "cache",
        &[],
        &[],
        "print('loading')\nCOUNT = [0]\ndef main(n, k = 1):\n    print('call', n)\n    return {'n': n * k, 's': struct(a = 1)}\ndef mutate():\n    COUNT.append(1)\n",
    );
    let first = h
        .runner
        .call_entry_point(
            &pkg,
            "main",
            vec![json!(2)],
            serde_json::Map::from_iter([("k".to_owned(), json!(5))]),
            None,
        )
        .await
        .unwrap();
    assert!(!first.cached);
    assert_eq!(first.value, json!({"n": 10, "s": {"a": 1}}));
    assert_eq!(first.output, "call 2\n");
    let second = h
        .runner
        .call_entry_point(&pkg, "main", vec![json!(3)], Default::default(), None)
        .await
        .unwrap();
    assert!(second.cached);
    assert_eq!(second.value["n"], json!(3));
    let stats = h.runner.cache_stats();
    assert_eq!((stats.hits, stats.misses, stats.entries), (1, 1, 1));
    // Top level ran once; its output is what exec_package reports.
    let ex = h.runner.exec_package(&pkg, None).await.unwrap();
    assert!(ex.cached);
    assert_eq!(ex.output, "loading\n");
    assert_eq!(ex.globals["COUNT"], json!([0]));
    assert_eq!(ex.functions, vec!["main".to_owned(), "mutate".to_owned()]);
    // Frozen globals cannot be mutated by a call.
    assert_err_contains(h.call(&pkg, "mutate", None).await, "mmutable");
    // Unknown entry point lists the available ones.
    assert_err_contains(h.call(&pkg, "nope", None).await, "main, mutate");
    // A changed script is a miss.
    let changed = package("cache", &[], &[], "def main(n):\n    return n\n");
    let r = h
        .runner
        .call_entry_point(&changed, "main", vec![json!(1)], Default::default(), None)
        .await
        .unwrap();
    assert!(!r.cached);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn load_is_confined_to_the_package() {
    let h = harness(EvalLimits::default());
    let mut sources = BTreeMap::new();
    sources.insert(
        "main.star".to_owned(),
        "load('lib/util.star', 'double')\ndef main():\n    return double(21)\n".to_owned(),
    );
    sources.insert(
        "lib/util.star".to_owned(),
        "load('../consts.star', 'TWO')\ndef double(x):\n    return x * TWO\n".to_owned(),
    );
    sources.insert("consts.star".to_owned(), "TWO = 2\n".to_owned());
    let pkg = Package::new(Manifest::minimal("loader", "main.star"), sources.clone());
    // `../consts.star` from lib/ is resolved against the package root, so it escapes: refused.
    assert_err_contains(
        h.call(&pkg, "main", None).await,
        "only relative paths inside the package",
    );
    sources.insert(
        "lib/util.star".to_owned(),
        "load('consts.star', 'TWO')\ndef double(x):\n    return x * TWO\n".to_owned(),
    );
    let pkg = Package::new(Manifest::minimal("loader", "main.star"), sources.clone());
    assert_eq!(h.call(&pkg, "main", None).await.unwrap().value, json!(42));
    sources.insert(
        "main.star".to_owned(),
        "load('/etc/passwd', 'x')\ndef main():\n    return 1\n".to_owned(),
    );
    let pkg = Package::new(Manifest::minimal("loader", "main.star"), sources.clone());
    assert_err_contains(h.call(&pkg, "main", None).await, "only relative paths");
    sources.insert(
        "main.star".to_owned(),
        "load('nothere.star', 'x')\ndef main():\n    return 1\n".to_owned(),
    );
    let pkg = Package::new(Manifest::minimal("loader", "main.star"), sources.clone());
    assert_err_contains(h.call(&pkg, "main", None).await, "is not a file of package");
    sources.insert(
        "main.star".to_owned(),
        "load('main.star', 'x')\ndef main():\n    return 1\n".to_owned(),
    );
    let pkg = Package::new(Manifest::minimal("loader", "main.star"), sources);
    assert_err_contains(h.call(&pkg, "main", None).await, "cyclic");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inactive_packages_do_not_run() {
    let h = harness(EvalLimits::default());
    let mut pkg = package("off", &[], &[], "def main():\n    return 1\n");
    pkg.status = PackageStatus::Disabled;
    assert_err_contains(h.call(&pkg, "main", None).await, "activate it first");
    pkg.status = PackageStatus::Active;
    pkg.tier = PackageTier::Native;
    assert_err_contains(h.call(&pkg, "main", None).await, "not Starlark");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn call_by_id_uses_the_package_store() {
    let h = harness(EvalLimits::default());
    h.packages.insert(package(
        "stored",
        &[],
        &[],
        "def main():\n    return 'hi'\n",
    ));
    let r = h
        .runner
        .call_by_id("stored", "main", vec![], Default::default(), None)
        .await
        .unwrap();
    assert_eq!(r.value, json!("hi"));
    assert_err_contains(
        h.runner
            .call_by_id("ghost", "main", vec![], Default::default(), None)
            .await,
        "not registered",
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn packages_load_from_disk() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("package.toml"),
        "id = \"disk\"\nversion = \"1.0.0\"\nscript = \"main.star\"\npermissions = [\"secrets.read\"]\n",
    )
    .unwrap();
    std::fs::write(
        dir.path().join("main.star"),
        "load('helpers.star', 'x')\ndef main():\n    return x\n",
    )
    .unwrap();
    std::fs::write(dir.path().join("helpers.star"), "x = 'from disk'\n").unwrap();
    let pkg = load_package_from_path(dir.path()).unwrap();
    assert_eq!(pkg.id, "disk");
    assert_eq!(pkg.manifest.permissions, vec![Permission::SecretsRead]);
    let h = harness(EvalLimits::default());
    assert_eq!(
        h.call(&pkg, "main", None).await.unwrap().value,
        json!("from disk")
    );

    let single = dir.path().join("solo.star");
    std::fs::write(&single, "def main():\n    return 5\n").unwrap();
    let pkg = load_package_from_path(&single).unwrap();
    assert_eq!(pkg.id, "solo");
    assert!(pkg.manifest.permissions.is_empty());
    assert_eq!(h.call(&pkg, "main", None).await.unwrap().value, json!(5));
    assert!(load_package_from_path(dir.path().join("missing")).is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_calls_share_one_runner() {
    let h = std::sync::Arc::new(harness(EvalLimits::default()));
    let pkg = package(
        "concurrent",
        &[Permission::SecretsRead],
        &[],
        "def main(i):\n    return [i, secrets.get('s')]\n",
    );
    h.grant_all(&pkg);
    h.secrets.set("concurrent", "s", "v");
    // Warm the cache, then run calls in parallel.
    h.runner
        .call_entry_point(&pkg, "main", vec![json!(0)], Default::default(), None)
        .await
        .unwrap();
    let mut tasks = Vec::new();
    for i in 1..=16 {
        let (h, pkg) = (h.clone(), pkg.clone());
        tasks.push(tokio::spawn(async move {
            h.runner
                .call_entry_point(&pkg, "main", vec![json!(i)], Default::default(), None)
                .await
        }));
    }
    for (i, t) in tasks.into_iter().enumerate() {
        let out = t.await.unwrap().unwrap();
        assert_eq!(out.value, json!([i + 1, "v"]));
        assert!(out.cached);
    }
    assert_eq!(h.runner.cache_stats().misses, 1);
}

/// What a failing call printed comes back with its error, in process.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_call_returns_what_it_printed() {
    let mut limits = EvalLimits::default();
    limits.max_ticks = 100_000;
    let h = harness(limits);
    let pkg = package("prints", &[], &[], crate::tiered::PRINTS_THEN_FAILS);
    let top = package("top-fails", &[], &[], "print('top ran')\nfail('at load')\n");
    crate::tiered::failures_keep_their_output(&h.runner, &pkg, &top).await;
}

/// Entry-point values in process: JSON exactly, ints of any size; other
/// types named in a conversion error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn entry_point_values_are_json_with_exact_ints() {
    let h = harness(EvalLimits::default());
    let pkg = package("values", &[], &[], crate::tiered::VALUES);
    crate::tiered::entry_values_cross_json_exactly(&h.runner, &pkg).await;
}
