//! `cargo xtask bench`: how fast and how light Cordon is, as ratios measured
//! side by side in one run (absolute times drift on shared machines).
//!
//! `cordon-bench [--quick] [--json]`. See benches/README.md for how to read
//! the table. This binary is also its own conformance probe child and
//! Starlark worker, like the `cordon` binary.

mod broker;
mod container;
mod keys;
mod proc_stats;
mod scale;
mod spawn;
mod starlark;
mod stats;
mod stores;

use std::sync::Arc;

use cordon_conformance::StandardSuite;
use cordon_core::{
    ChildSpec, Runner, RunnerConfig, SandboxRunner, TrustTier, TrustedProcessRunner,
};

/// How many samples each measurement takes.
#[derive(Clone, Copy)]
pub struct Plan {
    pub quick: bool,
    pub spawn_iters: usize,
    pub suite_runs: usize,
    pub scale_spawns: usize,
    pub star_iters: usize,
    pub cold_workers: usize,
}

fn main() {
    cordon_conformance::dispatch_probe_child();
    cordon_starlark::dispatch_worker();
    let args: Vec<String> = std::env::args().skip(1).collect();
    let quick = args.iter().any(|a| a == "--quick");
    let json = args.iter().any(|a| a == "--json");
    if let Some(bad) = args.iter().find(|a| *a != "--quick" && *a != "--json") {
        eprintln!(
            "cordon-bench: unknown argument `{bad}`; usage: cargo xtask bench [--quick] [--json]"
        );
        std::process::exit(2);
    }
    let plan = if quick {
        Plan {
            quick,
            spawn_iters: 60,
            suite_runs: 2,
            scale_spawns: 200,
            star_iters: 300,
            cold_workers: 5,
        }
    } else {
        Plan {
            quick,
            spawn_iters: 300,
            suite_runs: 5,
            scale_spawns: 1000,
            star_iters: 3000,
            cold_workers: 20,
        }
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    let code = rt.block_on(run(plan, json));
    std::process::exit(code);
}

async fn run(plan: Plan, json: bool) -> i32 {
    let started = std::time::Instant::now();
    // `CORDON_BENCH_PROFILE_SPAWNS=N CORDON_BENCH_PROFILE_WITHOUT=own_uid,…`:
    // N spawns under the Linux backend with those layers off, spawned
    // directly (no gate), to compare layers with `perf` or `farm-bench`.
    // `CORDON_BENCH_PROFILE_CALLS=N`: N trivial in-process Starlark calls
    // (the `starlark.in_process` row's), for `perf record`.
    if let Ok(n) = std::env::var("CORDON_BENCH_PROFILE_CALLS") {
        return starlark::profile_calls(n.parse().unwrap_or(100_000)).await;
    }
    if let (Ok(n), Ok(without)) = (
        std::env::var("CORDON_BENCH_PROFILE_SPAWNS"),
        std::env::var("CORDON_BENCH_PROFILE_WITHOUT"),
    ) {
        return spawn::profile_without(&without, n.parse().unwrap_or(1000)).await;
    }
    let backend: Arc<dyn cordon_core::SandboxBackend> = if cfg!(target_os = "macos") {
        Arc::new(cordon_backend_macos::MacosBackend::default())
    } else {
        Arc::new(cordon_backend_linux::LinuxBackend::new())
    };
    let sandbox = SandboxRunner::new(
        backend.clone(),
        &StandardSuite::new(),
        RunnerConfig::default(),
    )
    .await;
    if let Err(e) = &sandbox {
        eprintln!(
            "note: the native backend does not conform; sandboxed rows are marked not built\n{}",
            e.report.summary()
        );
    }
    // For `perf record`: only N spawns of /bin/true, no table; sandboxed,
    // or with `CORDON_BENCH_PROFILE_RUNNER=trusted` through the trusted
    // runner.
    if let Ok(n) = std::env::var("CORDON_BENCH_PROFILE_SPAWNS") {
        let trusted = TrustedProcessRunner::default();
        let (runner, tier): (&dyn Runner, TrustTier) =
            match std::env::var("CORDON_BENCH_PROFILE_RUNNER").as_deref() {
                Ok("trusted") => (&trusted, TrustTier::Trusted),
                _ => match sandbox.as_ref() {
                    Ok(r) => (r, TrustTier::Untrusted),
                    Err(_) => return 1,
                },
            };
        for _ in 0..n.parse::<u32>().unwrap_or(1000) {
            let spec = ChildSpec::new("/bin/true").trust(tier);
            let mut child = runner.start(spec).await.expect("spawn");
            assert!(child.wait().await.expect("wait").success());
        }
        return 0;
    }
    let mut rows = Vec::new();
    let egress = match &sandbox {
        Ok(r) => spawn::egress_runner(backend.clone(), r).await,
        Err(_) => None,
    };
    rows.extend(spawn::bench(&plan, sandbox.as_ref().ok(), egress.as_ref()).await);
    if cfg!(target_os = "linux") {
        rows.extend(spawn::layers(&plan).await);
    }
    rows.extend(spawn::suite(&plan, backend.clone()).await);
    let (scale_rows, clean) = scale::bench(&plan, sandbox.as_ref().ok()).await;
    rows.extend(scale_rows);
    rows.extend(starlark::bench(&plan, sandbox.as_ref().ok()).await);
    rows.extend(stores::bench(&plan).await);
    rows.extend(
        tokio::task::spawn_blocking(move || broker::bench(&plan))
            .await
            .unwrap_or_default(),
    );
    if cfg!(target_os = "linux") {
        rows.extend(
            tokio::task::spawn_blocking(move || container::bench(&plan))
                .await
                .unwrap_or_default(),
        );
    }
    let total = started.elapsed();
    let metrics = stats::metrics(&rows);
    let undocumented = keys::undocumented(metrics.keys());
    if json {
        let v = serde_json::json!({
            "quick": plan.quick,
            "total_seconds": total.as_secs_f64(),
            "metrics": metrics,
            "rows": rows,
            "host_clean_after_scale": clean,
        });
        println!("{}", serde_json::to_string_pretty(&v).expect("json"));
    } else {
        stats::print_table(&rows);
        println!(
            "\ntotal run time: {:.1} s{}",
            total.as_secs_f64(),
            if plan.quick { " (--quick)" } else { "" }
        );
    }
    if !undocumented.is_empty() {
        eprintln!(
            "cordon-bench: metrics missing from keys.rs (document them there): {undocumented:?}"
        );
        return 1;
    }
    if clean {
        0
    } else {
        eprintln!("cordon-bench: the host leaked fds or processes during the scale run");
        1
    }
}
