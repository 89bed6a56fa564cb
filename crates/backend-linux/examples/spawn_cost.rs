use cordon_backend_linux::{Layers, LinuxBackend};
use cordon_core::{ChildSpec, RunnerConfig, Spawner};
use std::sync::Arc;
use std::time::Instant;

fn main() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let n = 300;
    let mut rows: Vec<(&str, Box<dyn Fn()>)> = Vec::new();
    rows.push((
        "std Command",
        Box::new(|| {
            std::process::Command::new("/bin/true").status().unwrap();
        }),
    ));
    let variants: Vec<(&str, Spawner)> = vec![
        (
            "hygiene only",
            Spawner::hygiene_only(RunnerConfig::default()),
        ),
        (
            "legacy",
            Spawner::confined(
                Arc::new(LinuxBackend::with_layers(Layers::LEGACY)),
                RunnerConfig::default(),
            ),
        ),
        (
            "+pid",
            Spawner::confined(
                Arc::new(LinuxBackend::with_layers(Layers {
                    pid_namespace: true,
                    ..Layers::LEGACY
                })),
                RunnerConfig::default(),
            ),
        ),
        (
            "+ipc",
            Spawner::confined(
                Arc::new(LinuxBackend::with_layers(Layers {
                    ipc_namespace: true,
                    ..Layers::LEGACY
                })),
                RunnerConfig::default(),
            ),
        ),
        (
            "+mount",
            Spawner::confined(
                Arc::new(LinuxBackend::with_layers(Layers {
                    mount_namespace: true,
                    ..Layers::LEGACY
                })),
                RunnerConfig::default(),
            ),
        ),
        (
            "+pid+ipc+mnt",
            Spawner::confined(
                Arc::new(LinuxBackend::with_layers(Layers {
                    seccomp_allowlist: false,
                    ..Layers::ALL
                })),
                RunnerConfig::default(),
            ),
        ),
        (
            "all",
            Spawner::confined(Arc::new(LinuxBackend::new()), RunnerConfig::default()),
        ),
    ];
    for (name, sp) in &variants {
        let mut times = Vec::new();
        for _ in 0..n {
            let t = Instant::now();
            rt.block_on(async {
                let mut c = sp.spawn(&ChildSpec::new("/bin/true")).unwrap();
                c.wait().await.unwrap();
            });
            times.push(t.elapsed().as_micros());
        }
        times.sort();
        println!("{name:14} min {} median {} us", times[0], times[n / 2]);
    }
    let mut times = Vec::new();
    for _ in 0..n {
        let t = Instant::now();
        (rows[0].1)();
        times.push(t.elapsed().as_micros());
    }
    times.sort();
    println!("std Command    median {} us", times[n / 2]);
    let mut times = Vec::new();
    for _ in 0..n {
        let t = Instant::now();
        std::process::Command::new("bwrap")
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
            .unwrap();
        times.push(t.elapsed().as_micros());
    }
    times.sort();
    println!("bwrap          median {} us", times[n / 2]);
}
