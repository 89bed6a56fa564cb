//! The host as the Starlark tests call it: one trust tier for every call
//! (trusted: in process; untrusted: always a sandboxed worker), with the
//! argument lists the tests were written against. Shared by the
//! `integration` and `sandboxed` test binaries.

use cordon_starlark::*;

/// A [`StarlarkHost`] and the tier every call of these tests uses.
pub struct TieredHost {
    pub host: StarlarkHost,
    pub tier: TrustTier,
}

/// The worker pool's counters and shutdown (hosts with a sandbox only).
impl std::ops::Deref for TieredHost {
    type Target = WorkerPool;
    fn deref(&self) -> &WorkerPool {
        self.host.worker_pool().expect("the host has a worker pool")
    }
}

#[allow(dead_code)] // each test binary uses its own subset
impl TieredHost {
    pub async fn exec_package(
        &self,
        pkg: &Package,
        ctx: Option<&RunContext>,
    ) -> Result<ExecOutcome, StarlarkHostError> {
        self.host
            .load(pkg, self.tier, ctx)
            .await
            .map_err(|e| e.error)
    }

    pub async fn call_entry_point(
        &self,
        pkg: &Package,
        name: &str,
        args: Vec<serde_json::Value>,
        kwargs: serde_json::Map<String, serde_json::Value>,
        ctx: Option<&RunContext>,
    ) -> Result<CallOutcome, StarlarkHostError> {
        self.call_entry_point_with_cancel(pkg, name, args, kwargs, ctx, CancelToken::new())
            .await
    }

    pub async fn call_entry_point_with_cancel(
        &self,
        pkg: &Package,
        name: &str,
        args: Vec<serde_json::Value>,
        kwargs: serde_json::Map<String, serde_json::Value>,
        ctx: Option<&RunContext>,
        cancel: CancelToken,
    ) -> Result<CallOutcome, StarlarkHostError> {
        let call = call(name, args, kwargs, ctx, cancel);
        self.host
            .call(pkg, self.tier, call)
            .await
            .map_err(|e| e.error)
    }

    /// A call whose error keeps what the package printed.
    pub async fn call_keeping_output(
        &self,
        pkg: &Package,
        name: &str,
        args: Vec<serde_json::Value>,
    ) -> Result<CallOutcome, EvalError> {
        let call = call(name, args, Default::default(), None, CancelToken::new());
        self.host.call(pkg, self.tier, call).await
    }

    pub async fn call_by_id(
        &self,
        id: &str,
        name: &str,
        args: Vec<serde_json::Value>,
        kwargs: serde_json::Map<String, serde_json::Value>,
        ctx: Option<&RunContext>,
    ) -> Result<CallOutcome, StarlarkHostError> {
        let call = call(name, args, kwargs, ctx, CancelToken::new());
        self.host
            .call_by_id(id, self.tier, call)
            .await
            .map_err(|e| e.error)
    }

    pub fn cache_stats(&self) -> CacheStats {
        self.host.cache_stats()
    }
}

/// A [`Call`] from the old argument list.
fn call(
    name: &str,
    args: Vec<serde_json::Value>,
    kwargs: serde_json::Map<String, serde_json::Value>,
    ctx: Option<&RunContext>,
    cancel: CancelToken,
) -> Call {
    let mut c = Call::new(name).args(args).kwargs(kwargs).cancel(cancel);
    c.context = ctx.cloned();
    c
}

/// A package that prints, then fails in each way a caller must tell apart:
/// a script error, a limit, and (`top`) a top level that fails.
#[allow(dead_code)]
pub const PRINTS_THEN_FAILS: &str = "print('top ran')\ndef boom():\n    print('boom ran')\n    fail('boom')\ndef spin():\n    print('spin ran')\n    t = 0\n    for i in range(100000000):\n        t += i\n    return t\n";

