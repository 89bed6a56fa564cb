//! `cordon star run`: the real binary, in process and sandboxed.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::Path;

use crate::common;
use crate::common::{
    cordon, readable_copy, run, run_unread, run_unread_limited, text, unprivileged,
};

mod grants;
mod hostile;
mod operator;
mod postgres;
mod store;

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
    let cache = crate::common::shared_cache();
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
    let cache = crate::common::shared_cache();
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
    let cache = crate::common::shared_cache();
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

    let with_grants = |extra: &[&str]| {
        let mut c = cordon(cache.path());
        c.args([
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
            "greeting_token",
        ])
        .args(extra)
        .args(["--args", &format!("[\"{base}\"]")])
        .arg(pkg.path());
        operator::feed(&mut c, Some("t0ken\n"))
    };
    // The manifest's 127.0.0.1 is the host's loopback: refused until the
    // operator approves it.
    let out = with_grants(&[]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("--allow-private 127.0.0.1/32"),
        "{}",
        text(&out.stderr)
    );
    assert!(seen.try_recv().is_err(), "the server was reached");
    let out = with_grants(&["--allow-private", "127.0.0.1/32"]);
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
    let cache = crate::common::shared_cache();
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
    for (name, body) in bombs {
        let p = script(dir.path(), &format!("def main():\n    {body}\n"));
        let mut c = cordon(cache.path());
        c.args([
            "star",
            "run",
            "--isolation",
            "process",
            "--timeout",
            "3",
            "--entry",
            "main",
        ])
        .arg(&p);
        // The worker sets its own, higher, address-space limit.
        let e = run_unread_limited(&mut c, None);
        let err = e.stderr;
        assert!(!e.hung, "{name}: still running after 60 s, killed");
        assert!(
            matches!(e.code, Some(1) | Some(124)),
            "{name}: {:?} {err}",
            e.code
        );
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

/// The operator's path, each step a separate `cordon` process on one
/// store database: install a package, grant it `api.http`, `secrets.read`
/// and `provider.complete`, set its secret from stdin, set a user's
/// provider (a mock OpenAI-compatible server on 127.0.0.1, key from
/// stdin), run it as that user (sandboxed), revoke `secrets.read`, and run
/// it again: the module is gone. The database holds neither the secret
/// nor the key.
#[test]
fn the_store_commands_install_grant_set_run_and_revoke() {
    let cache = crate::common::shared_cache();
    let home = tempfile::tempdir().unwrap();
    let (port, _seen) = serve(
        r#"{"id":"c1","object":"chat.completion","model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"pong"},"finish_reason":"stop"}]}"#,
    );
    let pkg = tempfile::tempdir().unwrap();
    std::fs::write(
        pkg.path().join("package.toml"),
        format!(
            "id = \"e2e\"\nversion = \"1.0.0\"\nscript = \"main.star\"\n\
             permissions = [\"api.http\", \"secrets.read\", \"provider.complete\"]\n\
             network_access = [\"http://127.0.0.1:{port}\"]\n[requires_provider]\n"
        ),
    )
    .unwrap();
    std::fs::write(
        pkg.path().join("main.star"),
        format!(
            "def main(q):\n    r = provider.complete(q)\n    h = http.get('http://127.0.0.1:{port}/x')\n    \
             return {{'answer': r.content, 'status': h.status, 'token': secrets.get('tok'), 'src': r.key_source}}\n"
        ),
    )
    .unwrap();
    let star = |args: &[&str], stdin: Option<&str>| {
        let mut c = cordon(cache.path());
        c.env("XDG_DATA_HOME", home.path().join("data"))
            .env("XDG_CONFIG_HOME", home.path().join("config"))
            .env_remove("CORDON_STORE_KEY")
            .arg("star")
            .args(args);
        match stdin {
            None => run(&mut c),
            Some(input) => {
                use std::io::Write as _;
                c.stdin(std::process::Stdio::piped())
                    .stdout(std::process::Stdio::piped())
                    .stderr(std::process::Stdio::piped());
                let mut child = c.spawn().unwrap();
                child
                    .stdin
                    .take()
                    .unwrap()
                    .write_all(input.as_bytes())
                    .unwrap();
                child.wait_with_output().unwrap()
            }
        }
    };
    let ok = |out: &std::process::Output| {
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    };
    let path = pkg.path().to_str().unwrap();
    ok(&star(&["install", path, "--json"], None));
    ok(&star(
        &[
            "grant",
            "e2e",
            "api.http",
            "secrets.read",
            "provider.complete",
            "--user",
            "ops",
            "--allow-private",
            "127.0.0.1/32",
        ],
        None,
    ));
    ok(&star(
        &["secret", "set", "e2e", "tok"],
        Some("t0ken-from-stdin\n"),
    ));
    let base = format!("http://127.0.0.1:{port}/v1");
    ok(&star(
        &[
            "provider",
            "set",
            "--user",
            "alice",
            "--base-url",
            &base,
            "--model",
            "m",
        ],
        Some("sk-alice-key-from-stdin"),
    ));
    let listed = star(&["list", "--json"], None);
    ok(&listed);
    let v: serde_json::Value = serde_json::from_slice(&listed.stdout).unwrap();
    assert_eq!(v["packages"][0]["id"], "e2e");
    assert_eq!(v["packages"][0]["grants"].as_array().unwrap().len(), 3);
    assert_eq!(v["packages"][0]["grants"][0]["granted_by"], "ops");

    let out = star(
        &[
            "run",
            "e2e",
            "--entry",
            "main",
            "--args",
            r#"["ping"]"#,
            "--user",
            "alice",
            "--json",
        ],
        None,
    );
    ok(&out);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        v["value"],
        serde_json::json!({"answer": "pong", "status": 200, "token": "t0ken-from-stdin", "src": "user"})
    );

    ok(&star(&["revoke", "e2e", "secrets.read"], None));
    let out = star(
        &[
            "run",
            "e2e",
            "--entry",
            "main",
            "--args",
            r#"["ping"]"#,
            "--user",
            "alice",
        ],
        None,
    );
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("secrets"),
        "{}",
        text(&out.stderr)
    );

    // Changed sources need --upgrade; bad input changes nothing.
    std::fs::write(pkg.path().join("main.star"), "def main(q):\n    return q\n").unwrap();
    let out = star(&["install", path], None);
    assert_eq!(out.status.code(), Some(125));
    assert!(
        text(&out.stderr).contains("--upgrade"),
        "{}",
        text(&out.stderr)
    );
    assert_eq!(
        star(&["grant", "e2e", "root.access"], None).status.code(),
        Some(125)
    );
    assert_eq!(
        star(&["secret", "set", "nope", "x"], Some("v"))
            .status
            .code(),
        Some(125)
    );

    // Neither the secret nor the key is in the database file.
    let db = std::fs::read(home.path().join("data/cordon/star.db")).unwrap();
    for plain in ["t0ken-from-stdin", "sk-alice-key-from-stdin"] {
        assert!(
            !db.windows(plain.len()).any(|w| w == plain.as_bytes()),
            "{plain} on disk"
        );
    }
    // A lost key file is not replaced: a clear error, no new key.
    let key_file = home.path().join("config/cordon/store.key");
    std::fs::rename(&key_file, home.path().join("saved.key")).unwrap();
    let out = star(&["list"], None);
    assert_eq!(out.status.code(), Some(125));
    assert!(
        text(&out.stderr).contains("missing"),
        "{}",
        text(&out.stderr)
    );
    assert!(!key_file.exists(), "no new key was made");
    // Another key cannot open it, and says how to fix that.
    let mut c = cordon(cache.path());
    c.env("XDG_DATA_HOME", home.path().join("data"))
        .env("CORDON_STORE_KEY", "00".repeat(32))
        .args(["star", "list"]);
    let out = run(&mut c);
    assert_eq!(out.status.code(), Some(125));
    assert!(
        text(&out.stderr).contains("CORDON_STORE_KEY"),
        "{}",
        text(&out.stderr)
    );
}

