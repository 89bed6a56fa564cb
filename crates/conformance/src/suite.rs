//! [`StandardSuite`]: runs the registry's probes a backend must pass
//! (P1–P7, and P8 for one that claims the egress allowlist) against it (and, beside it, the
//! unconfined baseline) and builds the report.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cordon_core::{
    ConformanceReport, ConformanceSuite, HostFacts, ProbeId, ProbeResult, ProbeStatus,
    SandboxBackend,
};
#[cfg(target_os = "linux")]
use cordon_core::{Limits, RunnerConfig, Spawner};

#[cfg(target_os = "linux")]
use crate::baseline::Unconfined;
#[cfg(target_os = "linux")]
use crate::harness::{Ids, ProbeContext};
#[cfg(target_os = "linux")]
use crate::kernel::KernelFacts;
#[cfg(target_os = "linux")]
use crate::registry::ProbeRegistry;
#[cfg(target_os = "linux")]
use crate::scope::LimitScopes;
use crate::verdict::{fold, unreachable};

/// Where the probe child executable comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProbeExecutable {
    /// The running executable, re-invoked in probe mode. Its `main` must
    /// call [`dispatch_probe_child`](crate::dispatch_probe_child) first.
    CurrentExe,
    /// An explicit probe binary, e.g. the `cordon-probe` this crate ships.
    Path(PathBuf),
}

/// The standard conformance suite: P1–P7, and P8 for a backend that
/// claims the egress allowlist. Each probe runs twice,
/// concurrently: against the backend, and with no sandbox at all (the
/// baseline that marks checks passing without one).
///
/// ```no_run
/// use std::sync::Arc;
/// use cordon_conformance::StandardSuite;
/// use cordon_core::ConformanceSuite;
///
/// # async fn f() {
/// let backend = Arc::new(cordon_backend_noop::NoopBackend);
/// let report = StandardSuite::new().run(backend).await;
/// println!("{}", report.summary());
/// assert!(!report.conforms()); // the no-op backend confines nothing
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct StandardSuite {
    #[cfg(target_os = "linux")]
    registry: ProbeRegistry,
    exe: ProbeExecutable,
    only: Option<Vec<ProbeId>>,
    accept_unproven: Vec<ProbeId>,
    timeout: Duration,
    #[cfg(feature = "test-hooks")]
    hygiene: Option<cordon_core::HygieneOverrides>,
}

impl Default for StandardSuite {
    fn default() -> Self {
        StandardSuite::new()
    }
}

impl StandardSuite {
    /// The full suite, re-invoking the current executable as probe child,
    /// with the per-probe timeout of [`cordon_core::Limits::probe`]'s deadline (15 s:
    /// a probe ends as soon as its checks are made, so the timeout only
    /// bounds one that hangs, and a loaded host must not cut a check
    /// short, which would close the gate).
    pub fn new() -> Self {
        StandardSuite {
            #[cfg(target_os = "linux")]
            registry: ProbeRegistry::standard(),
            exe: ProbeExecutable::CurrentExe,
            only: None,
            accept_unproven: Vec::new(),
            timeout: cordon_core::Limits::probe()
                .deadline
                .unwrap_or(Duration::from_secs(15)),
            #[cfg(feature = "test-hooks")]
            hygiene: None,
        }
    }

    /// Runs the probes of `registry` instead of the standard ones (a
    /// registry with a probe of your own added, say). The probe executable
    /// must dispatch its children through the same registry
    /// ([`dispatch_probe_child_with`](crate::dispatch_probe_child_with)).
    #[cfg(target_os = "linux")]
    pub fn with_registry(mut self, registry: ProbeRegistry) -> Self {
        self.registry = registry;
        self
    }

    /// The probes this suite runs from.
    #[cfg(target_os = "linux")]
    pub fn registry(&self) -> &ProbeRegistry {
        &self.registry
    }

    /// Uses an explicit probe binary.
    pub fn with_probe_executable(mut self, exe: ProbeExecutable) -> Self {
        self.exe = exe;
        self
    }

