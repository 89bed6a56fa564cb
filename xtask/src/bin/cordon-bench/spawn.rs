//! Spawn overhead of `/bin/true`, and the conformance suite's wall time.

use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cordon_conformance::StandardSuite;
use cordon_core::{
    ChildSpec, ConformanceReport, ConformanceSuite, Runner, SandboxBackend, SandboxRunner,
    TrustTier, TrustedProcessRunner,
};

use crate::stats::{not_built, row, summarize, Row};
use crate::Plan;

const SECTION: &str = "1. spawn-and-wait of /bin/true";

fn bwrap() -> Option<std::path::PathBuf> {
    std::env::var_os("PATH").and_then(|p| {
        std::env::split_paths(&p)
            .map(|d| d.join("bwrap"))
            .find(|p| p.is_file())
    })
}

async fn time_runner(runner: &dyn Runner, trust: TrustTier) -> Duration {
    time_spec(runner, ChildSpec::new("/bin/true").trust(trust)).await
}

async fn time_spec(runner: &dyn Runner, spec: ChildSpec) -> Duration {
    let t = Instant::now();
    let mut child = runner.start(spec).await.expect("spawn");
    let out = child.wait().await.expect("wait");
    assert!(out.success(), "/bin/true failed: {out:?}");
    t.elapsed()
}

/// The `cordon` binary `cargo xtask bench` built (release, without the
/// Starlark host), for the whole-command row.
fn cordon_cli() -> Option<std::path::PathBuf> {
    std::env::var_os("CORDON_BENCH_CLI")
        .map(std::path::PathBuf::from)
        .filter(|p| p.is_file())
}

/// One `cordon run -- /bin/true`, the whole command, with the report
/// cached in `cache`.
fn time_cli(cli: &std::path::Path, cache: &std::path::Path) -> Duration {
    time_cli_with(cli, cache, &[])
}

/// [`time_cli`] with `flags` before the `--`.
fn time_cli_with(cli: &std::path::Path, cache: &std::path::Path, flags: &[&str]) -> Duration {
    let t = Instant::now();
    let s = Command::new(cli)
        .env("XDG_CACHE_HOME", cache)
        .arg("run")
        .args(flags)
        .args(["--", "/bin/true"])
        // --explain's summary; a failure is still seen (the status).
        .stderr(std::process::Stdio::null())
        .status()
        .expect("cordon");
    assert!(s.success(), "cordon run -- /bin/true failed: {s}");
    t.elapsed()
}

/// [`time_cli_with`] on a terminal: `cordon run -t` needs one on stdin
/// (a pty pair made here; `/bin/true` writes nothing to drain).
fn time_cli_tty(cli: &std::path::Path, cache: &std::path::Path) -> Duration {
    use std::os::fd::{FromRawFd, OwnedFd};
    let (mut master, mut slave) = (-1, -1);
    // SAFETY: openpty writes two fds; null name/termios/winsize are allowed.
    let r = unsafe {
        libc::openpty(
            &mut master,
            &mut slave,
            std::ptr::null_mut(),
            std::ptr::null(),
            std::ptr::null(),
        )
    };
    assert_eq!(r, 0, "openpty");
    // SAFETY: both fds are fresh and ours.
    let (_master, slave) = unsafe { (OwnedFd::from_raw_fd(master), OwnedFd::from_raw_fd(slave)) };
    let t = Instant::now();
    let s = Command::new(cli)
        .env("XDG_CACHE_HOME", cache)
        .args(["run", "-t", "--", "/bin/true"])
        .stdin(slave.try_clone().expect("dup"))
        .stdout(slave.try_clone().expect("dup"))
        .stderr(slave)
        .status()
        .expect("cordon");
    assert!(s.success(), "cordon run -t -- /bin/true failed: {s}");
    t.elapsed()
}

/// A suite that answers with a report already made: a second runner for
/// the same backend (with an egress allowlist) without a second probe run.
pub struct Replay(pub ConformanceReport);

#[async_trait::async_trait]
impl ConformanceSuite for Replay {
    async fn run(&self, _: Arc<dyn SandboxBackend>) -> ConformanceReport {
        self.0.clone()
    }
}