/// `--isolation in-process`: the done-when's scripts (a list and a string
/// built with `*`, `",".join` of a huge list, a `format` bomb, `sorted` of
/// a huge range, a 100 000-deep `json.encode`) are refused by the size
/// checks before they allocate: each ends by itself in 1 or 124 (the
/// deadline's), cordon never aborts, and its peak RSS stays under the heap
/// limit (64 MiB) plus 128 MiB (cordon itself, and values the script may
/// hold under the limit).
#[test]
fn in_process_size_checks_refuse_what_would_take_cordon_down() {
    let cache = crate::common::shared_cache();
    let dir = tempfile::tempdir().unwrap();
    let bombs = [
        ("list", "return len([0] * 1000000000)"),
        ("string", "return len('ab' * 1000000000)"),
        (
            "join",
            "return len(','.join(['abcdefghij' * 100] * 5000000))",
        ),
        (
            "format",
            "return len(('{}' * 1000000).format(*(['y' * 10000] * 1000000)))",
        ),
        ("sorted", "return len(sorted(range(1 << 30)))"),
        (
            "json",
            "x = []\n    for i in range(100000):\n        x = [x]\n    return json.encode(x)",
        ),
        ("folding", "return len('a' * 2000000000)"),
        (
            "percent",
            "return len('%s' * 100000 % tuple(['y' * 100000] * 100000))",
        ),
        // A repr can be the bomb: a million references to one string.
        (
            "percent-repr",
            "s = 'y' * 10000\n    return len('%s' % ([s] * 1000000,))",
        ),
        (
            "format-repr",
            "s = 'y' * 10000\n    return len('{}'.format([s] * 1000000))",
        ),
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
        let err = e.stderr;
        assert!(!e.hung, "{name}: still running after 60 s, killed");
        assert!(
            matches!(e.code, Some(1) | Some(124)),
            "{name}: exit {:?}: {err}",
            e.code
        );
        let peak_mib = e.peak_mib;
        assert!(peak_mib < 64 + 128, "{name}: peak RSS {peak_mib} MiB");
        assert!(
            err.contains("limit") || err.contains("too deeply"),
            "{name}: {err}"
        );
    }
}

