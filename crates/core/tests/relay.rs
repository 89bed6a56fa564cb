//! `StdioMode::Relay` against this test process's own fds 0, 1, 2, which
//! the test swaps for pipes and files it controls.
//!
//! One test function on purpose: the harness writes its progress lines to
//! fd 1, so nothing else may run in this process while fd 1 is swapped.

use std::io::{Read, Seek, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::{Duration, Instant};

use cordon_core::*;

/// Puts `new[i]` on fd `i` for i in 0..3 and puts the originals back on drop
/// (also when an assertion unwinds).
struct SwappedStdio {
    saved: Vec<OwnedFd>,
}

impl SwappedStdio {
    fn new(new: [RawFd; 3]) -> Self {
        let saved = (0..3)
            .map(|fd| {
                // SAFETY: F_DUPFD_CLOEXEC returns a fresh fd we own.
                let copy = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 10) };
                assert!(copy >= 0);
                // SAFETY: fresh fd.
                unsafe { OwnedFd::from_raw_fd(copy) }
            })
            .collect();
        for (fd, src) in new.iter().enumerate() {
            // SAFETY: dup2 onto 0..3 from fds the caller keeps open.
            assert!(unsafe { libc::dup2(*src, fd as RawFd) } >= 0);
        }
        SwappedStdio { saved }
    }
}

impl Drop for SwappedStdio {
    fn drop(&mut self) {
        for (fd, saved) in self.saved.iter().enumerate() {
            // SAFETY: dup2 back from the saved copies.
            unsafe { libc::dup2(saved.as_raw_fd(), fd as RawFd) };
        }
    }
}

fn pipe() -> (std::fs::File, std::fs::File) {
    let mut fds = [0; 2];
    // SAFETY: pipe2 writes two fresh fds.
    assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
    // SAFETY: fresh fds we own.
    unsafe {
        (
            std::fs::File::from_raw_fd(fds[0]),
            std::fs::File::from_raw_fd(fds[1]),
        )
    }
}

fn flags(fd: RawFd) -> i32 {
    // SAFETY: F_GETFL on an open fd.
    unsafe { libc::fcntl(fd, libc::F_GETFL) }
}

/// Bytes readable from `fd` within `limit` (poll, then one read).
fn read_within(fd: RawFd, limit: Duration) -> Vec<u8> {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd.
    if unsafe { libc::poll(&mut p, 1, limit.as_millis() as i32) } != 1 {
        return Vec::new();
    }
    let mut buf = vec![0u8; 4096];
    // SAFETY: buf is valid for its length.
    let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
    buf.truncate(n.max(0) as usize);
    buf
}

fn relayed(script: &str) -> ChildSpec {
    ChildSpec::new("/bin/sh")
        .args(["-c", script])
        .trust(TrustTier::Trusted)
        .stdio(StdioMode::Relay)
}

fn file_text(f: &mut std::fs::File) -> String {
    let mut s = String::new();
    f.rewind().unwrap();
    f.read_to_string(&mut s).unwrap();
    s
}

