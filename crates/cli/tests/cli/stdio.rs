//! `cordon run`'s standard streams: the program reaches the caller's stdin,
//! stdout and stderr only through pipes cordon relays, never through the
//! caller's own descriptors (breach 7 of the isolation issue), and the
//! relay loses nothing, keeps order, passes EOF and EPIPE on, and ends with
//! the program.
//!
//! Each attack runs under the hygiene-only runner (`--trusted`: the test is
//! then about stdio alone, with no sandbox layer that could hide a result)
//! and under the real backend, as root and as uid 65534.

use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::Duration;

use crate::common;
use crate::common::{cordon, spawn, text, unprivileged};

/// A hostile program, in C so that it runs unchanged inside the sandbox
/// (the system library dirs are readable there; an interpreter's modules
/// may not be). `log`: tries to clear O_APPEND on fd 1, truncate it, seek
/// to 0 and write over the caller's log. `tty`: tries to turn echo off and
/// chmod 0666 on fds 0, 1, 2.
const HOSTILE_C: &str = r#"
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <termios.h>
#include <unistd.h>

static void report(const char *what, int fd, int failed) {
    dprintf(2, "%s(%d): %s\n", what, fd, failed ? strerror(errno) : "done");
}

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "log") == 0) {
        report("fcntl F_SETFL 0", 1, fcntl(1, F_SETFL, 0) < 0);
        report("ftruncate 0", 1, ftruncate(1, 0) < 0);
        report("lseek 0", 1, lseek(1, 0, SEEK_SET) < 0);
        const char *msg = "program output\n";
        return write(1, msg, strlen(msg)) == (ssize_t)strlen(msg) ? 0 : 1;
    }
    if (argc > 1 && strcmp(argv[1], "tty") == 0) {
        for (int fd = 0; fd < 3; fd++) {
            struct termios t;
            if (tcgetattr(fd, &t) == 0) {
                t.c_lflag &= ~(tcflag_t)ECHO;
                report("tcsetattr -echo", fd, tcsetattr(fd, TCSANOW, &t) != 0);
            } else {
                report("tcgetattr", fd, 1);
            }
            report("fchmod 0666", fd, fchmod(fd, 0666) != 0);
        }
        dprintf(1, "hostile program ran\n");
        return 0;
    }
    return 2;
}
"#;

/// Compiles the hostile program into `dir` (made 0755 so uid 65534, and
/// the sandbox running as it, can execute it).
fn hostile(dir: &Path) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let src = dir.join("hostile.c");
    let exe = dir.join("hostile");
    std::fs::write(&src, HOSTILE_C).unwrap();
    let out = Command::new("cc")
        .arg("-o")
        .arg(&exe)
        .arg(&src)
        .output()
        .expect("a C compiler (cc) to build the hostile test program");
    assert!(out.status.success(), "cc failed: {}", text(&out.stderr));
    std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
    exe
}

/// The four ways the attacks run: hygiene only or sandboxed, as the current
/// uid (root here) or as 65534.
#[derive(Debug, Clone, Copy)]
struct Way {
    sandboxed: bool,
    unprivileged: bool,
}

const WAYS: [Way; 4] = [
    Way {
        sandboxed: false,
        unprivileged: false,
    },
    Way {
        sandboxed: true,
        unprivileged: false,
    },
    Way {
        sandboxed: false,
        unprivileged: true,
    },
    Way {
        sandboxed: true,
        unprivileged: true,
    },
];

/// `cordon run [--trusted] -- <program> <args>`, set up for `way`, in the
/// fresh directory `dir` (which also holds cordon's cache).
fn cordon_run(way: Way, dir: &Path, program: &Path, args: &[&str]) -> Command {
    let mut cmd = if way.unprivileged {
        unprivileged(&dir.join("as-65534"))
    } else {
        cordon(&dir.join("cache"))
    };
    cmd.arg("run");
    if !way.sandboxed {
        cmd.arg("--trusted");
    }
    cmd.arg("--").arg(program).args(args);
    cmd
}

/// Waits for `child`, killing it and failing the test if it takes longer
/// than `limit` (a relay that hangs must fail, not stall the suite).
fn wait_bounded(child: &mut Child, limit: Duration, what: &str) -> ExitStatus {
    common::wait_within(child, limit)
        .unwrap_or_else(|| panic!("{what}: cordon did not exit (killed after {limit:?})"))
}