/// Notifications are delivered where the operator says: JSON lines
/// appended to a file, or a POST to a webhook (a server on 127.0.0.1).
#[test]
fn notifications_go_to_a_file_or_a_webhook() {
    let cache = crate::common::shared_cache();
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("pkg");
    std::fs::create_dir(&p).unwrap();
    std::fs::write(
        p.join("package.toml"),
        "id = \"notifier\"\nversion = \"1.0.0\"\nscript = \"main.star\"\npermissions = [\"notifications.send\"]\n",
    )
    .unwrap();
    std::fs::write(
        p.join("main.star"),
        "def main():\n    notifications.send('done', 'all good', level = 'warning')\n    return 1\n",
    )
    .unwrap();
    let log = dir.path().join("notes.jsonl");
    let base = [
        "star",
        "run",
        "--isolation",
        "in-process",
        "--entry",
        "main",
    ];
    let out = run(cordon(cache.path())
        .args(base)
        .args(["--grant", "notifications.send", "--notify-file"])
        .arg(&log)
        .arg(&p));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let line: serde_json::Value =
        serde_json::from_str(std::fs::read_to_string(&log).unwrap().trim()).unwrap();
    assert_eq!(
        (line["title"].as_str(), line["level"].as_str()),
        (Some("done"), Some("warning"))
    );

    let (port, seen) = serve("{}");
    let out = run(cordon(cache.path())
        .args(base)
        .args(["--grant", "notifications.send", "--notify-webhook"])
        .arg(format!("http://127.0.0.1:{port}/hook"))
        .arg(&p));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let request = seen
        .recv_timeout(std::time::Duration::from_secs(5))
        .unwrap();
    assert!(request.starts_with("POST /hook"), "{request}");
    assert!(request.contains("\"all good\""), "{request}");
    // A bad URL is one clear line, and nothing runs.
    let out = run(cordon(cache.path())
        .args(base)
        .args(["--notify-webhook", "ftp://x"])
        .arg(&p));
    assert_eq!(out.status.code(), Some(125));
    assert!(
        text(&out.stderr).contains("--notify-webhook"),
        "{}",
        text(&out.stderr)
    );
}
