//! Protocol robustness, both ends:
//! * fake workers (`/bin/sh` printing frames) through the real spawn path
//!   against the host side;
//! * the real worker binary driven by hand over its stdin/stdout;
//! * a forged `module` request against the host's broker.

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Duration;

use cordon_starlark::internals::frame::{read_message, write_message, Message, DEFAULT_MAX_FRAME};
use cordon_starlark::internals::wire::{self, worker_identity};
use cordon_starlark::internals::*;
use cordon_starlark::*;
use serde_json::json;

use crate::{env_with, package, serial, settle_children, worker_config, WORKER};

/// A shell worker: `frame JSON` writes one frame; `$1` is the instance id.
fn sh_worker(body: &str) -> WorkerConfig {
    let script = format!(
        r#"frame() {{ m="$1"; n=${{#m}}; printf "\\000\\000\\$(printf %03o $((n/256)))\\$(printf %03o $((n%256)))"; printf %s "$m"; }}
hello() {{ frame "{{\"hello\":{{\"protocol_min\":$1,\"protocol_max\":$2,\"worker\":\"$3\",\"instance_id\":\"$4\"}}}}"; }}
ID="$1"
{body}"#
    );
    let mut c = worker_config();
    c.program = WorkerProgram {
        path: "/bin/sh".into(),
        args: vec!["-c".into(), script.into()],
    };
    c.handshake_timeout = Duration::from_secs(3);
    c
}

