//! A hostile package against `cordon star run`: a flood of notifications
//! with nobody reading cordon's stderr, secrets kept off argv, and
//! in-process value builders the size checks must refuse.

use std::io::Read as _;
use std::os::fd::{FromRawFd, OwnedFd};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::common::{cordon, text};
use super::operator::{package_dir, Operator, Who};
use super::script;

/// What one cordon run left: its exit code, how long it took, its peak
/// RSS (of cordon itself) and its stderr (what fitted in the pipe, read
/// only after it exited).
struct Ended {
    code: Option<i32>,
    took: Duration,
    peak_mib: i64,
    stderr: String,
}

/// Runs `cmd` with its stderr on a pipe that nobody reads while it runs,
/// under a 3 GiB address-space limit (so a regression fails this test
/// instead of taking the shared host's memory), and reaps it with wait4
/// for its own peak RSS.
fn run_unread(cmd: &mut Command) -> Ended {
    use std::os::unix::process::CommandExt;
    let mut fds = [0; 2];
    // SAFETY: pipe2 writes two fds into the array.
    assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
    // SAFETY: both fds are fresh and ours.
    let (r, w) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    // SAFETY: setrlimit is async-signal-safe; the limit is a plain value.
    unsafe {
        cmd.pre_exec(|| {
            let lim = libc::rlimit {
                rlim_cur: 3 << 30,
                rlim_max: 3 << 30,
            };
            if libc::setrlimit(libc::RLIMIT_AS, &lim) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let t = Instant::now();
    let child = cmd
        .stdout(Stdio::null())
        .stderr(Stdio::from(w))
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    // The Command holds our copy of the write end until replaced: drop it,
    // or the read below would never see the end.
    cmd.stderr(Stdio::null());
    // A cordon that never ends fails the test instead of hanging it: wait
    // for its exit (a pidfd) at most 60 s, then kill it.
    // SAFETY: pidfd_open on our own unreaped child.
    let pidfd = unsafe { libc::syscall(libc::SYS_pidfd_open, child.id() as i32, 0) } as i32;
    assert!(
        pidfd >= 0,
        "pidfd_open: {}",
        std::io::Error::last_os_error()
    );
    // SAFETY: the fd is fresh and ours.
    let pidfd = unsafe { OwnedFd::from_raw_fd(pidfd) };
    let mut pfd = libc::pollfd {
        fd: std::os::fd::AsRawFd::as_raw_fd(&pidfd),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: polls one pollfd we own.
    if unsafe { libc::poll(&mut pfd, 1, 60_000) } == 0 {
        // SAFETY: our own child, not yet reaped.
        unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
    }
    let mut status = 0;
    // SAFETY: a zeroed rusage is valid; wait4 fills it.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: waits for our own child and writes into our locals.
    let pid = unsafe { libc::wait4(child.id() as i32, &mut status, 0, &mut usage) };
    let took = t.elapsed();
    assert_eq!(pid, child.id() as i32);
    std::mem::forget(child); // reaped above
    let mut stderr = String::new();
    let mut r = std::fs::File::from(r);
    // The write end is closed: the child exited, ours was dropped above.
    let _ = r.read_to_string(&mut stderr);
    Ended {
        code: libc::WIFEXITED(status).then(|| libc::WEXITSTATUS(status)),
        took,
        peak_mib: usage.ru_maxrss / 1024,
        stderr,
    }
}

const FLOOD: &str = "def main():\n    for i in range(100000):\n        notifications.send('t', 'x' * 200000)\n    return 1\n";
/// Within any budget per notification, as many as it may.
const MANY_SMALL: &str = "def main():\n    for i in range(100000):\n        notifications.send('t%d' % i, 'y' * 1000)\n    return 1\n";
/// The whole budget (more than a pipe holds), then on until a limit ends it.
const THEN_SPIN: &str = "def main():\n    for i in range(100):\n        notifications.send('t%d' % i, 'y' * 1000)\n    for i in range(1000000000):\n        pass\n";

/// At most the first `n` characters of `s`, for an assertion's message.
fn head(s: &str, n: usize) -> &str {
    s.char_indices().nth(n).map_or(s, |(i, _)| &s[..i])
}

fn assert_flood_bounded(what: &str, e: &Ended, timeout: Duration) {
    // The figures, for `--nocapture`.
    eprintln!(
        "{what}: exit {:?} after {:?}, peak RSS {} MiB",
        e.code, e.took, e.peak_mib
    );
    assert!(
        matches!(e.code, Some(1) | Some(124)),
        "{what}: exit {:?}: {}",
        e.code,
        head(&e.stderr, 2000)
    );
    assert!(e.peak_mib < 256, "{what}: peak RSS {} MiB", e.peak_mib);
    assert!(
        e.took < timeout + Duration::from_secs(1),
        "{what}: took {:?}",
        e.took
    );
    assert!(
        !e.stderr.contains("panicked"),
        "{what}: {}",
        head(&e.stderr, 2000)
    );
}

/// The flood of the review: an installed package sends 200 KB
/// notifications in a loop; cordon delivers them as JSON lines on stderr,
/// which is a pipe nobody reads. The package gets a clean limit error,
/// cordon stays under 256 MiB and ends within the deadline plus 1 s.
#[test]
fn a_notification_flood_with_nobody_reading_stderr_is_bounded() {
    let dir = tempfile::tempdir().unwrap();
    let op = Operator::new(dir.path(), Who::Root);
    let timeout = Duration::from_secs(3);
    for (name, body) in [("flood", FLOOD), ("many", MANY_SMALL), ("spin", THEN_SPIN)] {
        let p = package_dir(
            &op.dir,
            name,
            &format!("id = \"{name}\"\npermissions = [\"notifications.send\"]\n"),
            body,
        );
        for args in [
            vec!["install", p.to_str().unwrap()],
            vec!["grant", name, "notifications.send"],
        ] {
            let out = op.star(&args, None);
            assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        }
    }
    // A first run admits the sandbox (the conformance report is then cached).
    let _ = op.star(&["run", "many", "--entry", "main", "--timeout", "1"], None);
    for name in ["flood", "many", "spin"] {
        let mut c = op.command();
        c.args([
            "star",
            "run",
            name,
            "--entry",
            "main",
            "--timeout",
            "3",
            "--db",
        ])
        .arg(op.db())
        .arg("--key-file")
        .arg(op.key());
        let e = run_unread(&mut c);
        assert_flood_bounded(&format!("installed {name}"), &e, timeout);
    }
    // A package path: notifications are recorded, then printed (stderr).
    for (name, body) in [("flood", FLOOD), ("many", MANY_SMALL)] {
        let p = package_dir(
            &op.dir,
            &format!("path-{name}"),
            &format!("id = \"{name}\"\npermissions = [\"notifications.send\"]\n"),
            body,
        );
        for isolation in ["in-process", "sandboxed"] {
            let mut c = op.command();
            c.args([
                "star",
                "run",
                "--isolation",
                isolation,
                "--grant",
                "notifications.send",
            ])
            .args(["--entry", "main", "--timeout", "3"])
            .arg(&p);
            let e = run_unread(&mut c);
            assert_flood_bounded(&format!("{isolation} {name}"), &e, timeout);
        }
    }
}

/// The budget is an error the package sees, and within it every
/// notification is delivered.
#[test]
fn the_notification_budget_is_a_limit_error_and_what_fits_is_delivered() {
    let cache = tempfile::tempdir().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let p = package_dir(
        dir.path(),
        "p",
        "id = \"p\"\npermissions = [\"notifications.send\"]\n",
        "def main(n, size):\n    for i in range(n):\n        notifications.send('t%d' % i, 'z' * size)\n    return n\n",
    );
    let log = dir.path().join("notes.jsonl");
    let go = |n: usize, size: usize| {
        let _ = std::fs::remove_file(&log);
        super::common::run(
            cordon(cache.path())
                .args([
                    "star",
                    "run",
                    "--isolation",
                    "in-process",
                    "--grant",
                    "notifications.send",
                ])
                .args(["--entry", "main", "--notify-file"])
                .arg(&log)
                .args(["--args", &format!("[{n}, {size}]")])
                .arg(&p),
        )
    };
    let out = go(100, 100);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(std::fs::read_to_string(&log).unwrap().lines().count(), 100);
    for (n, size, what) in [
        (101, 10, "notifications"),
        (1, 70_000, "bytes"),
        (20, 60_000, "bytes"),
    ] {
        let out = go(n, size);
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{n}x{size}: {err}");
        assert!(
            err.contains("limit") && err.contains(what),
            "{n}x{size}: {err}"
        );
        assert!(
            err.contains("EvalLimits"),
            "{n}x{size}: the error names the budget: {err}"
        );
    }
}

/// `--secret K=V` would put the value in /proc/PID/cmdline for every user
/// to read: it is a usage error that says how; the value comes from stdin
/// (`--secret K`) or a file (`--secret-file K=PATH`).
#[test]
fn secrets_never_come_from_argv() {
    let cache = tempfile::tempdir().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let p = package_dir(
        dir.path(),
        "p",
        "id = \"p\"\npermissions = [\"secrets.read\"]\n",
        "def main():\n    return [secrets.get('a'), secrets.get('b')]\n",
    );
    let base = |c: &mut Command| {
        c.args([
            "star",
            "run",
            "--isolation",
            "in-process",
            "--grant",
            "secrets.read",
        ])
        .args(["--entry", "main", "--json"]);
    };
    let mut c = cordon(cache.path());
    base(&mut c);
    let out = super::common::run(c.args(["--secret", "a=on-argv"]).arg(&p));
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "{err}");
    assert!(
        err.contains("--secret a") && err.contains("--secret-file"),
        "{err}"
    );
    assert!(!text(&out.stdout).contains("on-argv"));

    let file = dir.path().join("b.secret");
    std::fs::write(&file, "from-a-file\n").unwrap();
    let mut c = cordon(cache.path());
    base(&mut c);
    c.args(["--secret", "a", "--secret-file"])
        .arg(format!("b={}", file.display()))
        .arg(&p);
    let out = super::operator::feed(&mut c, Some("from-stdin\n"));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["value"], serde_json::json!(["from-stdin", "from-a-file"]));
    // Only one value can come from stdin.
    let mut c = cordon(cache.path());
    base(&mut c);
    c.args(["--secret", "a", "--secret", "b"]).arg(&p);
    let out = super::operator::feed(&mut c, Some("x"));
    assert_eq!(out.status.code(), Some(125));
    assert!(
        text(&out.stderr).contains("--secret-file"),
        "{}",
        text(&out.stderr)
    );
}

/// `--isolation in-process`: the builders the size checks did not cover
/// (`+`, `+=`, `replace`, `extend`, `list`/`tuple` of a range,
/// `enumerate`, `zip`, `split`, `<<` and `*` of big ints, `str`/`repr`/
/// `print`/`fail` of a shared value, f-strings) end in a clean error
/// (exit 1 or 124) well within the deadline, cordon stays small, and
/// nothing is reported as an internal error.
#[test]
fn in_process_builders_are_size_checked() {
    let cache = tempfile::tempdir().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let bombs = [
        ("str-plus", "s = 'x' * 1000000\n    for i in range(40):\n        s = s + s\n    return len(s)"),
        ("list-plus", "l = [0] * 1000000\n    for i in range(40):\n        l = l + l\n    return len(l)"),
        ("tuple-plus", "t = (0,) * 1000000\n    for i in range(40):\n        t = t + t\n    return len(t)"),
        ("str-plus-eq", "s = 'x' * 1000000\n    for i in range(40):\n        s += s\n    return len(s)"),
        ("list-plus-eq", "l = [0] * 1000000\n    for i in range(40):\n        l += l\n    return len(l)"),
        ("list-mul-eq", "l = [0] * 1000\n    l *= 100000000\n    return len(l)"),
        ("extend", "l = [0] * 1000000\n    for i in range(40):\n        l.extend(l)\n    return len(l)"),
        ("replace", "s = 'x' * 1000000\n    for i in range(10):\n        s = s.replace('x', 'xxxxxxxx')\n    return len(s)"),
        ("list-range", "return len(list(range(1 << 30)))"),
        ("tuple-range", "return len(tuple(range(1 << 30)))"),
        ("enumerate", "return len(enumerate(range(1 << 29)))"),
        ("zip", "return len(zip(range(1 << 29), range(1 << 29)))"),
        ("split", "s = 'a,' * 30000000\n    return len(s.split(','))"),
        ("elems", "s = 'a' * 60000000\n    return len(list(s.elems()))"),
        ("shl", "return (1 << (1 << 40)) > 0"),
        ("int-square", "x = 3\n    for i in range(40):\n        x = x * x\n    return x > 0"),
        ("str-repr", "s = 'y' * 10000\n    return len(str([s] * 1000000))"),
        ("repr", "s = 'y' * 10000\n    return len(repr([s] * 1000000))"),
        ("print", "s = 'y' * 10000\n    print([s] * 1000000)\n    return 1"),
        ("fail", "s = 'y' * 10000\n    fail([s] * 1000000)"),
        ("fstring", "s = 'y' * 10000\n    l = [s] * 1000000\n    return len(f'{l}')"),
        ("dict-repr", "s = 'y' * 10000\n    d = {i: s for i in range(100000)}\n    return len(str(d))"),
    ];
    let timeout = Duration::from_secs(3);
    for (name, body) in bombs {
        let p = script(dir.path(), &format!("def main():\n    {body}\n"));
        let mut c = cordon(cache.path());
        c.args([
            "star",
            "run",
            "--isolation",
            "in-process",
            "--timeout",
            "3",
            "--entry",
            "main",
        ])
        .arg(&p);
        let e = run_unread(&mut c);
        assert!(
            matches!(e.code, Some(1) | Some(124)),
            "{name}: exit {:?}: {}",
            e.code,
            head(&e.stderr, 2000)
        );
        assert!(e.took < 2 * timeout, "{name}: took {:?}", e.took);
        assert!(e.peak_mib < 64 + 128, "{name}: peak RSS {} MiB", e.peak_mib);
        assert!(
            !e.stderr.contains("internal error") && !e.stderr.contains("panicked"),
            "{name}: {}",
            head(&e.stderr, 2000)
        );
        assert!(
            e.stderr.contains("cordon: package"),
            "{name}: {}",
            head(&e.stderr, 2000)
        );
    }
}

/// What the checks allow still works exactly as the interpreter's own.
#[test]
fn in_process_builders_within_the_limit_work_as_before() {
    let cache = tempfile::tempdir().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let body = "s = 'ab' + 'cd'\n    l = [1] + [2]\n    l += [3]\n    l.extend([4])\n    t = (1,) + (2,)\n    \
                s += 'e'\n    n = 3\n    n += 4\n    m = [0]\n    m *= 3\n    \
                return [s, l, t, n, m, 'a-b'.replace('-', '+'), list(range(3)), tuple(range(2)), enumerate(['x']), \
                zip([1], [2]), 'a,b'.split(','), list('ab'.elems()), 1 << 10, 7 * 6, str([1]), repr('q'), f'{n}', 2 + 3]";
    let p = script(dir.path(), &format!("def main():\n    {body}\n"));
    let out = super::common::run(
        cordon(cache.path())
            .args([
                "star",
                "run",
                "--isolation",
                "in-process",
                "--entry",
                "main",
                "--json",
            ])
            .arg(&p),
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        v["value"],
        serde_json::json!([
            "abcde",
            [1, 2, 3, 4],
            [1, 2],
            7,
            [0, 0, 0],
            "a+b",
            [0, 1, 2],
            [0, 1],
            [[0, "x"]],
            [[1, 2]],
            ["a", "b"],
            ["a", "b"],
            1024,
            42,
            "[1]",
            "\"q\"",
            "7",
            5
        ])
    );
}
