//! Median latency of a trivial entry-point call: cached compiled package
//! (what [`Runner`] does) versus re-executing the script for every call
//! (what the Go runner did).
//!
//! `cargo run -p cordon-starlark --example bench_cached_call [iterations]`

use std::sync::Arc;
use std::time::{Duration, Instant};

use cordon_starlark::*;

fn script(helpers: usize) -> String {
    let mut s = String::from("CONFIG = {\"name\": \"bench\", \"levels\": [1, 2, 3]}\n");
    for i in 0..helpers {
        s.push_str(&format!(
            "def helper_{i}(x, y = {i}):\n    total = 0\n    for v in [x, y, {i}]:\n        if v > 2:\n            total += v * 2\n        else:\n            total -= v\n    return {{\"i\": {i}, \"total\": total, \"s\": \"item-%d\" % total}}\n\n"
        ));
    }
    s.push_str("def ping():\n    return 1\n");
    s
}

fn stats(mut v: Vec<Duration>) -> (Duration, Duration) {
    v.sort();
    (v[v.len() / 2], v[v.len() * 9 / 10])
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let iterations: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(300);
    let services = Services::new(
        Arc::new(InMemoryPackageStore::new()),
        Arc::new(InMemoryPermissionStore::new()),
    );
    let runner = Runner::new(services)?;
    let limits = runner.limits().clone();
    for helpers in [0usize, 100] {
        let pkg = Package::from_script("bench", script(helpers));
        let lines = pkg.sources["main.star"].lines().count();
        // Warm up (and fill the cache).
        runner
            .call_entry_point(&pkg, "ping", vec![], Default::default(), None)
            .await?;
        let mut cached = Vec::with_capacity(iterations);
        for _ in 0..iterations {
            let t = Instant::now();
            let out = runner
                .call_entry_point(&pkg, "ping", vec![], Default::default(), None)
                .await?;
            cached.push(t.elapsed());
            assert!(out.cached);
        }
        let mut reexec = Vec::with_capacity(iterations);
        for _ in 0..iterations {
            let p = pkg.clone();
            let l = limits.clone();
            let t = Instant::now();
            run_on_eval_thread(l.eval_stack_bytes, move || {
                let cancel = CancelToken::new();
                let compiled = compile_package(&p, ModuleSet::NONE, &l, &cancel)?;
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
                    .map_err(|(e, _)| e)
            })
            .await??;
            reexec.push(t.elapsed());
        }
        let (cm, c90) = stats(cached);
        let (rm, r90) = stats(reexec);
        println!(
            "script of {lines} lines: cached call median {cm:?} (p90 {c90:?}); re-exec per call median {rm:?} (p90 {r90:?}); {iterations} iterations"
        );
    }
    Ok(())
}
