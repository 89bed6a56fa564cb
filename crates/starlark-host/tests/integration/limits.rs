//! Each hard limit of a call (ticks, deadline, cancel, call stack, heap,
//! output, source and value sizes) ends it with the limit named, and the
//! host goes on working.

use std::time::Duration;

use cordon_starlark::*;
use serde_json::json;

use crate::{assert_err_contains, harness, package};

fn limit_kind(r: Result<CallOutcome, StarlarkHostError>) -> LimitKind {
    match r {
        Err(StarlarkHostError::Limit { kind, .. }) => kind,
        other => panic!("expected a limit error, got {other:?}"),
    }
}

/// After each hostile script the host must go on serving normal calls.
async fn host_still_works(h: &crate::Harness) {
    let ok = package("healthy", &[], &[], "def main():\n    return 'fine'\n");
    assert_eq!(
        h.call(&ok, "main", None).await.unwrap().value,
        json!("fine")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn infinite_loop_hits_the_tick_limit() {
    let mut limits = EvalLimits::default();
    limits.max_ticks = 100_000;
    let h = harness(limits);
    let pkg = package(
        "loop",
        &[],
        &[],
        "def main():\n    for i in range(1000000000):\n        pass\n",
    );
    assert_eq!(
        limit_kind(h.call(&pkg, "main", None).await),
        LimitKind::Ticks
    );
    host_still_works(&h).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn infinite_loop_hits_the_deadline() {
    let mut limits = EvalLimits::default();
    limits.max_ticks = u64::MAX / 2;
    limits.timeout = Duration::from_millis(300);
    let h = harness(limits);
    let pkg = package("loop-time", &[], &[], "def main():\n    for i in range(2147483647):\n        for j in range(2147483647):\n            pass\n");
    assert_eq!(
        limit_kind(h.call(&pkg, "main", None).await),
        LimitKind::Time
    );
    host_still_works(&h).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancellation_stops_a_running_loop() {
    let mut limits = EvalLimits::default();
    limits.max_ticks = u64::MAX / 2;
    limits.timeout = Duration::from_secs(60);
    let h = harness(limits);
    let pkg = package("loop-cancel", &[], &[], "def main():\n    for i in range(2147483647):\n        for j in range(2147483647):\n            pass\n");
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
    host_still_works(&h).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deep_recursion_hits_the_call_stack_limit() {
    let h = harness(EvalLimits::default());
    let pkg = package(
        "recurse",
        &[],
        &[],
        "def f(n):\n    return f(n + 1)\ndef main():\n    return f(0)\n",
    );
    assert_eq!(
        limit_kind(h.call(&pkg, "main", None).await),
        LimitKind::CallStack
    );
    host_still_works(&h).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_growth_hits_the_heap_limit() {
    let mut limits = EvalLimits::default();
    limits.max_heap_bytes = 16 * 1024 * 1024;
    limits.max_ticks = u64::MAX / 2;
    let h = harness(limits);
    let pkg = package(
        "grow",
        &[],
        &[],
        "def main():\n    x = []\n    for i in range(100000000):\n        x.append([i, i, i, i])\n    return len(x)\n",
    );
    assert_eq!(
        limit_kind(h.call(&pkg, "main", None).await),
        LimitKind::Heap
    );
    host_still_works(&h).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn print_flood_hits_the_output_limit() {
    let mut limits = EvalLimits::default();
    limits.max_output_bytes = 1000;
    let h = harness(limits);
    let pkg = package(
        "flood",
        &[],
        &[],
        "def main():\n    for i in range(100000):\n        print('spam spam spam', i)\n",
    );
    assert_eq!(
        limit_kind(h.call(&pkg, "main", None).await),
        LimitKind::Output
    );
    // Flooding at top level is caught as well.
    let top = package(
        "flood-top",
        &[],
        &[],
        "for i in range(100000):\n    print('x' * 100)\ndef main():\n    return 1\n",
    );
    assert_eq!(
        limit_kind(h.call(&top, "main", None).await),
        LimitKind::Output
    );
    host_still_works(&h).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deeply_nested_and_oversized_source_is_refused_before_parsing() {
    let h = harness(EvalLimits::default());
    let nested = format!(
        "x = {}{}\ndef main():\n    return 1\n",
        "[".repeat(100_000),
        "]".repeat(100_000)
    );
    let pkg = package("nested", &[], &[], &nested);
    assert_eq!(
        limit_kind(h.call(&pkg, "main", None).await),
        LimitKind::Nesting
    );
    // Brackets inside strings and comments do not count.
    let fine = package(
        "strings",
        &[],
        &[],
        &format!(
            "# {}\nx = '{}'\ndef main():\n    return len(x)\n",
            "(".repeat(500),
            "[".repeat(500)
        ),
    );
    assert_eq!(h.call(&fine, "main", None).await.unwrap().value, json!(500));
    let big = package(
        "big",
        &[],
        &[],
        &format!("x = 1\n{}", "# padding\n".repeat(100_000)),
    );
    assert_eq!(
        limit_kind(h.call(&big, "main", None).await),
        LimitKind::SourceSize
    );
    host_still_works(&h).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn return_values_are_depth_and_size_limited() {
    let h = harness(EvalLimits::default());
    let pkg = package(
        "values",
        &[],
        &[],
        r#"
def deep():
    x = []
    for i in range(10000):
        x = [x]
    return x
def cyclic():
    x = []
    x.append(x)
    return x
def huge():
    return ["y" * 1000000] * 10
def func():
    return main
def main():
    return {"a": (1, 2), "f": 1.5, "n": None, "b": True}
"#,
    );
    assert_eq!(
        limit_kind(h.call(&pkg, "deep", None).await),
        LimitKind::ValueSize
    );
    assert_eq!(
        limit_kind(h.call(&pkg, "cyclic", None).await),
        LimitKind::ValueSize
    );
    assert_eq!(
        limit_kind(h.call(&pkg, "huge", None).await),
        LimitKind::ValueSize
    );
    assert_err_contains(
        h.call(&pkg, "func", None).await,
        "cannot be converted to JSON",
    );
    assert_eq!(
        h.call(&pkg, "main", None).await.unwrap().value,
        json!({"a": [1, 2], "f": 1.5, "n": null, "b": true})
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn script_errors_are_reported_with_location() {
    let h = harness(EvalLimits::default());
    let pkg = package("broken", &[], &[], "def main():\n    return 1 +\n");
    assert_err_contains(h.call(&pkg, "main", None).await, "main.star");
    let pkg = package(
        "fails",
        &[],
        &[],
        "def main():\n    fail('custom failure')\n",
    );
    assert_err_contains(h.call(&pkg, "main", None).await, "custom failure");
    host_still_works(&h).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_operator_chains_are_refused_before_they_overflow_the_stack() {
    let h = harness(EvalLimits::default());
    // Each of these aborts the process with a native stack overflow (even on
    // the 64 MiB evaluation stack) if it reaches the parser/compiler.
    for (id, src) in [
        (
            "sum",
            format!("def main():\n    return {}1\n", "1 + ".repeat(100_000)),
        ),
        (
            "neg",
            format!("def main():\n    return {}1\n", "-".repeat(200_000)),
        ),
        (
            "nots",
            format!("def main():\n    return {}True\n", "not ".repeat(100_000)),
        ),
        (
            "lambdas",
            format!("def main():\n    return {}1\n", "lambda: ".repeat(10_000)),
        ),
        (
            "attrs",
            format!("def main():\n    return 'a'{}\n", ".upper()".repeat(50_000)),
        ),
    ] {
        let pkg = package(id, &[], &[], &src);
        assert_eq!(
            limit_kind(h.call(&pkg, "main", None).await),
            LimitKind::Nesting,
            "{id}"
        );
    }
    // Ordinary chains still work.
    let ok = package(
        "short",
        &[],
        &[],
        &format!("def main():\n    return {}1\n", "1 + ".repeat(500)),
    );
    assert_eq!(h.call(&ok, "main", None).await.unwrap().value, json!(501));
    host_still_works(&h).await;
}

/// `json.encode` of a value nested 100 000 deep overflowed the native
/// stack and aborted this whole process; of `[s] * n` it built `n` copies
/// of `s`. Both are refused now within the JSON limits, in process, and
/// `json.decode` keeps its depth limit and exact ints.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_encode_is_bounded_in_depth_and_size() {
    let h = harness(EvalLimits::default());
    let pkg = package(
        "json-bombs",
        &[],
        &[],
        r#"
def deep():
    x = []
    for i in range(100000):
        x = [x]
    return json.encode(x)
def wide():
    return len(json.encode(["x" * 10000] * 1000000))
def deep_decode():
    return json.decode("[" * 100000 + "]" * 100000)
def fine():
    v = {"b": 1, "a": [2, {"z": None, "y": 1.5}], "c": "x\n", "n": 123456789012345678901234567890}
    return [json.encode(v), json.decode(json.encode(v)) == v]
"#,
    );
    assert_err_contains(h.call(&pkg, "deep", None).await, "nested too deeply");
    assert_err_contains(h.call(&pkg, "wide", None).await, "larger than");
    assert_err_contains(h.call(&pkg, "deep_decode", None).await, "json.decode");
    let v = h.call(&pkg, "fine", None).await.unwrap().value;
    assert_eq!(
        v,
        serde_json::json!([
            "{\"b\":1,\"a\":[2,{\"z\":null,\"y\":1.5}],\"c\":\"x\\n\",\"n\":123456789012345678901234567890}",
            true
        ])
    );
    host_still_works(&h).await;
}

/// Within the heap limit the size-checked operators and builtins give what
/// the interpreter's own give; a user struct's `join`/`format` field still
/// works when called; taking `.join` as a value is refused (it would skip
/// the check).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn size_checked_builtins_behave_as_the_interpreters_within_the_limit() {
    let h = harness(EvalLimits::default());
    let pkg = package(
        "checked",
        &[],
        &[],
        r#"
def main():
    s = struct(join = lambda x: "joined " + x)
    return [
        "ab" * 3, [1] * 2, 2 * (0,), 6 * 7, 7 % 4, "%d:%s" % (1, "x"), "%s!" % "y",
        ",".join(["a", "b"]), "{a}-{}".format(1, a = 2), sorted([3, 1, 2], reverse = True),
        sorted(["bb", "a"], key = len), list(reversed([1, 2])), getattr("a", "upper")(),
        getattr("a", "nope", 5), s.join("it"),
    ]
"#,
    );
    assert_eq!(
        h.call(&pkg, "main", None).await.unwrap().value,
        json!([
            "ababab",
            [1, 1],
            [0, 0],
            42,
            3,
            "1:x",
            "y!",
            "a,b",
            "2-1",
            [3, 2, 1],
            ["a", "bb"],
            [2, 1],
            "A",
            5,
            "joined it"
        ])
    );
    // Refused when the package is checked, before anything runs.
    let as_value = package(
        "as-value",
        &[],
        &[],
        "def main():\n    f = ','.join\n    return f(['a'])\n",
    );
    assert_err_contains(h.call(&as_value, "main", None).await, "called directly");
}
