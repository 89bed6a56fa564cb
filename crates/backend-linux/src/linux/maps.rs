//! The sandbox's uid/gid maps on a root host, written by a helper that is
//! still root.
//!
//! On a root host the launcher drops to uid 65534 before it creates the
//! user namespace (so that 65534 owns it), and then must write that
//! namespace's maps. Written by the launcher itself, that needs its
//! `/proc/self` files to be its own, which needs its memory to be
//! *dumpable* — and the launcher's memory is the host's (`CLONE_VM`). A
//! root host's memory that is dumpable while a process of uid 65534 shares
//! it can be traced, read and written by any host process running as 65534
//! (`ptrace`, `/proc/<pid>/mem`). So the host's memory is kept non-dumpable
//! (`wrap` makes it so), and the maps are written by a helper made before
//! the uid change: a `clone(CLONE_VM)` that keeps root's credentials in the
//! host's user namespace, waits until the launcher has created the
//! namespaces, writes `/proc/<launcher>/{setgroups,uid_map,gid_map}` (as
//! root, with `CAP_SETUID` in the parent namespace, which is what the
//! kernel asks of a map's writer) and exits. Raw syscalls only: it runs
//! beside the launcher, in the same memory and thread-local storage.

use std::sync::atomic::{AtomicBool, Ordering};

use super::sys::{check_long, raw};

/// `"deny"` for `/proc/self/setgroups` and the one-line maps.
pub(crate) struct IdMaps {
    pub uid_map: Vec<u8>,
    pub gid_map: Vec<u8>,
}

impl IdMaps {
    /// Writes `setgroups` (`deny`, required before an unprivileged
    /// `gid_map`), then the uid and gid maps of the calling process.
    /// Async-signal-safe.
    pub(crate) fn write(&self) -> std::io::Result<()> {
        write_file(c"/proc/self/setgroups", b"deny")?;
        write_file(c"/proc/self/uid_map", &self.uid_map)?;
        write_file(c"/proc/self/gid_map", &self.gid_map)
    }

    /// Maps `inside` (the ids the program sees) to `outside` (its ids on
    /// the host). On an unprivileged host they are the same, the caller's;
    /// on a root host the program is `nobody` inside and has a uid of its
    /// own outside.
    pub(crate) fn new(inside: (u32, u32), outside: (u32, u32)) -> IdMaps {
        IdMaps {
            uid_map: format!("{} {} 1\n", inside.0, outside.0).into_bytes(),
            gid_map: format!("{} {} 1\n", inside.1, outside.1).into_bytes(),
        }
    }
}

/// Writes `data` to the file at `path` (one `write`).
fn write_file(path: &std::ffi::CStr, data: &[u8]) -> std::io::Result<()> {
    // SAFETY: raw syscalls on a NUL-terminated path and a byte slice.
    unsafe {
        let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let n = libc::write(fd, data.as_ptr().cast(), data.len());
        let err = std::io::Error::last_os_error();
        libc::close(fd);
        if n != data.len() as isize {
            return Err(if n < 0 {
                err
            } else {
                std::io::Error::from_raw_os_error(libc::EIO)
            });
        }
    }
    Ok(())
}

/// The step that leaves the new user namespace mapped: the root helper
/// `writer` finishes, or (a host that keeps its uid) the launcher writes
/// its own maps, or (no mount namespace, test layers only) nothing.
/// Async-signal-safe.
pub(crate) fn write(writer: Option<MapWriter>, maps: Option<&IdMaps>) -> std::io::Result<()> {
    match (writer, maps) {
        (Some(writer), _) => writer.finish(),
        (None, Some(maps)) => {
            // A host that keeps its uid writes its own maps, which needs its
            // `/proc/self` files to be its own: its (the host's) memory
            // dumpable. It is put back after, and launches of this host
            // take turns here, or one could put it back while another
            // writes.
            let turn = CredTurn::take()?;
            // SAFETY: prctl on integers.
            check_long(unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 1, 0, 0, 0) }.into())?;
            maps.write()?;
            turn.end()
        }
        (None, None) => Ok(()),
    }
}

/// Whose turn it is to change the shared dumpable flag (a host that keeps
/// its uid): every launcher of this host shares this word (they run in its
/// memory).
static CRED_TURN: AtomicBool = AtomicBool::new(false);

