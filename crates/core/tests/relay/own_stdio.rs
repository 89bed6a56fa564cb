//! `StdioMode::Relay` against this test process's own fds 0, 1, 2, which
//! the test swaps for pipes and files it controls.

use std::collections::BTreeSet;
use std::io::{Read, Seek, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

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

/// How long something a working relay does at once may take before the
/// test calls it a hang. Only a bound that turns a hang into a failure:
/// no assertion here is on how long anything took.
const HANG: Duration = Duration::from_secs(30);

/// `pidfd_open(pid, flags)`.
fn pidfd_open(pid: i32, flags: libc::c_uint) -> std::io::Result<OwnedFd> {
    // SAFETY: pidfd_open on integers; it returns a fresh fd.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, flags) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: a fresh fd we own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// A pidfd for our child `pid`, which is not reaped before `wait()`, so
/// the pid is still its own.
fn pidfd(pid: u32) -> OwnedFd {
    pidfd_open(pid as i32, 0).expect("pidfd_open")
}

/// Waits until the pidfd polls readable (its process or thread has
/// exited); false if it has not after [`HANG`].
fn exited(pidfd: &OwnedFd) -> bool {
    let mut p = libc::pollfd {
        fd: pidfd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd.
    unsafe { libc::poll(&mut p, 1, HANG.as_millis() as i32) == 1 }
}

/// The tids of this process's threads.
fn thread_ids() -> BTreeSet<i32> {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect()
}

/// A thread of this process, watched for its exit: through a thread pidfd
/// (Linux 6.9+), or, on older kernels, which have no event for it, its
/// `/proc/self/task` entry looked at again every millisecond.
struct Thread {
    tid: i32,
    pidfd: Option<OwnedFd>,
}

impl Thread {
    /// The threads started since `before` was taken that still run: the
    /// relay threads of the child started since (nothing else in this
    /// test starts threads).
    fn started_since(before: &BTreeSet<i32>) -> Vec<Thread> {
        thread_ids()
            .difference(before)
            .filter_map(|&tid| {
                // PIDFD_THREAD is O_EXCL (include/uapi/linux/pidfd.h).
                let pidfd = match pidfd_open(tid, libc::O_EXCL as libc::c_uint) {
                    Ok(fd) => Some(fd),
                    Err(e) if e.raw_os_error() == Some(libc::ESRCH) => return None,
                    Err(_) => None,
                };
                Some(Thread { tid, pidfd })
            })
            .collect()
    }

    /// True once the thread has exited; false if it still runs after
    /// [`HANG`].
    fn ended(&self) -> bool {
        if let Some(fd) = &self.pidfd {
            return exited(fd);
        }
        let task = std::path::PathBuf::from(format!("/proc/self/task/{}", self.tid));
        for _ in 0..HANG.as_millis() {
            if !task.exists() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        !task.exists()
    }
}

/// Asserts that every thread in `threads` ends (a relay thread names
/// itself `cordon-*` once it runs: the name is read for the message).
fn assert_ended(threads: &[Thread], what: &str) {
    for t in threads {
        if !t.ended() {
            let name = std::fs::read_to_string(format!("/proc/self/task/{}/comm", t.tid))
                .unwrap_or_default();
            panic!("relay thread {} ({}) {what}", t.tid, name.trim());
        }
    }
}

/// Whether `fd` polls with `events` now (no waiting).
fn polls_now(fd: RawFd, events: libc::c_short) -> bool {
    let mut p = libc::pollfd {
        fd,
        events,
        revents: 0,
    };
    // SAFETY: one valid pollfd.
    unsafe { libc::poll(&mut p, 1, 0) == 1 }
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

pub async fn relay_through_the_hosts_own_stdio() {
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
    //    even before wait() is called: every relay thread ends with the
    //    child (the stdin relay when its pipe loses its reader, the output
    //    relays at EOF), so nothing is left to take input written then.
    {
        let _swap = SwappedStdio::new([stdin_r.as_raw_fd(), out.as_raw_fd(), err.as_raw_fd()]);
        let before = thread_ids();
        let mut child = runner.start(relayed("exit 0")).await.unwrap();
        let relays = Thread::started_since(&before);
        assert!(exited(&pidfd(child.pid())), "the child did not exit");
        assert_ended(&relays, "still runs after the child ended");
        stdin_w.write_all(b"after-exit\n").unwrap();
        assert!(child.wait().await.unwrap().success());
        assert_eq!(
            read_within(0, Duration::from_secs(2)),
            b"after-exit\n",
            "the stdin relay took input after the child ended"
        );
    }

    // 4. A descendant that escapes the process group (setsid) and keeps
    //    every pipe open cannot hang wait(); the stdin relay stops anyway
    //    and does not eat input written after the child ended. The
    //    descendant outlives [`HANG`] by far: a wait() that waited for it
    //    fails the timeout.
    let mut out = tempfile::tempfile().unwrap();
    {
        let _swap = SwappedStdio::new([stdin_r.as_raw_fd(), out.as_raw_fd(), err.as_raw_fd()]);
        let mut child = runner
            // `<&0`: a background job of a non-interactive sh would
            // otherwise get /dev/null as stdin.
            .start(relayed("setsid sleep 600 <&0 & echo $!"))
            .await
            .unwrap();
        let waited = tokio::time::timeout(HANG, child.wait()).await;
        let escaped: i32 = file_text(&mut out).trim().parse().unwrap();
        // SAFETY: kill of the pid our own child just started.
        unsafe { libc::kill(escaped, libc::SIGKILL) };
        let outcome = waited.expect("wait() hung on a descendant that escaped the group");
        assert!(outcome.unwrap().success());
        stdin_w.write_all(b"later\n").unwrap();
        assert_eq!(
            read_within(0, Duration::from_secs(2)),
            b"later\n",
            "the stdin relay took input after the child ended"
        );
    }

    // 5. kill() ends a child blocked on stdin, and wait() returns even
    //    while the host's stdout is a pipe nobody reads and is full; the
    //    relay thread writing to it ends too (it does not stay blocked in a
    //    write until someone reads).
    let (stuck_r, stuck_w) = pipe();
    let threads_before = thread_ids();
    {
        let _swap = SwappedStdio::new([stdin_r.as_raw_fd(), stuck_w.as_raw_fd(), err.as_raw_fd()]);
        let mut child = runner.start(relayed("cat <&0 & yes")).await.unwrap();
        let relays = Thread::started_since(&threads_before);
        // Full: the relay's next write waits for POLLOUT, which nobody
        // reading the pipe will ever bring. A pipe's fill level has no
        // event of its own; this looks again every millisecond.
        let full = (0..HANG.as_millis()).any(|_| {
            let writable = polls_now(stuck_w.as_raw_fd(), libc::POLLOUT);
            if writable {
                std::thread::sleep(Duration::from_millis(1));
            }
            !writable
        });
        assert!(full, "the host's stdout never filled up: `yes` did not run");
        child.kill();
        let outcome = tokio::time::timeout(HANG, child.wait())
            .await
            .expect("wait() after kill() hung on a full host stdout")
            .unwrap();
        assert_eq!(outcome, ExitOutcome::Signaled(libc::SIGKILL));
        assert_ended(&relays, "stayed blocked after kill()");
        assert_eq!(thread_ids(), threads_before, "a relay thread stayed");
    }
    drop((stuck_r, stuck_w));

    // 6. Output left in the pipes when the child exits reaches the host
    //    however slowly the host reads: here the host's stdout is a full
    //    pipe, read a piece at a time with pauses longer than the grace
    //    period, starting only after the child has ended. The relay can
    //    copy nothing before the host reads, so it is blocked writing its
    //    first read while the child enlarges its own pipe and fills it
    //    with far more than one relay read.
    let (slow_r, slow_w) = pipe();
    // SAFETY: F_GETPIPE_SZ on our pipe.
    let capacity = unsafe { libc::fcntl(slow_w.as_raw_fd(), libc::F_GETPIPE_SZ) } as usize;
    (&slow_w).write_all(&vec![b'.'; capacity]).unwrap();
    {
        let _swap = SwappedStdio::new([stdin_r.as_raw_fd(), slow_w.as_raw_fd(), err.as_raw_fd()]);
        let mut child = runner
            .start(relayed(
                "echo first; exec perl -e \
                 'fcntl(STDOUT, 1031, 1 << 20) or die \"F_SETPIPE_SZ: $!\"; \
                  print map { sprintf(\"%07d\\n\", $_) } 1..60000'",
            ))
            .await
            .unwrap();
        let leader = pidfd(child.pid());
        let reader = std::thread::spawn(move || {
            let ended_first = exited(&leader);
            let mut all = Vec::new();
            let mut piece = vec![0u8; 64 * 1024];
            loop {
                let n = (&slow_r).read(&mut piece).unwrap();
                if n == 0 {
                    break;
                }
                all.extend_from_slice(&piece[..n]);
                // The scenario itself: a host slower than the grace period.
                std::thread::sleep(Duration::from_millis(250));
            }
            (ended_first, all)
        });
        assert!(child.wait().await.unwrap().success());
        drop(_swap);
        drop(slow_w);
        let (ended_first, all) = reader.join().unwrap();
        assert!(ended_first, "the child did not exit before the host read");
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
