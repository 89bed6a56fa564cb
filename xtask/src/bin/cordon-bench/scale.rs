//! Many sandboxed spawns at several concurrencies: throughput, latency, the
//! host's peak RSS, and proof that nothing leaked.

use std::sync::Arc;
use std::time::{Duration, Instant};

use cordon_core::{ChildSpec, Runner, SandboxRunner};

use crate::proc_stats::{children, open_fds, reset_peak_rss, status_kib};
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
        reset_peak_rss();
        let sem = Arc::new(tokio::sync::Semaphore::new(concurrency));
        let started = Instant::now();
        let mut set = tokio::task::JoinSet::new();
        for _ in 0..plan.scale_spawns {
            let permit = sem.clone().acquire_owned().await.expect("semaphore");
            let runner = runner.clone();
            set.spawn(async move {
                let t = Instant::now();
                let mut child = runner
                    .start(ChildSpec::new("/bin/true"))
                    .await
                    .expect("spawn");
                let ok = child.wait().await.map(|o| o.success()).unwrap_or(false);
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
        let leaked =
            fds_after != fds_before || live_after > live_before || zombies_and_live > live_after;
        clean &= !leaked && failures == 0;
        let mut r = row(S, format!("concurrency {concurrency}: latency"), lat);
        r.note = format!(
            "{:.0} spawns/s; {failures} failed; fds {fds_before}->{fds_after}; unreaped children {}; {}",
            plan.scale_spawns as f64 / elapsed.as_secs_f64(),
            zombies_and_live.saturating_sub(live_after),
            if leaked { "LEAK" } else { "clean" }
        );
        rows.push(r);
        rows.push(figure(
            S,
            format!("concurrency {concurrency}: host peak RSS"),
            peak_kib as f64 / 1024.0,
            "MiB",
            "",
        ));
    }
    (rows, clean)
}
