//! `cordon run -t`: the program gets a terminal of its own (a new pty the
//! host relays), the caller's terminal is in raw mode while it runs and
//! exactly as it was afterwards on every way out, and a hostile program
//! reaches nothing of the caller's terminal.
//!
//! The caller's terminal is a pty this test opens and drives from its
//! master, as tmux would: cordon runs on its slave, in a session of its
//! own with it as controlling terminal. Each case runs as root and as uid
//! 65534, in tier namespaces and tier landlock.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus};
use std::time::{Duration, Instant};

use crate::common::{cordon, shared_cache, spawn, text, unprivileged, wait_within};

/// Who runs cordon and in which tier.
#[derive(Debug, Clone, Copy)]
struct Way {
    unprivileged: bool,
    landlock: bool,
}

const WAYS: [Way; 4] = [
    Way {
        unprivileged: false,
        landlock: false,
    },
    Way {
        unprivileged: false,
        landlock: true,
    },
    Way {
        unprivileged: true,
        landlock: false,
    },
    Way {
        unprivileged: true,
        landlock: true,
    },
];

/// `cordon run [--tier landlock] -t <extra> -- <program...>` for `way`.
fn cordon_tty(way: Way, dir: &Path, extra: &[&str], program: &[&str]) -> Command {
    cordon_way(way, dir, true, extra, program)
}

/// The same, with `-t` or not.
fn cordon_way(way: Way, dir: &Path, tty: bool, extra: &[&str], program: &[&str]) -> Command {
    let mut cmd = if way.unprivileged {
        unprivileged(&dir.join("as-65534"))
    } else {
        cordon(shared_cache().path())
    };
    cmd.env("TERM", "xterm").arg("run");
    if tty {
        cmd.arg("-t");
    }
    if way.landlock {
        cmd.args(["--tier", "landlock"]);
    }
    cmd.args(extra).arg("--").args(program);
    cmd
}

/// The caller's terminal: a pty whose master the test drives.
struct Caller {
    master: OwnedFd,
    slave: OwnedFd,
    path: PathBuf,
    seen: Vec<u8>,
}

impl Caller {
    fn open(rows: u16, cols: u16) -> Caller {
        let (mut master, mut slave) = (-1, -1);
        let mut name = [0 as libc::c_char; 128];
        // SAFETY: openpty writes two fds and a name of at most 128 bytes
        // (glibc's buffer need); null termios/winsize are allowed.
        let r = unsafe {
            libc::openpty(
                &mut master,
                &mut slave,
                name.as_mut_ptr(),
                std::ptr::null(),
                std::ptr::null(),
            )
        };
        assert_eq!(r, 0, "openpty: {}", std::io::Error::last_os_error());
        // SAFETY: both fds are fresh and ours; the name is NUL-terminated.
        let (master, slave, path) = unsafe {
            (
                OwnedFd::from_raw_fd(master),
                OwnedFd::from_raw_fd(slave),
                PathBuf::from(
                    std::ffi::CStr::from_ptr(name.as_ptr())
                        .to_string_lossy()
                        .into_owned(),
                ),
            )
        };
        let caller = Caller {
            master,
            slave,
            path,
            seen: Vec::new(),
        };
        caller.resize(rows, cols);
        caller
    }

    fn resize(&self, rows: u16, cols: u16) {
        let ws = libc::winsize {
            ws_row: rows,
            ws_col: cols,
            ws_xpixel: 0,
            ws_ypixel: 0,
        };
        // SAFETY: TIOCSWINSZ reads one winsize.
        let r = unsafe { libc::ioctl(self.master.as_raw_fd(), libc::TIOCSWINSZ, &ws) };
        assert_eq!(r, 0);
    }

