//! `cordon run --explain` / `--explain-json`: hostile programs try what
//! the sandbox refuses, and the explanation names each refusal — from the
//! layer that refused it — with its count and the flag that allows it;
//! what the program saw is the same as without `--explain`; concurrent
//! sandboxes see only their own; a flood stays bounded; a hostile request
//! cannot forge a line; the sandbox never holds its filter's listener.
//! Each as root and as uid 65534.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::Path;
use std::process::Command;

use crate::common::{cordon, run, spawn, text, unprivileged};
use crate::container_filter;

const PY: &str = "/usr/bin/python3";

/// Who runs cordon: root (this process) and uid 65534.
fn callers() -> Vec<&'static str> {
    // SAFETY: geteuid cannot fail.
    if unsafe { libc::geteuid() } == 0 {
        vec!["root", "uid 65534"]
    } else {
        vec!["this user"]
    }
}

/// A `cordon` command for `who`, with a private cache in `dir`.
fn cordon_as(who: &str, dir: &Path) -> Command {
    if who == "uid 65534" {
        unprivileged(dir)
    } else {
        let mut c = cordon(dir);
        c.env("PATH", "/usr/local/bin:/usr/bin:/bin");
        c
    }
}

/// A program that tries refused calls and prints what each returned.
const SYSCALLS: &str = "\
import ctypes, os, socket
libc = ctypes.CDLL(None, use_errno=True)
for _ in range(3):
    r = libc.ptrace(0, 0, 0, 0)
    print('ptrace', r, ctypes.get_errno())
r = libc.syscall(999)
print('999', r, ctypes.get_errno())
for kind, name in ((socket.SOCK_DGRAM, 'udp'), (socket.SOCK_STREAM, 'tcp')):
    try:
        socket.socket(socket.AF_INET, kind)
        print(name, 'made')
    except OSError as e:
        print(name, e.errno)
";

fn json_lines(path: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l}: {e}")))
        .collect()
}

fn find<'a>(lines: &'a [serde_json::Value], object: &str) -> &'a serde_json::Value {
    lines
        .iter()
        .find(|l| l["object"] == object)
        .unwrap_or_else(|| panic!("no {object} in {lines:?}"))
}

#[test]
fn each_refused_call_is_named_with_its_count_and_hint() {
    refused_calls_are_named(false);
}

/// The same where only tier landlock runs (a container runtime's filter,
/// no user namespaces): its own filter, the same record.
#[test]
fn each_refused_call_is_named_in_tier_landlock_too() {
    refused_calls_are_named(true);
}

fn refused_calls_are_named(container: bool) {
    let cordon_as = |who: &str, dir: &Path| {
        let mut c = cordon_as(who, dir);
        if container {
            container_filter::install_on(&mut c);
        }
        c
    };
    // The audit switch decides whether file denials are observable: held
    // still while this test runs, and read.
    // SAFETY: geteuid cannot fail.
    let root = unsafe { libc::geteuid() } == 0;
    let _switch = root.then(|| AUDIT_SWITCH.lock().unwrap_or_else(|e| e.into_inner()));
    let audit_on = root && audit_get() == 1;
    for who in callers() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("home")).unwrap();
        let json = dir.path().join("home").join("explain.jsonl");
        let plain = run(cordon_as(who, dir.path()).args(["run", "--", PY, "-c", SYSCALLS]));
        let out = run(cordon_as(who, dir.path()).args([
            "run",
            "--explain",
            "--explain-json",
            json.to_str().unwrap(),
            "--",
            PY,
            "-c",
            SYSCALLS,
        ]));
        let (so, err) = (text(&out.stdout), text(&out.stderr));
        assert_eq!(out.status.code(), Some(0), "{who}: {err}");
        if container {
            assert!(err.contains("sandbox tier landlock"), "{who}: {err}");
        }
        // The program saw exactly what it sees without --explain.
        assert_eq!(so, text(&plain.stdout), "{who}: {err}");
        assert!(
            so.contains(&format!("ptrace -1 {}", libc::EPERM)),
            "{who}: {so}"
        );
        assert!(
            so.contains(&format!("999 -1 {}", libc::ENOSYS)),
            "{who}: {so}"
        );
        assert!(so.contains(&format!("udp {}", libc::EPERM)), "{who}: {so}");
        for line in [
            "cordon: denied syscall ptrace (x3) — no flag allows it",
            "cordon: denied syscall syscall 999 (x1) — no flag allows it",
            "cordon: denied socket AF_INET SOCK_DGRAM (x1) — no flag allows it: only TCP to \
             --allow-host hosts",
            "cordon: denied socket AF_INET SOCK_STREAM (x1) — the network is off: allow the \
             hosts it needs with --allow-host HOST",
        ] {
            assert!(err.contains(line), "{who}: missing {line:?} in {err}");
        }
        let lines = json_lines(&json);
        let ptrace = find(&lines, "ptrace");
        assert_eq!(ptrace["kind"], "syscall", "{who}");
        assert_eq!(ptrace["count"], 3, "{who}");
        assert_eq!(ptrace["hint"], "no flag allows it", "{who}");
        assert!(ptrace["first_seen"].is_u64(), "{who}");
        assert_eq!(find(&lines, "AF_INET SOCK_STREAM")["kind"], "network");
        // File denials are observable only as root with audit on, and
        // then tier namespaces still says writes fail at the mount first.
        let files_said = !(who == "root" && audit_on && container);
        assert_eq!(
            err.contains("cordon: not observable: files: "),
            files_said,
            "{who} (audit on: {audit_on}): {err}"
        );
        assert_eq!(
            lines.iter().any(|l| l["kind"] == "unobservable"),
            err.contains("cordon: not observable: "),
            "{who}: {lines:?}"
        );
        // Without the flags nothing is said.
        assert!(!text(&plain.stderr).contains("denied"), "{who}");
    }
}