    /// Runs only these probes. The report then cannot conform: a backend is
    /// admitted only on a full run.
    pub fn only(mut self, probes: Vec<ProbeId>) -> Self {
        self.only = Some(probes);
        self
    }

    /// Accepts these probes when they are unproven on this host (every
    /// check passed, none discriminates: something else on the host
    /// provides what they test), so that the report can conform; the
    /// report records them. For hosts whose outer confinement is known
    /// and trusted (a container's seccomp profile, say).
    pub fn accept_unproven(mut self, probes: Vec<ProbeId>) -> Self {
        self.accept_unproven = probes;
        self
    }

    /// The unproven probes this suite accepts.
    pub fn accepted_unproven(&self) -> &[ProbeId] {
        &self.accept_unproven
    }

    /// Sets the per-probe timeout (default: [`cordon_core::Limits::probe`]'s deadline).
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Switches parts of the runner's hygiene off, to show P2/P3 failing
    /// without it. Tests only.
    #[cfg(feature = "test-hooks")]
    pub fn without_hygiene_for_tests(mut self, overrides: cordon_core::HygieneOverrides) -> Self {
        self.hygiene = Some(overrides);
        self
    }

    #[cfg(target_os = "linux")]
    fn probe_exe(&self) -> std::io::Result<PathBuf> {
        match &self.exe {
            ProbeExecutable::CurrentExe => std::env::current_exe(),
            ProbeExecutable::Path(p) => Ok(p.clone()),
        }
    }

    /// The spawner for one side: `backend` confined, its scratch dirs made
    /// in `scratch_base`, with the test-only hygiene overrides if any.
    #[cfg(target_os = "linux")]
    fn spawner(&self, backend: Arc<dyn SandboxBackend>, scratch_base: PathBuf) -> Spawner {
        let config = RunnerConfig {
            scratch_base,
            // The ceiling lets the one check that needs more wall time
            // than the per-probe timeout have it (each spawn's own
            // deadline is the timeout unless its probe says otherwise).
            ceilings: Limits {
                deadline: Some(self.timeout.max(crate::probes::p6::cpu::DEADLINE)),
                ..Limits::probe()
            },
            ..RunnerConfig::default()
        };
        #[cfg(feature = "test-hooks")]
        if let Some(o) = self.hygiene {
            return Spawner::without_hygiene_for_tests(backend, config, o);
        }
        Spawner::confined(backend, config)
    }
}

#[async_trait::async_trait]
impl ConformanceSuite for StandardSuite {
    async fn run(&self, backend: Arc<dyn SandboxBackend>) -> ConformanceReport {
        let started = Instant::now();
        let availability = backend.availability();
        let host = HostFacts::collect(backend.as_ref());
        if !availability.is_available() {
            return ConformanceReport::new(backend.name(), availability, host, Vec::new(), 0.0);
        }
        // What the backend must pass (P8 for one that claims the egress
        // allowlist), from the registry's probes.
        let ids = self
            .only
            .clone()
            .unwrap_or_else(|| self.default_ids(backend.as_ref()));
        let name = backend.name().to_string();
        let probes = self.run_probes(backend, &host, &ids).await;
        let report = ConformanceReport::new(
            name,
            availability,
            host,
            probes,
            started.elapsed().as_secs_f64() * 1000.0,
        )
        .accepting_unproven(self.accept_unproven.clone());
        debug_assert!(report
            .probes
            .iter()
            .all(|p| p.status != ProbeStatus::Pass || !p.checks.is_empty()));
        report
    }
}

/// A probe side's task, aborted (and its children with it) if the suite's
/// run is dropped before it ends.
#[cfg(target_os = "linux")]
struct ProbeTask(tokio::task::JoinHandle<ProbeResult>);

