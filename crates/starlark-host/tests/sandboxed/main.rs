//! Sandboxed evaluation end to end: real worker processes started through
//! the real Linux backend, admitted by the real conformance suite (the
//! `cordon-star-test-worker` binary doubles as the probe child).
//!
//! Tests run one at a time (a global lock) so that fd and process counts
//! are meaningful.
#![allow(clippy::field_reassign_with_default)]
// The serialising lock is a std mutex held for a whole test on purpose:
// every test has its own runtime, so holding it across awaits is fine.
#![allow(clippy::await_holding_lock)]

#[path = "../integration/server.rs"]
#[allow(dead_code)]
mod server;

#[path = "../common/attacks.rs"]
mod attacks;
mod hostile;
mod protocol;
#[path = "../common/tiered.rs"]
mod tiered;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::Duration;

use cordon_conformance::{ProbeExecutable, StandardSuite};
use cordon_core::{RunnerConfig, SandboxRunner, SandboxUnavailable};
use cordon_starlark::*;
use serde_json::json;
use tiered::TieredHost;

pub const WORKER: &str = env!("CARGO_BIN_EXE_cordon-star-test-worker");

static SERIAL: Mutex<()> = Mutex::new(());

/// Runs tests one at a time.
pub fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// The admitted sandbox runner (the suite runs once per test binary).
pub fn sandbox() -> Result<SandboxRunner, SandboxUnavailable> {
    static RUNNER: OnceLock<Result<SandboxRunner, SandboxUnavailable>> = OnceLock::new();
    RUNNER
        .get_or_init(|| {
            std::thread::spawn(|| {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .unwrap();
                rt.block_on(SandboxRunner::new(
                    Arc::new(cordon_backend_linux::LinuxBackend::new()),
                    &StandardSuite::new()
                        .with_probe_executable(ProbeExecutable::Path(PathBuf::from(WORKER))),
                    RunnerConfig::default(),
                ))
            })
            .join()
            .unwrap()
        })
        .clone()
}

pub struct Env {
    pub perms: Arc<InMemoryPermissionStore>,
    pub secrets: Arc<InMemorySecretStore>,
    pub notifier: RecordingNotifier,
    pub providers: Arc<InMemoryProviderResolver>,
    /// Calls as [`TrustTier::Untrusted`]: always a sandboxed worker.
    pub sandboxed: Arc<TieredHost>,
}

/// The test worker config (no spare workers, the default, so process
/// counts are exact; spares have their own test).
pub fn worker_config() -> WorkerConfig {
    let c = WorkerConfig::new(WorkerProgram::path(WORKER));
    assert_eq!(c.pool.spare_workers, 0);
    c
}

pub fn env_with(limits: EvalLimits, config: WorkerConfig) -> Env {
    let perms = Arc::new(InMemoryPermissionStore::new());
    let secrets = Arc::new(InMemorySecretStore::new());
    let notifier = RecordingNotifier::new();
    let mut services = Services::new(Arc::new(InMemoryPackageStore::new()), perms.clone());
    services.secrets = Some(secrets.clone());
    services.notifier = Some(Arc::new(notifier.clone()));
    let providers = Arc::new(InMemoryProviderResolver::new());
    services.providers = Some(providers.clone());
    let runner = sandbox().unwrap_or_else(|e| panic!("the Linux backend must conform here: {e}"));
    let host = StarlarkHost::builder(services)
        .limits(limits)
        .sandbox(Ok(runner), config)
        .build()
        .unwrap();
    Env {
        perms,
        secrets,
        notifier,
        providers,
        sandboxed: Arc::new(TieredHost {
            host,
            tier: TrustTier::Untrusted,
        }),
    }
}

pub fn env(limits: EvalLimits) -> Env {
    env_with(limits, worker_config())
}

pub fn package(id: &str, perms: &[Permission], network: &[String], src: &str) -> Package {
    let mut m = Manifest::minimal(id, "main.star");
    m.permissions = perms.to_vec();
    m.network_access = network.to_vec();
    let mut sources = BTreeMap::new();
    sources.insert("main.star".to_owned(), src.to_owned());
    Package::new(m, sources)
}

impl Env {
    pub async fn call(&self, pkg: &Package, entry: &str) -> Result<CallOutcome, StarlarkHostError> {
        self.sandboxed
            .call_entry_point(pkg, entry, vec![], Default::default(), None)
            .await
    }

    /// Grants everything the package requests, as an operator who also
    /// approves the IP literals its `network_access` names (the tests'
    /// servers are on 127.0.0.1): `--allow-private` for each.
    pub fn grant_all(&self, pkg: &Package) {
        for p in &pkg.manifest.permissions {
            self.perms.grant(&pkg.id, *p);
        }
        for t in &pkg.manifest.network_access {
            let t: cordon_egress::HostPattern = t.parse().unwrap();
            if let Some(ip) = t.ip_literal() {
                self.perms
                    .allow_private(&pkg.id, cordon_egress::IpRange::single(ip));
            }
        }
    }
}

