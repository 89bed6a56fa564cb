//! Starlark: a trivial entry-point call in process (cached), re-executing
//! the script per call (the seed's model), through a warm and a cold
//! sandboxed worker; a compute-bound loop with limits on and with the bare
//! interpreter; worker and host memory.

use std::sync::Arc;
use std::time::{Duration, Instant};

use cordon_core::{ChildSpec, Runner as _, SandboxRunner, TrustTier};
use cordon_starlark::internals::{compile_package, run_on_eval_thread, DenyAllCalls, ModuleSet};
use cordon_starlark::{
    Call, CancelToken, EvalLimits, InMemoryPackageStore, InMemoryPermissionStore,
    InMemorySecretStore, Isolation, Package, Permission, Services, StarlarkHost, StarlarkHostError,
    WorkerConfig, WorkerProgram,
};

use crate::proc_stats::{rollup_kib, status_kib};
use crate::stats::{figure, not_built, row, summarize, Row};
use crate::Plan;

const S: &str = "4. Starlark: trivial entry point";
const C: &str = "4b. Starlark: compute-bound loop (1 000 000 iterations)";
const M: &str = "5. memory";

const TRIVIAL: &str = "CONFIG = {'name': 'bench'}\n\ndef ping():\n    return 1\n";
const SPIN: &str =
    "def spin():\n    t = 0\n    for i in range(1000000):\n        t += i\n    return t\n";

/// The same package written both ways: a secret read at the top level (the
/// seed's style: the top level runs again in every call) and in the entry
/// point (compiled once, cached).
const SEED_STYLE: &str = "TOKEN = secrets.get('t')\n\ndef ping():\n    return TOKEN\n";
const CALL_STYLE: &str = "def ping():\n    return secrets.get('t')\n";

fn services() -> Services {
    let perms = Arc::new(InMemoryPermissionStore::new());
    let secrets = Arc::new(InMemorySecretStore::new());
    for id in ["bench-seed-style", "bench-call-style"] {
        perms.grant(id, Permission::SecretsRead);
        secrets.set(id, "t", "x");
    }
    let mut s = Services::new(Arc::new(InMemoryPackageStore::new()), perms);
    s.secrets = Some(secrets);
    s
}

/// A package requesting `secrets.read`.
fn with_secrets(id: &str, src: &str) -> Package {
    let mut p = Package::from_script(id, src.to_string());
    p.manifest.permissions = vec![Permission::SecretsRead];
    p
}

/// A host with only in-process evaluation (the bench's trusted packages).
fn trusted_host(limits: &EvalLimits) -> StarlarkHost {
    StarlarkHost::builder(services())
        .limits(limits.clone())
        .trusted_isolation(Isolation::InProcess)
        .build()
        .expect("host")
}

/// A host whose worker pool runs the bench's untrusted packages.
fn pool_host(
    sandbox: &SandboxRunner,
    limits: &EvalLimits,
    config: WorkerConfig,
) -> Result<StarlarkHost, String> {
    StarlarkHost::builder(services())
        .limits(limits.clone())
        .sandbox(Ok(sandbox.clone()), config)
        .build()
        .map_err(|e| e.to_string())
}

/// The worker binary: `cordon-star-worker` as `cargo xtask bench` builds
/// it (`CORDON_BENCH_WORKER`), else this harness itself (which dispatches
/// a worker too, but links everything the bench does).
fn worker_program() -> std::io::Result<WorkerProgram> {
    match std::env::var_os("CORDON_BENCH_WORKER") {
        Some(path) => Ok(WorkerProgram::path(path)),
        None => WorkerProgram::current_exe(),
    }
}

/// Which binary [`worker_program`] runs, for the memory rows' notes.
fn worker_binary_note() -> &'static str {
    if std::env::var_os("CORDON_BENCH_WORKER").is_some() {
        "cordon-star-worker"
    } else {
        "the bench binary (CORDON_BENCH_WORKER not set: run through `cargo xtask bench`)"
    }
}