async fn fake_worker_error(body: &str, limits: EvalLimits) -> String {
    let e = env_with(limits, sh_worker(body));
    let pkg = package("fake", &[], &[], "def f():\n    return 1\n");
    let err = e.call(&pkg, "f").await.unwrap_err();
    assert!(e.sandboxed.worker_pids().is_empty());
    assert!(settle_children().await.is_empty(), "fake worker reaped");
    err.to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fake_workers_breaking_the_protocol_are_killed_with_clear_errors() {
    let _g = serial();
    let id = worker_identity();
    let ok_hello = format!(r#"hello 1 1 "{id}" "$ID""#);
    let cases: Vec<(&str, String, &str)> = vec![
        (
            "garbage",
            "printf garbage; exec sleep 5".into(),
            "exceeds the 1048576-byte limit",
        ),
        (
            "garbage-frame",
            "frame garbage; exec sleep 5".into(),
            "malformed frame",
        ),
        (
            "oversize",
            r"printf '\177\377\377\377'; exec sleep 5".into(),
            "exceeds the",
        ),
        (
            "truncated",
            r#"printf '\000\000\001\000{"hel'"#.into(),
            "truncated frame",
        ),
        (
            "silent-exit",
            "exit 0".into(),
            "closed the connection before its hello",
        ),
        (
            "wrong-version",
            format!(r#"hello 7 9 "{id}" "$ID"; exec sleep 5"#),
            "protocol version mismatch",
        ),
        (
            "wrong-instance",
            format!(r#"hello 1 1 "{id}" other; exec sleep 5"#),
            "expected `",
        ),
        (
            "wrong-identity",
            r#"hello 1 1 "evil/6.6.6" "$ID"; exec sleep 5"#.into(),
            "identifies as",
        ),
        (
            "unknown-method",
            format!(
                r#"{ok_hello}; frame '{{"request":{{"id":1,"method":"launch_missiles","body":null}}}}'; exec sleep 5"#
            ),
            "unknown method \"launch_missiles\"",
        ),
        (
            "unsolicited",
            format!(r#"{ok_hello}; frame '{{"response":{{"id":99,"body":null}}}}'; exec sleep 5"#),
            "unsolicited response to request 99",
        ),
        (
            "output-for-another-request",
            format!(r#"{ok_hello}; frame '{{"output":{{"id":99,"output":"x"}}}}'; exec sleep 5"#),
            "unsolicited output for request 99",
        ),
        (
            "module-outside-call",
            format!(
                r#"{ok_hello}; frame '{{"request":{{"id":1,"method":"module","body":{{"secret_get":{{"name":"x"}}}}}}}}'; exec sleep 5"#
            ),
            "module request (1) while no call was running",
        ),
    ];
    for (name, body, expect) in cases {
        let msg = fake_worker_error(&body, EvalLimits::default()).await;
        eprintln!("{name}: {msg}");
        assert!(msg.contains(expect), "{name}: {msg}");
        assert!(msg.contains("\"fake\""), "{name}: names the package: {msg}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_worker_is_killed_at_the_deadline() {
    let _g = serial();
    let mut limits = EvalLimits::default();
    limits.timeout = Duration::from_millis(300);
    let id = worker_identity();
    let msg = fake_worker_error(&format!(r#"hello 1 1 "{id}" "$ID"; exec sleep 30"#), limits).await;
    assert!(msg.contains("deadline") && msg.contains("killed"), "{msg}");

    // A worker that never reads its stdin: the host's write of a 300 KB
    // load_package fills the pipe and must not block past the deadline.
    let mut limits = EvalLimits::default();
    limits.timeout = Duration::from_millis(300);
    let e = env_with(
        limits,
        sh_worker(&format!(r#"hello 1 1 "{id}" "$ID"; exec sleep 30"#)),
    );
    let src = format!("# {}\ndef f():\n    return 1\n", "x".repeat(300_000));
    let pkg = package("fake", &[], &[], &src);
    let err = e.call(&pkg, "f").await.unwrap_err().to_string();
    assert!(err.contains("deadline"), "{err}");
    assert!(settle_children().await.is_empty());
}

// ---- the real worker, driven by hand ---------------------------------

struct Driven {
    child: std::process::Child,
    input: std::process::ChildStdin,
    output: std::process::ChildStdout,
}

impl Driven {
    fn start() -> Driven {
        let mut child = Command::new(WORKER)
            .args([WORKER_ARG, "--instance", "by-hand"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let input = child.stdin.take().unwrap();
        let output = child.stdout.take().unwrap();
        let mut d = Driven {
            child,
            input,
            output,
        };
        match d.read() {
            Message::Hello {
                protocol_min,
                protocol_max,
                worker,
                instance_id,
            } => {
                assert_eq!((protocol_min, protocol_max), (1, 1));
                assert_eq!(worker, worker_identity());
                assert_eq!(instance_id, "by-hand");
            }
            other => panic!("{other:?}"),
        }
        d
    }

    fn welcome(mut self) -> Driven {
        self.send(&Message::Welcome { protocol: 1 });
        self
    }

    fn read(&mut self) -> Message {
        read_message(&mut self.output, DEFAULT_MAX_FRAME).unwrap()
    }

    fn send(&mut self, m: &Message) {
        write_message(&mut self.input, m, DEFAULT_MAX_FRAME).unwrap();
    }

    fn raw(&mut self, bytes: &[u8]) {
        self.input.write_all(bytes).unwrap();
        self.input.flush().unwrap();
    }

    fn load(&mut self, src: &str, modules: ModuleSet, limits: &EvalLimits) -> Message {
        let pkg = package("driven", &[], &[], src);
        let body = wire::LoadPackage {
            package: pkg,
            modules,
            limits: wire::WireLimits::from(limits),
        };
        self.send(&Message::Request {
            id: 1,
            method: "load_package".into(),
            body: serde_json::to_value(body).unwrap(),
        });
        self.read()
    }

    fn call(&mut self, id: u64, entry: &str) {
        let body = wire::Call {
            entry: entry.into(),
            args: vec![],
            kwargs: Default::default(),
            timeout_ms: 5000,
        };
        self.send(&Message::Request {
            id,
            method: "call".into(),
            body: serde_json::to_value(body).unwrap(),
        });
    }

    /// Expects a terminal error with `code`, then exit code 2.
    fn expect_terminal(mut self, code: &str) {
        match self.read() {
            Message::Error {
                id: None, code: c, ..
            } => assert_eq!(c, code),
            other => panic!("{other:?}"),
        }
        assert_eq!(self.child.wait().unwrap().code(), Some(2));
    }
}

#[test]
fn the_real_worker_by_hand_load_call_module_and_cancel() {
    let _g = serial();
    let mut d = Driven::start().welcome();
    let modules = ModuleSet {
        http: true,
        ..ModuleSet::NONE
    };
    let src = "print('top')\ndef f(x = 2):\n    return x * 21\ndef net():\n    return http.get('https://example.com/').status\ndef spin():\n    for i in range(1000000000):\n        pass\n";
    match d.load(src, modules, &EvalLimits::default()) {
        Message::Response { id: 1, body } => {
            let l: wire::Loaded = serde_json::from_value(body).unwrap();
            assert_eq!(l.functions, vec!["f", "net", "spin"]);
            assert_eq!(l.output, "top\n");
        }
        other => panic!("{other:?}"),
    }
    d.call(2, "f");
    match d.read() {
        Message::Response { id: 2, body } => assert_eq!(body["value"], json!(42)),
        other => panic!("{other:?}"),
    }
    // A module call goes to the host; the host refuses it.
    d.call(3, "net");
    let mid = match d.read() {
        Message::Request { id, method, body } => {
            assert_eq!(method, "module");
            let call: ModuleCall = serde_json::from_value(body).unwrap();
            assert!(matches!(call, ModuleCall::Http(_)));
            id
        }
        other => panic!("{other:?}"),
    };
    d.send(&Message::Error {
        id: Some(mid),
        code: "permission_denied".into(),
        message: "not today".into(),
    });
    match d.read() {
        Message::Error {
            id: Some(3),
            code,
            message,
        } => {
            assert_eq!(code, "script");
            assert!(
                message.contains("permission denied: not today"),
                "{message}"
            );
        }
        other => panic!("{other:?}"),
    }
    // Cancel a running call.
    d.call(4, "spin");
    std::thread::sleep(Duration::from_millis(100));
    d.send(&Message::Cancel { id: 4 });
    match d.read() {
        Message::Error {
            id: Some(4), code, ..
        } => assert_eq!(code, "cancelled"),
        other => panic!("{other:?}"),
    }
    // A late cancel for a finished call is harmless.
    d.send(&Message::Cancel { id: 2 });
    d.call(5, "f");
    assert!(matches!(d.read(), Message::Response { id: 5, .. }));
    // EOF ends the worker cleanly.
    drop(d.input);
    assert_eq!(d.child.wait().unwrap().code(), Some(0));
}

#[test]
fn the_real_worker_refuses_protocol_violations() {
    let _g = serial();
    // Wrong version in Welcome.
    let mut d = Driven::start();
    d.send(&Message::Welcome { protocol: 99 });
    d.expect_terminal("version");
    // Garbage after the handshake.
    let mut d = Driven::start().welcome();
    d.raw(b"\x00\x00\x00\x07garbage");
    d.expect_terminal("protocol");
    // Oversize frame header.
    let mut d = Driven::start().welcome();
    d.raw(&[0x7f, 0xff, 0xff, 0xff]);
    d.expect_terminal("protocol");
    // Unknown method.
    let mut d = Driven::start().welcome();
    d.send(&Message::Request {
        id: 1,
        method: "launch_missiles".into(),
        body: json!({}),
    });
    d.expect_terminal("unknown_method");
    // An answer to a request it never sent.
    let mut d = Driven::start().welcome();
    d.send(&Message::Response {
        id: 7,
        body: json!(null),
    });
    d.expect_terminal("protocol");
    // A second load_package.
    let mut d = Driven::start().welcome();
    assert!(matches!(
        d.load(
            "def f():\n    return 1\n",
            ModuleSet::NONE,
            &EvalLimits::default()
        ),
        Message::Response { .. }
    ));
    d.load(
        "def f():\n    return 1\n",
        ModuleSet::NONE,
        &EvalLimits::default(),
    );
    // (the second load's answer is the terminal error)
    assert_eq!(d.child.wait().unwrap().code(), Some(2));
    // Truncated frame, then EOF.
    let mut d = Driven::start().welcome();
    d.raw(b"\x00\x00\x01\x00{\"req");
    drop(d.input);
    match read_message(&mut d.output, DEFAULT_MAX_FRAME).unwrap() {
        Message::Error { id: None, code, .. } => assert_eq!(code, "protocol"),
        other => panic!("{other:?}"),
    }
    assert_eq!(d.child.wait().unwrap().code(), Some(2));
    // A call before load_package is answered, not terminal.
    let mut d = Driven::start().welcome();
    d.call(1, "f");
    match d.read() {
        Message::Error {
            id: Some(1), code, ..
        } => assert_eq!(code, "not_loaded"),
        other => panic!("{other:?}"),
    }
    drop(d.input);
    assert_eq!(d.child.wait().unwrap().code(), Some(0));
}

// ---- a forged module request against the host ------------------------

/// A `tracing` writer into a shared buffer.
#[derive(Clone, Default)]
struct Captured(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

// Current-thread runtime: the capturing subscriber is thread-local.
#[tokio::test]
async fn a_worker_forging_an_ungranted_module_call_is_refused_by_the_host() {
    let _g = serial();
    let logs = Captured::default();
    let l2 = logs.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || l2.clone())
        .with_ansi(false)
        .with_max_level(tracing::Level::WARN)
        .finish();
    let _log = tracing::subscriber::set_default(subscriber);
    let srv = crate::server::start().await;
    let caps = Capabilities::new(Services::new(
        std::sync::Arc::new(InMemoryPackageStore::new()),
        std::sync::Arc::new(InMemoryPermissionStore::new()),
    ))
    .unwrap();
    // The package asks for http and the allowlist would allow the server,
    // but the host granted nothing: the module set is empty.
    let pkg = package(
        "forger",
        &[Permission::ApiHttp],
        &[srv.base()],
        "def f():\n    return 1\n",
    );
    let modules = caps.module_set(&pkg, None).await.unwrap();
    assert_eq!(modules, ModuleSet::NONE);
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    let cancel = CancelToken::new();
    let broker = ModuleBroker::new(
        caps,
        &pkg,
        modules.into(),
        None,
        &EvalLimits::default(),
        deadline,
        cancel.clone(),
    )
    .unwrap();

    let (host_side, worker_side) = tokio::io::duplex(1 << 16);
    let (host_r, host_w) = tokio::io::split(host_side);
    let (mut wr, mut ww) = tokio::io::split(worker_side);
    let url = format!("{}/hello", srv.base());
    let fake = tokio::spawn(async move {
        use cordon_starlark::internals::frame::{read_message_async, write_message_async};
        let max = DEFAULT_MAX_FRAME;
        write_message_async(
            &mut ww,
            &Message::Hello {
                protocol_min: 1,
                protocol_max: 1,
                worker: worker_identity(),
                instance_id: "forge".into(),
            },
            max,
        )
        .await
        .unwrap();
        assert!(matches!(
            read_message_async(&mut wr, max).await.unwrap(),
            Message::Welcome { protocol: 1 }
        ));
        let call_id = match read_message_async(&mut wr, max).await.unwrap() {
            Message::Request { id, method, .. } if method == "call" => id,
            other => panic!("{other:?}"),
        };
        let mut answers = Vec::new();
        let forged = [
            ModuleCall::Http(HttpRequest {
                method: "GET".into(),
                url: url.clone(),
                headers: vec![],
                body: None,
                timeout_ms: None,
            }),
            ModuleCall::SecretGet(SecretGet {
                name: "anything".into(),
            }),
        ];
        for (i, call) in forged.iter().enumerate() {
            write_message_async(
                &mut ww,
                &Message::Request {
                    id: 100 + i as u64,
                    method: "module".into(),
                    body: serde_json::to_value(call).unwrap(),
                },
                max,
            )
            .await
            .unwrap();
            answers.push(read_message_async(&mut wr, max).await.unwrap());
        }
        write_message_async(
            &mut ww,
            &Message::Response {
                id: call_id,
                body: json!({"value": 1, "output": ""}),
            },
            max,
        )
        .await
        .unwrap();
        answers
    });
    let mut conn =
        WorkerConnection::handshake(host_r, host_w, "forge", DEFAULT_MAX_FRAME, "forger")
            .await
            .unwrap();
    let call = wire::Call {
        entry: "f".into(),
        args: vec![],
        kwargs: Default::default(),
        timeout_ms: 5000,
    };
    let r = conn
        .call(
            &call,
            &broker,
            tokio::time::Instant::now() + Duration::from_secs(5),
            &cancel,
            Duration::from_millis(100),
        )
        .await
        .unwrap();
    assert_eq!(r.value, json!(1));
    let answers = fake.await.unwrap();
    for (i, a) in answers.iter().enumerate() {
        match a {
            Message::Error {
                id: Some(id),
                code,
                message,
            } => {
                assert_eq!(*id, 100 + i as u64);
                assert_eq!(code, "permission_denied");
                assert!(message.contains("forger"), "{message}");
            }
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(srv.hits(), 0, "the host never made the forged request");
    // The host's own record names each forged call and the grant it
    // lacked.
    let record = broker.refusals().finish();
    let named: Vec<_> = record
        .denials
        .iter()
        .map(|d| (d.kind, d.object.as_str(), d.remedy.clone()))
        .collect();
    use cordon_core::explain::{DenialKind, Remedy};
    assert_eq!(
        named,
        [
            (
                DenialKind::Module,
                "http.request",
                Remedy::GrantPermission("api.http".into())
            ),
            (
                DenialKind::Module,
                "secrets.get",
                Remedy::GrantPermission("secrets.read".into())
            ),
        ]
    );
    let logs = String::from_utf8(logs.0.lock().unwrap().clone()).unwrap();
    assert!(
        logs.contains("WARN")
            && logs.contains("package=forger")
            && logs.contains("module=\"http.request\"")
            && logs.contains("not granted"),
        "{logs}"
    );
}

/// A worker that cannot set the limits it was given (here an open-file
/// limit above the kernel's maximum, which not even root may set) exits
/// before its hello: it never serves a package with less.
#[test]
fn a_worker_that_cannot_set_its_limits_exits_before_serving() {
    // Serial too: its child and pipes would count as another test's leak.
    let _g = serial();
    let out = std::process::Command::new(WORKER)
        .args([WORKER_ARG, "--instance", "x"])
        .args(["--rlimit", "nofile=1099511627776"])
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(out.stdout.is_empty(), "no hello was sent: {out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("cannot set the worker's nofile limit"),
        "{err}"
    );
}