/// A one-line HTTP server on 127.0.0.1 answering `200` to every request,
/// on its own thread, for as long as the test runs.
fn http_server() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for mut c in l.incoming().flatten() {
            let mut buf = [0u8; 4096];
            let _ = c.read(&mut buf);
            let _ =
                c.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok");
        }
    });
    port
}

#[test]
fn the_proxys_refusals_are_named_with_the_entry_that_allows_them() {
    let port = http_server();
    let fetch = format!(
        "\
import urllib.request, urllib.parse, socket, os
for url in ['http://127.0.0.1:{port}/', 'http://127.0.0.1:{other}/', 'http://api.example.com/']:
    try:
        print(url, urllib.request.urlopen(url, timeout=10).status)
    except Exception as e:
        print(url, e)
# A request line made to forge lines on the operator's terminal.
proxy = urllib.parse.urlparse(os.environ['http_proxy'])
s = socket.create_connection((proxy.hostname, proxy.port))
s.sendall(b'CONNECT \\x1b]0;pwned\\x07\\ncordon: denied nothing:443 HTTP/1.1\\r\\n\\r\\n')
print('forged', s.recv(100)[:12])
# A target that reaches the proxy's reason, with a right-to-left override.
s = socket.create_connection((proxy.hostname, proxy.port))
s.sendall(b'GET http://\\xe2\\x80\\xaeevil.example/ HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n')
print('bidi', s.recv(100)[:12])
",
        other = port + 1
    );
    for who in callers() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("home")).unwrap();
        let json = dir.path().join("home").join("net.jsonl");
        let out = run(cordon_as(who, dir.path()).args([
            "run",
            "--explain",
            "--explain-json",
            json.to_str().unwrap(),
            "--allow-host",
            &format!("http://127.0.0.1:{port}"),
            "--",
            PY,
            "-c",
            &fetch,
        ]));
        let (so, err) = (text(&out.stdout), text(&out.stderr));
        assert!(
            so.contains(&format!("http://127.0.0.1:{port}/ 200")),
            "{who}: {so} {err}"
        );
        for line in [
            format!(
                "cordon: denied connect 127.0.0.1:{} (not in the allowlist) (x1) — allow with \
                 --allow-host http://127.0.0.1:{}",
                port + 1,
                port + 1
            ),
            "cordon: denied connect api.example.com:80 (not in the allowlist) (x1) — allow \
             with --allow-host http://api.example.com:80"
                .to_string(),
        ] {
            assert!(err.contains(&line), "{who}: missing {line:?} in {err}");
        }
        // The hostile request line reached the explanation escaped: no
        // control byte, no line of its own.
        assert!(so.contains("forged"), "{who}: {so}");
        assert!(
            !err.contains('\u{1b}') && !err.contains('\u{7}'),
            "{who}: {err:?}"
        );
        assert!(
            !err.lines().any(|l| l.starts_with("cordon: denied nothing")),
            "{who}: {err}"
        );
        let lines = json_lines(&json);
        let other = find(
            &lines,
            &format!("127.0.0.1:{} (not in the allowlist)", port + 1),
        );
        assert_eq!(
            (
                other["kind"].as_str(),
                other["count"].as_u64(),
                other["remedy"]["value"].as_str()
            ),
            (
                Some("network"),
                Some(1),
                Some(format!("http://127.0.0.1:{}", port + 1).as_str())
            ),
            "{who}: {other}"
        );
        // The override reached the explanation, escaped.
        assert!(so.contains("bidi"), "{who}: {so}");
        assert!(
            err.contains("`\\u{202e}evil.example` is not HOST:PORT") && !err.contains('\u{202e}'),
            "{who}: {err:?}"
        );
    }
}

