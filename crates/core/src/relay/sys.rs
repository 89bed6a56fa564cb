//! The relays' raw calls: poll, read, write, pipes and fd flags, on fds only.

#[allow(unused_imports)]
use super::*;

pub(super) fn pollfd(fd: RawFd, events: libc::c_short) -> libc::pollfd {
    libc::pollfd {
        fd,
        events,
        revents: 0,
    }
}

pub(super) fn ready(p: &libc::pollfd) -> bool {
    p.revents != 0
}

/// `poll`, restarted after `EINTR`. `Ok(0)` means the timeout passed.
pub(super) fn poll(fds: &mut [libc::pollfd], timeout: Option<Duration>) -> io::Result<usize> {
    let ms = timeout.map_or(-1, |t| {
        t.as_millis().clamp(1, i32::MAX as u128) as libc::c_int
    });
    loop {
        // SAFETY: `fds` is a valid, exclusively borrowed array of pollfd.
        let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms) };
        if n >= 0 {
            return Ok(n as usize);
        }
        let e = io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EINTR) {
            return Err(e);
        }
    }
}

pub(super) fn retry(e: &io::Error) -> bool {
    e.raw_os_error() == Some(libc::EINTR) || e.kind() == io::ErrorKind::WouldBlock
}

pub(super) fn read(fd: RawFd, buf: &mut [u8]) -> io::Result<usize> {
    // SAFETY: `buf` is valid for `buf.len()` bytes of writes.
    let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
    if n < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}

pub(super) fn write(fd: RawFd, data: &[u8]) -> io::Result<usize> {
    // SAFETY: `data` is valid for `data.len()` bytes of reads.
    let n = unsafe { libc::write(fd, data.as_ptr().cast(), data.len()) };
    if n < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}

/// Bytes buffered in a pipe (`FIONREAD`); 0 if it cannot be told.
pub(super) fn pending_bytes(fd: &OwnedFd) -> usize {
    let mut n: libc::c_int = 0;
    // SAFETY: FIONREAD writes one c_int.
    if unsafe { libc::ioctl(fd.as_raw_fd(), libc::FIONREAD, &mut n) } == 0 {
        n.max(0) as usize
    } else {
        0
    }
}

/// A close-on-exec pipe, `(read end, write end)`, both above fd 2 (so a
/// host that runs with fd 0, 1 or 2 closed cannot have a pipe end taken
/// for its own stdio).
pub(super) fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as RawFd; 2];
    // SAFETY: pipe2 writes two fds into the array.
    #[cfg(any(target_os = "linux", target_os = "android"))]
    let made = unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) };
    // No pipe2 on macOS: the fds are close-on-exec a moment later, which
    // another thread's fork could see in between (the spawn's own fd
    // hygiene still closes them in the child).
    // SAFETY: pipe writes two fds into the array.
    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    let made = unsafe { libc::pipe(fds.as_mut_ptr()) };
    if made != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both fds are fresh and owned by nobody else.
    let (r, w) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    for fd in [&r, &w] {
        // SAFETY: fcntl on an fd we own.
        if unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETFD, libc::FD_CLOEXEC) } != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok((above_stdio(r)?, above_stdio(w)?))
}

pub(super) fn above_stdio(fd: OwnedFd) -> io::Result<OwnedFd> {
    if fd.as_raw_fd() > HOST_STDERR {
        return Ok(fd);
    }
    // SAFETY: F_DUPFD_CLOEXEC returns a new fd we then own; `fd` is closed
    // when it drops.
    let dup = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, HOST_STDERR + 1) };
    if dup < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `dup` is a fresh fd.
    Ok(unsafe { OwnedFd::from_raw_fd(dup) })
}

/// Sets `O_NONBLOCK` on one of *our own* pipe ends (never on a host fd).
pub(super) fn set_nonblocking(fd: &OwnedFd) -> io::Result<()> {
    // SAFETY: fcntl on an fd we own.
    unsafe {
        let flags = libc::fcntl(fd.as_raw_fd(), libc::F_GETFL);
        if flags < 0 || libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, flags | libc::O_NONBLOCK) < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// True when host fds `a` and `b` are open on the same file.
pub(super) fn same_file(a: RawFd, b: RawFd) -> bool {
    let stat = |fd: RawFd| {
        // SAFETY: fstat writes one stat struct; zeroed is a valid start.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        (unsafe { libc::fstat(fd, &mut st) } == 0).then_some((st.st_dev, st.st_ino))
    };
    matches!((stat(a), stat(b)), (Some(x), Some(y)) if x == y)
}

/// Blocks every asynchronous signal in the calling relay thread except
/// `SIGTTOU`: the host's handlers run on its other threads; `SIGPIPE` from a
/// host write becomes `EPIPE` here; `SIGTTIN` from reading a terminal in the
/// background becomes `EIO` (the kernel fails the read instead of stopping
/// the process when the reader blocks it). `SIGTTOU` stays so a terminal
/// set to `tostop` still stops a background cordon that writes to it, as it
/// would any program.
pub(super) fn block_async_signals() {
    // SAFETY: sigset operations on a local set, then pthread_sigmask for
    // this thread only.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut set);
        libc::sigdelset(&mut set, libc::SIGTTOU);
        for sync in [libc::SIGSEGV, libc::SIGBUS, libc::SIGFPE, libc::SIGILL] {
            libc::sigdelset(&mut set, sync);
        }
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
    }
}