/// One call of `entry` with no arguments.
async fn call(host: &StarlarkHost, pkg: &Package, tier: TrustTier, entry: &str) {
    host.call(pkg, tier, Call::new(entry))
        .await
        .unwrap_or_else(|e| panic!("{entry}: {e}"));
}

async fn timed<F, T>(f: F) -> Duration
where
    F: std::future::Future<Output = T>,
{
    let t = Instant::now();
    f.await;
    t.elapsed()
}

pub async fn bench(plan: &Plan, sandbox: Option<&SandboxRunner>) -> Vec<Row> {
    let mut rows = vec![];
    let limits = EvalLimits::default();
    let runner = trusted_host(&limits);
    let pkg = Package::from_script("bench-trivial", TRIVIAL.to_string());
    let trusted = TrustTier::Trusted;

    // In process, cached. Warmed up well first: the spawn and scale
    // sections before this one leave exits, reaping and cgroup removal
    // behind, which made the first row's median ten times the next ones'.
    for _ in 0..plan.star_iters.max(200) {
        call(&runner, &pkg, trusted, "ping").await;
    }
    let mut cached = Vec::with_capacity(plan.star_iters);
    for _ in 0..plan.star_iters {
        cached.push(timed(call(&runner, &pkg, trusted, "ping")).await);
    }
    let mut base =
        row(S, "in-process, cached package (baseline)", cached).keyed("starlark.in_process");
    let bare = bare_call(plan);
    base.note = format!("{:.2}x a bare interpreter call", base.median / bare.median);
    base.extra
        .push(("starlark.in_process_to_bare", base.median / bare.median));
    rows.push(base.clone());
    rows.push(bare);

    // A module call at top level (seed style) against the same call in the
    // entry point: the per-call top level's cost.
    for (id, src, name, key) in [
        (
            "bench-call-style",
            CALL_STYLE,
            "in-process, secrets.get in the entry point (cached)",
            "starlark.call_style",
        ),
        (
            "bench-seed-style",
            SEED_STYLE,
            "in-process, secrets.get at top level (runs per call)",
            "starlark.seed_style",
        ),
    ] {
        let p = with_secrets(id, src);
        call(&runner, &p, trusted, "ping").await;
        let mut v = Vec::with_capacity(plan.star_iters);
        for _ in 0..plan.star_iters {
            v.push(timed(call(&runner, &p, trusted, "ping")).await);
        }
        let mut r = row(S, name, v).keyed(key);
        r.ratio = Some(r.median / base.median);
        rows.push(r);
    }

    // Re-executing the whole script per call.
    let mut reexec = Vec::with_capacity(plan.star_iters);
    for _ in 0..plan.star_iters {
        let (p, l) = (pkg.clone(), limits.clone());
        reexec.push(
            timed(run_on_eval_thread(l.eval_stack_bytes, move || {
                let cancel = CancelToken::new();
                let compiled = compile_package(&p, ModuleSet::NONE, &l, &cancel)
                    .map_err(|(e, _)| StarlarkHostError::from(e))?;
                compiled
                    .call(
                        "ping",
                        &[],
                        &Default::default(),
                        Arc::new(DenyAllCalls),
                        &l,
                        Instant::now() + l.timeout,
                        &cancel,
                    )
                    .map_err(|(e, _)| StarlarkHostError::from(e))
            }))
            .await,
        );
    }
    let mut r =
        row(S, "in-process, re-executing the script per call", reexec).keyed("starlark.reexec");
    r.ratio = Some(r.median / base.median);
    rows.push(r);

    match sandbox {
        None => rows.push(not_built(
            S,
            "sandboxed worker",
            "no conforming native backend",
        )),
        Some(sandbox) => rows.extend(worker_rows(plan, sandbox, &limits, &pkg, base.median).await),
    }

    rows.extend(compute(plan, &runner).await);
    rows
}

