//! A discarded scratch dir that a killed host left behind is removed by
//! the next host's first fresh scratch in the same base; nothing else in
//! the base is touched. (The sweep runs once per process and base: the
//! base is this test's own temp dir.)

use std::os::unix::fs::PermissionsExt;

use cordon_core::*;

#[tokio::test]
async fn a_dead_hosts_scratch_is_swept_and_nothing_else() {
    let base = tempfile::tempdir().unwrap();
    // A pid with no process: a child that has exited and been reaped (it
    // could be reused in the moment before the sweep, very unlikely).
    let dead = {
        let mut c = std::process::Command::new("true").spawn().unwrap();
        let pid = c.id();
        c.wait().unwrap();
        pid
    };
    let left = base.path().join(format!("cordon-scratch-{dead}-AbC123"));
    std::fs::create_dir_all(left.join("locked/inner")).unwrap();
    std::fs::write(left.join("locked/inner/file"), "what the sandbox wrote").unwrap();
    // A dir the sandbox made that its owner cannot enter or empty as is.
    std::fs::set_permissions(left.join("locked"), std::fs::Permissions::from_mode(0o500)).unwrap();
    // A chain deeper than any thread's stack and any fd limit (a recursive
    // sweep overflowed its 2 MiB stack on one 15 000 deep and aborted the
    // host): built as a sandbox builds it, renaming into a new top.
    // Removed however the test ends: the temp dir's own recursive
    // removal would overflow this thread's stack on the chain below.
    struct Left(std::path::PathBuf);
    impl Drop for Left {
        fn drop(&mut self) {
            let _ = cordon_core::hostfs::remove_tree(&self.0);
        }
    }
    let _cleanup = Left(left.clone());
    let chain = left.join("chain");
    std::fs::create_dir(&chain).unwrap();
    for _ in 0..20_000 {
        let new = left.join("new");
        std::fs::create_dir(&new).unwrap();
        std::fs::rename(&chain, new.join("d")).unwrap();
        std::fs::rename(&new, &chain).unwrap();
    }

    // Not to be touched: a live host's (this one's), a kept scratch (no
    // pid), a link named like a leftover, and what it points to.
    let live = base
        .path()
        .join(format!("cordon-scratch-{}-Live12", std::process::id()));
    let kept = base.path().join("cordon-scratch-Kept12");
    std::fs::create_dir(&live).unwrap();
    std::fs::create_dir(&kept).unwrap();
    // Not a name the spawner gives (the random part is six characters).
    let odd = base.path().join(format!("cordon-scratch-{dead}-TooLong7"));
    std::fs::create_dir(&odd).unwrap();
    // As root: a dead scratch of a uid that is not the caller's and not in
    // any sandbox range the backend names (here: none) is another user's.
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let others = base.path().join(format!("cordon-scratch-{dead}-Other1"));
    if root {
        std::fs::create_dir(&others).unwrap();
        std::os::unix::fs::chown(&others, Some(70_000), Some(70_000)).unwrap();
    }
    let elsewhere = tempfile::tempdir().unwrap();
    std::fs::write(elsewhere.path().join("precious"), "keep me").unwrap();
    let link = base.path().join(format!("cordon-scratch-{dead}-Link12"));
    std::os::unix::fs::symlink(elsewhere.path(), &link).unwrap();
    // A live host in another PID namespace: its pid means nothing here,
    // but it holds its scratch locked.
    let other_ns = base.path().join(format!("cordon-scratch-{dead}-OtherN"));
    std::fs::create_dir(&other_ns).unwrap();
    let held = std::fs::File::open(&other_ns).unwrap();
    let fd = std::os::fd::AsRawFd::as_raw_fd(&held);
    // SAFETY: flock on a file we hold open.
    let locked = unsafe { libc::flock(fd, libc::LOCK_EX) };
    assert_eq!(locked, 0);

    let runner = TrustedProcessRunner::new(RunnerConfig {
        scratch_base: base.path().to_path_buf(),
        ..RunnerConfig::default()
    });
    let mut child = runner
        .start(
            ChildSpec::new("/bin/sh")
                .args(["-c", "true"])
                .trust(TrustTier::Trusted),
        )
        .await
        .unwrap();
    let name = child
        .scratch_dir()
        .file_name()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    assert!(
        name.starts_with(&format!("cordon-scratch-{}-", std::process::id())),
        "a discarded scratch does not name its creator: {name}"
    );
    assert!(child.wait().await.unwrap().success());

    // The sweep runs beside the spawn, on a thread of its own.
    // A generous bound: a loaded host (a build beside the tests) slows the
    // sweep's 60 000 syscalls a lot, and the wait ends as soon as it is
    // done.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(300);
    while left.exists() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert!(!left.exists(), "the dead host's scratch is still there");
    assert!(
        other_ns.is_dir(),
        "a scratch its holder keeps locked was removed"
    );
    drop(held);
    assert!(
        live.is_dir() && kept.is_dir() && odd.is_dir(),
        "a scratch that is not a dead host's was removed"
    );
    assert_eq!(others.is_dir(), root, "another uid's dir was removed");
    assert!(link.symlink_metadata().unwrap().file_type().is_symlink());
    assert_eq!(
        std::fs::read_to_string(elsewhere.path().join("precious")).unwrap(),
        "keep me",
        "the sweep followed a link"
    );
}