/// Holding the turn, with the host's dumpable flag as it was; dropping it
/// puts the flag back (on every path, errors included) and passes the turn
/// on. A spin lock with a bound: no futex or allocation in a launcher, and
/// a launcher that died holding it (only with the host itself) makes the
/// next spawns fail, not hang.
struct CredTurn {
    dumpable: libc::c_int,
}

impl CredTurn {
    fn take() -> std::io::Result<CredTurn> {
        // About a second of yields: the turn is held for a few syscalls.
        for _ in 0..200_000 {
            if CRED_TURN
                .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
            {
                // SAFETY: prctl on integers.
                let dumpable = unsafe { libc::prctl(libc::PR_GET_DUMPABLE, 0, 0, 0, 0) };
                return Ok(CredTurn { dumpable });
            }
            // SAFETY: sched_yield has no preconditions.
            unsafe { libc::sched_yield() };
        }
        Err(std::io::Error::from_raw_os_error(libc::EBUSY))
    }

    /// Puts the flag back and passes the turn on, reporting a failure.
    fn end(self) -> std::io::Result<()> {
        let r = self.restore();
        std::mem::forget(self);
        CRED_TURN.store(false, Ordering::Release);
        r
    }

    fn restore(&self) -> std::io::Result<()> {
        if self.dumpable >= 0 {
            // SAFETY: prctl on integers.
            let r = unsafe { libc::prctl(libc::PR_SET_DUMPABLE, self.dumpable, 0, 0, 0) };
            check_long(r.into())?;
        }
        Ok(())
    }
}

impl Drop for CredTurn {
    fn drop(&mut self) {
        let _ = self.restore();
        CRED_TURN.store(false, Ordering::Release);
    }
}

/// What the writer reads, on the launcher's stack (alive until the writer
/// is reaped).
pub(crate) struct WriterArgs {
    go_r: libc::c_int,
    /// The launcher's end, which the writer's copy of the fd table holds
    /// too: closed first thing, or the writer would never see EOF.
    go_w: libc::c_int,
    paths: [[u8; 48]; 3],
    data: [(*const u8, usize); 3],
}

/// The running writer, as the launcher sees it.
pub(crate) struct MapWriter {
    pid: libc::pid_t,
    go_w: libc::c_int,
}