async fn worker_rows(
    plan: &Plan,
    sandbox: &SandboxRunner,
    limits: &EvalLimits,
    pkg: &Package,
    base: f64,
) -> Vec<Row> {
    let mut rows = vec![];
    let program = match worker_program() {
        Ok(p) => p,
        Err(e) => {
            return vec![not_built(
                S,
                "sandboxed worker",
                format!("no worker program: {e}"),
            )]
        }
    };
    let host = match pool_host(sandbox, limits, WorkerConfig::new(program)) {
        Ok(h) => h,
        Err(e) => return vec![not_built(S, "sandboxed worker", e)],
    };
    let workers = host.worker_pool().expect("the host has a pool");
    let untrusted = TrustTier::Untrusted;
    // Warm worker.
    if let Err(e) = host.call(pkg, untrusted, Call::new("ping")).await {
        return vec![not_built(
            S,
            "sandboxed worker",
            format!("worker failed: {e}"),
        )];
    }
    let mut warm = Vec::with_capacity(plan.star_iters);
    for _ in 0..plan.star_iters {
        warm.push(timed(call(&host, pkg, untrusted, "ping")).await);
    }
    let floor = pipe_round_trip(plan).await;
    let mut r = row(S, "sandboxed worker, warm", warm).keyed("starlark.warm_worker");
    r.ratio = Some(r.median / base);
    if floor.median.is_finite() {
        r.note = format!("{:.1}x a pipe round trip", r.median / floor.median);
        r.extra
            .push(("starlark.warm_worker_to_pipe", r.median / floor.median));
    }
    rows.push(r);
    rows.push(floor);

    // Cold: spawn + handshake + load_package of a fresh worker, beside a
    // sandboxed /bin/true spawn through the same runner.
    let mut cold = vec![];
    let mut truespawn = vec![];
    for i in 0..plan.cold_workers {
        let p = Package::from_script(format!("bench-cold-{i}"), format!("{TRIVIAL}# {i}\n"));
        match workers.time_cold_start(&p, ModuleSet::NONE, false).await {
            Ok((d, w)) => {
                cold.push(d);
                workers.discard(w).await;
            }
            Err(e) => return vec![not_built(S, "sandboxed worker, cold", e.to_string())],
        }
        truespawn.push(
            timed(async {
                let mut c = sandbox
                    .start(ChildSpec::new("/bin/true"))
                    .await
                    .expect("spawn");
                c.wait().await.expect("wait");
            })
            .await,
        );
    }
    let (true_median, _) = summarize(truespawn.clone());
    let mut r =
        row(S, "sandboxed worker, cold (spawn+handshake+load)", cold).keyed("starlark.cold_worker");
    r.ratio = Some(r.median / base);
    r.note = format!(
        "{:.2}x a sandboxed /bin/true spawn ({true_median:.0} µs)",
        r.median / true_median
    );
    r.extra
        .push(("starlark.cold_to_sandbox_spawn", r.median / true_median));
    rows.push(r);

    // The mitigation: a spare worker already started, so a new package
    // pays only load_package.
    rows.push(spare_row(plan, sandbox, limits, base).await);

    // Memory: an idle worker, and the host per warm worker held.
    workers.shutdown().await;
    let host_before = status_kib("self", "VmRSS").unwrap_or(0);
    let heap_before = crate::proc_stats::heap_in_use();
    let k = 8;
    for i in 0..k {
        let p = Package::from_script(format!("bench-mem-{i}"), format!("{TRIVIAL}# mem {i}\n"));
        let _ = host.call(&p, untrusted, Call::new("ping")).await;
    }
    let host_after = status_kib("self", "VmRSS").unwrap_or(0);
    let heap_after = crate::proc_stats::heap_in_use();
    // A worker's pid is its sandbox's leader: with a PID namespace the
    // init, which shares the host's memory (its RSS is the host's); the
    // worker itself is the process at the end of the init's line.
    let pids: Vec<u32> = workers
        .worker_pids()
        .into_iter()
        .map(last_descendant)
        .collect();
    for (name, key, read) in [
        (
            "RSS of an idle sandboxed Starlark worker",
            "memory.idle_worker_rss",
            (|p: &str| status_kib(p, "VmRSS")) as fn(&str) -> Option<u64>,
        ),
        (
            "USS (private memory) of an idle sandboxed Starlark worker",
            "memory.idle_worker_uss",
            |p: &str| Some(rollup_kib(p, "Private_Clean")? + rollup_kib(p, "Private_Dirty")?),
        ),
        (
            "PSS of an idle sandboxed Starlark worker",
            "memory.idle_worker_pss",
            |p: &str| rollup_kib(p, "Pss"),
        ),
    ] {
        let kib: Vec<u64> = pids.iter().filter_map(|p| read(&p.to_string())).collect();
        if let Some(max) = kib.iter().max() {
            rows.push(
                figure(
                    M,
                    name,
                    *max as f64 / 1024.0,
                    "MiB",
                    format!(
                        "max over {} idle workers; {}",
                        kib.len(),
                        worker_binary_note()
                    ),
                )
                .keyed(key),
            );
        }
    }
    rows.push(
        figure(
            M,
            "host memory per warm worker held",
            heap_after.saturating_sub(heap_before) as f64 / 1024.0 / k as f64,
            "KiB",
            format!(
                "heap in use (mallinfo2) over {k} warm workers; host RSS {:.1} -> {:.1} MiB",
                host_before as f64 / 1024.0,
                host_after as f64 / 1024.0
            ),
        )
        .keyed("memory.host_per_warm_worker"),
    );
    workers.shutdown().await;
    rows
}

