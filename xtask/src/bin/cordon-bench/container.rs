//! A container's whole life under `cordon-runtime` against runc, in one
//! run: `create` of a busybox bundle whose program is `/bin/true`,
//! `start`, the wait for the pid the pid file names (this process is a
//! subreaper, as conmon and containerd's shim are), `delete`. The bundle
//! is the same for both; the runtime's state roots are this run's own.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::stats::{not_built, row, Row};
use crate::Plan;

const S: &str = "7. Container: create + start + wait + delete of /bin/true";
const RUNC: &str = "/usr/sbin/runc";
const BUSYBOX: &str = "/bin/busybox";

/// The busybox bundle under `dir`.
fn bundle(dir: &Path) -> std::io::Result<PathBuf> {
    let rootfs = dir.join("rootfs");
    for d in ["bin", "proc", "dev", "tmp"] {
        std::fs::create_dir_all(rootfs.join(d))?;
    }
    std::fs::copy(BUSYBOX, rootfs.join("bin/busybox"))?;
    std::os::unix::fs::symlink("busybox", rootfs.join("bin/true"))?;
    let config = serde_json::json!({
        "ociVersion": "1.0.2",
        "root": {"path": rootfs},
        "process": {"user": {"uid": 0, "gid": 0}, "args": ["/bin/true"],
                    "env": ["PATH=/bin"], "cwd": "/"},
        "mounts": [
            {"destination": "/proc", "type": "proc", "source": "proc"},
            {"destination": "/dev", "type": "tmpfs", "source": "tmpfs",
             "options": ["nosuid", "mode=755", "size=65536k"]}
        ],
        "linux": {"namespaces": [{"type": "pid"}, {"type": "network"}, {"type": "ipc"},
                                 {"type": "uts"}, {"type": "mount"}]}
    });
    let b = dir.join("bundle");
    std::fs::create_dir_all(&b)?;
    std::fs::write(b.join("config.json"), config.to_string())?;
    Ok(b)
}

/// One life of a container under `runtime`; `Err` with what failed.
fn once(runtime: &Path, state: &Path, bundle: &Path, id: &str) -> Result<Duration, String> {
    let pid_file = state.join(format!("{id}.pid"));
    // stderr to a file, not a pipe: the container `create` leaves behind
    // keeps the runtime's stdio (it is the container's), so a pipe would
    // not end before the container does.
    let run = |args: &[&str]| -> Result<(), String> {
        let err = tempfile::tempfile().map_err(|e| e.to_string())?;
        let status = Command::new(runtime)
            .arg("--root")
            .arg(state)
            .args(args)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(err.try_clone().map_err(|e| e.to_string())?)
            .status()
            .map_err(|e| e.to_string())?;
        if status.success() {
            Ok(())
        } else {
            use std::io::{Read, Seek};
            let mut text = String::new();
            let mut err = err;
            let _ = err.seek(std::io::SeekFrom::Start(0));
            let _ = err.read_to_string(&mut text);
            Err(format!("{} {args:?}: {}", runtime.display(), text.trim()))
        }
    };
    let t = Instant::now();
    run(&[
        "create",
        "--bundle",
        bundle.to_str().unwrap_or_default(),
        "--pid-file",
        pid_file.to_str().unwrap_or_default(),
        id,
    ])?;
    let pid: libc::pid_t = std::fs::read_to_string(&pid_file)
        .map_err(|e| e.to_string())?
        .trim()
        .parse()
        .map_err(|_| "a pid file without a pid".to_string())?;
    run(&["start", id])?;
    let mut status = 0;
    // SAFETY: waitpid on a child of ours (reparented to this subreaper).
    if unsafe { libc::waitpid(pid, &mut status, 0) } != pid {
        return Err(format!("waitpid: {}", std::io::Error::last_os_error()));
    }
    run(&["delete", id])?;
    let took = t.elapsed();
    let _ = std::fs::remove_file(&pid_file);
    if !(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0) {
        return Err(format!("/bin/true ended with status {status:#x}"));
    }
    Ok(took)
}

pub fn bench(plan: &Plan) -> Vec<Row> {
    let cordon = match std::env::var_os("CORDON_BENCH_RUNTIME") {
        Some(p) => PathBuf::from(p),
        None => {
            return vec![not_built(
                S,
                "cordon-runtime",
                "CORDON_BENCH_RUNTIME is not set (run through cargo xtask bench)",
            )]
        }
    };
    for tool in [RUNC, BUSYBOX] {
        if !Path::new(tool).exists() {
            return vec![not_built(S, "containers", format!("{tool} is missing"))];
        }
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return vec![not_built(
            S,
            "containers",
            "runc and cordon-runtime run as root here",
        )];
    }
    // SAFETY: prctl on this process only.
    unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) };
    let dir = match tempfile::tempdir() {
        Ok(d) => d,
        Err(e) => return vec![not_built(S, "containers", e.to_string())],
    };
    let b = match bundle(dir.path()) {
        Ok(b) => b,
        Err(e) => return vec![not_built(S, "containers", e.to_string())],
    };
    let n = if plan.quick { 10 } else { 50 };
    let mut rows = Vec::new();
    let mut medians = Vec::new();
    for (name, runtime, key) in [
        ("runc", PathBuf::from(RUNC), "container.runc"),
        (
            "cordon-runtime (goal ≤ 1.0× runc)",
            cordon,
            "container.cordon",
        ),
    ] {
        let state = dir.path().join(key);
        let mut samples = Vec::with_capacity(n);
        let mut failed = None;
        // One unmeasured life first: cordon-runtime's first one runs (or
        // reads) the gate's report.
        for i in 0..=n {
            match once(&runtime, &state, &b, &format!("bench-{i}")) {
                Ok(d) if i > 0 => samples.push(d),
                Ok(_) => {}
                Err(e) => {
                    failed = Some(e);
                    break;
                }
            }
        }
        match failed {
            Some(e) => rows.push(not_built(S, name, e)),
            None => {
                let mut r = row(S, name, samples).keyed(key);
                if let Some(base) = medians.first() {
                    r.ratio = Some(r.median / base);
                    r.note = "ratio to runc".into();
                }
                medians.push(r.median);
                rows.push(r);
            }
        }
    }
    // SAFETY: prctl on this process only.
    unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0) };
    rows
}
