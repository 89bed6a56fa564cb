//! A hostile package against `cordon star run`: a flood of notifications
//! with nobody reading cordon's stderr, secrets kept off argv, and
//! in-process value builders the size checks must refuse.

use std::process::Command;

use super::common::{cordon, run_unread, text, Ended};
use super::operator::{package_dir, Operator, Who};
use super::script;

const FLOOD: &str = "def main():\n    for i in range(100000):\n        notifications.send('t', 'x' * 200000)\n    return 1\n";
/// Within any budget per notification, as many as it may.
const MANY_SMALL: &str = "def main():\n    for i in range(100000):\n        notifications.send('t%d' % i, 'y' * 1000)\n    return 1\n";
/// The whole budget (more than a pipe holds), then on until a limit ends it.
const THEN_SPIN: &str = "def main():\n    for i in range(100):\n        notifications.send('t%d' % i, 'y' * 1000)\n    for i in range(1000000000):\n        pass\n";

/// At most the first `n` characters of `s`, for an assertion's message.
fn head(s: &str, n: usize) -> &str {
    s.char_indices().nth(n).map_or(s, |(i, _)| &s[..i])
}

fn assert_flood_bounded(what: &str, e: &Ended) {
    // The figures, for `--nocapture`.
    eprintln!("{what}: exit {:?}, peak RSS {} MiB", e.code, e.peak_mib);
    assert!(
        matches!(e.code, Some(1) | Some(124)),
        "{what}: exit {:?}: {}",
        e.code,
        head(&e.stderr, 2000)
    );
    assert!(e.peak_mib < 256, "{what}: peak RSS {} MiB", e.peak_mib);
    assert!(!e.hung, "{what}: still running after 60 s, killed");
    assert!(
        !e.stderr.contains("panicked"),
        "{what}: {}",
        head(&e.stderr, 2000)
    );
}

/// The flood of the review: an installed package sends 200 KB
/// notifications in a loop; cordon delivers them as JSON lines on stderr,
/// which is a pipe nobody reads. The package gets a clean limit error,
/// cordon stays under 256 MiB and ends by itself (a limit error or the
/// deadline's 124; a cordon blocked on the full pipe is killed by the hang
/// guard and fails the test).
#[test]
fn a_notification_flood_with_nobody_reading_stderr_is_bounded() {
    let dir = tempfile::tempdir().unwrap();
    let op = Operator::new(dir.path(), Who::Root);
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
        assert_flood_bounded(&format!("installed {name}"), &e);
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
            assert_flood_bounded(&format!("{isolation} {name}"), &e);
        }
    }
}

/// The budget is an error the package sees, and within it every
/// notification is delivered.
#[test]
fn the_notification_budget_is_a_limit_error_and_what_fits_is_delivered() {
    let cache = crate::common::shared_cache();
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
    let cache = crate::common::shared_cache();
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
    let cache = crate::common::shared_cache();
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
        assert!(!e.hung, "{name}: still running after 60 s, killed");
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
    let cache = crate::common::shared_cache();
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

/// `--notify-file` at a symlink (another user's, planted where the
/// operator writes): refused before the package runs, and the file the
/// link names is untouched.
#[test]
fn a_notify_file_that_is_a_symlink_is_refused() {
    let cache = crate::common::shared_cache();
    let dir = tempfile::tempdir().unwrap();
    let victim = dir.path().join("victim");
    std::fs::write(&victim, "the host's own file\n").unwrap();
    let link = dir.path().join("notes.jsonl");
    std::os::unix::fs::symlink(&victim, &link).unwrap();
    let p = script(
        dir.path(),
        "def main():\n    notifications.send('t', 'x')\n    return 1\n",
    );
    let mut c = cordon(cache.path());
    c.args(["star", "run", "--isolation", "in-process", "--grant"])
        .arg("notifications.send")
        .args(["--entry", "main", "--notify-file"])
        .arg(&link)
        .arg(&p);
    let out = super::common::run(&mut c);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "{err}");
    assert!(err.contains("--notify-file"), "{err}");
    assert_eq!(
        std::fs::read_to_string(&victim).unwrap(),
        "the host's own file\n"
    );
}