/// Follows `pid`'s only child down for as long as there is exactly one.
fn last_descendant(pid: u32) -> u32 {
    let mut at = pid;
    for _ in 0..8 {
        let children =
            std::fs::read_to_string(format!("/proc/{at}/task/{at}/children")).unwrap_or_default();
        let mut it = children
            .split_whitespace()
            .filter_map(|c| c.parse::<u32>().ok());
        match (it.next(), it.next()) {
            (Some(only), None) => at = only,
            _ => break,
        }
    }
    at
}

/// The floor of a warm worker call: one byte to a child process (`cat`)
/// and back, over pipes, through the same async I/O as the worker's.
async fn pipe_round_trip(plan: &Plan) -> Row {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    const NAME: &str = "pipe round trip to a child process (floor)";
    let child = tokio::process::Command::new("cat")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn();
    let Ok(mut child) = child else {
        return not_built(S, NAME, "cannot start cat");
    };
    let (Some(mut input), Some(mut output)) = (child.stdin.take(), child.stdout.take()) else {
        return not_built(S, NAME, "cat's stdio is not piped");
    };
    let mut byte = [0u8; 1];
    let mut v = Vec::with_capacity(plan.star_iters);
    for i in 0..plan.star_iters + 100 {
        let t = Instant::now();
        if input.write_all(b"x").await.is_err() || output.read_exact(&mut byte).await.is_err() {
            return not_built(S, NAME, "cat stopped answering");
        }
        if i >= 100 {
            v.push(t.elapsed());
        }
    }
    drop(input);
    let _ = child.wait().await;
    row(S, NAME, v).keyed("starlark.pipe_round_trip")
}

async fn spare_row(plan: &Plan, sandbox: &SandboxRunner, limits: &EvalLimits, base: f64) -> Row {
    const NAME: &str = "sandboxed worker, spare ready (load only)";
    let mut config = match worker_program() {
        Ok(p) => WorkerConfig::new(p),
        Err(e) => return not_built(S, NAME, e.to_string()),
    };
    config.pool.spare_workers = 1;
    let host = match pool_host(sandbox, limits, config) {
        Ok(h) => h,
        Err(e) => return not_built(S, NAME, e),
    };
    let workers = host.worker_pool().expect("the host has a pool");
    let mut loads = vec![];
    for i in 0..plan.cold_workers {
        workers.wait_for_spares(1, Duration::from_secs(5)).await;
        let p = Package::from_script(
            format!("bench-spare-{i}"),
            format!("{TRIVIAL}# spare {i}\n"),
        );
        match workers.time_cold_start(&p, ModuleSet::NONE, true).await {
            Ok((d, w)) => {
                loads.push(d);
                workers.discard(w).await;
            }
            Err(e) => return not_built(S, NAME, e.to_string()),
        }
    }
    workers.shutdown().await;
    let mut r = row(S, NAME, loads).keyed("starlark.spare_ready");
    r.ratio = Some(r.median / base);
    r.note = "PoolConfig::spare_workers = 1 (off by default)".into();
    r
}

