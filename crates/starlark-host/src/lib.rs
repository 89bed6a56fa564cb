//! # cordon-starlark
//!
//! Runs Starlark *packages* with only the host modules their granted
//! permissions unlock.
//!
//! * A [`Package`] is a manifest (`package.toml`: id, version, script,
//!   requested permissions, `network_access`, `requires_provider`) plus its
//!   `.star` sources. [`load_package_from_path`] reads one from a directory
//!   or a single `.star` file.
//! * A module is present in a script's globals only when its permission is
//!   **granted** (by a [`PermissionStore`]) **and requested** (by the
//!   manifest), and its backing service is configured: `secrets`
//!   (`secrets.read`), `notifications` (`notifications.send`), `http`
//!   (`api.http`), `provider` (`provider.complete`, also needs a user in the
//!   [`RunContext`] and `requires_provider`). `print`, `json` and `struct`
//!   are always there. `load()` reaches only files of the same package.
//! * Capabilities and bindings are split: the Starlark builtins only turn
//!   arguments into serde structs
//!   and call a `dyn` handler. In process that is the host's module broker,
//!   which does all the checking (gating, allowlist, private-address guard,
//!   caps, deadline). In a sandboxed worker it is a forwarder that asks the
//!   host, which serves it with the same broker — the same code.
//! * [`StarlarkHost`] is the one way to run a package: [`StarlarkHost::load`]
//!   and [`StarlarkHost::call`] take the package's [`TrustTier`]. A package
//!   is compiled once (parse, run the top level, freeze) and kept (in
//!   process: cached by source hash and module set; in a sandboxed worker:
//!   loaded in a warm worker); each entry-point [`Call`] runs on a fresh
//!   heap under [`EvalLimits`] (ticks, deadline, cancellation, heap, call
//!   depth, output, source size, bracket nesting, JSON value depth/size).
//! * Each call says what it was refused, in the form of a sandbox's
//!   explanation (`cordon_core::explain`): [`CallOutcome::denials`] or
//!   [`EvalError::denials`] name a module the package was not given and
//!   the permission that unlocks it, a host its `network_access` does not
//!   list, a budget or limit reached and the [`EvalLimits`] setting that
//!   raises it. The host's broker records them, never the script or its
//!   worker.
//!
//! The frozen, cached state must not depend on which user invoked it first,
//! so module calls are refused while a package's top level runs once. A
//! package whose top level does call a module (the seed's style:
//! `TOKEN = secrets.get("api")`) runs its top level again at the start of
//! every call instead, with that call's modules; calling modules from
//! functions keeps the compiled-once path.
//!
//! ## Trust and isolation
//!
//! The interpreter is not a safety boundary: hostile input can abort its
//! process (compile-time folding of `'a' * 2000000000`; `str` of structs
//! nested so deep that the interpreter's repr overflows the native stack —
//! `json.encode` is Cordon's own and bounded) or exhaust memory inside one
//! builtin before a limit is checked (`",".join`, `format`, `sorted` of a
//! huge `range`). So:
//!
//! * **untrusted** packages ([`TrustTier::Untrusted`]) run only in a
//!   sandboxed worker process ([`WorkerPool`]) started through an admitted
//!   [`cordon_core::SandboxRunner`] given to
//!   [`StarlarkHostBuilder::sandbox`]; with no conforming backend, or none
//!   given, they are refused (with the conformance report), never run in
//!   process. The host has no API that evaluates one in process: its
//!   in-process evaluator is private to this crate and reached only for
//!   [`TrustTier::Trusted`] (the bare interpreter below it,
//!   `cordon-starlark-worker`, knows no trust tiers: it is what runs
//!   inside the sandboxed worker);
//! * **trusted** packages run, by default, in an unconfined worker process
//!   ([`Isolation::Process`]: no sandbox, but memory, CPU and file limits
//!   the worker sets on itself, and a kill at the deadline), so an accident
//!   in one ends its worker, not the host; in process only when the host
//!   opts in ([`Isolation::InProcess`]: fastest, size checks on the
//!   one-step builders it can see, no memory protection beyond them); or
//!   in the sandboxed pool too ([`Isolation::Sandboxed`]).
//!
//! The worker is the application's own executable: call
//! [`dispatch_worker`] first thing in `main`. The host ⇄ worker protocol is
//! specified in `docs/protocol.md` and implemented by the crate
//! `cordon-starlark-protocol`; the interpreter and the worker loop are the
//! crate `cordon-starlark-worker`, on which this one builds (see
//! `docs/decisions/0011-starlark-layers.md`). `cargo xtask bench` measures call
//! latency in process and through warm and cold workers.
//!
//! ## Example
//!
//! ```no_run
//! use std::sync::Arc;
//! use cordon_core::TrustTier;
//! use cordon_starlark::{
//!     load_package_from_path, Call, InMemoryPackageStore, InMemoryPermissionStore,
//!     InMemorySecretStore, Isolation, Permission, RunContext, Services, StarlarkHost,
//! };
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let pkg = load_package_from_path("examples/starlark/hello")?;
//! let perms = Arc::new(InMemoryPermissionStore::new());
//! perms.grant(&pkg.id, Permission::ApiHttp);
//! perms.grant(&pkg.id, Permission::SecretsRead);
//! let secrets = Arc::new(InMemorySecretStore::new());
//! secrets.set(&pkg.id, "greeting_token", "s3cret");
//!
//! let mut services = Services::new(Arc::new(InMemoryPackageStore::new()), perms);
//! services.secrets = Some(secrets);
//! // No sandbox given: this host runs trusted packages only, here in
//! // process (fastest; no memory protection: see Isolation).
//! let host = StarlarkHost::builder(services)
//!     .trusted_isolation(Isolation::InProcess)
//!     .build()?;
//!
//! let call = Call::new("main").context(RunContext::for_user("u1"));
//! let out = host.call(&pkg, TrustTier::Trusted, call).await?;
//! println!("{} {}", out.value, out.output);
//! # Ok(()) }
//! ```