#[test]
fn the_limit_that_ended_the_program_is_named() {
    let hog =
        "import os\nfd = os.memfd_create('x')\nfor _ in range(512): os.write(fd, b'x' * (1 << 20))";
    // Ten processes in turn, 0.4 s each: only the sandbox's sum passes 1 s.
    let burn = "import os, time\nfor i in range(10):\n    pid = os.fork()\n    if pid == 0:\n        \
                end = time.process_time() + 0.4\n        while time.process_time() < end: pass\n        \
                os._exit(0)\n    os.waitpid(pid, 0)";
    for who in callers() {
        let dir = tempfile::tempdir().unwrap();
        let facts = run(cordon_as(who, dir.path()).args(["conformance", "--json"]));
        let report: serde_json::Value = serde_json::from_slice(&facts.stdout).unwrap();
        // A fact missing fails the test (it would skip a branch silently).
        let scope = |k: &str| {
            report["host"]["backend_facts"][k]
                .as_str()
                .unwrap_or_else(|| panic!("{who}: no {k} in the host facts: {report}"))
                .to_string()
        };
        if scope("limit_memory").starts_with("sandbox:") {
            let out = run(cordon_as(who, dir.path()).args([
                "run",
                "--explain",
                "--mem",
                "64M",
                "--",
                PY,
                "-c",
                hog,
            ]));
            let err = text(&out.stderr);
            assert!(
                err.contains("cordon: limit memory 64 MiB: killed (x1) — raise it with --mem"),
                "{who}: {err}"
            );
        } else {
            // Per process (rlimits): the allocation fails in the program,
            // and the explanation says that leaves no record.
            let out = run(cordon_as(who, dir.path()).args([
                "run",
                "--explain",
                "--mem",
                "64M",
                "--mem-scope",
                "process",
                "--",
                PY,
                "-c",
                "try: b = bytearray(512 << 20)\nexcept MemoryError: print('refused')",
            ]));
            let (so, err) = (text(&out.stdout), text(&out.stderr));
            assert_eq!(so.trim(), "refused", "{who}: {err}");
            assert!(
                err.contains("cordon: not observable: memory: the limit holds per process here"),
                "{who}: {err}"
            );
        }
        let mut cpu = vec!["run", "--explain", "--cpu", "1"];
        if !scope("limit_cpu").starts_with("sandbox:") {
            cpu.extend(["--cpu-scope", "process"]);
        }
        cpu.extend(["--", PY, "-c", burn]);
        let out = run(cordon_as(who, dir.path()).args(&cpu));
        let err = text(&out.stderr);
        assert!(
            err.contains("cordon: limit cpu 1000 ms: killed (x1) — raise it with --cpu"),
            "{who}: {err}"
        );
    }
}

#[test]
fn concurrent_sandboxes_each_see_only_their_own_denials() {
    // Each makes its own refused call many times, while the other runs.
    let prog = |nr: u32| {
        format!(
            "import ctypes, time\nlibc = ctypes.CDLL(None)\nfor _ in range(200):\n    \
             libc.syscall({nr})\n    time.sleep(0.002)"
        )
    };
    for who in callers() {
        let dir = tempfile::tempdir().unwrap();
        // Warm the report cache, so both start at once.
        run(cordon_as(who, dir.path()).args(["run", "--", "/bin/true"]));
        let (a, b) = (prog(990), prog(991));
        let mut first = cordon_as(who, dir.path());
        first
            .args(["run", "--explain", "--", PY, "-c", &a])
            .stderr(std::process::Stdio::piped());
        let mut second = cordon_as(who, dir.path());
        second
            .args(["run", "--explain", "--", PY, "-c", &b])
            .stderr(std::process::Stdio::piped());
        let (one, two) = (spawn(&mut first), spawn(&mut second));
        let one = text(&one.wait_with_output().unwrap().stderr);
        let two = text(&two.wait_with_output().unwrap().stderr);
        assert!(
            one.contains("denied syscall syscall 990 (x200)"),
            "{who}: {one}"
        );
        assert!(!one.contains("syscall 991"), "{who}: {one}");
        assert!(
            two.contains("denied syscall syscall 991 (x200)"),
            "{who}: {two}"
        );
        assert!(!two.contains("syscall 990"), "{who}: {two}");
    }
}

