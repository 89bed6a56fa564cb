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
//! * Capabilities and bindings are split: the Starlark builtins
//!   ([`bindings`]) only turn arguments into serde structs
//!   ([`ModuleCall`]) and call a `dyn` [`ModuleCalls`]. In process that is a
//!   [`ModuleBroker`], which does all the checking (gating, allowlist,
//!   private-address guard, caps, deadline). In a sandboxed worker it is a
//!   forwarder that asks the host, which serves it with
//!   [`ModuleBroker::handle`] — the same code.
//! * [`Runner`] compiles a package once (parse, run the top level, freeze),
//!   caches it by (source hash, module set) and evaluates each entry-point
//!   call on a fresh heap on a dedicated large-stack thread, under
//!   [`Limits`] (ticks, deadline, cancellation, heap, call depth, output,
//!   source size, bracket nesting, JSON value depth/size).
//!
//! Module calls are refused while a package's top level runs: the frozen,
//! cached state must not depend on which user invoked it first. Call modules
//! from functions.
//!
//! ## Trust and isolation
//!
//! The interpreter is not a safety boundary: hostile input can abort its
//! process (compile-time folding of `'a' * 2000000000`, values nested so
//! deep that `json.encode` overflows the native stack) or exhaust memory
//! inside one builtin before a limit is checked. So:
//!
//! * **untrusted** packages run only in a sandboxed worker process
//!   ([`Isolation::Sandboxed`], [`SandboxedRunner`]) started through an
//!   admitted [`cordon_core::SandboxRunner`]; with no conforming backend
//!   they are refused with the conformance report, never run in process;
//! * **trusted** packages may run in process ([`Isolation::InProcess`],
//!   [`Runner`]).
//!
//! [`StarlarkHost`] / [`select_isolation`] make that choice in one place.
//! The worker is the application's own executable: call
//! [`worker::dispatch_worker`] first thing in `main`. The host ⇄ worker
//! protocol is specified in `docs/protocol.md` ([`wire`] has the bodies).
//!
//! For `cordon star run`, [`run_local`] (in process) and
//! [`run_local_sandboxed`] (in a worker) do all of this for a path with
//! explicit grants and secrets. `cargo xtask bench` measures call latency
//! in process and through warm and cold workers.
//!
//! ## Example
//!
//! ```no_run
//! use std::sync::Arc;
//! use cordon_starlark::{
//!     load_package_from_path, InMemoryPackageStore, InMemoryPermissionStore,
//!     InMemorySecretStore, Permission, RunContext, Runner, Services,
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
//! let runner = Runner::new(services)?;
//!
//! let out = runner
//!     .call_entry_point(&pkg, "main", vec![], Default::default(), Some(&RunContext::for_user("u1")))
//!     .await?;
//! println!("{} {}", out.value, out.output);
//! # Ok(()) }
//! ```

#![deny(missing_docs)]

pub mod bindings;
pub mod broker;
pub mod error;
pub mod eval;
pub mod http;
pub mod isolation;
pub mod limits;
pub mod local;
pub mod package;
pub mod protocol;
pub mod provider;
pub mod runner;
pub mod sandbox;
pub mod stores;
pub mod wire;
pub mod worker;

pub use bindings::{globals_for, ModuleSet};
pub use broker::{ensure_runnable, CancelToken, Capabilities, ModuleBroker, Services};
pub use error::{LimitKind, StarlarkHostError};
pub use eval::{compile_package, run_on_eval_thread, CallOutcome, CompiledPackage};
pub use http::{is_public_ip, Allowlist, HttpLimits};
pub use isolation::{select_isolation, Executor, Isolation, StarlarkHost};
pub use limits::Limits;
pub use local::{run_local, run_local_sandboxed, LocalOutcome, LocalRun};
pub use package::{
    load_package_from_path, parse_manifest, Manifest, Package, PackageStatus, PackageTier,
    Permission, ProviderRequirement,
};
pub use protocol::{
    ChatMessage, CompletionRequest, CompletionResponse, DenyAllCalls, HttpRequest, HttpResponse,
    ModuleCall, ModuleCalls, ModuleError, ModuleReply, Notification, SecretGet, Usage,
};
pub use provider::OpenAiCompatibleProvider;
pub use runner::{CacheStats, ExecOutcome, Runner};
pub use sandbox::{
    ColdWorker, PoolConfig, PoolStats, SandboxedRunner, SessionError, WorkerConfig,
    WorkerConnection, WorkerLimits, WorkerProgram,
};
pub use stores::{
    ApiKey, InMemoryPackageStore, InMemoryPermissionStore, InMemoryProviderResolver,
    InMemorySecretStore, KeySource, NotificationSender, PackageStore, PermissionStore,
    ProviderConfig, ProviderResolver, RecordingNotifier, ResolvedProvider, RunContext, SecretStore,
};
