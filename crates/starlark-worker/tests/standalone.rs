//! The stand-alone `cordon-star-worker` binary, built from this crate
//! alone (no host, no HTTP client), serves the protocol: the handshake, a
//! package, a call whose module call goes out as a `module` request and
//! comes back with the answer. The host's own tests drive the same loop
//! through the sandbox (`crates/starlark-host/tests/sandboxed/`).

use std::process::{Command, Stdio};

use cordon_starlark_protocol::frame::{read_message, write_message, Message, DEFAULT_MAX_FRAME};
use cordon_starlark_protocol::wire::{self, worker_identity};
use cordon_starlark_protocol::{EvalLimits, ModuleCall, ModuleReply, ModuleSet, Package};
use cordon_starlark_worker::WORKER_ARG;
use serde_json::json;

const WORKER: &str = env!("CARGO_BIN_EXE_cordon-star-worker");

fn request(id: u64, method: &str, body: impl serde::Serialize) -> Message {
    Message::Request {
        id,
        method: method.into(),
        body: serde_json::to_value(body).unwrap(),
    }
}

#[test]
fn the_stand_alone_worker_loads_calls_and_forwards_a_module_call() {
    let mut child = Command::new(WORKER)
        .args([WORKER_ARG, "--instance", "alone"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut input = child.stdin.take().unwrap();
    let mut output = child.stdout.take().unwrap();
    let mut read = || read_message(&mut output, DEFAULT_MAX_FRAME).unwrap();
    match read() {
        Message::Hello {
            worker,
            instance_id,
            ..
        } => assert_eq!((worker, instance_id.as_str()), (worker_identity(), "alone")),
        other => panic!("{other:?}"),
    }
    let mut send = |m: &Message| write_message(&mut input, m, DEFAULT_MAX_FRAME).unwrap();
    send(&Message::Welcome { protocol: 1 });
    let src = "def greet(name):\n    return secrets.get('prefix') + ', ' + name\n";
    let load = wire::LoadPackage {
        package: Package::from_script("alone", src),
        modules: ModuleSet {
            secrets: true,
            ..ModuleSet::NONE
        },
        limits: wire::WireLimits::from(&EvalLimits::default()),
    };
    send(&request(1, wire::METHOD_LOAD_PACKAGE, load));
    match read() {
        Message::Response { id: 1, body } => {
            let loaded: wire::Loaded = serde_json::from_value(body).unwrap();
            assert_eq!(loaded.functions, vec!["greet"]);
        }
        other => panic!("{other:?}"),
    }
    let call = wire::Call {
        entry: "greet".into(),
        args: vec![json!("world")],
        kwargs: Default::default(),
        timeout_ms: 10_000,
    };
    send(&request(2, wire::METHOD_CALL, call));
    let module_id = match read() {
        Message::Request { id, method, body } => {
            assert_eq!(method, wire::METHOD_MODULE);
            let call: ModuleCall = serde_json::from_value(body).unwrap();
            assert_eq!(call.name(), "secrets.get");
            id
        }
        other => panic!("{other:?}"),
    };
    send(&Message::Response {
        id: module_id,
        body: serde_json::to_value(ModuleReply::Secret(Some("hello".into()))).unwrap(),
    });
    match read() {
        Message::Response { id: 2, body } => assert_eq!(body["value"], json!("hello, world")),
        other => panic!("{other:?}"),
    }
    drop(input);
    assert_eq!(child.wait().unwrap().code(), Some(0), "EOF ends the worker");
}

#[test]
fn started_by_hand_the_worker_says_so_and_exits() {
    let out = Command::new(WORKER).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("started by a Starlark host"), "{err}");
}