/// The highest RSS of `child` seen while it runs, in KiB (sampled every
/// 20 ms: a report-cache miss would run the probes first, whose peak is
/// not this test's).
fn peak_rss_kib(child: &mut std::process::Child) -> u64 {
    let mut peak = 0;
    while child.try_wait().unwrap().is_none() {
        if let Ok(s) = std::fs::read_to_string(format!("/proc/{}/status", child.id())) {
            if let Some(v) = s.lines().find_map(|l| l.strip_prefix("VmRSS:")) {
                peak = peak.max(v.trim().trim_end_matches(" kB").trim().parse().unwrap_or(0));
            }
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    peak
}

#[test]
fn a_flood_of_a_million_denials_stays_bounded() {
    // 10^6 refused calls over 5000 distinct numbers.
    let flood =
        "import ctypes\nprint('started', flush=True)\nlibc = ctypes.CDLL(None)\nf = libc.syscall\n\
                 for i in range(1000000): f(1000 + i % 5000)\nprint('flooded')";
    for who in callers() {
        let dir = tempfile::tempdir().unwrap();
        run(cordon_as(who, dir.path()).args(["run", "--", "/bin/true"]));
        let mut cmd = cordon_as(who, dir.path());
        cmd.args(["run", "--explain", "--", PY, "-c", flood])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        let mut child = spawn(&mut cmd);
        // Once the program runs (the probes, if any, are over).
        let mut stdout = std::io::BufReader::new(child.stdout.take().unwrap());
        let mut first = String::new();
        std::io::BufRead::read_line(&mut stdout, &mut first).unwrap();
        assert_eq!(first, "started\n", "{who}");
        let mut err = String::new();
        let mut stderr = child.stderr.take().unwrap();
        let reader = std::thread::spawn(move || {
            let _ = stderr.read_to_string(&mut err);
            err
        });
        let peak = peak_rss_kib(&mut child);
        let err = reader.join().unwrap();
        let mut so = String::new();
        stdout.read_to_string(&mut so).unwrap();
        assert!(so.contains("flooded"), "{who}: {err}");
        assert!(
            peak > 0 && peak < 64 * 1024,
            "{who}: cordon peaked at {peak} KiB"
        );
        let kept = err
            .lines()
            .filter(|l| l.starts_with("cordon: denied"))
            .count();
        assert_eq!(kept, cordon_core::explain::MAX_DISTINCT, "{who}: {err}");
        let unkept = (5000 - cordon_core::explain::MAX_DISTINCT) * 200;
        assert!(
            err.contains(&format!("cordon: and {unkept} more refusals, not kept")),
            "{who}: {err}"
        );
        // 10^6 / 5000 each.
        assert!(
            err.contains("denied syscall syscall 1000 (x200)"),
            "{who}: {err}"
        );
    }
}

#[test]
fn the_sandbox_never_holds_its_filters_listener() {
    // Whoever holds the listener decides the refused calls. The program
    // lists the fds it has open; with --explain it must have exactly the
    // ones it has without (a listener or its socket kept would show).
    let prog = "import os\ndef ok(fd):\n    try:\n        os.fstat(fd)\n        return True\n    \
                except OSError:\n        return False\nprint('open', [fd for fd in range(1024) if ok(fd)])";
    for who in callers() {
        let dir = tempfile::tempdir().unwrap();
        let plain = run(cordon_as(who, dir.path()).args(["run", "--", PY, "-c", prog]));
        let explained =
            run(cordon_as(who, dir.path()).args(["run", "--explain", "--", PY, "-c", prog]));
        let (p, e) = (text(&plain.stdout), text(&explained.stdout));
        assert!(
            p.starts_with("open ["),
            "{who}: {p} {}",
            text(&plain.stderr)
        );
        assert_eq!(p, e, "{who}: {}", text(&explained.stderr));
    }
}

/// Turns the kernel's audit on for as long as it lives (as root), and
/// back to how it was after: Landlock logs refusals only while it is on.
/// One at a time (the audit switch is the host's): a second test's guard
/// waits, so none turns it off under another.
struct AuditOn {
    before: u32,
    _one_at_a_time: std::sync::MutexGuard<'static, ()>,
}

static AUDIT_SWITCH: std::sync::Mutex<()> = std::sync::Mutex::new(());

impl AuditOn {
    fn new() -> AuditOn {
        let held = AUDIT_SWITCH.lock().unwrap_or_else(|e| e.into_inner());
        AuditOn {
            before: audit_set(1),
            _one_at_a_time: held,
        }
    }
}

impl Drop for AuditOn {
    fn drop(&mut self) {
        audit_set(self.before);
    }
}

/// `AUDIT_SET` of `enabled`; returns the value before (`AUDIT_GET`).
fn audit_set(enabled: u32) -> u32 {
    audit_switch(Some(enabled))
}

/// Whether the kernel's audit is on (`AUDIT_GET`).
fn audit_get() -> u32 {
    audit_switch(None)
}

/// `AUDIT_GET`, then `AUDIT_SET` of `enabled` if given; the value before.
fn audit_switch(enabled: Option<u32>) -> u32 {
    use std::os::fd::FromRawFd;
    // SAFETY: a netlink socket of our own, requests and replies in local
    // buffers.
    unsafe {
        let fd = libc::socket(libc::AF_NETLINK, libc::SOCK_RAW, libc::NETLINK_AUDIT);
        assert!(
            fd >= 0,
            "netlink audit: {}",
            std::io::Error::last_os_error()
        );
        let _sock = std::os::fd::OwnedFd::from_raw_fd(fd);
        let request = |kind: u16, payload: &[u8]| {
            let mut msg = Vec::new();
            msg.extend_from_slice(&(16 + payload.len() as u32).to_ne_bytes());
            msg.extend_from_slice(&kind.to_ne_bytes());
            msg.extend_from_slice(&((libc::NLM_F_REQUEST | libc::NLM_F_ACK) as u16).to_ne_bytes());
            msg.extend_from_slice(&[0; 8]);
            msg.extend_from_slice(payload);
            assert!(libc::send(fd, msg.as_ptr().cast(), msg.len(), 0) > 0);
        };
        request(1000, &[]);
        let mut buf = [0u8; 8192];
        let before = loop {
            let n = libc::recv(fd, buf.as_mut_ptr().cast(), buf.len(), 0);
            assert!(n >= 16, "AUDIT_GET: {}", std::io::Error::last_os_error());
            if u16::from_ne_bytes([buf[4], buf[5]]) == 1000 {
                break u32::from_ne_bytes(buf[20..24].try_into().unwrap());
            }
        };
        if let Some(enabled) = enabled {
            // struct audit_status: mask = AUDIT_STATUS_ENABLED, enabled.
            let mut status = [0u8; 40];
            status[0..4].copy_from_slice(&1u32.to_ne_bytes());
            status[4..8].copy_from_slice(&enabled.to_ne_bytes());
            request(1001, &status);
        }
        before
    }
}

#[test]
fn file_denials_come_from_landlocks_own_records() {
    file_denials_are_named(false);
}

#[test]
fn file_denials_are_named_in_tier_landlock_too() {
    file_denials_are_named(true);
}

/// Reads and an exec outside the grants, writes to a read-only grant and
/// a creation in it. The read-only grant is writable by anyone on the
/// host (its mode), so that only the sandbox refuses the writes: Landlock
/// in tier landlock, the read-only mount (EROFS) before Landlock in tier
/// namespaces, which the explanation says.
fn file_denials_are_named(container: bool) {
    use std::os::unix::fs::PermissionsExt;
    let outside = tempfile::tempdir().unwrap();
    std::fs::set_permissions(outside.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let secret = outside.path().join("credentials");
    std::fs::write(&secret, "key").unwrap();
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o644)).unwrap();
    let tool = outside.path().join("tool");
    std::fs::write(&tool, "#!/bin/sh\necho ran\n").unwrap();
    std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o755)).unwrap();
    let ro = outside.path().join("ro");
    std::fs::create_dir(&ro).unwrap();
    std::fs::set_permissions(&ro, std::fs::Permissions::from_mode(0o777)).unwrap();
    let data = ro.join("data");
    std::fs::write(&data, "kept").unwrap();
    std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o666)).unwrap();
    let prog = format!(
        "import os\nfor _ in range(3):\n    try: open({s:?}).read()\n    except OSError as e: \
         print('read', e.errno)\nfor _ in range(2):\n    try: open({d:?}, 'w').write('x')\n    \
         except OSError as e: print('write', e.errno)\ntry: open({n:?}, 'x')\nexcept OSError as \
         e: print('create', e.errno)\ntry: os.execv({t:?}, [{t:?}])\nexcept OSError as e: \
         print('exec', e.errno)",
        s = secret.to_str().unwrap(),
        d = data.to_str().unwrap(),
        n = ro.join("new").to_str().unwrap(),
        t = tool.to_str().unwrap()
    );
    // SAFETY: geteuid cannot fail.
    let root = unsafe { libc::geteuid() } == 0;
    let _audit = root.then(AuditOn::new);
    for who in callers() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("home")).unwrap();
        let json = dir.path().join("home").join("files.jsonl");
        let mut cmd = cordon_as(who, dir.path());
        if container {
            container_filter::install_on(&mut cmd);
        }
        let out = run(cmd.args([
            "run",
            "--explain",
            "--explain-json",
            json.to_str().unwrap(),
            "--ro",
            ro.to_str().unwrap(),
            "--",
            PY,
            "-c",
            &prog,
        ]));
        let (so, err) = (text(&out.stdout), text(&out.stderr));
        assert_eq!(std::fs::read_to_string(&data).unwrap(), "kept", "{who}");
        assert!(!ro.join("new").exists(), "{who}");
        let write_errno = if container { libc::EACCES } else { libc::EROFS };
        for seen in [
            format!("read {}", libc::EACCES),
            format!("exec {}", libc::EACCES),
            format!("write {write_errno}"),
            format!("create {write_errno}"),
        ] {
            assert!(so.contains(&seen), "{who}: {seen:?} in {so} {err}");
        }
        if who == "root" {
            let (s, t, d, r) = (
                secret.display(),
                tool.display(),
                data.display(),
                ro.display(),
            );
            let mut want = vec![
                format!("cordon: denied read {s} (x3) — grant with --ro {s}"),
                format!("cordon: denied execute {t} (x1) — grant with --ro {t}"),
            ];
            if container {
                want.push(format!(
                    "cordon: denied write {d} (x2) — grant with --rw {d}"
                ));
                want.push(format!(
                    "cordon: denied create in {r} (x1) — grant with --rw {r}"
                ));
            } else {
                want.push(
                    "cordon: not observable: files: a write or a creation outside the \
                     read-write grants fails with EROFS"
                        .to_string(),
                );
            }
            for line in want {
                assert!(err.contains(&line), "{who}: missing {line:?} in {err}");
            }
            let lines = json_lines(&json);
            let read = find(&lines, secret.to_str().unwrap());
            assert_eq!(
                (read["kind"].as_str(), read["count"].as_u64()),
                (Some("file"), Some(3))
            );
            if container {
                let write = find(&lines, data.to_str().unwrap());
                assert_eq!(
                    (write["access"].as_str(), write["count"].as_u64()),
                    (Some("write"), Some(2))
                );
            }
        } else {
            // The documented case: not observable for this caller.
            assert!(
                err.contains(
                    "cordon: not observable: files: Landlock's audit records are \
                              readable only by root"
                ),
                "{who}: {err}"
            );
            assert!(!err.contains("denied read"), "{who}: {err}");
        }
    }
}