/// Runs `cmd` with `input` on its stdin and its stdout/stderr captured,
/// bounded by 60 s (the first run of a cache dir includes the conformance
/// gate).
fn run_with_input(mut cmd: Command, input: Vec<u8>, what: &str) -> (ExitStatus, Vec<u8>, Vec<u8>) {
    let mut child = spawn(
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped()),
    );
    let mut stdin = child.stdin.take().unwrap();
    let feeder = std::thread::spawn(move || {
        let _ = stdin.write_all(&input);
    });
    let mut stdout = child.stdout.take().unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let out = std::thread::spawn(move || {
        let mut v = Vec::new();
        stdout.read_to_end(&mut v).unwrap();
        v
    });
    let err = std::thread::spawn(move || {
        let mut v = Vec::new();
        stderr.read_to_end(&mut v).unwrap();
        v
    });
    let status = wait_bounded(&mut child, Duration::from_secs(60), what);
    feeder.join().unwrap();
    (status, out.join().unwrap(), err.join().unwrap())
}

/// Runs `attack` each way and fails with every way that let it through.
fn each_way(attack: impl Fn(Way) -> Result<(), String>) {
    let breaches: Vec<String> = WAYS
        .iter()
        .filter_map(|&way| attack(way).err().map(|e| format!("{way:?}: {e}")))
        .collect();
    assert!(breaches.is_empty(), "{}", breaches.join("\n\n"));
}

#[test]
fn the_program_cannot_rewrite_the_callers_append_only_log() {
    // The control: run directly on the log (no cordon), the program does
    // rewrite it, so the check below can see a breach.
    {
        let dir = tempfile::tempdir().unwrap();
        let prog = hostile(dir.path());
        let log = dir.path().join("host.log");
        std::fs::write(&log, "original line\n").unwrap();
        let file = std::fs::OpenOptions::new().append(true).open(&log).unwrap();
        let out = Command::new(&prog)
            .arg("log")
            .stdin(Stdio::null())
            .stdout(file)
            .output()
            .unwrap();
        assert_eq!(
            std::fs::read_to_string(&log).unwrap(),
            "program output\n",
            "control: the program could not rewrite a log it holds directly: {}",
            text(&out.stderr)
        );
    }
    each_way(|way| {
        let dir = tempfile::tempdir().unwrap();
        let prog = hostile(dir.path());
        let log = dir.path().join("host.log");
        std::fs::write(&log, "original line\n").unwrap();
        let file = std::fs::OpenOptions::new().append(true).open(&log).unwrap();
        // The same open file description as cordon's stdout, to check its
        // flags afterwards.
        let ours = file.try_clone().unwrap();
        let (status, stderr) = {
            let mut child = spawn(
                cordon_run(way, dir.path(), &prog, &["log"])
                    .stdin(Stdio::null())
                    .stdout(file)
                    .stderr(Stdio::piped()),
            );
            let mut stderr = String::new();
            child
                .stderr
                .take()
                .unwrap()
                .read_to_string(&mut stderr)
                .unwrap();
            let status = wait_bounded(&mut child, Duration::from_secs(60), "log attack");
            (status, stderr)
        };
        // The program ran all three attempts (its report is on stderr).
        assert_eq!(status.code(), Some(0), "{way:?}: {stderr}");
        assert!(stderr.contains("lseek 0(1):"), "{way:?}: {stderr}");
        // The caller's line is intact, the program's output appended...
        let content = std::fs::read_to_string(&log).unwrap();
        if content != "original line\nprogram output\n" {
            return Err(format!(
                "the program changed the caller's log through fd 1 (now {content:?}); \
                 its report:\n{stderr}"
            ));
        }
        // ...and the caller's file description still appends.
        // SAFETY: F_GETFL on an fd we own.
        let flags = unsafe { libc::fcntl(ours.as_raw_fd(), libc::F_GETFL) };
        if flags & libc::O_APPEND == 0 {
            return Err("O_APPEND was cleared on the caller's file description".into());
        }
        Ok(())
    });
}

/// A pseudo-terminal pair opened by the test.
struct Pty {
    master: OwnedFd,
    slave: OwnedFd,
}

fn open_pty() -> Pty {
    let (mut master, mut slave) = (-1, -1);
    // SAFETY: openpty writes two fds; null name/termios/winsize are allowed.
    let r = unsafe {
        libc::openpty(
            &mut master,
            &mut slave,
            std::ptr::null_mut(),
            std::ptr::null(),
            std::ptr::null(),
        )
    };
    assert_eq!(r, 0, "openpty: {}", std::io::Error::last_os_error());
    // SAFETY: both fds are fresh and ours.
    unsafe {
        Pty {
            master: OwnedFd::from_raw_fd(master),
            slave: OwnedFd::from_raw_fd(slave),
        }
    }
}

fn echo_on(tty: &OwnedFd) -> bool {
    // SAFETY: tcgetattr fills a termios; zeroed is a valid start.
    let mut t: libc::termios = unsafe { std::mem::zeroed() };
    // SAFETY: as above, on an fd we own.
    assert_eq!(unsafe { libc::tcgetattr(tty.as_raw_fd(), &mut t) }, 0);
    t.c_lflag & libc::ECHO != 0
}