/// `sandbox` with an egress allowlist (`Network::Allow`): its own network
/// namespace and the host's proxy, where the backend proved it (P8).
pub async fn egress_runner(
    backend: Arc<dyn SandboxBackend>,
    sandbox: &SandboxRunner,
) -> Option<SandboxRunner> {
    if !sandbox.report().proves_egress_allowlist() {
        return None;
    }
    let config = cordon_core::RunnerConfig {
        network: cordon_core::Network::Allow(vec!["localhost:8080".parse().expect("pattern")]),
        ..sandbox.config().clone()
    };
    SandboxRunner::new(backend, &Replay(sandbox.report().clone()), config)
        .await
        .ok()
}

pub async fn bench(
    plan: &Plan,
    sandbox: Option<&SandboxRunner>,
    egress: Option<&SandboxRunner>,
) -> Vec<Row> {
    let trusted = TrustedProcessRunner::default();
    let bwrap = bwrap();
    let cli = cordon_cli();
    let cache = tempfile::tempdir().expect("temp dir");
    if let Some(cli) = &cli {
        // Fills the cache: the rows measure a cached report.
        time_cli(cli, cache.path());
    }
    let (mut plain, mut tr, mut sb, mut bw, mut cl) = (vec![], vec![], vec![], vec![], vec![]);
    let (mut eg, mut sx, mut cx) = (vec![], vec![], vec![]);
    let (mut ct, mut cr) = (vec![], vec![]);
    // A directory the review rows write nothing to (the layer's cost).
    let reviewed = tempfile::tempdir().expect("temp dir");
    let reviewed_dir = reviewed.path().to_str().expect("UTF-8 temp dir").to_owned();
    // Interleaved, so that drift on a shared machine hits every row alike.
    for i in 0..plan.spawn_iters + 10 {
        let t = Instant::now();
        let s = Command::new("/bin/true").status().expect("/bin/true");
        assert!(s.success());
        let p = t.elapsed();
        let t2 = time_runner(&trusted, TrustTier::Trusted).await;
        let s2 = match sandbox {
            Some(r) => Some(time_runner(r, TrustTier::Untrusted).await),
            None => None,
        };
        let e2 = match egress {
            Some(r) => Some(time_runner(r, TrustTier::Untrusted).await),
            None => None,
        };
        let b = bwrap.as_ref().map(|bw| {
            let t = Instant::now();
            let s = Command::new(bw)
                .args([
                    "--ro-bind",
                    "/",
                    "/",
                    "--unshare-all",
                    "--die-with-parent",
                    "--new-session",
                    "/bin/true",
                ])
                .status()
                .expect("bwrap");
            assert!(s.success(), "bwrap failed");
            t.elapsed()
        });
        let c = cli.as_ref().map(|cli| time_cli(cli, cache.path()));
        // The same with explain mode on (what `--explain` adds).
        let sx2 = match sandbox {
            Some(r) => {
                let spec = ChildSpec::new("/bin/true")
                    .trust(TrustTier::Untrusted)
                    .explain(true);
                Some(time_spec(r, spec).await)
            }
            None => None,
        };
        let cx2 = cli
            .as_ref()
            .map(|cli| time_cli_with(cli, cache.path(), &["--explain"]));
        let ct2 = cli.as_ref().map(|cli| time_cli_tty(cli, cache.path()));
        let cr2 = cli.as_ref().map(|cli| {
            let flags = ["--rw-review", reviewed_dir.as_str(), "--review", "discard"];
            time_cli_with(cli, cache.path(), &flags)
        });
        if i >= 10 {
            ct.extend(ct2);
            cr.extend(cr2);
            sx.extend(sx2);
            cx.extend(cx2);
            if let Some(c) = c {
                cl.push(c);
            }
            plain.push(p);
            tr.push(t2);
            if let Some(s) = s2 {
                sb.push(s);
            }
            if let Some(e) = e2 {
                eg.push(e);
            }
            if let Some(b) = b {
                bw.push(b);
            }
        }
    }
    let base = row(SECTION, "std::process::Command (baseline)", plain).keyed("spawn.plain");
    let mut rows = vec![base.clone()];
    let mut trusted_row = row(SECTION, "TrustedProcessRunner", tr).keyed("spawn.trusted");
    trusted_row.ratio = Some(trusted_row.median / base.median);
    rows.push(trusted_row.clone());
    if sb.is_empty() {
        rows.push(not_built(
            SECTION,
            "SandboxRunner (native backend)",
            "no conforming native backend",
        ));
    } else {
        let mut r = row(SECTION, "SandboxRunner (native backend)", sb).keyed("spawn.sandbox");
        r.ratio = Some(r.median / base.median);
        r.note = format!("{:.2}x the trusted runner", r.median / trusted_row.median);
        r.extra
            .push(("spawn.sandbox_to_trusted", r.median / trusted_row.median));
        let deny = r.median;
        let mut x = row(
            SECTION,
            "SandboxRunner, explain mode",
            std::mem::take(&mut sx),
        )
        .keyed("spawn.sandbox_explain");
        x.ratio = Some(x.median / base.median);
        x.note = format!("{:.2}x the sandbox without", x.median / deny);
        x.extra.push(("spawn.explain_to_sandbox", x.median / deny));
        rows.push(r);
        rows.push(x);
        if eg.is_empty() {
            rows.push(not_built(
                SECTION,
                "SandboxRunner with an egress allowlist",
                "the backend did not prove the allowlist (P8)",
            ));
        } else {
            let mut e = row(
                SECTION,
                "SandboxRunner with an egress allowlist (netns + proxy)",
                std::mem::take(&mut eg),
            )
            .keyed("spawn.sandbox_egress");
            e.ratio = Some(e.median / base.median);
            e.note = format!("{:.2}x the sandbox without network", e.median / deny);
            e.extra.push(("spawn.egress_to_sandbox", e.median / deny));
            rows.push(e);
        }
    }
    // `cordon run`, with and without --explain (whether or not bwrap is
    // there to compare with).
    let bwrap = (!bw.is_empty()).then(|| summarize(bw.clone()).0);
    if cl.is_empty() {
        rows.push(not_built(
            SECTION,
            "cordon run -- /bin/true (whole command)",
            "CORDON_BENCH_CLI not set: run through `cargo xtask bench`",
        ));
    } else {
        let mut c = row(
            SECTION,
            "cordon run -- /bin/true (whole command, cached report)",
            std::mem::take(&mut cl),
        )
        .keyed("spawn.cli");
        c.ratio = Some(c.median / base.median);
        if let Some(bw) = bwrap {
            c.note = format!("{:.2}x bwrap", c.median / bw);
            c.extra.push(("spawn.cli_to_bwrap", c.median / bw));
        }
        let mut x = row(
            SECTION,
            "cordon run --explain -- /bin/true (whole command)",
            std::mem::take(&mut cx),
        )
        .keyed("spawn.cli_explain");
        x.ratio = Some(x.median / base.median);
        x.note = format!("{:.2}x without --explain", x.median / c.median);
        x.extra
            .push(("spawn.cli_explain_to_cli", x.median / c.median));
        let mut t = row(
            SECTION,
            "cordon run -t -- /bin/true (a pty of its own, relayed)",
            std::mem::take(&mut ct),
        )
        .keyed("spawn.cli_tty");
        t.ratio = Some(t.median / base.median);
        t.note = format!("{:.2}x without -t", t.median / c.median);
        t.extra.push(("spawn.cli_tty_to_cli", t.median / c.median));
        let mut v = row(
            SECTION,
            "cordon run --rw-review DIR --review discard -- /bin/true",
            std::mem::take(&mut cr),
        )
        .keyed("spawn.cli_review");
        v.ratio = Some(v.median / base.median);
        v.note = format!("{:.2}x without the layer", v.median / c.median);
        v.extra
            .push(("spawn.cli_review_to_cli", v.median / c.median));
        rows.push(c);
        rows.push(x);
        rows.push(t);
        rows.push(v);
    }
    if bw.is_empty() {
        rows.push(not_built(
            SECTION,
            "bwrap --unshare-all",
            "bubblewrap not installed; skipped",
        ));
    } else {
        let mut r = row(SECTION, "bwrap --ro-bind / / --unshare-all ...", bw).keyed("spawn.bwrap");
        r.ratio = Some(r.median / base.median);
        if let Some(sb) = rows
            .iter_mut()
            .find(|r| r.name.starts_with("SandboxRunner"))
        {
            if sb.median.is_finite() {
                sb.note = format!("{}; {:.2}x bwrap", sb.note, sb.median / r.median);
                sb.extra
                    .push(("spawn.sandbox_to_bwrap", sb.median / r.median));
            }
        }
        rows.push(r);
    }
    rows
}