#[test]
fn forks_refused_at_the_process_limit_are_counted() {
    // 20 forks under --pids 8: the program and 7 children fit, 13 fail.
    let prog = "import os, time\nkids, failed = [], 0\nfor _ in range(20):\n    try: pid = \
                os.fork()\n    except OSError: failed += 1; continue\n    if pid == 0:\n        \
                time.sleep(30); os._exit(0)\n    kids.append(pid)\nprint(len(kids), failed, \
                flush=True)\nfor k in kids: os.kill(k, 9); os.waitpid(k, 0)";
    for who in callers() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("home")).unwrap();
        let json = dir.path().join("home").join("pids.jsonl");
        let args = |explain: bool| {
            let mut a = vec!["run", "--pids", "8"];
            if explain {
                a.extend(["--explain", "--explain-json", json.to_str().unwrap()]);
            }
            a.extend(["--", PY, "-c", prog]);
            a
        };
        let plain = run(cordon_as(who, dir.path()).args(args(false)));
        let out = run(cordon_as(who, dir.path()).args(args(true)));
        let (so, err) = (text(&out.stdout), text(&out.stderr));
        // Exactly the limit, with and without --explain.
        assert_eq!(so.trim(), "7 13", "{who}: {err}");
        assert_eq!(text(&plain.stdout), so, "{who}");
        if who == "root" {
            let line = "cordon: limit processes 8: fork refused (x13) — raise it with --pids";
            assert!(err.contains(line), "{who}: missing {line:?} in {err}");
            let lines = json_lines(&json);
            let forks = find(&lines, "processes 8");
            assert_eq!(
                (forks["kind"].as_str(), forks["count"].as_u64()),
                (Some("limit"), Some(13))
            );
        } else {
            let line = "cordon: not observable: processes: a fork refused at the process limit \
                        is not observable for uid 65534 on this host";
            assert!(err.contains(line), "{who}: missing {line:?} in {err}");
        }
    }
}