/// Open fds of this process.
pub fn fd_count() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

/// Live (non-zombie) children of this process.
pub fn live_children() -> Vec<u32> {
    let me = std::process::id();
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let name = e.file_name();
        let Some(pid) = name.to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else {
            continue;
        };
        let Some(rest) = stat.rfind(')').map(|i| &stat[i + 1..]) else {
            continue;
        };
        let mut f = rest.split_whitespace();
        let state = f.next().unwrap_or("");
        let ppid: u32 = f.next().and_then(|p| p.parse().ok()).unwrap_or(0);
        if ppid == me && state != "Z" && state != "X" {
            out.push(pid);
        }
    }
    out
}

/// Waits (briefly) until no live child is left; returns what is left.
pub async fn settle_children() -> Vec<u32> {
    for _ in 0..100 {
        let c = live_children();
        if c.is_empty() {
            return c;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    live_children()
}

pub async fn host_still_works(e: &Env) {
    let pkg = package("alive", &[], &[], "def ping(x = 1):\n    return x + 1\n");
    let out = e.call(&pkg, "ping").await.unwrap();
    assert_eq!(out.value, json!(2));
}

fn err_of(r: Result<CallOutcome, StarlarkHostError>) -> StarlarkHostError {
    match r {
        Ok(o) => panic!("expected an error, got {o:?}"),
        Err(e) => e,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_linux_backend_is_admitted_with_the_worker_binary_as_probe() {
    let _g = serial();
    let r = sandbox();
    assert!(r.is_ok(), "{}", r.unwrap_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_run_in_a_warm_reused_worker() {
    let _g = serial();
    let e = env(EvalLimits::default());
    let pkg = package(
        "warm",
        &[],
        &[],
        "print('loading')\nN = 3\ndef add(a, b = 2):\n    print('adding')\n    return {'sum': a + b, 'n': N}\n",
    );
    let ex = e.sandboxed.exec_package(&pkg, None).await.unwrap();
    assert_eq!(ex.output, "loading\n");
    assert_eq!(ex.functions, vec!["add".to_owned()]);
    assert_eq!(ex.globals["N"], json!(3));
    let mut kw = serde_json::Map::new();
    kw.insert("b".into(), json!(40));
    let out = e
        .sandboxed
        .call_entry_point(&pkg, "add", vec![json!(2)], kw, None)
        .await
        .unwrap();
    assert_eq!(out.value, json!({"sum": 42, "n": 3}));
    assert_eq!(out.output, "adding\n");
    assert!(out.cached, "exec_package left a warm worker");
    for _ in 0..5 {
        let out = e
            .sandboxed
            .call_entry_point(&pkg, "add", vec![json!(1)], Default::default(), None)
            .await
            .unwrap();
        assert!(out.cached);
    }
    let s = e.sandboxed.pool_stats();
    assert_eq!(s.started, 1, "{s:?}");
    assert_eq!(s.reused, 6, "{s:?}");
    assert_eq!(s.idle, 1);
    let err = err_of(e.call(&pkg, "nope").await);
    assert!(err.to_string().contains("defined functions: add"), "{err}");
    e.sandboxed.shutdown().await;
    assert!(settle_children().await.is_empty());
    assert!(e.sandboxed.worker_pids().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn worker_runs_as_nobody_with_no_files_and_no_network() {
    // Starlark has no file or socket API, so what is checked is from the
    // outside, by the host: the worker process runs as the sandbox uid,
    // with no_new_privs and a seccomp filter, in PID, mount, IPC and user
    // namespaces of its own, and its only granted dir is the private
    // staging dir.
    let _g = serial();
    let e = env(EvalLimits::default());
    let pkg = package("who", &[], &[], "def f():\n    return 1\n");
    e.call(&pkg, "f").await.unwrap();
    let pids = e.sandboxed.worker_pids();
    assert_eq!(pids.len(), 1);
    // The pid the pool holds is the sandbox's monitor; the worker program
    // is its descendant that carries `--instance`.
    let worker = program_under(pids[0]);
    // Two threads once the start-up warm-up thread is done: the protocol
    // reader and the evaluation thread.
    let mut status = String::new();
    for _ in 0..100 {
        status = std::fs::read_to_string(format!("/proc/{worker}/status")).unwrap();
        if status
            .lines()
            .any(|l| l.starts_with("Threads:") && l.ends_with("\t2"))
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let field = |key: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .map(|v| v.split_whitespace().collect::<Vec<_>>().join(" "))
            .unwrap_or_default()
    };
    // SAFETY: geteuid cannot fail.
    let host_uid = unsafe { libc::geteuid() };
    let uids: Vec<u32> = field("Uid:")
        .split(' ')
        .filter_map(|u| u.parse().ok())
        .collect();
    assert!(
        uids.len() == 4 && uids.iter().all(|&u| u == uids[0]),
        "{status}"
    );
    if host_uid == 0 {
        // A uid of its own, from the default pool.
        assert!(
            (2_000_000_000..=2_000_065_535).contains(&uids[0]),
            "{status}"
        );
    } else {
        assert_eq!(uids[0], host_uid, "{status}");
    }
    assert_eq!(field("NoNewPrivs:"), "1", "{status}");
    assert_eq!(field("Seccomp:"), "2", "{status}");
    assert_eq!(field("CapEff:"), "0000000000000000", "{status}");
    // Against the host's own values, not constants alone: inside a
    // container the host may already run under a filter with
    // no_new_privs, so the worker must hold more filters than the host.
    let mine = std::fs::read_to_string("/proc/self/status").unwrap();
    let own = |key: &str| -> u64 {
        mine.lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0)
    };
    let filters: u64 = field("Seccomp_filters:").parse().unwrap_or(0);
    assert!(
        filters > own("Seccomp_filters:"),
        "the worker has {filters} seccomp filters, the host {}: none is the sandbox's\n{status}",
        own("Seccomp_filters:")
    );
    for ns in ["pid", "mnt", "ipc", "user", "uts"] {
        let mine = std::fs::read_link(format!("/proc/self/ns/{ns}")).unwrap();
        let its = std::fs::read_link(format!("/proc/{worker}/ns/{ns}")).unwrap();
        assert_ne!(mine, its, "the worker shares the host's {ns} namespace");
    }
    assert_eq!(field("Threads:"), "2", "{status}");
    let kib = |key: &str| -> u64 {
        status
            .lines()
            .find(|l| l.starts_with(key))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap()
    };
    let (peak, rss) = (kib("VmPeak:"), kib("VmHWM:"));
    eprintln!(
        "warm worker: VmPeak {} MiB, VmHWM {} MiB",
        peak >> 10,
        rss >> 10
    );
    assert!(
        peak << 10 < WorkerLimits::default().memory_bytes / 2,
        "{peak} KiB"
    );
    let staged = e.sandboxed.staged_program().to_owned();
    let meta = std::fs::metadata(staged.parent().unwrap()).unwrap();
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(meta.permissions().mode() & 0o777, 0o755);
    e.sandboxed.shutdown().await;
}

/// The attempts of `cordon-star-test-worker --try-reach`, by exit code:
/// 64 plus 1 for a read, 2 for a connection, 4 for a created file.
const REACHED_NOTHING: i32 = 64;
const REACHED_ALL: i32 = REACHED_NOTHING | 1 | 2 | 4;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_reaches_no_host_file_and_no_host_socket() {
    // Starlark has no file or socket API, so the test worker program
    // tries instead, started exactly as the pool starts a worker: it reads
    // a world-readable file, connects to a listener on the host's
    // loopback and creates a file in a world-writable dir.
    use std::os::unix::fs::PermissionsExt;
    let _g = serial();
    let tmp = tempfile::tempdir().unwrap();
    let mode = |p: &std::path::Path, m: u32| {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).unwrap()
    };
    mode(tmp.path(), 0o755);
    let secret = tmp.path().join("secret");
    std::fs::write(&secret, "not for the worker").unwrap();
    mode(&secret, 0o644);
    let drop_dir = tmp.path().join("drop");
    std::fs::create_dir(&drop_dir).unwrap();
    mode(&drop_dir, 0o777);
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let try_args: Vec<std::ffi::OsString> = vec![
        "--try-reach".into(),
        secret.clone().into(),
        listener.local_addr().unwrap().to_string().into(),
        drop_dir.clone().into(),
    ];
    let made = || std::fs::read_dir(&drop_dir).unwrap().count();

    // Control: unconfined, every attempt works, so the checks below can
    // see one that does.
    let status = std::process::Command::new(WORKER)
        .args(&try_args)
        .status()
        .unwrap();
    assert_eq!(status.code(), Some(REACHED_ALL), "the unconfined control");
    assert!(listener.accept().is_ok(), "the control's connection");
    assert_eq!(made(), 1, "the control's file");
    std::fs::remove_dir_all(&drop_dir).unwrap();
    std::fs::create_dir(&drop_dir).unwrap();
    mode(&drop_dir, 0o777);

    let mut config = worker_config();
    config.program.args.splice(0..0, try_args);
    let e = env_with(EvalLimits::default(), config);
    let pkg = package("reach", &[], &[], "def f():\n    return 1\n");
    let err = e.call(&pkg, "f").await.unwrap_err().to_string();
    assert!(
        err.contains(&format!("exited with code {REACHED_NOTHING};")),
        "the worker reached something (exit code 64 + 1 read, 2 connected, 4 wrote): {err}"
    );
    assert!(
        matches!(listener.accept(), Err(ref x) if x.kind() == std::io::ErrorKind::WouldBlock),
        "a worker connected to the host's listener"
    );
    assert_eq!(made(), 0, "a worker created a file on the host");
    e.sandboxed.shutdown().await;
}

/// The descendant of `root` whose argv has `--instance` (the worker
/// program under the sandbox's monitor and init).
fn program_under(root: u32) -> u32 {
    let parent_of = |pid: u32| -> Option<u32> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        stat.rsplit_once(')')?
            .1
            .split_whitespace()
            .nth(1)?
            .parse()
            .ok()
    };
    let found: Vec<u32> = std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .map(|c| c.split(|b| *b == 0).any(|a| a == b"--instance"))
                .unwrap_or(false)
        })
        .filter(|pid| {
            let mut p = *pid;
            for _ in 0..8 {
                if p == root {
                    return true;
                }
                match parent_of(p) {
                    Some(q) if q > 1 => p = q,
                    _ => return false,
                }
            }
            false
        })
        .collect();
    assert_eq!(found.len(), 1, "worker program under {root}: {found:?}");
    found[0]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tighter_memory_limit_still_runs_normal_packages() {
    let _g = serial();
    let mut c = worker_config();
    c.limits.memory_bytes = 256 << 20;
    let e = env_with(EvalLimits::default(), c);
    let pkg = package(
        "tight",
        &[],
        &[],
        "def main():\n    x = [i * i for i in range(100000)]\n    return len(json.encode(x))\n",
    );
    assert!(e.call(&pkg, "main").await.unwrap().value.as_u64().unwrap() > 100000);
    let pkg = package(
        "tight-oom",
        &[],
        &[],
        // `list` called through a value (not by its name) is not
        // size-checked before it allocates (a gap the crate README lists):
        // the worker's memory limit is what stops it.
        "x = [list][0](range(40000000))\ndef main():\n    return 1\n",
    );
    let err = err_of(e.call(&pkg, "main").await);
    assert!(
        matches!(
            err,
            StarlarkHostError::Limit {
                kind: LimitKind::Memory,
                ..
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("256 MiB"), "{err}");
    e.sandboxed.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_scripts_end_in_clear_errors_without_leaks() {
    let _g = serial();
    let mut limits = EvalLimits::default();
    limits.timeout = Duration::from_secs(3);
    let e = env(limits);
    // Warm-up: tokio's SIGCHLD pipe etc. exist before the baseline.
    host_still_works(&e).await;
    e.sandboxed.shutdown().await;
    settle_children().await;
    let fds_before = fd_count();

    let cases: Vec<(&str, String, &str)> = vec![
        (
            "ticks",
            "def main():\n    for i in range(100000000):\n        pass\n".into(),
            "Ticks limit",
        ),
        (
            "recursion",
            "def f(n):\n    return f(n + 1)\ndef main():\n    return f(0)\n".into(),
            "CallStack limit",
        ),
        (
            "heap",
            "def main():\n    x = []\n    for i in range(10000000):\n        x.append([i, i, i, i])\n    return len(x)\n".into(),
            "Heap limit",
        ),
        (
            "print-flood",
            "def main():\n    for i in range(1000000):\n        print('spam spam spam spam')\n".into(),
            "Output limit",
        ),
        (
            // Refused by the size check before the compiler could fold it.
            "huge-string-folding",
            "x = 'a' * 2000000000\ndef main():\n    return len(x)\n".into(),
            "Heap limit",
        ),
        (
            "unchecked-allocation",
            "x = [list][0](range(300000000))\ndef main():\n    return len(x)\n".into(),
            "exceeded its memory limit",
        ),
        (
            "nested-brackets",
            format!("x = {}1{}\ndef main():\n    return x\n", "[".repeat(100_000), "]".repeat(100_000)),
            "Nesting limit",
        ),
        (
            // The interpreter's repr of structs recurses without a limit
            // (its `json.encode` did too; Cordon's is bounded now). `str`
            // by name is refused before it recurses...
            "deep-struct-str",
            "def main():\n    x = None\n    for i in range(200000):\n        x = struct(a = x)\n    return str(x)\n".into(),
            "Nesting limit",
        ),
        (
            // ...but not through a value: the native stack overflows, and
            // the worker's crash says so.
            "deep-struct-repr",
            "def main():\n    x = None\n    for i in range(200000):\n        x = struct(a = x)\n    return [str][0](x)\n".into(),
            "overflowed its native stack",
        ),
        (
            "doubling",
            "def main():\n    x = 'a' * 1000000\n    for i in range(40):\n        x = x + x\n    return len(x)\n".into(),
            "limit",
        ),
    ];
    for (name, src, expect) in cases {
        let pkg = package(name, &[], &[], &src);
        let err = err_of(e.call(&pkg, "main").await);
        let msg = err.to_string();
        eprintln!("{name}: {msg}");
        assert!(msg.contains(expect), "{name}: {msg}");
        assert!(msg.contains(name), "{name}: error names the package: {msg}");
        host_still_works(&e).await;
    }
    e.sandboxed.shutdown().await;
    assert!(settle_children().await.is_empty(), "no worker left behind");
    assert!(e.sandboxed.worker_pids().is_empty());
    assert_eq!(fd_count(), fds_before, "no fd leaked");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deadline_and_cancellation() {
    let _g = serial();
    let mut limits = EvalLimits::default();
    limits.timeout = Duration::from_millis(400);
    limits.max_ticks = u64::MAX / 2;
    let e = env(limits);
    let pkg = package(
        "spin",
        &[],
        &[],
        "def main():\n    for i in range(1000000000):\n        pass\ndef ok():\n    return 1\n",
    );
    let err = err_of(e.call(&pkg, "main").await);
    assert!(
        matches!(
            err,
            StarlarkHostError::Limit {
                kind: LimitKind::Time,
                ..
            }
        ),
        "{err}"
    );
    // The worker stopped by itself and stays usable.
    assert_eq!(e.call(&pkg, "ok").await.unwrap().value, json!(1));

    let cancel = CancelToken::new();
    let c2 = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(100)).await;
        c2.cancel();
    });
    let err = e
        .sandboxed
        .call_entry_point_with_cancel(&pkg, "main", vec![], Default::default(), None, cancel)
        .await
        .unwrap_err();
    assert!(matches!(err, StarlarkHostError::Cancelled { .. }), "{err}");
    assert_eq!(e.call(&pkg, "ok").await.unwrap().value, json!(1));
    e.sandboxed.shutdown().await;
    assert!(settle_children().await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_mid_call_is_a_clean_error_and_the_next_call_works() {
    let _g = serial();
    let mut limits = EvalLimits::default();
    limits.max_ticks = u64::MAX / 2;
    let e = env(limits);
    let pkg = package(
        "victim",
        &[],
        &[],
        "def main():\n    for i in range(1000000000):\n        pass\ndef ok():\n    return 'fine'\n",
    );
    e.call(&pkg, "ok").await.unwrap();
    let s2 = e.sandboxed.clone();
    let p2 = pkg.clone();
    let call = tokio::spawn(async move {
        s2.call_entry_point(&p2, "main", vec![], Default::default(), None)
            .await
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let pids = e.sandboxed.worker_pids();
    assert_eq!(pids.len(), 1, "{pids:?}");
    // SAFETY: kill with a pid we own.
    unsafe {
        libc::kill(pids[0] as i32, libc::SIGKILL);
    }
    let err = call.await.unwrap().unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains("victim") && msg.contains("signal 9"), "{msg}");
    assert_eq!(e.call(&pkg, "ok").await.unwrap().value, json!("fine"));
    assert_eq!(e.sandboxed.pool_stats().started, 2);
    e.sandboxed.shutdown().await;
    assert!(settle_children().await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn module_calls_are_brokered_by_the_host() {
    let _g = serial();
    let srv = server::start().await;
    let e = env(EvalLimits::default());
    let base = srv.base();
    let pkg = package(
        "fetch",
        &[
            Permission::ApiHttp,
            Permission::SecretsRead,
            Permission::NotificationsSend,
        ],
        &[format!("http://127.0.0.1:{}", srv.port)],
        &format!(
            r#"
def main():
    r = http.get("{base}/hello")
    j = http.post("{base}/echo", json = {{"k": 1}}).json()
    notifications.send("t", "b")
    return {{"status": r.status, "body": r.body, "method": j["method"], "secret": secrets.get("tok")}}

def outside():
    return http.get("http://127.0.0.1:1/").status
"#
        ),
    );
    e.grant_all(&pkg);
    e.secrets.set("fetch", "tok", "s3cret");
    let out = e.call(&pkg, "main").await.unwrap();
    assert_eq!(
        out.value,
        json!({"status": 200, "body": "hello", "method": "POST", "secret": "s3cret"})
    );
    assert_eq!(srv.hits(), 2);
    let sent = e.notifier.sent();
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].package_id, "fetch", "attributed by the host");
    // The allowlist is the host's: a port not listed is refused.
    let err = err_of(e.call(&pkg, "outside").await);
    assert!(err.to_string().contains("network access denied"), "{err}");
    // Not granted → module absent in the worker's globals.
    let pkg2 = package(
        "ungranted",
        &[Permission::ApiHttp],
        std::slice::from_ref(&base),
        "def main():\n    return http.get('http://127.0.0.1/')\n",
    );
    let err = err_of(e.call(&pkg2, "main").await);
    assert!(err.to_string().contains("http"), "{err}");
    e.sandboxed.shutdown().await;
}

/// A package in the seed's style (a secret read at top level) runs in a
/// worker too: its top level runs per call, and its module calls go to the
/// host like any other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn top_level_module_calls_are_brokered_per_call_in_a_worker() {
    let _g = serial();
    let e = env(EvalLimits::default());
    let pkg = package(
        "seed-style",
        &[Permission::SecretsRead],
        &[],
        "TOKEN = secrets.get('tok')\nprint('top', TOKEN)\ndef main():\n    return TOKEN\n",
    );
    e.grant_all(&pkg);
    e.secrets.set("seed-style", "tok", "one");
    let first = e.call(&pkg, "main").await.unwrap();
    assert_eq!(
        (first.value.clone(), first.output.as_str()),
        (json!("one"), "top one\n")
    );
    e.secrets.set("seed-style", "tok", "two");
    let second = e.call(&pkg, "main").await.unwrap();
    assert_eq!(second.value, json!("two"), "the top level ran again");
    assert_eq!(
        e.sandboxed.pool_stats().started,
        1,
        "in the same warm worker"
    );
    e.sandboxed.shutdown().await;
}

/// What a failing call printed comes back with its error from a worker
/// too (an `output` frame before the `error` frame).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_call_returns_what_it_printed_from_a_worker() {
    let _g = serial();
    let mut limits = EvalLimits::default();
    limits.max_ticks = 100_000;
    let e = env(limits);
    let pkg = package("prints", &[], &[], tiered::PRINTS_THEN_FAILS);
    let top = package("top-fails", &[], &[], "print('top ran')\nfail('at load')\n");
    tiered::failures_keep_their_output(&e.sandboxed, &pkg, &top).await;
    e.sandboxed.shutdown().await;
}

/// Entry-point values through a worker: the same as in process.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn entry_point_values_are_json_with_exact_ints_in_a_worker() {
    let _g = serial();
    let e = env(EvalLimits::default());
    let pkg = package("values", &[], &[], tiered::VALUES);
    tiered::entry_values_cross_json_exactly(&e.sandboxed, &pkg).await;
    e.sandboxed.shutdown().await;
}

/// In a worker too, a package with `provider` gets the provider's timeout
/// on top of its own: a 2 s model call completes under a 1 s script
/// timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_model_is_not_cut_at_the_scripts_deadline_in_a_worker() {
    let _g = serial();
    let srv = server::start().await;
    let mut limits = EvalLimits::default();
    limits.timeout = Duration::from_secs(1);
    let e = env(limits);
    let mut pkg = package(
        "slow-model",
        &[Permission::ProviderComplete],
        &[],
        "def ask():\n    return provider.complete('hi').content\n",
    );
    pkg.manifest.requires_provider = Some(ProviderRequirement::default());
    e.grant_all(&pkg);
    e.providers.set_host_default(ProviderConfig {
        base_url: format!("{}/after-2/v1", srv.base()),
        api_key: ApiKey::new("sk-host"),
        model: "m".into(),
    });
    let out = e
        .sandboxed
        .call_entry_point(
            &pkg,
            "ask",
            vec![],
            Default::default(),
            Some(&RunContext::for_user("u")),
        )
        .await
        .unwrap();
    assert_eq!(out.value, json!("echo: hi"));
    e.sandboxed.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn starlark_host_runs_untrusted_only_in_workers_and_never_falls_back() {
    let _g = serial();
    let services = || {
        Services::new(
            Arc::new(InMemoryPackageStore::new()),
            Arc::new(InMemoryPermissionStore::new()),
        )
    };
    let pkg = package("iso", &[], &[], "def f():\n    return 7\n");
    let f = || Call::new("f");

    let host = StarlarkHost::builder(services())
        .sandbox(sandbox(), worker_config())
        .trusted_isolation(Isolation::InProcess)
        .build()
        .unwrap();
    let pool = host.worker_pool().unwrap();
    // Untrusted: in a worker (the pool starts one).
    assert_eq!(
        host.call(&pkg, TrustTier::Untrusted, f())
            .await
            .unwrap()
            .value,
        json!(7)
    );
    assert_eq!(pool.pool_stats().started, 1);
    // Trusted: in process, as this host chose (no new worker).
    assert_eq!(
        host.call(&pkg, TrustTier::Trusted, f())
            .await
            .unwrap()
            .value,
        json!(7)
    );
    assert_eq!(pool.pool_stats().started, 1);
    assert_eq!(host.cache_stats().misses, 1);
    host.shutdown().await;
    // Trusted, with the default isolation: an unconfined worker (no
    // sandboxed one, not in process), which holds its memory limit.
    let default = StarlarkHost::builder(services())
        .sandbox(sandbox(), worker_config())
        .build()
        .unwrap();
    assert_eq!(
        default
            .call(&pkg, TrustTier::Trusted, f())
            .await
            .unwrap()
            .value,
        json!(7)
    );
    assert_eq!(default.worker_pool().unwrap().pool_stats().started, 0);
    assert_eq!(default.cache_stats().misses, 0);
    let bomb = package(
        "range-bomb",
        &[],
        &[],
        "def f():\n    return len([list][0](range(200000000)))\n",
    );
    let err = default
        .call(&bomb, TrustTier::Trusted, f())
        .await
        .unwrap_err();
    assert!(
        matches!(
            err.error,
            StarlarkHostError::Limit {
                kind: LimitKind::Memory,
                ..
            }
        ),
        "{err}"
    );
    default.shutdown().await;
    // Trusted, on a host that sends trusted packages to the pool too.
    let all_sandboxed = StarlarkHost::builder(services())
        .sandbox(sandbox(), worker_config())
        .trusted_isolation(Isolation::Sandboxed)
        .build()
        .unwrap();
    assert_eq!(
        all_sandboxed
            .call(&pkg, TrustTier::Trusted, f())
            .await
            .unwrap()
            .value,
        json!(7)
    );
    assert_eq!(all_sandboxed.worker_pool().unwrap().pool_stats().started, 1);
    assert_eq!(all_sandboxed.cache_stats().misses, 0);
    all_sandboxed.shutdown().await;

    // No conforming backend: the no-op backend fails the suite.
    let refused = SandboxRunner::new(
        Arc::new(cordon_backend_noop_like::Unavailable),
        &StandardSuite::new().with_probe_executable(ProbeExecutable::Path(WORKER.into())),
        RunnerConfig::default(),
    )
    .await;
    assert!(refused.is_err());
    let host = StarlarkHost::builder(services())
        .sandbox(refused, worker_config())
        .build()
        .unwrap();
    let err = host
        .call(&pkg, TrustTier::Untrusted, f())
        .await
        .unwrap_err();
    assert!(
        matches!(err.error, StarlarkHostError::SandboxUnavailable { .. }),
        "{err}"
    );
    let msg = err.to_string();
    assert!(msg.contains("no conforming sandbox"), "{msg}");
    assert!(msg.contains("iso"), "{msg}");
    // Trusted packages still run in process.
    assert_eq!(
        host.call(&pkg, TrustTier::Trusted, f())
            .await
            .unwrap()
            .value,
        json!(7)
    );
}

/// A backend that reports itself unavailable.
mod cordon_backend_noop_like {
    use cordon_core::{Availability, SandboxBackend, SandboxPolicy, WrapError};

    pub struct Unavailable;

    impl SandboxBackend for Unavailable {
        fn name(&self) -> &str {
            "unavailable-for-test"
        }
        fn availability(&self) -> Availability {
            Availability::Unavailable {
                reason: "test backend".into(),
            }
        }
        fn wrap(
            &self,
            _cmd: &mut cordon_core::ChildCommand,
            _policy: &SandboxPolicy,
        ) -> Result<cordon_core::WrapResources, WrapError> {
            Err(WrapError::new("unavailable-for-test", "never"))
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pool_is_bounded_retires_worn_and_idle_workers() {
    let _g = serial();
    let mut c = worker_config();
    c.pool.max_idle_per_package = 1;
    c.pool.max_calls_per_worker = 3;
    c.pool.idle_timeout = Duration::from_millis(300);
    let e = env_with(EvalLimits::default(), c);
    let pkg = package("pool", &[], &[], "def f(x = 0):\n    return x\n");
    // Two concurrent calls need two workers; only one is kept idle.
    let (a, b) = tokio::join!(e.call(&pkg, "f"), e.call(&pkg, "f"));
    a.unwrap();
    b.unwrap();
    let s = e.sandboxed.pool_stats();
    assert_eq!((s.started, s.idle, s.retired), (2, 1, 1), "{s:?}");
    // The kept worker served 1 call; 2 more wear it out (max 3 calls).
    e.call(&pkg, "f").await.unwrap();
    e.call(&pkg, "f").await.unwrap();
    let s = e.sandboxed.pool_stats();
    assert_eq!((s.started, s.idle, s.retired), (2, 0, 2), "{s:?}");
    e.call(&pkg, "f").await.unwrap();
    assert_eq!(e.sandboxed.pool_stats().started, 3);
    // The idle sweeper kills it after the idle timeout.
    tokio::time::sleep(Duration::from_millis(900)).await;
    let s = e.sandboxed.pool_stats();
    assert_eq!((s.idle, s.retired), (0, 3), "{s:?}");
    assert!(settle_children().await.is_empty());
    assert!(e.sandboxed.worker_pids().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_a_call_kills_its_worker() {
    let _g = serial();
    let mut limits = EvalLimits::default();
    limits.max_ticks = u64::MAX / 2;
    let e = env(limits);
    let pkg = package(
        "dropped",
        &[],
        &[],
        "def main():\n    for i in range(1000000000):\n        pass\n",
    );
    let r = tokio::time::timeout(Duration::from_millis(300), e.call(&pkg, "main")).await;
    assert!(r.is_err(), "timed out");
    assert!(e.sandboxed.worker_pids().is_empty());
    assert!(
        settle_children().await.is_empty(),
        "the dropped worker was killed"
    );
    host_still_works(&e).await;
    e.sandboxed.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_package_from_disk_runs_in_a_worker_with_only_its_grants() {
    let _g = serial();
    let srv = server::start().await;
    let dir = tempfile::tempdir().unwrap();
    let src =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/starlark/hello");
    std::fs::create_dir_all(dir.path().join("lib")).unwrap();
    for f in ["main.star", "lib/format.star"] {
        std::fs::copy(src.join(f), dir.path().join(f)).unwrap();
    }
    let toml = std::fs::read_to_string(src.join("package.toml"))
        .unwrap()
        .replace(
            "http://127.0.0.1:8080",
            &format!("http://127.0.0.1:{}", srv.port),
        );
    std::fs::write(dir.path().join("package.toml"), toml).unwrap();
    let args = vec![json!(srv.base()), json!("/json")];
    // A package loaded from disk, granted explicitly (as `cordon star run`
    // does it).
    let pkg = load_package_from_path(dir.path()).unwrap();
    let e = env(EvalLimits::default());
    e.perms.grant(&pkg.id, Permission::ApiHttp);
    e.perms.grant(&pkg.id, Permission::SecretsRead);
    // Its server is on this host's loopback: the operator approves that.
    e.perms
        .allow_private(&pkg.id, "127.0.0.1/32".parse().unwrap());
    e.secrets.set(&pkg.id, "greeting_token", "t");
    let exec = e.sandboxed.exec_package(&pkg, None).await.unwrap();
    let call = e
        .sandboxed
        .call_entry_point(&pkg, "main", args.clone(), Default::default(), None)
        .await
        .unwrap();
    e.sandboxed.shutdown().await;
    assert_eq!(exec.modules, vec!["secrets".to_owned(), "http".to_owned()]);
    assert_eq!(call.value["status"], json!(200));
    assert_eq!(srv.hits(), 1);
    assert!(
        settle_children().await.is_empty(),
        "workers reaped after shutdown"
    );
    // Without a conforming sandbox: refused, not run in process.
    let refused: Result<SandboxRunner, SandboxUnavailable> = Err(
        match SandboxRunner::new(
            Arc::new(cordon_backend_noop_like::Unavailable),
            &StandardSuite::new(),
            RunnerConfig::default(),
        )
        .await
        {
            Err(e) => e,
            Ok(_) => unreachable!(),
        },
    );
    let mut services = Services::new(
        Arc::new(InMemoryPackageStore::new()),
        Arc::new(InMemoryPermissionStore::new()),
    );
    services.secrets = Some(Arc::new(InMemorySecretStore::new()));
    let host = StarlarkHost::builder(services)
        .sandbox(refused, worker_config())
        .build()
        .unwrap();
    let err = host
        .call(&pkg, TrustTier::Untrusted, Call::new("main").args(args))
        .await
        .unwrap_err();
    assert!(
        matches!(err.error, StarlarkHostError::SandboxUnavailable { .. }),
        "{err}"
    );
    assert_eq!(srv.hits(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spare_worker_serves_the_next_new_package() {
    let _g = serial();
    let mut c = worker_config();
    c.pool.spare_workers = 1;
    let e = env_with(EvalLimits::default(), c);
    let a = package("spare-a", &[], &[], "def f():\n    return 'a'\n");
    let b = package("spare-b", &[], &[], "def f():\n    return 'b'\n");
    assert_eq!(e.call(&a, "f").await.unwrap().value, json!("a"));
    assert!(e.sandboxed.wait_for_spares(1, Duration::from_secs(5)).await);
    let s = e.sandboxed.pool_stats();
    assert_eq!((s.started, s.idle, s.spares), (2, 1, 1), "{s:?}");
    // A new package takes the spare (no spawn on its path), and a new
    // spare is started in the background.
    let out = e.call(&b, "f").await.unwrap();
    assert_eq!(out.value, json!("b"));
    assert!(!out.cached);
    assert!(e.sandboxed.wait_for_spares(1, Duration::from_secs(5)).await);
    let s = e.sandboxed.pool_stats();
    assert_eq!((s.started, s.idle, s.spares), (3, 2, 1), "{s:?}");
    // Shutdown kills spares too.
    e.sandboxed.shutdown().await;
    assert_eq!(e.sandboxed.pool_stats().spares, 0);
    assert!(e.sandboxed.worker_pids().is_empty());
    assert!(settle_children().await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn worker_limits_above_the_runners_ceilings_are_refused_not_clamped() {
    let _g = serial();
    let mut config = worker_config();
    // The runner's default memory ceiling is 1 GiB.
    config.limits.memory_bytes = 2 << 30;
    let err = StarlarkHost::builder(Services::new(
        Arc::new(InMemoryPackageStore::new()),
        Arc::new(InMemoryPermissionStore::new()),
    ))
    .sandbox(sandbox(), config)
    .build()
    .unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains("memory_bytes") && msg.contains("ceiling"),
        "{msg}"
    );
    assert!(settle_children().await.is_empty(), "no worker was started");
}
