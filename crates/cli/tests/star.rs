//! `cordon star run`: the real binary, in process and sandboxed.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::Path;

mod common;
use common::{cordon, readable_copy, run, text, unprivileged};

fn examples() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/starlark")
}

fn script(dir: &Path, body: &str) -> std::path::PathBuf {
    let p = dir.join("pkg.star");
    std::fs::write(&p, body).unwrap();
    p
}

/// A tiny HTTP/1.1 server on 127.0.0.1 that answers every request with
/// `body` and records the requests it saw.
fn serve(body: &'static str) -> (u16, std::sync::mpsc::Receiver<String>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for stream in listener.incoming().take(16) {
            let Ok(mut s) = stream else { continue };
            let mut buf = [0u8; 4096];
            let n = s.read(&mut buf).unwrap_or(0);
            let _ = tx.send(String::from_utf8_lossy(&buf[..n]).into_owned());
            let _ = write!(
                s,
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{}",
                body.len(),
                body
            );
        }
    });
    (port, rx)
}

#[test]
fn in_process_single_file_prints_result() {
    let cache = tempfile::tempdir().unwrap();
    let single = examples().join("single.star");
    let out = run(cordon(cache.path())
        .args([
            "star",
            "run",
            "--isolation",
            "in-process",
            "--entry",
            "main",
            "--args",
            "[10]",
            "--json",
        ])
        .arg(&single));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["value"]["fib"], 55);
    assert_eq!(v["output"], "computing fib(10)\n");
    assert!(text(&out.stderr).contains("TRUSTED"));
}

fn exit_codes(isolation: &str) {
    let cache = tempfile::tempdir().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let p = script(
        dir.path(),
        "print('top ran')\ndef main():\n    print('main ran')\n    x = 1\n    fail(\"boom %d\" % x)\n",
    );
    let out = run(cordon(cache.path())
        .args(["star", "run", "--isolation", isolation, "--entry", "main"])
        .arg(&p));
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let err = text(&out.stderr);
    assert!(
        err.contains("boom 1") && err.contains("pkg.star:5"),
        "{err}"
    );
    // What the package printed before it failed is on stderr, in order.
    assert!(
        err.starts_with("top ran\nmain ran\n") || err.contains("\ntop ran\nmain ran\n"),
        "{err}"
    );
    // Also when the top level itself fails.
    let p = script(dir.path(), "print('top ran')\nfail('at load')\n");
    let out = run(cordon(cache.path())
        .args(["star", "run", "--isolation", isolation, "--entry", "main"])
        .arg(&p));
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let err = text(&out.stderr);
    assert!(
        err.contains("top ran\n") && err.contains("at load"),
        "{err}"
    );

    let p = script(
        dir.path(),
        "def main():\n    t = 0\n    for i in range(1000000000):\n        t += i\n    return t\n",
    );
    let out = run(cordon(cache.path())
        .args(["star", "run", "--isolation", isolation, "--entry", "main"])
        .arg(&p));
    assert_eq!(out.status.code(), Some(124), "{}", text(&out.stderr));

    let out = run(cordon(cache.path())
        .args([
            "star",
            "run",
            "--isolation",
            isolation,
            "--grant",
            "root.access",
        ])
        .arg(&p));
    assert_eq!(out.status.code(), Some(125));
    let out = run(cordon(cache.path())
        .args(["star", "run", "--isolation", isolation, "--args", "{}"])
        .arg(&p));
    assert_eq!(out.status.code(), Some(125));
    let out = run(cordon(cache.path())
        .args(["star", "run", "--isolation", isolation])
        .arg(dir.path().join("missing.star")));
    assert_eq!(out.status.code(), Some(125));
}

#[test]
fn in_process_exit_codes() {
    exit_codes("in-process");
}

#[test]
fn sandboxed_exit_codes() {
    exit_codes("sandboxed");
}

fn hello(isolation: &str) {
    let cache = tempfile::tempdir().unwrap();
    let (port, seen) = serve(r#"{"greeting": "hi from the server"}"#);
    let base = format!("http://127.0.0.1:{port}");
    // The manifest allows 127.0.0.1:8080; copy the package and point it at our port.
    let pkg = tempfile::tempdir().unwrap();
    let src = examples().join("hello");
    for entry in ["package.toml", "main.star"] {
        let text = std::fs::read_to_string(src.join(entry)).unwrap();
        std::fs::write(
            pkg.path().join(entry),
            text.replace("127.0.0.1:8080", &format!("127.0.0.1:{port}")),
        )
        .unwrap();
    }
    std::fs::create_dir(pkg.path().join("lib")).unwrap();
    std::fs::copy(
        src.join("lib/format.star"),
        pkg.path().join("lib/format.star"),
    )
    .unwrap();

    // Without the grants the modules are absent: a script error.
    let out = run(cordon(cache.path())
        .args(["star", "run", "--isolation", isolation, "--entry", "main"])
        .arg(pkg.path()));
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));

    let out = run(cordon(cache.path())
        .args([
            "star",
            "run",
            "--isolation",
            isolation,
            "--entry",
            "main",
            "--json",
        ])
        .args([
            "--grant",
            "api.http",
            "--grant",
            "secrets.read",
            "--secret",
            "greeting_token=t0ken",
        ])
        .args(["--args", &format!("[\"{base}\"]")])
        .arg(pkg.path()));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["value"]["greeting"], "hi from the server");
    let request = seen
        .recv_timeout(std::time::Duration::from_secs(5))
        .unwrap();
    assert!(request.contains("Bearer t0ken"), "{request}");
}