#[test]
fn explain_mode_refuses_a_seccomp_listener_of_the_sandboxs_own() {
    // With a listener of its own, a newer filter of the program's could
    // answer the refused calls itself (FLAG_CONTINUE) once the host's
    // listener is gone: explain mode refuses making one. Without
    // --explain the same call works (the control: this test can fail).
    let prog = "\
import ctypes, struct
libc = ctypes.CDLL(None, use_errno=True)
insn = struct.pack('HBBI', 0x06, 0, 0, 0x7fff0000)  # ret ALLOW
buf = ctypes.create_string_buffer(insn)
class Fprog(ctypes.Structure):
    _fields_ = [('len', ctypes.c_ushort), ('filter', ctypes.c_void_p)]
f = Fprog(1, ctypes.cast(buf, ctypes.c_void_p))
r = libc.syscall(317, 1, 8, ctypes.byref(f))
print('listener', r, ctypes.get_errno())
";
    for who in callers() {
        let dir = tempfile::tempdir().unwrap();
        let plain = run(cordon_as(who, dir.path()).args(["run", "--", PY, "-c", prog]));
        let so = text(&plain.stdout);
        assert!(
            !so.contains("listener -1"),
            "{who}: control: {so} {}",
            text(&plain.stderr)
        );
        let out = run(cordon_as(who, dir.path()).args(["run", "--explain", "--", PY, "-c", prog]));
        let so = text(&out.stdout);
        assert!(
            so.contains(&format!("listener -1 {}", libc::EPERM)),
            "{who}: {so} {}",
            text(&out.stderr)
        );
    }
}