/// What each isolation layer of the Linux backend costs: the same spawn
/// with the layers added one at a time, interleaved with plain `Command`.
/// These spawners bypass the gate on purpose (a backend without every
/// layer never passes it); they exist only to be measured.
pub async fn layers(plan: &Plan) -> Vec<Row> {
    use cordon_backend_linux::{Layers, LinuxBackend};
    use cordon_core::{RunnerConfig, Spawner};
    const S: &str = "1b. Linux backend, layer by layer";
    let base = Layers::BASE;
    let pid = Layers {
        pid_namespace: true,
        ..base
    };
    let ipc = Layers {
        ipc_namespace: true,
        ..pid
    };
    let mount = Layers {
        mount_namespace: true,
        ..ipc
    };
    let allowlist = Layers {
        seccomp_allowlist: true,
        ..mount
    };
    let limits = Layers {
        sandbox_limits: true,
        ..allowlist
    };
    let uts = Layers {
        uts_namespace: true,
        ..limits
    };
    let quotas = Layers {
        kernel_quotas: true,
        ..uts
    };
    debug_assert_eq!(
        Layers {
            own_uid: true,
            ..quotas
        },
        Layers::ALL
    );
    let steps: [(&str, &'static str, Layers); 9] = [
        (
            "user ns + rlimits + caps + Landlock + seccomp deny-list",
            "layers.userns_landlock_seccomp",
            base,
        ),
        ("+ PID namespace (init)", "layers.pid_namespace", pid),
        ("+ IPC namespace", "layers.ipc_namespace", ipc),
        (
            "+ mount namespace (read-only host, tmpfs scratch, /proc)",
            "layers.mount_namespace",
            mount,
        ),
        ("+ seccomp allowlist", "layers.seccomp_allowlist", allowlist),
        (
            "+ sandbox-wide limits (cgroup where allowed)",
            "layers.sandbox_limits",
            limits,
        ),
        ("+ UTS namespace (hostname)", "layers.uts_namespace", uts),
        (
            "+ kernel quotas (per-user-namespace maxima, rlimits)",
            "layers.kernel_quotas",
            quotas,
        ),
        (
            "+ a uid of its own (root: lease from the pool) = every layer",
            "layers.all",
            Layers::ALL,
        ),
    ];
    if !LinuxBackend::new().availability().is_available() {
        return vec![not_built(
            S,
            "every layer",
            "the Linux backend is unavailable here",
        )];
    }
    let mut spawners: Vec<Spawner> = steps
        .iter()
        .map(|(_, _, l)| {
            Spawner::confined(
                Arc::new(LinuxBackend::with_layers(*l)),
                RunnerConfig::default(),
            )
        })
        .collect();
    // Tier landlock with every layer, where this host can run it: the
    // same steps without the namespace ones.
    let landlock = LinuxBackend::new().with_tier(cordon_backend_linux::Tier::Landlock);
    let landlock_runs = landlock.availability().is_available();
    if landlock_runs {
        spawners.push(Spawner::confined(
            Arc::new(landlock),
            RunnerConfig::default(),
        ));
    }
    let mut plain = vec![];
    let mut forked = vec![];
    let mut samples: Vec<Vec<Duration>> = vec![vec![]; spawners.len()];
    for i in 0..plan.spawn_iters + 10 {
        let t = Instant::now();
        assert!(Command::new("/bin/true")
            .status()
            .expect("/bin/true")
            .success());
        let p = t.elapsed();
        let t = Instant::now();
        {
            use std::os::unix::process::CommandExt;
            let mut c = Command::new("/bin/true");
            // SAFETY: an empty hook; it makes std fork instead of posix_spawn.
            unsafe { c.pre_exec(|| Ok(())) };
            assert!(c.status().expect("/bin/true").success());
        }
        forked.push(t.elapsed());
        let mut these = vec![];
        for sp in &spawners {
            let t = Instant::now();
            let mut child = sp.spawn(&ChildSpec::new("/bin/true")).expect("spawn");
            assert!(child.wait().await.expect("wait").success());
            these.push(t.elapsed());
        }
        if i >= 10 {
            plain.push(p);
            for (s, t) in samples.iter_mut().zip(these) {
                s.push(t);
            }
        }
    }
    let base = row(S, "std::process::Command (baseline)", plain).keyed("layers.plain");
    let mut rows = vec![base.clone()];
    let mut f = row(S, "std Command with a pre_exec hook (fork)", forked).keyed("layers.fork_hook");
    f.ratio = Some(f.median / base.median);
    rows.push(f);
    let landlock_samples = landlock_runs.then(|| samples.pop()).flatten();
    let mut previous: Option<f64> = None;
    for ((name, key, _), v) in steps.iter().zip(samples) {
        let mut r = row(S, *name, v).keyed(key);
        r.ratio = Some(r.median / base.median);
        if let Some(p) = previous {
            r.note = format!("{:+.0} µs over the row above", r.median - p);
        }
        previous = Some(r.median);
        rows.push(r);
    }
    if let Some(v) = landlock_samples {
        let mut r =
            row(S, "tier landlock (no namespaces), every layer", v).keyed("layers.tier_landlock");
        r.ratio = Some(r.median / base.median);
        if let Some(all) = previous {
            r.note = format!("{:.2}x the row above (tier namespaces)", r.median / all);
        }
        rows.push(r);
    }
    rows
}

pub async fn suite(plan: &Plan, backend: Arc<dyn SandboxBackend>) -> Vec<Row> {
    const S: &str = "2. conformance suite";
    let mut total = vec![];
    let mut per: Vec<Vec<Duration>> = vec![vec![]; 7];
    let mut conforms = true;
    for _ in 0..plan.suite_runs {
        let t = Instant::now();
        let report = StandardSuite::new().run(backend.clone()).await;
        total.push(t.elapsed());
        conforms &= report.conforms();
        for (i, p) in report.probes.iter().enumerate().take(7) {
            per[i].push(Duration::from_secs_f64(p.duration_ms / 1000.0));
        }
    }
    let mut rows =
        vec![row(S, format!("whole suite ({})", backend.name()), total).keyed("suite.total")];
    rows[0].note = if conforms {
        "CONFORMS".into()
    } else {
        "NOT CONFORMING".into()
    };
    for (i, samples) in per.into_iter().enumerate() {
        if !samples.is_empty() {
            rows.push(row(S, format!("  P{}", i + 1), samples));
        }
    }
    rows
}

/// For `perf`/`farm-bench` comparisons of one layer: `n` spawns of
/// `/bin/true` under every layer but those named in `without`
/// (comma-separated field names of `Layers`; `none` for every layer).
/// These spawns bypass the gate, like [`layers`].
pub async fn profile_without(without: &str, n: u32) -> i32 {
    use cordon_backend_linux::{Layers, LinuxBackend};
    use cordon_core::{RunnerConfig, Spawner};
    let mut l = Layers::ALL;
    for name in without.split(',').filter(|w| !w.is_empty() && *w != "none") {
        let field = match name {
            "pid_namespace" => &mut l.pid_namespace,
            "ipc_namespace" => &mut l.ipc_namespace,
            "mount_namespace" => &mut l.mount_namespace,
            "sandbox_limits" => &mut l.sandbox_limits,
            "seccomp_allowlist" => &mut l.seccomp_allowlist,
            "own_uid" => &mut l.own_uid,
            "uts_namespace" => &mut l.uts_namespace,
            "kernel_quotas" => &mut l.kernel_quotas,
            other => {
                eprintln!("cordon-bench: no layer `{other}`");
                return 2;
            }
        };
        *field = false;
    }
    // `CORDON_BENCH_PROFILE_TIER=landlock`: tier landlock instead.
    let mut backend = LinuxBackend::with_layers(l);
    if std::env::var("CORDON_BENCH_PROFILE_TIER").as_deref() == Ok("landlock") {
        backend = backend.with_tier(cordon_backend_linux::Tier::Landlock);
    }
    let sp = Spawner::confined(Arc::new(backend), RunnerConfig::default());
    let (mut spawning, mut waiting) = (Duration::ZERO, Duration::ZERO);
    for _ in 0..n {
        let t = Instant::now();
        let mut child = sp.spawn(&ChildSpec::new("/bin/true")).expect("spawn");
        spawning += t.elapsed();
        let t = Instant::now();
        assert!(child.wait().await.expect("wait").success());
        waiting += t.elapsed();
    }
    eprintln!(
        "spawn {:.0} µs, wait {:.0} µs (means over {n})",
        spawning.as_secs_f64() * 1e6 / f64::from(n.max(1)),
        waiting.as_secs_f64() * 1e6 / f64::from(n.max(1))
    );
    0
}
