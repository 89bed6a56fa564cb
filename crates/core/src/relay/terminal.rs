//! The pieces of [`StdioMode::Terminal`]: a new pseudo-terminal for the
//! child, the host terminal's raw mode (kept and restored), and its window
//! size.
//!
//! The pty is opened here with `O_NOCTTY` (the host never takes it as its
//! own controlling terminal); on Linux its slave comes from the master
//! itself (`TIOCGPTPEER`, Linux 4.13), never by a path someone could
//! swap. Only the child gets the slave: the runner closes its copy once
//! the child started, so the master reads `EIO` when the sandbox's last
//! holder is gone.
//!
//! [`StdioMode::Terminal`]: crate::StdioMode::Terminal

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

/// How often the relay looks at the host terminal's window size, to copy a
/// change to the child's terminal (which then sends its foreground group
/// `SIGWINCH`). Looked at rather than signalled: a `SIGWINCH` handler
/// would be the embedder's to install.
pub const WINDOW_SIZE_POLL: Duration = Duration::from_millis(100);

/// A new pty: the master (ours) and the slave (the child's).
pub(crate) struct Pty {
    pub(crate) master: OwnedFd,
    pub(crate) slave: OwnedFd,
}

fn check(r: libc::c_int) -> io::Result<libc::c_int> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

impl Pty {
    /// `pair` (a backend's own, `SandboxBackend::open_terminal`), or a new
    /// pty pair of the host's, the slave sized as the host's terminal on
    /// fd 0 if there is one.
    pub(crate) fn open(pair: Option<(OwnedFd, OwnedFd)>) -> io::Result<Pty> {
        if let Some((master, slave)) = pair {
            if let Some(size) = window_size(0) {
                set_window_size(master.as_raw_fd(), &size);
            }
            return Ok(Pty {
                master: super::above_stdio(master)?,
                slave: super::above_stdio(slave)?,
            });
        }
        // SAFETY: posix_openpt returns a new fd or -1.
        let fd =
            check(unsafe { libc::posix_openpt(libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC) })?;
        // SAFETY: a fresh fd only we hold.
        let master = super::above_stdio(unsafe { OwnedFd::from_raw_fd(fd) })?;
        // SAFETY: grantpt/unlockpt on our own master.
        unsafe {
            check(libc::grantpt(master.as_raw_fd()))?;
            check(libc::unlockpt(master.as_raw_fd()))?;
        }
        let slave = open_slave(&master)?;
        if let Some(size) = window_size(0) {
            set_window_size(master.as_raw_fd(), &size);
        }
        Ok(Pty {
            master,
            slave: super::above_stdio(slave)?,
        })
    }
}

#[cfg(target_os = "linux")]
fn open_slave(master: &OwnedFd) -> io::Result<OwnedFd> {
    // TIOCGPTPEER: the slave of this very master, opened without a path.
    const TIOCGPTPEER: libc::c_ulong = 0x5441;
    // SAFETY: the ioctl returns a new fd or -1.
    let fd = check(unsafe {
        libc::ioctl(
            master.as_raw_fd(),
            TIOCGPTPEER,
            libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC,
        )
    })?;
    // SAFETY: a fresh fd only we hold.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

#[cfg(not(target_os = "linux"))]
fn open_slave(master: &OwnedFd) -> io::Result<OwnedFd> {
    // SAFETY: ptsname returns a pointer to a static, NUL-terminated name or
    // NULL; it is copied at once (no other thread opens ptys here).
    let name = unsafe {
        let p = libc::ptsname(master.as_raw_fd());
        if p.is_null() {
            return Err(io::Error::last_os_error());
        }
        std::ffi::CStr::from_ptr(p).to_owned()
    };
    // SAFETY: a NUL-terminated path; returns a new fd or -1.
    let fd = check(unsafe {
        libc::open(
            name.as_ptr(),
            libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC,
        )
    })?;
    // SAFETY: a fresh fd only we hold.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// The window size of the terminal on `fd`, if it is one.
pub(crate) fn window_size(fd: RawFd) -> Option<libc::winsize> {
    // SAFETY: TIOCGWINSZ writes one winsize; zeroed is a valid start.
    let mut ws: libc::winsize = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    (unsafe { libc::ioctl(fd, libc::TIOCGWINSZ, &mut ws) } == 0).then_some(ws)
}

/// Sets the child's terminal's size (the kernel sends its foreground
/// process group `SIGWINCH` when it changes).
pub(crate) fn set_window_size(master: RawFd, ws: &libc::winsize) {
    // SAFETY: TIOCSWINSZ reads one winsize.
    unsafe { libc::ioctl(master, libc::TIOCSWINSZ, ws) };
}

/// Two window sizes are the same.
pub(crate) fn same_size(a: &libc::winsize, b: &libc::winsize) -> bool {
    (a.ws_row, a.ws_col, a.ws_xpixel, a.ws_ypixel) == (b.ws_row, b.ws_col, b.ws_xpixel, b.ws_ypixel)
}

/// The host terminal (fd 0) in raw mode; its modes as they were are put
/// back by [`restore`](RawMode::restore) or on drop, once.
pub(crate) struct RawMode {
    saved: Option<libc::termios>,
}

impl RawMode {
    /// Puts the host's terminal on fd 0 in raw mode; `None` when fd 0 is
    /// not a terminal (nothing is changed then).
    pub(crate) fn enter() -> io::Result<Option<RawMode>> {
        // SAFETY: isatty only inspects the fd.
        if unsafe { libc::isatty(0) } != 1 {
            return Ok(None);
        }
        // SAFETY: termios is plain data that tcgetattr fills.
        let mut saved: libc::termios = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        check(unsafe { libc::tcgetattr(0, &mut saved) })?;
        let mut raw = saved;
        // SAFETY: cfmakeraw edits the local copy.
        unsafe { libc::cfmakeraw(&mut raw) };
        // SAFETY: tcsetattr reads one termios.
        check(unsafe { libc::tcsetattr(0, libc::TCSANOW, &raw) })?;
        Ok(Some(RawMode { saved: Some(saved) }))
    }

    /// Puts the terminal's modes back as they were (once).
    pub(crate) fn restore(&mut self) {
        if let Some(saved) = self.saved.take() {
            // SAFETY: tcsetattr reads one termios. TCSANOW: a stalled
            // terminal (a hung ssh) must not hold the host's exit.
            unsafe { libc::tcsetattr(0, libc::TCSANOW, &saved) };
        }
    }
}

impl Drop for RawMode {
    fn drop(&mut self) {
        self.restore();
    }
}
