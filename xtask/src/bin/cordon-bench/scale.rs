//! Many sandboxed spawns at several concurrencies: throughput, latency, the
//! host's peak RSS, and proof that nothing leaked: no fd, process, cgroup,
//! mount or scratch dir, with one spawn in ten killed mid-run.

use std::sync::Arc;
use std::time::{Duration, Instant};

use cordon_core::{ChildSpec, Runner, SandboxRunner};

use crate::proc_stats::{children, leftovers, open_fds, reset_peak_rss, status_kib};
use crate::stats::{figure, not_built, row, Row};
use crate::Plan;

const S: &str = "3. scale: sandboxed spawns of /bin/true";

pub async fn bench(plan: &Plan, sandbox: Option<&SandboxRunner>) -> (Vec<Row>, bool) {
    let Some(sandbox) = sandbox else {
        return (
            vec![not_built(S, "scale", "no conforming native backend")],
            true,
        );
    };
    let runner = Arc::new(sandbox.clone());
    let mut rows = vec![];
    let mut clean = true;
    // Settle: the suite and earlier sections may still be reaping.
    tokio::time::sleep(Duration::from_millis(200)).await;
    for concurrency in [1usize, 8, 32] {
        let fds_before = open_fds();
        let (_, live_before) = children();
        let left_before = leftovers();
        reset_peak_rss();
        let sem = Arc::new(tokio::sync::Semaphore::new(concurrency));
        let started = Instant::now();
        let mut set = tokio::task::JoinSet::new();
        for i in 0..plan.scale_spawns {
            let permit = sem.clone().acquire_owned().await.expect("semaphore");
            let runner = runner.clone();
            // One in ten is killed while it runs: what a killed sandbox
            // leaves behind must be cleaned up too.
            let killed = i % 10 == 9;
            set.spawn(async move {
                let t = Instant::now();
                let spec = if killed {
                    ChildSpec::new("/bin/sleep").arg("30")
                } else {
                    ChildSpec::new("/bin/true")
                };
                let mut child = runner.start(spec).await.expect("spawn");
                if killed {
                    child.kill();
                }
                let ok = match child.wait().await {
                    Ok(o) if killed => o == cordon_core::ExitOutcome::Signaled(libc::SIGKILL),
                    Ok(o) => o.success(),
                    Err(_) => false,
                };
                drop(permit);
                (t.elapsed(), ok)
            });
        }
        let mut lat = Vec::with_capacity(plan.scale_spawns);
        let mut failures = 0;
        while let Some(r) = set.join_next().await {
            let (d, ok) = r.expect("task");
            lat.push(d);
            failures += usize::from(!ok);
        }
        let elapsed = started.elapsed();
        let peak_kib = status_kib("self", "VmHWM").unwrap_or(0);
        tokio::time::sleep(Duration::from_millis(50)).await;
        let fds_after = open_fds();
        let (zombies_and_live, live_after) = children();
        // A sandbox's cgroups are removed once it is gone, from a thread
        // when its last process is still being torn down: allow a moment.
        let mut left_after = leftovers();
        for _ in 0..50 {
            if left_after == left_before {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
            left_after = leftovers();
        }
        let leaked = fds_after != fds_before
            || live_after > live_before
            || zombies_and_live > live_after
            || left_after != left_before;
        clean &= !leaked && failures == 0;
        let (lat_key, rss_key) = match concurrency {
            1 => ("scale.c1_latency", "scale.c1_peak_rss"),
            8 => ("scale.c8_latency", "scale.c8_peak_rss"),
            _ => ("scale.c32_latency", "scale.c32_peak_rss"),
        };
        let mut r = row(S, format!("concurrency {concurrency}: latency"), lat).keyed(lat_key);
        r.note = format!(
            "{:.0} spawns/s ({} killed); {failures} failed; fds {fds_before}->{fds_after}; \
             unreaped children {}; host before -> after: {left_before} -> {left_after}; {}",
            plan.scale_spawns as f64 / elapsed.as_secs_f64(),
            plan.scale_spawns / 10,
            zombies_and_live.saturating_sub(live_after),
            if leaked { "LEAK" } else { "clean" }
        );
        rows.push(r);
        rows.push(
            figure(
                S,
                format!("concurrency {concurrency}: host peak RSS"),
                peak_kib as f64 / 1024.0,
                "MiB",
                "",
            )
            .keyed(rss_key),
        );
    }
    (rows, clean)
}