/// `/proc/<pid>/<file>` NUL-terminated in `buf`, without allocating.
fn proc_path(buf: &mut [u8; 48], pid: libc::pid_t, file: &[u8]) {
    let mut digits = [0u8; 12];
    let mut n = pid.max(0) as u32;
    let mut i = digits.len();
    loop {
        i -= 1;
        digits[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    let parts: [&[u8]; 4] = [b"/proc/", &digits[i..], b"/", file];
    let mut at = 0;
    for p in parts {
        buf[at..at + p.len()].copy_from_slice(p);
        at += p.len();
    }
    buf[at] = 0;
}

impl MapWriter {
    /// In the launcher, before its uid changes: starts the writer on the
    /// stack whose top is `stack_top` (unused by anyone else until the
    /// writer is reaped). `args` must stay where it is until then.
    ///
    /// # Safety
    /// Only in the launcher; `stack_top` is the top of a stack this launch
    /// owns.
    pub(crate) unsafe fn start(
        maps: &IdMaps,
        stack_top: usize,
        args: &mut WriterArgs,
    ) -> std::io::Result<MapWriter> {
        let mut pipe = [0 as libc::c_int; 2];
        // SAFETY: pipe2 writes two fds.
        if unsafe { libc::pipe2(pipe.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: getpid has no preconditions.
        let me = unsafe { libc::getpid() };
        args.go_r = pipe[0];
        args.go_w = pipe[1];
        proc_path(&mut args.paths[0], me, b"setgroups");
        proc_path(&mut args.paths[1], me, b"uid_map");
        proc_path(&mut args.paths[2], me, b"gid_map");
        args.data = [
            (b"deny".as_ptr(), 4),
            (maps.uid_map.as_ptr(), maps.uid_map.len()),
            (maps.gid_map.as_ptr(), maps.gid_map.len()),
        ];
        // CLONE_UNTRACED: a tracer of the launcher must not follow it into
        // a process that stays root.
        // SAFETY: the writer runs `writer_main` on its own stack with
        // `args`, which outlive it (the launcher reaps it before either
        // goes away).
        let pid = unsafe {
            libc::clone(
                writer_main,
                stack_top as *mut libc::c_void,
                libc::CLONE_VM | libc::CLONE_UNTRACED | libc::SIGCHLD,
                args as *mut WriterArgs as *mut libc::c_void,
            )
        };
        if pid < 0 {
            let e = std::io::Error::last_os_error();
            // SAFETY: our own fds.
            unsafe {
                libc::close(pipe[0]);
                libc::close(pipe[1]);
            }
            return Err(e);
        }
        // SAFETY: our copy of the read end; the writer has its own.
        unsafe { libc::close(pipe[0]) };
        Ok(MapWriter { pid, go_w: pipe[1] })
    }

    /// In the launcher, once it has created the user namespace: lets the
    /// writer write, waits for it, and reports its failure.
    pub(crate) fn finish(mut self) -> std::io::Result<()> {
        // SAFETY: a one-byte write to our pipe, then a wait for our child.
        unsafe {
            if libc::write(self.go_w, b"1".as_ptr().cast(), 1) != 1 {
                return Err(std::io::Error::last_os_error());
            }
            libc::close(self.go_w);
            self.go_w = -1;
        }
        match self.reap() {
            Some(0) => Ok(()),
            Some(errno) => Err(std::io::Error::from_raw_os_error(errno)),
            None => Err(std::io::Error::from_raw_os_error(libc::ECHILD)),
        }
    }

    /// Waits for the writer; its exit code (an errno, or 0).
    fn reap(&mut self) -> Option<i32> {
        if self.pid <= 0 {
            return None;
        }
        let mut status = 0;
        loop {
            // SAFETY: waitpid on our own child.
            let r = unsafe { libc::waitpid(self.pid, &mut status, libc::__WALL) };
            if r == self.pid {
                break;
            }
            if r < 0 && std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
                self.pid = 0;
                return None;
            }
        }
        self.pid = 0;
        libc::WIFEXITED(status).then(|| libc::WEXITSTATUS(status))
    }
}

impl Drop for MapWriter {
    /// On an error before `finish`: the writer sees EOF, writes nothing and
    /// exits; it is reaped here.
    fn drop(&mut self) {
        if self.go_w >= 0 {
            // SAFETY: our own fd.
            unsafe { libc::close(self.go_w) };
        }
        let _ = self.reap();
    }
}

/// The writer: waits for the launcher's go, writes the three files, exits
/// with 0 or the errno. Raw syscalls only.
extern "C" fn writer_main(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `arg` is the launcher's `WriterArgs`, alive until we are
    // reaped.
    let a = unsafe { &*(arg as *const WriterArgs) };
    // SAFETY: raw syscalls on our fds and on the launcher's buffers.
    unsafe {
        raw(libc::SYS_close, a.go_w as usize, 0, 0, 0);
        let mut b = 0u8;
        loop {
            let n = raw(
                libc::SYS_read,
                a.go_r as usize,
                &mut b as *mut u8 as usize,
                1,
                0,
            );
            if n == -(libc::EINTR as isize) {
                continue;
            }
            if n != 1 {
                // The launcher gave up before its namespace existed.
                return libc::ECANCELED;
            }
            break;
        }
        for (path, (ptr, len)) in a.paths.iter().zip(a.data) {
            let fd = raw(
                libc::SYS_openat,
                libc::AT_FDCWD as usize,
                path.as_ptr() as usize,
                (libc::O_WRONLY | libc::O_CLOEXEC) as usize,
                0,
            );
            if fd < 0 {
                return (-fd) as libc::c_int;
            }
            let n = raw(libc::SYS_write, fd as usize, ptr as usize, len, 0);
            raw(libc::SYS_close, fd as usize, 0, 0, 0);
            if n != len as isize {
                return if n < 0 {
                    (-n) as libc::c_int
                } else {
                    libc::EIO
                };
            }
        }
    }
    0
}

impl WriterArgs {
    /// Empty arguments, filled by [`MapWriter::start`].
    pub(crate) fn new() -> Self {
        WriterArgs {
            go_r: -1,
            go_w: -1,
            paths: [[0; 48]; 3],
            data: [(std::ptr::null(), 0); 3],
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn proc_paths_are_built_without_allocating() {
        let mut buf = [0u8; 48];
        super::proc_path(&mut buf, 123_456, b"uid_map");
        let end = buf.iter().position(|&b| b == 0).unwrap();
        assert_eq!(&buf[..end], b"/proc/123456/uid_map");
        super::proc_path(&mut buf, 7, b"setgroups");
        let end = buf.iter().position(|&b| b == 0).unwrap();
        assert_eq!(&buf[..end], b"/proc/7/setgroups");
    }
}
