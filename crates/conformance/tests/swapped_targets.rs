//! Another local user swaps the suite's targets for symlinks while the
//! suite runs as root: nothing outside the suite's own files changes.
//!
//! The unconfined baseline runs the probes' hostile code as root (a chmod
//! to 06777, a chown, xattrs, truncating opens of its targets). Were its
//! targets in a dir that others may write, a local user could rename a
//! symlink over one and have root work on any file of the host. Here an
//! attacker process of uid 1234 renames a symlink to a victim file (made
//! by this test, root's, 0644) over every entry it can reach in the
//! suite's target dirs, as fast as it can, while P2 and P5 run; the test
//! then checks the victim: same content, mode, owner, times, no xattr.
//! The attacker must have swapped something (the backend's run's target
//! dirs are world-writable on purpose), or the test proves nothing.

#![cfg(target_os = "linux")]

mod common;

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::sync::Arc;

use cordon_backend_linux::LinuxBackend;
use cordon_core::ProbeId;

/// Renames a symlink to the victim over every entry of every target dir
/// under BASE until STOP exists; prints how many it swapped.
const ATTACKER: &str = r#"
import glob, os, sys
base, victim, stop = sys.argv[1:4]
swapped = 0
while not os.path.exists(stop):
    for d in glob.glob(base + "/cordon-conformance-*/outside") + glob.glob(base + "/cordon-conformance-*/home"):
        try:
            names = os.listdir(d)
        except OSError:
            continue
        for n in names:
            p = os.path.join(d, n)
            if n.startswith(".swap-") or os.path.islink(p):
                continue
            tmp = os.path.join(d, ".swap-%d" % os.getpid())
            try:
                os.symlink(victim, tmp)
                os.rename(tmp, p)
                swapped += 1
            except OSError:
                try:
                    os.unlink(tmp)
                except OSError:
                    pass
print(swapped)
"#;

fn snapshot(p: &Path) -> (Vec<u8>, u32, u32, u32, i64, i64, bool) {
    let m = std::fs::symlink_metadata(p).unwrap();
    let c = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: a valid C string; a null buffer of size 0 asks for the size.
    let xattrs = unsafe { libc::listxattr(c.as_ptr(), std::ptr::null_mut(), 0) };
    (
        std::fs::read(p).unwrap(),
        m.mode(),
        m.uid(),
        m.gid(),
        m.mtime(),
        m.ctime(),
        xattrs > 0,
    )
}

#[test]
fn symlinks_swapped_into_the_target_dirs_reach_nothing_of_the_host() {
    assert!(
        common::is_root(),
        "this test needs root (CI runs as root): it shows what a root suite does"
    );
    let base = tempfile::tempdir().unwrap();
    std::fs::set_permissions(base.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let victim_dir = base.path().join("victim");
    std::fs::create_dir(&victim_dir).unwrap();
    let victim = victim_dir.join("file");
    std::fs::write(&victim, b"the host's own file\n").unwrap();
    std::fs::set_permissions(&victim, std::fs::Permissions::from_mode(0o644)).unwrap();
    let before = snapshot(&victim);
    let stop = base.path().join("stop");

    let attacker = std::process::Command::new("/usr/bin/python3")
        .arg("-c")
        .arg(ATTACKER)
        .arg(base.path())
        .arg(&victim)
        .arg(&stop)
        .uid(1234)
        .gid(1234)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("python3 runs");

    // The suite's dirs go under `base` (tempfile reads TMPDIR), where the
    // attacker looks; set before the runtime starts any thread (no other
    // thread of this one-test binary reads the environment now).
    std::env::set_var("TMPDIR", base.path());
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let report = rt.block_on(common::run(
        common::suite().only(vec![ProbeId::P2, ProbeId::P5]),
        Arc::new(LinuxBackend::new()),
    ));
    std::fs::write(&stop, b"").unwrap();
    let out = attacker.wait_with_output().unwrap();
    let swapped: u64 = String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .expect("the attacker's count");

    assert_eq!(
        snapshot(&victim),
        before,
        "the suite changed a file it did not make:\n{}",
        common::dump(&report)
    );
    assert!(
        swapped > 0,
        "the attacker swapped nothing, so this run shows nothing"
    );
}