#[test]
fn the_json_file_is_never_written_through_the_sandboxs_link() {
    use std::os::unix::fs::PermissionsExt;
    for who in callers() {
        let dir = tempfile::tempdir().unwrap();
        let shared = dir.path().join("home").join("shared");
        std::fs::create_dir_all(&shared).unwrap();
        std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o777)).unwrap();
        let victim = dir.path().join("victim");
        std::fs::write(&victim, "precious").unwrap();
        let json = shared.join("explain.jsonl");
        // The program puts a link to the victim where the output goes (the
        // output is not there while it runs: it is made beside its name).
        let swap = format!(
            "import os\ntry:\n    os.unlink({j:?})\nexcept FileNotFoundError:\n    pass\nos.symlink({v:?}, {j:?})\nprint('swapped')",
            j = json.to_str().unwrap(),
            v = victim.to_str().unwrap()
        );
        let out = run(cordon_as(who, dir.path()).args([
            "run",
            "--explain-json",
            json.to_str().unwrap(),
            "--rw",
            shared.to_str().unwrap(),
            "--",
            PY,
            "-c",
            &swap,
        ]));
        assert!(
            text(&out.stdout).contains("swapped"),
            "{who}: {}",
            text(&out.stderr)
        );
        assert_eq!(
            std::fs::read_to_string(&victim).unwrap(),
            "precious",
            "{who}"
        );
    }
}

/// A path the caller's own run may write: `dir/w` for a `--rw` grant,
/// and the victim `dir/victim/explain.json` outside every grant, both the
/// caller's (uid 65534's when it runs cordon).
fn grant_and_victim(who: &str, dir: &Path) -> (std::path::PathBuf, std::path::PathBuf) {
    use std::os::unix::fs::PermissionsExt;
    let w = dir.join("w");
    let victim_dir = dir.join("victim");
    std::fs::create_dir_all(&w).unwrap();
    std::fs::create_dir_all(&victim_dir).unwrap();
    let victim = victim_dir.join("explain.json");
    std::fs::write(&victim, "precious").unwrap();
    std::fs::set_permissions(&victim, std::fs::Permissions::from_mode(0o600)).unwrap();
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    if who == "uid 65534" {
        for p in [&w, &victim_dir, &victim] {
            std::os::unix::fs::chown(p, Some(65534), Some(65534)).unwrap();
        }
    }
    (w, victim)
}

/// Who runs cordon with a `--rw` grant, in which tier: each caller in
/// tier namespaces, and in tier landlock all but root (a root host
/// refuses a writable host dir there: no idmapped mount).
fn grant_runs() -> Vec<(&'static str, &'static str)> {
    let mut runs = Vec::new();
    for who in callers() {
        runs.push((who, "namespaces"));
        if who != "root" {
            runs.push((who, "landlock"));
        }
    }
    runs
}

/// Runs `code` (which prints `planted` when done) in a sandbox of `tier`
/// that may write `w`: what an earlier run of the caller's leaves there.
fn plant_in_grant(who: &str, tier: &str, dir: &Path, w: &Path, code: &str) {
    let out = run(cordon_as(who, dir).args([
        "run",
        "--tier",
        tier,
        "--rw",
        w.to_str().unwrap(),
        "--",
        PY,
        "-c",
        code,
    ]));
    assert!(
        text(&out.stdout).contains("planted"),
        "{who}, tier {tier}: {}",
        text(&out.stderr)
    );
}

/// `cordon run --tier TIER --rw W --explain-json JSON` as `caller`, for
/// the program given after it.
fn explaining_into(caller: &str, tier: &str, dir: &Path, w: &Path, json: &Path) -> Command {
    let mut c = cordon_as(caller, dir);
    c.args(["run", "--tier", tier, "--rw"])
        .arg(w)
        .arg("--explain-json")
        .arg(json);
    c
}

#[test]
fn a_link_the_sandbox_left_in_the_json_files_path_is_refused() {
    // Run 1 turns `W/logs` into a link to a dir of the caller's outside
    // every grant; run 2, the operator's usual `--explain-json
    // W/logs/explain.json`, must not write there.
    for (caller, tier) in grant_runs() {
        let who = &format!("{caller}, tier {tier}");
        let dir = tempfile::tempdir().unwrap();
        let (w, victim) = grant_and_victim(caller, dir.path());
        let logs = w.join("logs");
        let plant = format!(
            "import os, shutil\nshutil.rmtree({l:?}, ignore_errors=True)\nos.symlink({v:?}, {l:?})\nprint('planted')",
            l = logs.to_str().unwrap(),
            v = victim.parent().unwrap().to_str().unwrap()
        );
        plant_in_grant(caller, tier, dir.path(), &w, &plant);
        assert!(logs.symlink_metadata().unwrap().file_type().is_symlink());
        let json = logs.join("explain.json");
        let out =
            run(explaining_into(caller, tier, dir.path(), &w, &json).args(["--", "/bin/true"]));
        let err = text(&out.stderr);
        assert!(!out.status.success(), "{who}: the run went on: {err}");
        assert!(err.contains("symbolic link"), "{who}: {err}");
        assert_eq!(
            std::fs::read_to_string(&victim).unwrap(),
            "precious",
            "{who}"
        );
        assert_eq!(
            std::fs::read_dir(victim.parent().unwrap()).unwrap().count(),
            1,
            "{who}: something was made in the victim's dir"
        );
    }
}