fn mode(fd: &OwnedFd) -> u32 {
    // SAFETY: fstat fills a stat; zeroed is a valid start.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: as above, on an fd we own.
    assert_eq!(unsafe { libc::fstat(fd.as_raw_fd(), &mut st) }, 0);
    st.st_mode & 0o7777
}

/// What cordon wrote to the terminal so far (the master side, non-blocking).
fn terminal_output(master: &OwnedFd) -> String {
    // SAFETY: fcntl/read on the test's own master fd.
    unsafe {
        let fl = libc::fcntl(master.as_raw_fd(), libc::F_GETFL);
        libc::fcntl(master.as_raw_fd(), libc::F_SETFL, fl | libc::O_NONBLOCK);
    }
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        // SAFETY: buf is valid for its length.
        let n = unsafe { libc::read(master.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
        if n <= 0 {
            break;
        }
        out.extend_from_slice(&buf[..n as usize]);
    }
    text(&out)
}

/// Makes `tty` the stdin, stdout, stderr and controlling terminal of
/// `cmd`, as a login shell's terminal is for the commands it starts.
fn on_terminal(cmd: &mut Command, tty: &OwnedFd) {
    cmd.stdin(tty.try_clone().unwrap())
        .stdout(tty.try_clone().unwrap())
        .stderr(tty.try_clone().unwrap());
    // SAFETY: setsid and ioctl are async-signal-safe raw syscalls.
    unsafe {
        cmd.pre_exec(|| {
            if libc::setsid() < 0 || libc::ioctl(0, libc::TIOCSCTTY, 0) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

#[test]
fn the_program_cannot_change_the_callers_terminal() {
    // The control: run directly on a terminal (no cordon), the program
    // does turn its echo off and change its mode.
    {
        let dir = tempfile::tempdir().unwrap();
        let prog = hostile(dir.path());
        let pty = open_pty();
        let mode_before = mode(&pty.slave);
        let mut cmd = Command::new(&prog);
        cmd.arg("tty");
        on_terminal(&mut cmd, &pty.slave);
        let mut child = spawn(&mut cmd);
        drop(cmd);
        wait_bounded(&mut child, Duration::from_secs(60), "tty control");
        let output = terminal_output(&pty.master);
        assert!(
            !echo_on(&pty.slave) && mode(&pty.slave) != mode_before,
            "control: the program could not change a terminal it holds directly: {output}"
        );
    }
    each_way(|way| {
        let dir = tempfile::tempdir().unwrap();
        let prog = hostile(dir.path());
        let pty = open_pty();
        // SAFETY: geteuid cannot fail.
        if way.unprivileged && unsafe { libc::geteuid() } == 0 {
            // The caller's own terminal, as after a login as that user: in
            // the old design its owner's program could chmod it.
            assert_eq!(
                // SAFETY: fchown on an fd we own.
                unsafe { libc::fchown(pty.slave.as_raw_fd(), 65534, u32::MAX) },
                0
            );
        }
        assert!(echo_on(&pty.slave));
        let mode_before = mode(&pty.slave);
        let mut cmd = cordon_run(way, dir.path(), &prog, &["tty"]);
        on_terminal(&mut cmd, &pty.slave);
        let mut child = spawn(&mut cmd);
        drop(cmd);
        let status = wait_bounded(&mut child, Duration::from_secs(60), "tty attack");
        let output = terminal_output(&pty.master);
        assert_eq!(status.code(), Some(0), "{way:?}: {output}");
        assert!(output.contains("hostile program ran"), "{way:?}: {output}");
        let mut breaches = Vec::new();
        if !echo_on(&pty.slave) {
            breaches.push("the program turned the caller's terminal echo off".to_string());
        }
        let mode_after = mode(&pty.slave);
        if mode_after != mode_before {
            breaches.push(format!(
                "the program changed the caller's terminal mode from {mode_before:o} to {mode_after:o}"
            ));
        }
        if breaches.is_empty() {
            Ok(())
        } else {
            Err(format!("{}; its report:\n{output}", breaches.join("; ")))
        }
    });
}

#[test]
fn stdin_reaches_the_program_and_its_eof_follows() {
    for way in WAYS {
        let dir = tempfile::tempdir().unwrap();
        let cmd = cordon_run(
            way,
            dir.path(),
            Path::new("/bin/sh"),
            &["-c", "cat; echo eof-seen"],
        );
        let (status, out, err) = run_with_input(cmd, b"hi\n".to_vec(), "stdin relay");
        assert_eq!(status.code(), Some(0), "{way:?}: {}", text(&err));
        assert_eq!(text(&out), "hi\neof-seen\n", "{way:?}: {}", text(&err));
    }
}

fn numbers(n: u32) -> String {
    (1..=n).map(|i| format!("{i}\n")).collect()
}

#[test]
fn large_streams_arrive_complete_and_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let way = Way {
        sandboxed: true,
        unprivileged: false,
    };
    // Both output streams at once, several MiB on stdout.
    let cmd = cordon_run(
        way,
        dir.path(),
        Path::new("/bin/sh"),
        &["-c", "seq 1 300000 >&2 & seq 1 1000000; wait"],
    );
    let (status, out, err) = run_with_input(cmd, Vec::new(), "large output");
    assert_eq!(status.code(), Some(0), "{}", text(&err));
    assert!(out.len() > 6 << 20);
    assert!(
        out == numbers(1_000_000).as_bytes(),
        "stdout incomplete or reordered"
    );
    assert!(
        err == numbers(300_000).as_bytes(),
        "stderr incomplete or reordered"
    );

    // 8 MiB through stdin and back out, never repeating a 4-byte word.
    let input: Vec<u8> = (0u32..2 << 20).flat_map(|i| i.to_le_bytes()).collect();
    let cmd = cordon_run(way, dir.path(), Path::new("/bin/cat"), &[]);
    let (status, out, err) = run_with_input(cmd, input.clone(), "large input");
    assert_eq!(status.code(), Some(0), "{}", text(&err));
    assert_eq!(out.len(), input.len());
    assert!(out == input, "stdin relay lost or reordered bytes");
}

#[test]
fn a_closed_stdout_ends_the_program_with_sigpipe() {
    let dir = tempfile::tempdir().unwrap();
    let way = Way {
        sandboxed: true,
        unprivileged: false,
    };
    let mut child = spawn(
        cordon_run(way, dir.path(), Path::new("/usr/bin/yes"), &[])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped()),
    );
    let mut stdout = child.stdout.take().unwrap();
    let mut first = [0u8; 2];
    if let Err(e) = stdout.read_exact(&mut first) {
        // cordon ended before the program wrote: say why.
        let out = child.wait_with_output().unwrap();
        panic!(
            "no output from yes ({e}); cordon ended with {:?}: {}",
            out.status,
            text(&out.stderr)
        );
    }
    assert_eq!(&first, b"y\n");
    drop(stdout); // as `head -1` does
    let status = wait_bounded(&mut child, Duration::from_secs(20), "yes | head -1");
    assert_eq!(
        status.code(),
        Some(128 + libc::SIGPIPE),
        "the program should die of SIGPIPE, as in a plain pipeline"
    );

    // And as a shell writes it.
    let script = format!(
        "{} run -- yes | head -1",
        cordon(&dir.path().join("cache"))
            .get_program()
            .to_str()
            .unwrap()
    );
    let mut sh = Command::new("/bin/sh");
    sh.arg("-c")
        .arg(script)
        .env("XDG_CACHE_HOME", dir.path().join("cache"));
    let (status, out, err) = run_with_input(sh, Vec::new(), "sh: yes | head -1");
    assert_eq!(status.code(), Some(0), "{}", text(&err));
    assert_eq!(text(&out), "y\n");
}

#[test]
fn a_background_cordon_is_not_stopped_by_its_terminal_and_takes_no_input() {
    // A job-control shell on a terminal starts cordon in the background;
    // a line is already typed. Reading it would stop cordon (SIGTTIN) or
    // take the line from the foreground job; the relay must do neither.
    for sandboxed in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let cache = dir.path().join("cache");
        let trusted = if sandboxed { "" } else { "--trusted" };
        let script = format!(
            "set -m; {} run {trusted} -- /bin/sleep 1 & sleep 0.3; wait $!; echo cordon=$?; \
             read line; echo fg got: $line",
            common::CORDON
        );
        let pty = open_pty();
        let mut sh = Command::new("/bin/sh");
        sh.arg("-c").arg(script).env("XDG_CACHE_HOME", &cache);
        on_terminal(&mut sh, &pty.slave);
        (&std::fs::File::from(pty.master.try_clone().unwrap()))
            .write_all(b"typed\n")
            .unwrap();
        let mut child = spawn(&mut sh);
        drop(sh);
        let status = wait_bounded(&mut child, Duration::from_secs(60), "background cordon");
        let output = terminal_output(&pty.master);
        assert_eq!(status.code(), Some(0), "{output}");
        assert!(
            output.contains("cordon=0"),
            "sandboxed={sandboxed}: cordon did not finish normally in the background:\n{output}"
        );
        assert!(
            output.contains("fg got: typed"),
            "sandboxed={sandboxed}: the foreground job lost its input:\n{output}"
        );
    }
}