#[cfg(target_os = "linux")]
impl Drop for ProbeTask {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl StandardSuite {
    /// Starts one side (`ctx`) of probe `id` as a task.
    #[cfg(target_os = "linux")]
    fn spawn_probe(&self, ctx: &Arc<ProbeContext>, id: ProbeId) -> ProbeTask {
        let ctx = Arc::clone(ctx);
        let probe = self.registry.get(id).cloned();
        let title = self.registry.title(id);
        let known = self.registry.ids();
        ProbeTask(tokio::spawn(async move {
            let started = Instant::now();
            let Some(probe) = probe else {
                let why = format!("no probe {id} in this suite's registry (it has {known:?})");
                return fold(id, title, vec![unreachable("registry", why)], 0, started);
            };
            let manifest = crate::expected::checks(probe.as_ref(), &ctx.conditions);
            let mut checks = probe.host(&ctx).await;
            crate::expected::enforce(&manifest, &mut checks);
            ctx.gives_up.apply(id, &mut checks);
            let result = fold(id, title, checks, manifest.len(), started);
            tracing::debug!(probe = %id, baseline = ctx.baseline, status = ?result.status,
                ms = result.duration_ms, "probe finished");
            result
        }))
    }

    /// The result of a probe side's task; a task that panicked is an
    /// `Unreachable` probe saying so.
    #[cfg(target_os = "linux")]
    async fn joined(&self, id: ProbeId, mut task: ProbeTask) -> ProbeResult {
        let started = Instant::now();
        match (&mut task.0).await {
            Ok(result) => result,
            Err(e) => {
                let why = if e.is_panic() {
                    format!(
                        "the probe panicked: {}",
                        cordon_core::panic_message(&*e.into_panic())
                    )
                } else {
                    format!("the probe's task ended early: {e}")
                };
                fold(
                    id,
                    self.registry.title(id),
                    vec![unreachable("probe-task", why)],
                    0,
                    started,
                )
            }
        }
    }

    #[cfg(target_os = "linux")]
    fn default_ids(&self, backend: &dyn SandboxBackend) -> Vec<ProbeId> {
        self.registry.required_of(backend)
    }

    /// Outside Linux there is no registry: the probes core requires.
    #[cfg(not(target_os = "linux"))]
    fn default_ids(&self, backend: &dyn SandboxBackend) -> Vec<ProbeId> {
        ProbeId::required_of(backend)
    }

    /// Outside Linux no probe is written yet: each is `Unreachable`, so no
    /// backend conforms there (fail closed, and the report says why).
    #[cfg(not(target_os = "linux"))]
    async fn run_probes(
        &self,
        _backend: Arc<dyn SandboxBackend>,
        _host: &HostFacts,
        ids: &[ProbeId],
    ) -> Vec<ProbeResult> {
        let os = std::env::consts::OS;
        ids.iter()
            .map(|id| {
                let why = format!(
                    "the conformance probes are written for Linux; none exists for {os} yet, \
                     so no backend can be shown to confine here"
                );
                let title = "(no probe for this platform)";
                fold(
                    *id,
                    title,
                    vec![unreachable("platform", why)],
                    0,
                    Instant::now(),
                )
            })
            .collect()
    }

