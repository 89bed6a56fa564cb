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
        self.host.load(pkg, self.tier, ctx).await
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
        self.host.call_by_id(id, self.tier, call).await
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