/// What `PRINTS_THEN_FAILS` must give on `tiered`, whatever runs it.
#[allow(dead_code)]
pub async fn failures_keep_their_output(tiered: &TieredHost, pkg: &Package, top: &Package) {
    let e = tiered
        .call_keeping_output(pkg, "boom", vec![])
        .await
        .unwrap_err();
    assert!(e.to_string().contains("boom"), "{e}");
    assert_eq!(e.output, "boom ran\n", "{e}");
    let e = tiered
        .call_keeping_output(pkg, "spin", vec![])
        .await
        .unwrap_err();
    assert!(matches!(e.error, StarlarkHostError::Limit { .. }), "{e}");
    assert_eq!(e.output, "spin ran\n", "{e}");
    // A refused call printed nothing.
    let e = tiered
        .call_keeping_output(pkg, "nope", vec![])
        .await
        .unwrap_err();
    assert_eq!(e.output, "", "{e}");
    // A top level that fails keeps what it printed, in a call and a load.
    let e = tiered
        .call_keeping_output(top, "main", vec![])
        .await
        .unwrap_err();
    assert!(e.to_string().contains("at load"), "{e}");
    assert_eq!(e.output, "top ran\n", "{e}");
    let e = tiered.host.load(top, tiered.tier, None).await.unwrap_err();
    assert_eq!(e.output, "top ran\n", "{e}");
}

/// Entry points for [`entry_values_cross_json_exactly`].
#[allow(dead_code)]
pub const VALUES: &str = "def echo(x):\n    return x\ndef big():\n    return 1 << 200\ndef huge():\n    return 1 << 20000\ndef func():\n    return len\ndef rng():\n    return range(3)\ndef keys():\n    return {1: 2}\n";

/// JSON values round-trip through an entry point, ints of any size
/// exactly; anything else is a conversion error naming the type and what
/// is accepted, whatever runs the package.
#[allow(dead_code)]
pub async fn entry_values_cross_json_exactly(tiered: &TieredHost, pkg: &Package) {
    let exact = |s: &str| serde_json::from_str::<serde_json::Value>(s).unwrap();
    for v in [
        exact("123456789012345678901234567890123456789"),
        exact("-98765432109876543210987654321"),
        exact("18446744073709551615"),
        exact(r#"[1, 2.5, "x", null, true, {"k": [9223372036854775807]}]"#),
    ] {
        let out = tiered
            .call_keeping_output(pkg, "echo", vec![v.clone()])
            .await
            .unwrap();
        assert_eq!(out.value, v);
        assert_eq!(out.value.to_string(), v.to_string(), "digits kept exactly");
    }
    let out = tiered
        .call_keeping_output(pkg, "big", vec![])
        .await
        .unwrap();
    assert_eq!(
        out.value.to_string(),
        "1606938044258990275541962092341162602522202993782792835301376"
    );
    for (entry, names) in [
        ("func", "type function"),
        ("rng", "range"),
        ("keys", "dict key of type int"),
    ] {
        let e = tiered
            .call_keeping_output(pkg, entry, vec![])
            .await
            .unwrap_err();
        assert!(
            matches!(e.error, StarlarkHostError::Conversion { .. }),
            "{entry}: {e}"
        );
        let text = e.to_string();
        assert!(
            text.contains(names) && text.contains("accepted: None, bool, int"),
            "{entry}: {text}"
        );
    }
    // Too many digits is a size limit, not a type error.
    let e = tiered
        .call_keeping_output(pkg, "huge", vec![])
        .await
        .unwrap_err();
    assert!(
        matches!(
            e.error,
            StarlarkHostError::Limit {
                kind: LimitKind::ValueSize,
                ..
            }
        ),
        "{e}"
    );
    let long = exact(&"7".repeat(5000));
    let e = tiered
        .call_keeping_output(pkg, "echo", vec![long])
        .await
        .unwrap_err();
    assert!(e.to_string().contains("5000 digits"), "{e}");
}