    #[cfg(target_os = "linux")]
    async fn run_probes(
        &self,
        backend: Arc<dyn SandboxBackend>,
        host: &HostFacts,
        ids: &[ProbeId],
    ) -> Vec<ProbeResult> {
        let sandbox = sandbox_ids(&host.backend_facts);
        // The baseline checks each limit at the same scope, so that a
        // sandbox-wide check is marked only if it passes without a sandbox.
        let scopes = LimitScopes::from_facts(&host.backend_facts);
        // Every process of the baseline runs in the gate's cgroup, killed
        // whole when this run ends, however it ends (`gate_cgroup.rs`).
        let cgroup = crate::gate_cgroup::GateCgroup::create().map(Arc::new);
        let contexts = self.probe_exe().and_then(|exe| {
            let kernel = KernelFacts::learn(&exe);
            let watchdog = Arc::new(crate::watchdog::Watchdog::start(&exe, sandbox)?);
            if let Some(cg) = &cgroup {
                watchdog.guard_cgroup(cg.path())?;
            }
            // The unconfined control runs, the host-side targets of both
            // sides and the suite dirs must not outlive this process.
            let mut real = ProbeContext::new(
                |scratch| self.spawner(backend, scratch),
                Some(Arc::clone(&watchdog)),
                &exe,
                self.timeout,
                sandbox,
                kernel.clone(),
                scopes.clone(),
                false,
            )?;
            let base = ProbeContext::new(
                |scratch| self.spawner(Arc::new(Unconfined(cgroup.clone())), scratch),
                Some(watchdog),
                &exe,
                self.timeout,
                sandbox,
                kernel,
                scopes,
                true,
            )?;
            real.gives_up = crate::given_up::GivenUp::from_facts(&host.backend_facts);
            Ok((real, base))
        });
        match contexts {
            // The probes are independent, and so is the baseline: run them
            // all concurrently.
            // Each side of each probe is a task of its own, so that one
            // side's host work at a hold (an attacker process it waits
            // for, say) never stalls another's children past their
            // deadlines, and a probe that panics fails alone.
            Ok((real, base)) => {
                let (real, base) = (Arc::new(real), Arc::new(base));
                // A process limit shared by every task of the uid is filled
                // by P6's fork loop (and by the control's, which has no
                // limit): P6 then runs after the others, and its control
                // after it, so no other probe's fork is refused for it.
                let alone = |id: &ProbeId| real.scopes.processes_per_uid && *id == ProbeId::P6;
                let runs: Vec<_> = ids
                    .iter()
                    .filter(|id| !alone(id))
                    .map(|id| {
                        (
                            *id,
                            self.spawn_probe(&real, *id),
                            self.spawn_probe(&base, *id),
                        )
                    })
                    .collect();
                let (mut real_results, mut base_results) = (Vec::new(), Vec::new());
                for (id, r, b) in runs {
                    real_results.push(self.joined(id, r).await);
                    base_results.push(self.joined(id, b).await);
                }
                for id in ids.iter().filter(|id| alone(id)) {
                    let r = self.joined(*id, self.spawn_probe(&real, *id)).await;
                    real_results.push(r);
                    let b = self.joined(*id, self.spawn_probe(&base, *id)).await;
                    base_results.push(b);
                }
                // In the order asked for.
                real_results.sort_by_key(|p| ids.iter().position(|id| *id == p.id));
                crate::verdict::mark(&mut real_results, &base_results);
                // What the controls left (a keeper killed by its deadline
                // cannot kill its orphans): gone before the report is.
                if let Some(cg) = &cgroup {
                    cg.kill();
                }
                real_results
            }
            Err(e) => ids
                .iter()
                .map(|id| {
                    fold(
                        *id,
                        self.registry.title(*id),
                        vec![unreachable(
                            "setup",
                            format!("cannot prepare the probe environment: {e}"),
                        )],
                        0,
                        Instant::now(),
                    )
                })
                .collect(),
        }
    }
}

/// Who the sandboxed program runs as: the backend's `sandbox_uid` /
/// `sandbox_gid` facts, else (no such fact) the host's own ids. A uid
/// without a gid takes that user's primary group from the user database.
#[cfg(target_os = "linux")]
fn sandbox_ids(facts: &std::collections::BTreeMap<String, String>) -> Ids {
    // SAFETY: geteuid/getegid have no preconditions.
    let (host_uid, host_gid) = unsafe { (libc::geteuid(), libc::getegid()) };
    let uid = facts
        .get("sandbox_uid")
        .and_then(|v| v.parse().ok())
        .unwrap_or(host_uid);
    let gid = facts
        .get("sandbox_gid")
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| {
            if uid == host_uid {
                host_gid
            } else {
                primary_gid(uid).unwrap_or(uid)
            }
        });
    Ids { uid, gid }
}

/// The primary gid of `uid` in the user database.
#[cfg(target_os = "linux")]
fn primary_gid(uid: u32) -> Option<u32> {
    let mut buf = vec![0 as libc::c_char; 4096];
    // SAFETY: passwd is plain data; getpwuid_r writes into pw and buf,
    // whose size we pass.
    unsafe {
        let mut pw: libc::passwd = std::mem::zeroed();
        let mut out: *mut libc::passwd = std::ptr::null_mut();
        let rc = libc::getpwuid_r(uid, &mut pw, buf.as_mut_ptr(), buf.len(), &mut out);
        (rc == 0 && !out.is_null()).then_some(pw.pw_gid)
    }
}
