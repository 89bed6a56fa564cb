use cordon_backend_linux::LinuxBackend;
use cordon_core::{Limits, SandboxBackend, SandboxPolicy};
use std::time::Instant;

fn main() {
    let b = LinuxBackend::new();
    let dir = tempfile::tempdir().unwrap();
    let mut pol = SandboxPolicy::new(dir.path(), Limits::default_ceilings());
    pol.program_files = vec![
        "/usr/bin/true".into(),
        "/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2".into(),
    ];
    pol.scratch_persists = false;
    let mut v = vec![];
    for _ in 0..300 {
        let mut cmd = std::process::Command::new("/bin/true");
        let t = Instant::now();
        b.wrap(&mut cmd, &pol).unwrap();
        v.push(t.elapsed().as_micros());
    }
    v.sort();
    println!("wrap min {} p50 {}", v[0], v[150]);
}