#![deny(missing_docs)]

mod broker;
mod credentials;
mod error;
mod eval_threads;
mod evaluator;
mod grants;
mod host;
mod http;
mod in_process;
mod package_load;
mod provider;
mod sandbox;
mod stores;

pub use broker::Services;
pub use cordon_core::TrustTier;
pub use cordon_starlark_protocol::{
    EvalLimits, HttpLimits, LimitKind, Manifest, Notification, NotificationLimits, Package,
    PackageStatus, PackageTier, Permission, ProviderRequirement,
};
pub use cordon_starlark_worker::{dispatch_worker, CancelToken};
pub use error::{EvalError, StarlarkHostError};
pub use evaluator::{Call, CallOutcome, ExecOutcome};
pub use grants::{check_private_targets, grant_status, Approval, Grant, GrantStatus};
pub use host::{Isolation, StarlarkHost, StarlarkHostBuilder};
pub use in_process::CacheStats;
pub use package_load::load_package_from_path;
pub use sandbox::{PoolConfig, PoolStats, WorkerConfig, WorkerLimits, WorkerPool, WorkerProgram};
#[cfg(feature = "test-cluster")]
pub use stores::TestCluster;
#[cfg(feature = "postgres")]
pub use stores::{
    is_postgres_url, Migration, PasswordSource, PgConfig, PgOptions, PgStore, STORE_URL_ENV,
};
#[cfg(feature = "sqlite")]
pub use stores::{
    services_of, GrantRecord, InstallOutcome, KeyOrigin, PackageRecord, ProviderScope, SqliteStore,
    StoreAdmin, StoreKey, STORE_KEY_ENV,
};
pub use stores::{
    ApiKey, DeliveryStats, InMemoryPackageStore, InMemoryPermissionStore, InMemoryProviderResolver,
    InMemorySecretStore, JsonLinesNotifier, KeySource, LineQueue, NotificationSender, PackageStore,
    PermissionStore, ProviderConfig, ProviderResolver, QueueFull, QueueLimits, RecordingNotifier,
    ResolvedProvider, RunContext, SecretStore, StoreError, WebhookNotifier,
};

/// The parts below [`StarlarkHost`] (this crate's, and the protocol's and
/// worker's), for its own tests and benchmarks (the wire protocol by hand,
/// the interpreter without a host).
/// Not a stable API: embedders use the items at the crate root.
#[doc(hidden)]
pub mod internals {
    pub use crate::broker::{ensure_runnable, Admitted, Capabilities, ModuleBroker};
    pub use crate::eval_threads::run_on_eval_thread;
    pub use crate::sandbox::{ColdWorker, SessionError, WorkerConnection};
    pub use cordon_egress::is_public_ip;
    pub use cordon_egress::Allowlist;
    pub use cordon_starlark_protocol::*;
    pub use cordon_starlark_protocol::{frame, wire};
    pub use cordon_starlark_worker::{
        compile_package, globals_for, run_worker, CompiledPackage, EvalFailure, WORKER_ARG,
    };
}
