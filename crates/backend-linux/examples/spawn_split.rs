use cordon_backend_linux::{Layers, LinuxBackend};
use cordon_core::{ChildSpec, RunnerConfig, Spawner};
use std::sync::Arc;
use std::time::Instant;

fn main() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let n = 200;
    for (name, layers) in [
        ("legacy", Layers::LEGACY),
        (
            "+pid",
            Layers {
                pid_namespace: true,
                ..Layers::LEGACY
            },
        ),
        (
            "+mnt",
            Layers {
                mount_namespace: true,
                ..Layers::LEGACY
            },
        ),
        (
            "ns all",
            Layers {
                seccomp_allowlist: false,
                ..Layers::ALL
            },
        ),
    ] {
        let sp = Spawner::confined(
            Arc::new(LinuxBackend::with_layers(layers)),
            RunnerConfig::default(),
        );
        let (mut a, mut b) = (vec![], vec![]);
        for _ in 0..n {
            rt.block_on(async {
                let t = Instant::now();
                let mut c = sp.spawn(&ChildSpec::new("/bin/true")).unwrap();
                let t1 = t.elapsed();
                c.wait().await.unwrap();
                a.push(t1.as_micros());
                b.push((t.elapsed() - t1).as_micros());
            });
        }
        a.sort();
        b.sort();
        println!(
            "{name:8} spawn min {} p50 {} p90 {} | wait min {} p50 {} p90 {}",
            a[0],
            a[n / 2],
            a[n * 9 / 10],
            b[0],
            b[n / 2],
            b[n * 9 / 10]
        );
    }
}
