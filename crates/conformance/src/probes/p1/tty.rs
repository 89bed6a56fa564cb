//! P1's terminal part: the harness opens a pty of its own, as a terminal a
//! host user would be sitting at, and makes its slave world-accessible
//! (0666) so only the sandbox stands in the way. The child tries to open it
//! by path, make it its controlling terminal (`TIOCSCTTY`), switch echo off
//! and `fchmod` it. While the child is held the host reads the program's
//! `tty_nr` (`/proc/<pid>/stat` field 7: 0 = no controlling terminal);
//! afterwards it checks the pty's modes and file mode are unchanged.
//!
//! (The child cannot reach the harness's terminal any other way: the runner
//! starts it in a new session, with no fd but its three pipes.)

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::PathBuf;

use cordon_core::CheckResult;

use crate::child::{self, Reporter, DENIED};
use crate::harness::{fail, unreachable, verdict};
use crate::inspect;

/// The host's pty and what it looked like before the child ran.
pub(crate) struct HostPty {
    master: OwnedFd,
    pub slave: PathBuf,
    flags: [libc::tcflag_t; 4],
    mode: u32,
}

fn termios_flags(fd: i32) -> std::io::Result<[libc::tcflag_t; 4]> {
    // SAFETY: termios is plain data that tcgetattr fills.
    unsafe {
        let mut t: libc::termios = std::mem::zeroed();
        if libc::tcgetattr(fd, &mut t) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok([t.c_iflag, t.c_oflag, t.c_cflag, t.c_lflag])
    }
}

fn file_mode(path: &std::path::Path) -> std::io::Result<u32> {
    use std::os::unix::fs::MetadataExt;
    Ok(std::fs::metadata(path)?.mode() & 0o7777)
}

impl HostPty {
    /// Opens a pty pair's master and prepares its slave path.
    pub(crate) fn open() -> std::io::Result<HostPty> {
        use std::os::unix::fs::PermissionsExt;
        // SAFETY: posix_openpt returns a new fd or -1.
        let fd = unsafe { libc::posix_openpt(libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: fd is a fresh descriptor we own.
        let master = unsafe { OwnedFd::from_raw_fd(fd) };
        let mut name = [0 as libc::c_char; 128];
        // SAFETY: grantpt/unlockpt on our master; ptsname_r writes at most
        // name.len() bytes, NUL-terminated.
        unsafe {
            if libc::grantpt(fd) != 0
                || libc::unlockpt(fd) != 0
                || libc::ptsname_r(fd, name.as_mut_ptr(), name.len()) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
        }
        // SAFETY: ptsname_r wrote a NUL-terminated string.
        let slave = unsafe { std::ffi::CStr::from_ptr(name.as_ptr()) }
            .to_string_lossy()
            .into_owned();
        let slave = PathBuf::from(slave);
        std::fs::set_permissions(&slave, std::fs::Permissions::from_mode(0o666))?;
        Ok(HostPty {
            flags: termios_flags(master.as_raw_fd())?,
            mode: file_mode(&slave)?,
            master,
            slave,
        })
    }

    /// After the child: the terminal modes and the slave's file mode are
    /// what they were.
    pub(crate) fn verify(&self) -> CheckResult {
        const NAME: &str = "host-pty-unchanged";
        match (
            termios_flags(self.master.as_raw_fd()),
            file_mode(&self.slave),
        ) {
            (Ok(flags), Ok(mode)) => {
                let mut changed = Vec::new();
                if flags != self.flags {
                    changed.push(format!(
                        "terminal modes (lflag {:#o} -> {:#o})",
                        self.flags[3], flags[3]
                    ));
                }
                if mode != self.mode {
                    changed.push(format!("file mode {:o} -> {mode:o}", self.mode));
                }
                verdict(
                    NAME,
                    changed.is_empty(),
                    if changed.is_empty() {
                        "terminal modes and file mode unchanged".to_string()
                    } else {
                        format!(
                            "the child changed the host's terminal: {}",
                            changed.join(", ")
                        )
                    },
                )
            }
            (Err(e), _) | (_, Err(e)) => fail(NAME, format!("cannot read the pty: {e}")),
        }
    }
}

/// At the hold: the program has no controlling terminal.
pub(crate) fn controlling_tty(pid: Option<i32>) -> CheckResult {
    const NAME: &str = "controlling-tty";
    let Some(pid) = pid else {
        return unreachable(NAME, "the program was not found by its token");
    };
    match inspect::stat_field(pid, 7) {
        Some(tty) => verdict(
            NAME,
            tty == "0",
            if tty == "0" {
                "the program has no controlling terminal".to_string()
            } else {
                format!("the program has a controlling terminal (tty_nr {tty})")
            },
        ),
        None => unreachable(NAME, "cannot read the program's stat"),
    }
}

/// The child's attack: returns the pty fd if it got one, to be kept open
/// (and its controlling-terminal status visible) until the host has looked.
pub(crate) fn attack(r: &mut Reporter, path: Option<&String>) -> Option<i32> {
    let Some(path) = path else {
        r.check(
            "open-host-pty",
            cordon_core::ProbeStatus::Unreachable,
            "the host had no pty",
        );
        return None;
    };
    match child::open(path, libc::O_RDWR | libc::O_NOCTTY) {
        Ok(fd) => {
            // SAFETY: ioctl/tcgetattr/tcsetattr/fchmod on the fd we opened.
            let what = unsafe {
                let ctty = libc::ioctl(fd, libc::TIOCSCTTY, 0) == 0;
                let mut t: libc::termios = std::mem::zeroed();
                let mut echo_off = false;
                if libc::tcgetattr(fd, &mut t) == 0 {
                    t.c_lflag &= !libc::ECHO;
                    echo_off = libc::tcsetattr(fd, libc::TCSANOW, &t) == 0;
                }
                let chmod = libc::fchmod(fd, 0o600) == 0;
                format!("opened {path} (TIOCSCTTY: {ctty}, echo off: {echo_off}, fchmod: {chmod})")
            };
            r.forbidden("open-host-pty", Ok(what), &DENIED);
            Some(fd)
        }
        Err(e) => {
            r.forbidden("open-host-pty", Err(e), &DENIED);
            None
        }
    }
}