#[test]
fn a_fifo_at_the_json_files_path_does_not_hang_cordon() {
    for (caller, tier) in grant_runs() {
        let who = &format!("{caller}, tier {tier}");
        let dir = tempfile::tempdir().unwrap();
        let (w, _) = grant_and_victim(caller, dir.path());
        let json = w.join("explain.json");
        // An earlier sandbox with the same grant left a FIFO there.
        let plant = format!(
            "import os\nos.mkfifo({j:?})\nprint('planted')",
            j = json.to_str().unwrap()
        );
        plant_in_grant(caller, tier, dir.path(), &w, &plant);
        let mut child = spawn(
            explaining_into(caller, tier, dir.path(), &w, &json)
                .args(["--timeout", "5", "--", "/bin/true"])
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::piped()),
        );
        // Bounded wait: cordon must have ended (refused) long before this.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        let status = loop {
            if let Some(s) = child.try_wait().unwrap() {
                break Some(s);
            }
            if std::time::Instant::now() > deadline {
                child.kill().unwrap();
                child.wait().unwrap();
                break None;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        };
        let mut err = String::new();
        std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut err).unwrap();
        let status = status.unwrap_or_else(|| panic!("{who}: cordon hung on the FIFO: {err}"));
        assert!(!status.success(), "{who}: {err}");
        assert!(err.contains("FIFO"), "{who}: {err}");
    }
}

#[test]
fn roots_json_file_is_never_written_into_another_users_file() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return;
    }
    // uid 65534 made a 0666 file in a sticky dir (as with
    // fs.protected_regular=0) and waits for root's denial records.
    let dir = tempfile::tempdir().unwrap();
    let sticky = dir.path().join("sticky");
    std::fs::create_dir(&sticky).unwrap();
    std::fs::set_permissions(&sticky, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let planted = sticky.join("explain.json");
    std::fs::write(&planted, "").unwrap();
    std::fs::set_permissions(&planted, std::fs::Permissions::from_mode(0o666)).unwrap();
    std::os::unix::fs::chown(&planted, Some(65534), Some(65534)).unwrap();
    let out = run(cordon(dir.path()).args([
        "run",
        "--explain-json",
        planted.to_str().unwrap(),
        "--",
        PY,
        "-c",
        "import ctypes; ctypes.CDLL(None).ptrace(0, 0, 0, 0)",
    ]));
    let err = text(&out.stderr);
    assert!(!out.status.success(), "the run went on: {err}");
    assert!(err.contains("uid 65534"), "{err}");
    let m = std::fs::metadata(&planted).unwrap();
    assert_eq!((m.uid(), m.len()), (65534, 0), "root wrote into it");
}

#[test]
fn the_program_cannot_forge_the_json_file() {
    // The program looks for the output beside its name while it runs, to
    // append a forged denial to it, swap it or leave a FIFO: the file is
    // made only once it has ended, so there is nothing to find.
    const FORGED: &str = "FORGED-DENIAL";
    for (who, tier) in grant_runs() {
        let dir = tempfile::tempdir().unwrap();
        let (w, _) = grant_and_victim(who, dir.path());
        let json = w.join("explain.json");
        let forge = format!(
            "import os\nfound = [n for n in os.listdir({w:?}) if n != 'explain.json']\n\
             for n in found:\n    with open(os.path.join({w:?}, n), 'a') as f:\n        \
             f.write('{{\"kind\":\"{FORGED}\"}}\\n')\nprint('found', len(found))",
            w = w.to_str().unwrap()
        );
        let out =
            run(explaining_into(who, tier, dir.path(), &w, &json).args(["--", PY, "-c", &forge]));
        let err = text(&out.stderr);
        assert_eq!(text(&out.stdout), "found 0\n", "{who}, tier {tier}: {err}");
        let written = std::fs::read_to_string(&json)
            .unwrap_or_else(|e| panic!("{who}, tier {tier}: no JSON file ({e}): {err}"));
        assert!(!written.contains(FORGED), "{who}, tier {tier}: {written}");
        let names: Vec<_> = std::fs::read_dir(&w)
            .unwrap()
            .flatten()
            .map(|e| e.file_name())
            .collect();
        assert_eq!(
            names.len(),
            1,
            "{who}, tier {tier}: left beside it: {names:?}"
        );
    }
}