#[test]
fn in_process_hello_uses_http_and_secrets() {
    hello("in-process");
}

#[test]
fn sandboxed_hello_uses_http_and_secrets_through_the_host() {
    hello("sandboxed");
}

#[test]
fn unprivileged_uid_runs_a_package_sandboxed_by_default() {
    let dir = tempfile::tempdir().unwrap();
    let pkg = readable_copy(&examples().join("single.star"), dir.path());
    let mut cmd = unprivileged(&dir.path().join("bin"));
    let out = run(cmd
        .args(["star", "run", "--entry", "main", "--args", "[12]", "--json"])
        .arg(&pkg));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["value"]["fib"], 144);
    // Sandboxed is the default: nothing says it ran as trusted.
    assert!(!text(&out.stderr).contains("TRUSTED"));
}

#[test]
fn unprivileged_uid_survives_scripts_that_abort_an_interpreter() {
    let dir = tempfile::tempdir().unwrap();
    // (script, exit status): a memory limit is 124; nesting too deep for
    // the interpreter (refused before parsing, or overflowing its stack in
    // the worker) is the script's error, 1.
    let cases = [
        // Constant folding allocates 2 GB before any limit is checked.
        ("fold.star", "x = 'a' * 2000000000\ndef main():\n    return 1\n".to_string(), 124),
        // json.encode of a very deep list overflows the native stack.
        (
            "deep.star",
            "def main():\n    x = []\n    for i in range(100000):\n        x = [x]\n    return len(json.encode(x))\n".to_string(),
            1,
        ),
        // 100 000 nested brackets are refused before parsing.
        ("nest.star", format!("x = {}{}\ndef main():\n    return 1\n", "[".repeat(100_000), "]".repeat(100_000)), 1),
    ];
    for (name, body, _) in &cases {
        std::fs::write(dir.path().join(name), body).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(
            dir.path().join(name),
            std::fs::Permissions::from_mode(0o644),
        )
        .unwrap();
    }
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    for (i, (name, _, code)) in cases.iter().enumerate() {
        let mut cmd = unprivileged(&dir.path().join(format!("bin{i}")));
        let out = run(cmd
            .args(["star", "run", "--entry", "main"])
            .arg(dir.path().join(name)));
        let err = text(&out.stderr);
        // cordon itself survives and reports a clear error: never a crash
        // of the host process, never a success for these.
        assert_eq!(out.status.code(), Some(*code), "{name}: {err}");
        assert!(
            err.starts_with("cordon: ") || err.contains("\ncordon: "),
            "{name}: {err}"
        );
        assert!(!err.contains("panicked"), "{name}: {err}");
    }
}

/// Scripts that take an interpreter's process down (a builtin that
/// allocates gigabytes in one step, one that recurses without limit, a
/// CPU-bound format) end in a clear error under `--isolation process`: the
/// worker holds its memory limit and is killed at the deadline, cordon
/// itself never aborts, and nothing grows past the worker's 512 MiB.
#[test]
fn process_isolation_survives_what_kills_an_interpreter() {
    let cache = tempfile::tempdir().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let bombs = [
        (
            "join",
            "l = ['x' * 1000] * 5000000\n    return len(','.join(l))",
        ),
        (
            "format",
            "return len(('{}' * 1000000).format(*(['y' * 10000] * 1000000)))",
        ),
        ("sorted", "return len(sorted(range(1 << 30)))"),
        (
            "doubling",
            "s = 'x' * 1000000\n    for i in range(40):\n        s = s + s\n    return len(s)",
        ),
        (
            "json",
            "x = []\n    for i in range(100000):\n        x = [x]\n    return json.encode(x)",
        ),
        (
            "struct-repr",
            "x = None\n    for i in range(200000):\n        x = struct(a = x)\n    return str(x)",
        ),
    ];
    let timeout = std::time::Duration::from_secs(3);
    for (name, body) in bombs {
        let p = script(dir.path(), &format!("def main():\n    {body}\n"));
        let t = std::time::Instant::now();
        let out = run(cordon(cache.path())
            .args([
                "star",
                "run",
                "--isolation",
                "process",
                "--timeout",
                "3",
                "--entry",
                "main",
            ])
            .arg(&p));
        let took = t.elapsed();
        let err = text(&out.stderr);
        assert!(
            matches!(out.status.code(), Some(1) | Some(124)),
            "{name}: {:?} {err}",
            out.status
        );
        assert!(took < 2 * timeout, "{name}: took {took:?}");
        assert!(err.contains("cordon: package"), "{name}: {err}");
    }
    // The largest process this test binary waited for (cordon or, through
    // it, a worker) stayed near the worker's limit.
    // SAFETY: a zeroed rusage is valid; getrusage writes into it.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage writes into `usage`.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut usage) };
    assert_eq!(rc, 0);
    let peak_mib = usage.ru_maxrss / 1024;
    assert!(peak_mib < 512 + 256, "peak RSS {peak_mib} MiB");
}