#[tokio::test]
async fn relay_through_the_hosts_own_stdio() {
    let runner = TrustedProcessRunner::default();
    let (stdin_r, mut stdin_w) = pipe();
    let mut out = tempfile::tempfile().unwrap();
    let mut err = tempfile::tempfile().unwrap();

    // 1. Separate stdout and stderr files: separate pipes, stderr also kept
    //    in the ring; the host's fds keep their flags (never O_NONBLOCK).
    {
        let _swap = SwappedStdio::new([stdin_r.as_raw_fd(), out.as_raw_fd(), err.as_raw_fd()]);
        let before = [flags(0), flags(1), flags(2)];
        let mut child = runner
            .start(relayed("echo to-out; echo to-err >&2; exit 3"))
            .await
            .unwrap();
        assert!(child.stdin.is_none() && child.stdout.is_none());
        assert_eq!(child.wait().await.unwrap(), ExitOutcome::Exited(3));
        assert_eq!(child.stderr_tail(), b"to-err\n");
        assert_eq!([flags(0), flags(1), flags(2)], before);
    }
    assert_eq!(file_text(&mut out), "to-out\n");
    assert_eq!(file_text(&mut err), "to-err\n");

    // 2. stdout and stderr the same file (a terminal, `2>&1`): one pipe,
    //    so the streams stay interleaved exactly as written.
    let mut both = tempfile::tempfile().unwrap();
    {
        let _swap = SwappedStdio::new([stdin_r.as_raw_fd(), both.as_raw_fd(), both.as_raw_fd()]);
        let mut child = runner
            .start(relayed(
                "i=0; while [ $i -lt 300 ]; do i=$((i+1)); echo out$i; echo err$i >&2; done",
            ))
            .await
            .unwrap();
        assert!(child.wait().await.unwrap().success());
    }
    let expected: String = (1..=300).map(|i| format!("out{i}\nerr{i}\n")).collect();
    assert!(
        file_text(&mut both) == expected,
        "stdout and stderr lines were reordered"
    );

    // 3. Once the child has ended, the stdin relay takes no more input,
    //    even before wait() is called.
    {
        let _swap = SwappedStdio::new([stdin_r.as_raw_fd(), out.as_raw_fd(), err.as_raw_fd()]);
        let mut child = runner.start(relayed("exit 0")).await.unwrap();
        let stat = format!("/proc/{}/stat", child.pid());
        let until = Instant::now() + Duration::from_secs(5);
        while !std::fs::read_to_string(&stat)
            .unwrap()
            .rsplit(')')
            .next()
            .unwrap()
            .trim_start()
            .starts_with('Z')
        {
            assert!(Instant::now() < until, "the child did not exit");
            std::thread::sleep(Duration::from_millis(5));
        }
        stdin_w.write_all(b"after-exit\n").unwrap();
        std::thread::sleep(Duration::from_millis(100));
        assert!(child.wait().await.unwrap().success());
        assert_eq!(
            read_within(0, Duration::from_secs(2)),
            b"after-exit\n",
            "the stdin relay took input after the child ended"
        );
    }

    // 4. A descendant that escapes the process group (setsid) and keeps
    //    every pipe open cannot hang wait(); the stdin relay stops anyway
    //    and does not eat input written after the child ended.
    let mut out = tempfile::tempfile().unwrap();
    {
        let _swap = SwappedStdio::new([stdin_r.as_raw_fd(), out.as_raw_fd(), err.as_raw_fd()]);
        let mut child = runner
            // `<&0`: a background job of a non-interactive sh would
            // otherwise get /dev/null as stdin.
            .start(relayed("setsid sleep 30 <&0 & echo $!"))
            .await
            .unwrap();
        let started = Instant::now();
        assert!(child.wait().await.unwrap().success());
        let took = started.elapsed();
        let escaped: i32 = file_text(&mut out).trim().parse().unwrap();
        // SAFETY: kill of the pid our own child just started.
        unsafe { libc::kill(escaped, libc::SIGKILL) };
        assert!(took < Duration::from_secs(3), "wait() took {took:?}");
        stdin_w.write_all(b"later\n").unwrap();
        assert_eq!(
            read_within(0, Duration::from_secs(2)),
            b"later\n",
            "the stdin relay took input after the child ended"
        );
    }

    // 5. kill() ends a child blocked on stdin, and wait() returns promptly
    //    even while the host's stdout is a pipe nobody reads and is full;
    //    the relay thread writing to it ends too (it does not stay blocked
    //    in a write until someone reads).
    let (stuck_r, stuck_w) = pipe();
    let threads_before = std::fs::read_dir("/proc/self/task").unwrap().count();
    {
        let _swap = SwappedStdio::new([stdin_r.as_raw_fd(), stuck_w.as_raw_fd(), err.as_raw_fd()]);
        let mut child = runner.start(relayed("cat <&0 & yes")).await.unwrap();
        tokio::time::sleep(Duration::from_millis(300)).await;
        child.kill();
        let outcome = tokio::time::timeout(Duration::from_secs(3), child.wait())
            .await
            .expect("wait() after kill() hung on a full host stdout")
            .unwrap();
        assert_eq!(outcome, ExitOutcome::Signaled(libc::SIGKILL));
        let threads_after = std::fs::read_dir("/proc/self/task").unwrap().count();
        assert_eq!(
            threads_after, threads_before,
            "a relay thread stayed blocked"
        );
    }
    drop((stuck_r, stuck_w));

    // 6. Output left in the pipes when the child exits reaches the host
    //    however slowly the host reads: here the host's stdout is a full
    //    pipe, read a piece at a time with pauses longer than the grace
    //    period, starting only after the child has ended. The relay is
    //    blocked writing the first line when the child enlarges its pipe
    //    (so more than one relay read is left in it) and fills it.
    let (slow_r, slow_w) = pipe();
    // SAFETY: F_GETPIPE_SZ on our pipe.
    let capacity = unsafe { libc::fcntl(slow_w.as_raw_fd(), libc::F_GETPIPE_SZ) } as usize;
    (&slow_w).write_all(&vec![b'.'; capacity]).unwrap();
    {
        let _swap = SwappedStdio::new([stdin_r.as_raw_fd(), slow_w.as_raw_fd(), err.as_raw_fd()]);
        let mut child = runner
            .start(relayed(
                "echo first; sleep 0.3; exec perl -e \
                 'fcntl(STDOUT, 1031, 1 << 20) or die \"F_SETPIPE_SZ: $!\"; \
                  print map { sprintf(\"%07d\\n\", $_) } 1..60000'",
            ))
            .await
            .unwrap();
        let pid = child.pid();
        let reader = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(800));
            // SAFETY: signal 0 only checks existence.
            let leader_alive = unsafe { libc::kill(pid as i32, 0) } == 0;
            let mut all = Vec::new();
            let mut piece = vec![0u8; 64 * 1024];
            loop {
                let n = (&slow_r).read(&mut piece).unwrap();
                if n == 0 {
                    break;
                }
                all.extend_from_slice(&piece[..n]);
                std::thread::sleep(Duration::from_millis(250));
            }
            (leader_alive, all)
        });
        assert!(child.wait().await.unwrap().success());
        drop(_swap);
        drop(slow_w);
        let (leader_alive, all) = reader.join().unwrap();
        assert!(
            !leader_alive,
            "the child should have ended before the host read"
        );
        let expected: String = std::iter::once("first\n".to_string())
            .chain((1..=60000).map(|i| format!("{i:07}\n")))
            .collect();
        assert_eq!(all.len(), capacity + expected.len(), "output was lost");
        assert!(
            all[capacity..] == *expected.as_bytes(),
            "output was reordered"
        );
    }
    drop(stdin_w);
}
