//! 200 children in `StdioMode::Relay` (and some piped) leave no thread and
//! no fd behind in the host process.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

use cordon_core::*;

fn count(dir: &str) -> usize {
    std::fs::read_dir(dir).unwrap().count()
}

fn relayed(script: &str) -> ChildSpec {
    ChildSpec::new("/bin/sh")
        .args(["-c", script])
        .trust(TrustTier::Trusted)
        .stdio(StdioMode::Relay)
}

/// One child of each kind the relay handles: a piped child, plain output
/// on both streams, a background child holding the pipes (killed with the
/// group), and a child blocked reading stdin that is killed (last, so the
/// count right after the final round would see its relays if they lingered).
async fn one_round(runner: &TrustedProcessRunner, i: usize) {
    match i % 4 {
        0 => {
            let mut c = runner
                .start(relayed("echo piped").stdio(StdioMode::Piped))
                .await
                .unwrap();
            assert!(c.wait().await.unwrap().success());
        }
        1 => {
            let mut c = runner
                .start(relayed(&format!("echo out {i}; echo err {i} >&2")))
                .await
                .unwrap();
            assert!(c.wait().await.unwrap().success());
        }
        2 => {
            let mut c = runner
                .start(relayed(&format!("sleep 30 <&0 & echo bg {i}")))
                .await
                .unwrap();
            assert!(c.wait().await.unwrap().success());
        }
        _ => {
            let mut c = runner.start(relayed("cat")).await.unwrap();
            tokio::time::sleep(Duration::from_millis(5)).await;
            c.kill();
            assert_eq!(
                c.wait().await.unwrap(),
                ExitOutcome::Signaled(libc::SIGKILL)
            );
        }
    }
}

pub async fn two_hundred_relayed_children_leak_no_thread_and_no_fd() {
    // This process's stdin: a pipe that never ends and never has data, so
    // every stdin relay must be stopped by its child ending. stdout and
    // stderr: two files, so each child gets three relay threads.
    let mut fds = [0; 2];
    // SAFETY: pipe2 writes two fresh fds.
    assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
    // SAFETY: fresh fds we own.
    let (stdin_r, _stdin_w) =
        unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    let out = tempfile::tempfile().unwrap();
    let err = tempfile::tempfile().unwrap();
    let saved: Vec<OwnedFd> = (0..3)
        .map(|fd: RawFd| {
            // SAFETY: F_DUPFD_CLOEXEC returns a fresh fd we own.
            unsafe { OwnedFd::from_raw_fd(libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 10)) }
        })
        .collect();
    for (fd, src) in [stdin_r.as_raw_fd(), out.as_raw_fd(), err.as_raw_fd()]
        .into_iter()
        .enumerate()
    {
        // SAFETY: dup2 onto 0..3 from fds we keep open.
        assert!(unsafe { libc::dup2(src, fd as RawFd) } >= 0);
    }
    struct Restore(Vec<OwnedFd>);
    impl Drop for Restore {
        fn drop(&mut self) {
            for (fd, saved) in self.0.iter().enumerate() {
                // SAFETY: dup2 back from the saved copies.
                unsafe { libc::dup2(saved.as_raw_fd(), fd as RawFd) };
            }
        }
    }
    let _restore = Restore(saved);

    let runner = TrustedProcessRunner::default();
    // Warm up: the runtime's lazily created fds (signal pipe, pidfd driver).
    for i in 0..4 {
        one_round(&runner, i).await;
    }
    let (fds_before, tasks_before) = (count("/proc/self/fd"), count("/proc/self/task"));
    for i in 0..200 {
        one_round(&runner, i).await;
    }
    let (fds_after, tasks_after) = (count("/proc/self/fd"), count("/proc/self/task"));
    assert_eq!(fds_after, fds_before, "fds leaked");
    assert_eq!(tasks_after, tasks_before, "threads leaked");

    // The output was relayed: 1 + 50 lines each of "out" and "bg" on
    // stdout, of "err" on stderr (warm-up included).
    let stdout = std::fs::read_to_string(format!("/proc/self/fd/{}", out.as_raw_fd())).unwrap();
    let stderr = std::fs::read_to_string(format!("/proc/self/fd/{}", err.as_raw_fd())).unwrap();
    assert_eq!(stdout.matches("out ").count(), 51);
    assert_eq!(stdout.matches("bg ").count(), 51);
    assert_eq!(stderr.matches("err ").count(), 51);
}