    /// Starts `cmd` with this terminal as its stdio and controlling
    /// terminal, as a shell starts a command in the foreground.
    fn start(&self, mut cmd: Command) -> Child {
        cmd.stdin(self.slave.try_clone().unwrap())
            .stdout(self.slave.try_clone().unwrap())
            .stderr(self.slave.try_clone().unwrap());
        // SAFETY: setsid and ioctl are async-signal-safe raw syscalls.
        unsafe {
            cmd.pre_exec(|| {
                if libc::setsid() < 0 || libc::ioctl(0, libc::TIOCSCTTY, 0) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        spawn(&mut cmd)
    }

    fn send(&self, bytes: &[u8]) {
        // SAFETY: writing our own buffer to our own master.
        let n = unsafe { libc::write(self.master.as_raw_fd(), bytes.as_ptr().cast(), bytes.len()) };
        assert_eq!(n, bytes.len() as isize);
    }

    /// Reads what arrived within `limit`; true once `needle` was seen
    /// (after everything read before this call).
    fn wait_for(&mut self, needle: &str, limit: Duration) -> bool {
        let from = self.seen.len();
        let end = Instant::now() + limit;
        loop {
            if text(&self.seen[from..]).contains(needle) {
                return true;
            }
            let left = end.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            let mut p = libc::pollfd {
                fd: self.master.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one pollfd.
            let n = unsafe { libc::poll(&mut p, 1, left.as_millis().max(1) as i32) };
            if n <= 0 {
                continue;
            }
            let mut buf = [0u8; 4096];
            // SAFETY: buf is valid for its length.
            let r =
                unsafe { libc::read(self.master.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
            if r <= 0 {
                return text(&self.seen[from..]).contains(needle);
            }
            self.seen.extend_from_slice(&buf[..r as usize]);
        }
    }

    fn modes(&self) -> Modes {
        Modes::of(&self.slave)
    }

    fn transcript(&self) -> String {
        text(&self.seen)
    }
}

/// Everything `stty -a` shows of a terminal, and its file mode.
#[derive(Debug, PartialEq, Eq)]
struct Modes {
    flags: [libc::tcflag_t; 4],
    cc: Vec<libc::cc_t>,
    speeds: (libc::speed_t, libc::speed_t),
    file_mode: u32,
}

impl Modes {
    fn of(fd: &OwnedFd) -> Modes {
        // SAFETY: tcgetattr and fstat fill plain data; zeroed is a valid
        // start.
        unsafe {
            let mut t: libc::termios = std::mem::zeroed();
            assert_eq!(libc::tcgetattr(fd.as_raw_fd(), &mut t), 0);
            let mut st: libc::stat = std::mem::zeroed();
            assert_eq!(libc::fstat(fd.as_raw_fd(), &mut st), 0);
            Modes {
                flags: [t.c_iflag, t.c_oflag, t.c_cflag, t.c_lflag],
                cc: t.c_cc.to_vec(),
                speeds: (libc::cfgetispeed(&t), libc::cfgetospeed(&t)),
                file_mode: st.st_mode & 0o7777,
            }
        }
    }
}

fn finish(child: &mut Child, what: &str, caller: &Caller) -> ExitStatus {
    wait_within(child, Duration::from_secs(120)).unwrap_or_else(|| {
        panic!(
            "{what}: cordon did not exit (killed); terminal: {}",
            caller.transcript()
        )
    })
}

const LONG: Duration = Duration::from_secs(90);
const SHORT: Duration = Duration::from_secs(15);

#[test]
fn a_shell_gets_a_terminal_of_its_own_and_the_callers_is_restored() {
    for way in WAYS {
        let dir = tempfile::tempdir().unwrap();
        let mut caller = Caller::open(30, 100);
        let before = caller.modes();
        let cmd = cordon_tty(
            way,
            dir.path(),
            &[],
            &["bash", "--norc", "--noprofile", "-i"],
        );
        let mut child = caller.start(cmd);
        let say = |c: &Caller, line: &str| c.send(format!("{line}\r").as_bytes());
        // Each answer is computed by the shell, so the echo of the typed
        // line never matches it.
        say(&caller, "echo READY-$((40+2))");
        assert!(
            caller.wait_for("READY-42", LONG),
            "{way:?}: no prompt: {}",
            caller.transcript()
        );
        // Raw mode while it runs: the caller's terminal echoes nothing.
        assert_eq!(caller.modes().flags[3] & libc::ECHO, 0, "{way:?}: not raw");
        say(
            &caller,
            "test -t 0 && test -t 1 && test -t 2 && echo TTY-$((1+1))",
        );
        assert!(
            caller.wait_for("TTY-2", SHORT),
            "{way:?}: {}",
            caller.transcript()
        );
        say(&caller, "echo SIZE-$(stty size | tr ' ' x)");
        assert!(
            caller.wait_for("SIZE-30x100", SHORT),
            "{way:?}: {}",
            caller.transcript()
        );
        caller.resize(40, 120);
        std::thread::sleep(Duration::from_millis(500));
        say(&caller, "echo SIZE-$(stty size | tr ' ' x)-$(tput cols)");
        assert!(
            caller.wait_for("SIZE-40x120-120", SHORT),
            "{way:?}: resize not seen: {}",
            caller.transcript()
        );
        // ^C reaches the sandbox's terminal as a byte and interrupts its
        // foreground command, not cordon.
        say(&caller, "sleep 60; echo SLEPT-$((2+2))");
        std::thread::sleep(Duration::from_millis(800));
        caller.send(b"\x03");
        say(&caller, "echo ALIVE-$((3+3))");
        assert!(
            caller.wait_for("ALIVE-6", SHORT),
            "{way:?}: ^C did not interrupt sleep: {}",
            caller.transcript()
        );
        assert!(!caller.transcript().contains("SLEPT-4"), "{way:?}");
        say(&caller, "exit 3");
        let status = finish(&mut child, "exit 3", &caller);
        assert_eq!(status.code(), Some(3), "{way:?}: {}", caller.transcript());
        assert_eq!(
            caller.modes(),
            before,
            "{way:?}: the caller's terminal changed"
        );
    }
}

#[test]
fn the_callers_terminal_is_restored_on_every_way_out() {
    for way in WAYS {
        let dir = tempfile::tempdir().unwrap();
        // --timeout: cordon kills the program.
        let caller = Caller::open(24, 80);
        let before = caller.modes();
        let mut child = caller.start(cordon_tty(
            way,
            dir.path(),
            &["--timeout", "3"],
            &["sleep", "60"],
        ));
        let status = finish(&mut child, "timeout", &caller);
        assert_eq!(status.code(), Some(124), "{way:?}: {}", caller.transcript());
        assert_eq!(caller.modes(), before, "{way:?}: after --timeout");
        // The program SIGKILLed.
        let caller = Caller::open(24, 80);
        let mut child = caller.start(cordon_tty(
            way,
            dir.path(),
            &[],
            &["sh", "-c", "kill -9 $$"],
        ));
        let status = finish(&mut child, "SIGKILL", &caller);
        assert_eq!(status.code(), Some(137), "{way:?}: {}", caller.transcript());
        assert_eq!(
            caller.modes(),
            before,
            "{way:?}: after SIGKILL of the program"
        );
        // cordon itself told to stop.
        let mut caller = Caller::open(24, 80);
        let mut child = caller.start(cordon_tty(
            way,
            dir.path(),
            &[],
            &["sh", "-c", "echo UP-$((1+1)); exec sleep 60"],
        ));
        assert!(
            caller.wait_for("UP-2", LONG),
            "{way:?}: {}",
            caller.transcript()
        );
        // SAFETY: a signal to our own child.
        unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
        let status = finish(&mut child, "SIGTERM", &caller);
        assert_eq!(status.code(), Some(128 + libc::SIGTERM), "{way:?}");
        assert_eq!(caller.modes(), before, "{way:?}: after SIGTERM to cordon");
    }
}

#[test]
fn tty_without_a_terminal_is_refused() {
    let out = cordon(shared_cache().path())
        .args(["run", "-t", "--", "true"])
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(125));
    assert!(
        text(&out.stderr).contains("stdin is not a terminal"),
        "{}",
        text(&out.stderr)
    );
}

/// Tries what a program given a terminal could do to its user's: inject
/// input (`TIOCSTI`, `TIOCLINUX`), open the caller's terminal by path
/// (`argv[1]`), find it behind `/dev/tty`, and change the modes and file
/// mode of every terminal it holds. Prints one line per try.
const ATTACK_C: &str = r#"
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <termios.h>
#include <unistd.h>

static void quiet(int fd) {
    struct termios t;
    if (tcgetattr(fd, &t) == 0) {
        t.c_lflag &= ~(tcflag_t)ECHO;
        tcsetattr(fd, TCSANOW, &t);
    }
    fchmod(fd, 0666);
}

int main(int argc, char **argv) {
    char c = 'x';
    printf("TIOCSTI %s\n", ioctl(0, TIOCSTI, &c) == 0 ? "done" : strerror(errno));
    char sub = 12; /* TIOCL_GETSHIFTSTATE */
    printf("TIOCLINUX %s\n", ioctl(0, TIOCLINUX, &sub) == 0 ? "done" : strerror(errno));
    int fd = open(argv[1], O_RDWR | O_NOCTTY);
    printf("OPEN-CALLER %s\n", fd >= 0 ? "done" : strerror(errno));
    if (fd >= 0) {
        printf("TIOCSTI-CALLER %s\n", ioctl(fd, TIOCSTI, &c) == 0 ? "done" : strerror(errno));
        quiet(fd);
    }
    /* /dev/tty's own inode stays the file's: TIOCGDEV names the terminal
       behind it. */
    struct stat caller;
    unsigned int dev = 0;
    int t = open("/dev/tty", O_RDWR | O_NOCTTY);
    if (t >= 0 && stat(argv[1], &caller) == 0 && ioctl(t, TIOCGDEV, &dev) == 0)
        printf("DEVTTY %s\n", dev == caller.st_rdev ? "is-the-callers" : "own");
    else
        printf("DEVTTY %s\n", t >= 0 ? "own" : strerror(errno));
    if (t >= 0) quiet(t);
    for (int i = 0; i < 3; i++) quiet(i);
    printf("ATTACK-DONE\n");
    fflush(stdout);
    sleep(1);
    return 0;
}
"#;

fn attack_program(dir: &Path) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let src = dir.join("attack.c");
    let exe = dir.join("attack");
    std::fs::write(&src, ATTACK_C).unwrap();
    let out = Command::new("cc")
        .arg("-o")
        .arg(&exe)
        .arg(&src)
        .output()
        .unwrap();
    assert!(out.status.success(), "cc: {}", text(&out.stderr));
    std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
    exe
}

#[test]
fn a_program_under_tty_reaches_nothing_of_the_callers_terminal() {
    let dir = tempfile::tempdir().unwrap();
    let attack = attack_program(dir.path());
    // The control: run on the caller's terminal directly (root), every
    // try reaches it, and the host's check sees it.
    {
        let mut caller = Caller::open(24, 80);
        let before = caller.modes();
        let path = caller.path.clone();
        let mut cmd = Command::new(&attack);
        cmd.arg(&path);
        let mut child = caller.start(cmd);
        assert!(
            caller.wait_for("ATTACK-DONE", SHORT),
            "{}",
            caller.transcript()
        );
        finish(&mut child, "control", &caller);
        let t = caller.transcript();
        assert!(
            t.contains("OPEN-CALLER done") && t.contains("DEVTTY is-the-callers"),
            "{t}"
        );
        assert_ne!(
            caller.modes(),
            before,
            "control: the check cannot see a change"
        );
    }
    for way in WAYS {
        let mut caller = Caller::open(24, 80);
        // As another user, the terminal is theirs (a login's), and
        // world-writable, so only the sandbox stands in the way.
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&caller.path, std::fs::Permissions::from_mode(0o666)).unwrap();
        let before = caller.modes();
        let path = caller.path.to_str().unwrap().to_owned();
        let exe = attack.to_str().unwrap();
        let mut child = caller.start(cordon_tty(way, dir.path(), &[], &[exe, &path]));
        assert!(
            caller.wait_for("ATTACK-DONE", LONG),
            "{way:?}: {}",
            caller.transcript()
        );
        let status = finish(&mut child, "attack", &caller);
        let t = caller.transcript();
        assert_eq!(status.code(), Some(0), "{way:?}: {t}");
        // (No `DEVTTY own` here: device numbers repeat across devpts
        // instances, and the sandbox's pty is in one of its own; the
        // program turned echo off on /dev/tty, so the modes check below is
        // what tells whether /dev/tty was the caller's.)
        for refused in [
            "TIOCSTI Operation not permitted",
            "TIOCLINUX Operation not permitted",
        ] {
            assert!(t.contains(refused), "{way:?}: expected `{refused}`: {t}");
        }
        assert!(!t.contains("OPEN-CALLER done"), "{way:?}: {t}");
        assert_eq!(
            caller.modes(),
            before,
            "{way:?}: the caller's terminal changed: {t}"
        );
    }
}

/// The host's `/dev/pts` entry whose file is `(dev, ino)`, if any.
fn host_pts_entry(dev: u64, ino: u64) -> Option<PathBuf> {
    use std::os::unix::fs::MetadataExt;
    std::fs::read_dir("/dev/pts").ok()?.flatten().find_map(|e| {
        let m = std::fs::symlink_metadata(e.path()).ok()?;
        (m.dev() == dev && m.ino() == ino).then(|| e.path())
    })
}

/// Whether uid 4321 (a local user of no concern to the test) can open
/// `path` for writing.
fn another_user_opens(path: &Path) -> bool {
    Command::new("/bin/sh")
        .args(["-c", "exec 3<>\"$1\" && echo OPENED", "sh"])
        .arg(path)
        .uid(4321)
        .gid(4321)
        .output()
        .is_ok_and(|o| text(&o.stdout).contains("OPENED"))
}

#[test]
fn a_terminal_the_program_opens_up_is_no_other_users() {
    // SAFETY: geteuid cannot fail.
    let euid = unsafe { libc::geteuid() };
    assert_eq!(euid, 0, "runs as root (it becomes other uids)");
    // The control: a pty of the host's made world-writable is found by
    // the host's check and opened by another user.
    {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        let c = Caller::open(24, 80);
        std::fs::set_permissions(&c.path, std::fs::Permissions::from_mode(0o666)).unwrap();
        let m = std::fs::metadata(&c.path).unwrap();
        let found = host_pts_entry(m.dev(), m.ino()).expect("control: the check finds a host pty");
        assert!(
            another_user_opens(&found),
            "control: another user cannot open {found:?}"
        );
    }
    for way in WAYS {
        let dir = tempfile::tempdir().unwrap();
        let mut caller = Caller::open(24, 80);
        // Opens its terminal to everyone, says which file it is, and waits.
        let script = "chmod 0666 /proc/self/fd/0 2>/dev/null; \
                      echo \"PTY $(stat -L -c '%d %i' /proc/self/fd/0) END\"; sleep 5";
        let mut child = caller.start(cordon_tty(way, dir.path(), &[], &["sh", "-c", script]));
        assert!(
            caller.wait_for(" END", LONG),
            "{way:?}: {}",
            caller.transcript()
        );
        let t = caller.transcript();
        let line = t
            .lines()
            .find(|l| l.contains("PTY ") && l.contains(" END"))
            .unwrap()
            .to_owned();
        let mut f = line.split("PTY ").nth(1).unwrap().split_whitespace();
        let (dev, ino): (u64, u64) = (
            f.next().unwrap().parse().unwrap(),
            f.next().unwrap().parse().unwrap(),
        );
        // The sandbox's pty is nowhere on the host's /dev/pts, or if it is,
        // still closed to others.
        if let Some(entry) = host_pts_entry(dev, ino) {
            assert!(
                !another_user_opens(&entry),
                "{way:?}: another user opened the sandbox's terminal {entry:?}"
            );
        }
        // SAFETY: a signal to our own child.
        unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
        finish(&mut child, "SIGTERM", &caller);
        assert_eq!(caller.modes().flags[3] & libc::ECHO, libc::ECHO, "{way:?}");
    }
}

/// The program starts with no signal blocked, with and without `-t` (the
/// init blocks every signal before it takes the terminal; the program it
/// makes must not inherit that, or `^C`, `SIGTERM` and job control would
/// reach nothing).
#[test]
fn the_program_starts_with_no_signal_blocked() {
    let probe =
        "import signal; print('BLOCKED', sorted(signal.pthread_sigmask(signal.SIG_BLOCK, [])))";
    for way in WAYS {
        let dir = tempfile::tempdir().unwrap();
        let mut caller = Caller::open(24, 80);
        let mut child = caller.start(cordon_tty(
            way,
            dir.path(),
            &[],
            &["/usr/bin/python3", "-c", probe],
        ));
        assert!(
            caller.wait_for("BLOCKED", LONG),
            "{way:?}: {}",
            caller.transcript()
        );
        finish(&mut child, "mask", &caller);
        assert!(
            caller.transcript().contains("BLOCKED []"),
            "{way:?}: {}",
            caller.transcript()
        );
        let mut cmd = cordon_way(
            way,
            dir.path(),
            false,
            &[],
            &["/usr/bin/python3", "-c", probe],
        );
        let out = crate::common::run(&mut cmd);
        assert!(
            text(&out.stdout).contains("BLOCKED []"),
            "{way:?} without -t: {}",
            text(&out.stdout)
        );
    }
}