/// For `perf`: `n` of the `starlark.in_process` row's calls.
pub async fn profile_calls(n: u32) -> i32 {
    let runner = trusted_host(&EvalLimits::default());
    let pkg = Package::from_script("bench-trivial", TRIVIAL.to_string());
    for _ in 0..n {
        call(&runner, &pkg, TrustTier::Trusted, "ping").await;
    }
    0
}

/// The trivial entry point called on a frozen module with the bare
/// `starlark` interpreter, no Cordon: a fresh module and evaluator per
/// call (as Cordon's), no limits, no thread hop, no value conversion.
fn bare_call(plan: &Plan) -> Row {
    use starlark::environment::{FrozenModule, Globals, Module};
    use starlark::eval::Evaluator;
    use starlark::syntax::{AstModule, Dialect};
    let globals = Globals::standard();
    let ast =
        AstModule::parse("trivial.star", TRIVIAL.to_string(), &Dialect::Extended).expect("parse");
    let frozen: FrozenModule = Module::with_temp_heap(|module| {
        let mut eval = Evaluator::new(&module);
        eval.eval_module(ast, &globals).expect("module");
        drop(eval);
        module.freeze().expect("freeze")
    });
    let ping = frozen.get("ping").expect("ping defined");
    let once = || {
        let t = Instant::now();
        Module::with_temp_heap(|module| {
            // SAFETY: as in Cordon's own call (the worker's eval): the
            // module's frozen heap keeps a reference to the function's.
            let f = unsafe { ping.owned_frozen_value(module.frozen_heap()) }.to_value();
            let mut eval = Evaluator::new(&module);
            eval.eval_function(f, &[], &[]).expect("call").unpack_i32()
        });
        t.elapsed()
    };
    for _ in 0..plan.star_iters.max(200) {
        once();
    }
    let v: Vec<Duration> = (0..plan.star_iters).map(|_| once()).collect();
    row(
        S,
        "bare interpreter: the same entry point on a frozen module",
        v,
    )
    .keyed("starlark.bare_call")
}

async fn compute(plan: &Plan, runner: &StarlarkHost) -> Vec<Row> {
    let n = if plan.quick { 3 } else { 9 };
    let pkg = Package::from_script("bench-spin", SPIN.to_string());
    call(runner, &pkg, TrustTier::Trusted, "spin").await;
    let mut limited = vec![];
    for _ in 0..n {
        limited.push(timed(call(runner, &pkg, TrustTier::Trusted, "spin")).await);
    }
    let mut bare = vec![];
    for _ in 0..n {
        bare.push(
            tokio::task::spawn_blocking(|| {
                use starlark::environment::{Globals, Module};
                use starlark::eval::Evaluator;
                use starlark::syntax::{AstModule, Dialect};
                let ast = AstModule::parse("spin.star", SPIN.to_string(), &Dialect::Extended)
                    .expect("parse");
                let globals = Globals::standard();
                Module::with_temp_heap(|module| {
                    let mut eval = Evaluator::new(&module);
                    eval.eval_module(ast, &globals).expect("module");
                    let f = module.get("spin").expect("spin defined");
                    let t = Instant::now();
                    eval.eval_function(f, &[], &[]).expect("call");
                    t.elapsed()
                })
            })
            .await
            .expect("bare eval"),
        );
    }
    let base = row(C, "bare interpreter, no limits installed (baseline)", bare).keyed("loop.bare");
    let mut r = row(C, "cordon in-process, default limits", limited).keyed("loop.cordon");
    r.ratio = Some(r.median / base.median);
    r.note = "tick budget, deadline/cancel check, heap cap, fresh heap, JSON conversion".into();
    vec![base, r]
}
