//! [`StandardSuite`]: runs P1–P7 (and P8 for a backend that claims the
//! egress allowlist) against a backend (and, beside it, the
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
use crate::baseline::{self, Unconfined};
#[cfg(target_os = "linux")]
use crate::harness::{Ctx, Ids};
#[cfg(target_os = "linux")]
use crate::kernel::KernelFacts;
#[cfg(target_os = "linux")]
use crate::probes;
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
    /// with a 5 s per-probe timeout.
    pub fn new() -> Self {
        StandardSuite {
            exe: ProbeExecutable::CurrentExe,
            only: None,
            accept_unproven: Vec::new(),
            timeout: Duration::from_secs(5),
            #[cfg(feature = "test-hooks")]
            hygiene: None,
        }
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

    /// Sets the per-probe timeout (default 5 s).
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

    /// The spawner for one side: `backend` confined, with the test-only
    /// hygiene overrides if any.
    #[cfg(target_os = "linux")]
    fn spawner(&self, backend: Arc<dyn SandboxBackend>) -> Spawner {
        let config = RunnerConfig {
            ceilings: Limits {
                deadline: Some(self.timeout),
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

    #[cfg(target_os = "linux")]
    async fn run_probe(ctx: &Ctx, id: ProbeId) -> ProbeResult {
        let started = Instant::now();
        let manifest = crate::expected::checks(id, &ctx.conditions);
        let mut checks = match id {
            ProbeId::P1 => probes::p1::host(ctx).await,
            ProbeId::P2 => probes::p2::host(ctx).await,
            ProbeId::P3 => probes::p3::host(ctx).await,
            ProbeId::P4 => probes::p4::host(ctx).await,
            ProbeId::P5 => probes::p5::host(ctx).await,
            ProbeId::P6 => probes::p6::host(ctx).await,
            ProbeId::P7 => probes::p7::host(ctx).await,
            ProbeId::P8 => probes::p8::host(ctx).await,
        };
        crate::expected::enforce(&manifest, &mut checks);
        let result = fold(id, checks, manifest.len(), started);
        tracing::debug!(probe = %id, status = ?result.status, ms = result.duration_ms, "probe finished");
        result
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
        // P8 runs for a backend that claims the egress allowlist.
        let ids = self.only.clone().unwrap_or_else(|| {
            let mut ids = ProbeId::ALL.to_vec();
            if backend.claims_egress_allowlist() {
                ids.extend(ProbeId::CLAIMED);
            }
            ids
        });
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

impl StandardSuite {
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
                fold(*id, vec![unreachable("platform", why)], 0, Instant::now())
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
        let contexts = self.probe_exe().and_then(|exe| {
            let kernel = KernelFacts::learn(&exe);
            let watchdog = Arc::new(crate::watchdog::Watchdog::start(&exe, sandbox)?);
            let mut real = Ctx::new(
                self.spawner(backend),
                &exe,
                self.timeout,
                sandbox,
                kernel.clone(),
                scopes.clone(),
            )?;
            let mut base = Ctx::new(
                self.spawner(Arc::new(Unconfined)),
                &exe,
                self.timeout,
                sandbox,
                kernel,
                scopes,
            )?;
            base.baseline = true;
            // The unconfined control runs, the host-side targets of both
            // sides and the suite dirs must not outlive this process.
            watchdog.guard_dir(real.root.path())?;
            watchdog.guard_dir(base.root.path())?;
            real.watchdog = Some(Arc::clone(&watchdog));
            base.watchdog = Some(watchdog);
            Ok((real, base))
        });
        match contexts {
            // The probes are independent, and so is the baseline: run them
            // all concurrently.
            Ok((real, base)) => {
                let runs = ids.iter().map(|id| async {
                    let (r, b) =
                        futures_join2(Self::run_probe(&real, *id), Self::run_probe(&base, *id))
                            .await;
                    (r, b)
                });
                let (mut real, base): (Vec<_>, Vec<_>) =
                    futures_join_all(runs).await.into_iter().unzip();
                baseline::mark(&mut real, &base);
                real
            }
            Err(e) => ids
                .iter()
                .map(|id| {
                    fold(
                        *id,
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

/// Polls two futures concurrently on the current task.
#[cfg(target_os = "linux")]
async fn futures_join2<A: std::future::Future, B: std::future::Future>(
    a: A,
    b: B,
) -> (A::Output, B::Output) {
    let mut a = Box::pin(a);
    let mut b = Box::pin(b);
    let mut ra = None;
    let mut rb = None;
    std::future::poll_fn(|cx| {
        if ra.is_none() {
            if let std::task::Poll::Ready(v) = a.as_mut().poll(cx) {
                ra = Some(v);
            }
        }
        if rb.is_none() {
            if let std::task::Poll::Ready(v) = b.as_mut().poll(cx) {
                rb = Some(v);
            }
        }
        if ra.is_some() && rb.is_some() {
            std::task::Poll::Ready(())
        } else {
            std::task::Poll::Pending
        }
    })
    .await;
    (
        ra.expect("polled to completion"),
        rb.expect("polled to completion"),
    )
}

/// Polls futures concurrently on the current task and keeps their order.
#[cfg(target_os = "linux")]
async fn futures_join_all<F: std::future::Future>(
    futures: impl Iterator<Item = F>,
) -> Vec<F::Output> {
    let mut set: Vec<std::pin::Pin<Box<F>>> = futures.map(Box::pin).collect();
    let mut out: Vec<Option<F::Output>> = (0..set.len()).map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (i, f) in set.iter_mut().enumerate() {
            if out[i].is_none() {
                match f.as_mut().poll(cx) {
                    std::task::Poll::Ready(v) => out[i] = Some(v),
                    std::task::Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            std::task::Poll::Pending
        } else {
            std::task::Poll::Ready(())
        }
    })
    .await;
    out.into_iter()
        .map(|o| o.expect("every future completed"))
        .collect()
}
