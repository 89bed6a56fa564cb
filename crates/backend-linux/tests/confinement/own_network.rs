//! `Network::Namespace`: TCP clients and servers inside a network
//! namespace of the sandbox's own, nothing outside it, and its TCP
//! buffers (one pool for the host) held to the sandbox's share.

use super::*;

/// A runner whose sandboxes get `Network::Namespace`.
fn own_network_spawner() -> Spawner {
    spawner_with(RunnerConfig {
        network: Network::Namespace,
        ..config()
    })
}

/// Where the backend cannot give it (tier landlock; no cgroup to bound
/// the TCP buffers with), the spawn is refused and nothing runs: `Some`
/// with what was checked.
fn refused_here(marker: &Path) -> Option<Outcome> {
    let why = if on_container() {
        "Network::Namespace needs a network namespace of the sandbox's own"
    } else if !is_root() {
        "Network::Namespace needs a cgroup of the sandbox's own"
    } else {
        return None;
    };
    let script = format!("touch {}", marker.display());
    Some(match run_with(&own_network_spawner(), sh(&script)) {
        Err(e) if e.contains(why) => ensure(!marker.exists(), || "the program ran".into()),
        Err(e) => Err(format!("refused, but not for `{why}`: {e}")),
        Ok(r) => Err(format!("ran where it must be refused: {r}")),
    })
}

/// Serves and connects on its own loopback; the host's listener on
/// 127.0.0.1 is not reachable (another namespace), and UDP, raw and
/// netlink sockets are refused.
pub(super) fn own_network_serves_inside_and_reaches_nothing_outside() -> Outcome {
    let dir = tempfile::tempdir().unwrap();
    if let Some(done) = refused_here(&dir.path().join("ran")) {
        return done;
    }
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    let code = format!(
        r#"
import socket
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(4)
c = socket.create_connection(("127.0.0.1", s.getsockname()[1]), timeout=3)
a, _ = s.accept(); c.sendall(b"ping"); print("SERVED", a.recv(4).decode())
try:
    socket.create_connection(("127.0.0.1", {port}), timeout=3); print("HOST reached")
except OSError as e: print("HOST", e.errno)
for name, fam, typ in [("udp", socket.AF_INET, socket.SOCK_DGRAM),
                       ("raw", socket.AF_INET, socket.SOCK_RAW),
                       ("netlink", socket.AF_NETLINK, socket.SOCK_RAW)]:
    try:
        socket.socket(fam, typ); print(name, "made")
    except OSError as e: print(name, e.errno)
"#
    );
    // The control: unconfined, the same program reaches the host's
    // listener (so the check below can fail).
    let control = run_unconfined(py(&code))?;
    ensure(control.stdout.contains("HOST reached"), || {
        format!("control: {control}")
    })?;
    std::thread::sleep(Duration::from_millis(100));
    while listener.accept().is_ok() {}
    let r = run_with(&own_network_spawner(), py(&code))?;
    let want = "SERVED ping\nHOST 111\nudp 1\nraw 1\nnetlink 1\n";
    ensure(r.stdout == want, || format!("want {want:?}: {r}"))?;
    std::thread::sleep(Duration::from_millis(100));
    match listener.accept() {
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => Ok(()),
        Ok((_, peer)) => Err(format!("the host's listener got a connection from {peer}")),
        Err(e) => Err(format!("accept: {e}")),
    }
}

/// TCP memory the host counts (`/proc/net/sockstat`'s `TCP: … mem N`, in
/// pages: one count for the host, whatever the namespace).
fn host_tcp_pages() -> u64 {
    let text = std::fs::read_to_string("/proc/net/sockstat").unwrap();
    let line = text.lines().find(|l| l.starts_with("TCP:")).unwrap();
    let mut words = line.split_whitespace();
    while let Some(w) = words.next() {
        if w == "mem" {
            return words.next().unwrap().parse().unwrap();
        }
    }
    panic!("no TCP mem in {line}")
}

/// A program that fills 48 loopback connections both ways (each can hold
/// megabytes) holds at most its cgroup's share of the host's TCP memory.
pub(super) fn own_network_tcp_buffers_stay_in_the_sandboxs_share() -> Outcome {
    let dir = tempfile::tempdir().unwrap();
    if let Some(done) = refused_here(&dir.path().join("ran")) {
        return done;
    }
    let code = r#"
import socket, sys, time
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(64)
pairs = []
for _ in range(48):
    c = socket.create_connection(("127.0.0.1", s.getsockname()[1]))
    a, _ = s.accept()
    pairs += [c, a]
sent = 0
for x in pairs:
    x.setblocking(False)
chunk = b"x" * 65536
for _ in range(200):
    moved = 0
    for x in pairs:
        try:
            moved += x.send(chunk)
        except BlockingIOError:
            pass
    sent += moved
    if moved == 0:
        break
print("FILLED", sent, flush=True)
time.sleep(30)
"#;
    let before = host_tcp_pages();
    let page = 4096u64;
    rt().block_on(async {
        let sp = own_network_spawner();
        let mut child = sp
            .spawn(&py(code))
            .map_err(|e| format!("spawn failed: {e}"))?;
        drop(child.stdin.take());
        let mut out = child.stdout.take().unwrap();
        let mut got = Vec::new();
        let mut buf = [0u8; 256];
        let deadline = Instant::now() + Duration::from_secs(30);
        while !String::from_utf8_lossy(&got).contains('\n') {
            let n = tokio::time::timeout(Duration::from_secs(30), out.read(&mut buf))
                .await
                .map_err(|_| "the filler never said FILLED".to_string())?
                .map_err(|e| e.to_string())?;
            if n == 0 || Instant::now() > deadline {
                return Err(format!(
                    "the filler ended: {} {}",
                    String::from_utf8_lossy(&got),
                    String::from_utf8_lossy(&child.stderr_tail())
                ));
            }
            got.extend_from_slice(&buf[..n]);
        }
        let during = host_tcp_pages();
        child.kill();
        let _ = child.wait().await;
        let said = String::from_utf8_lossy(&got).into_owned();
        let sent: u64 = said
            .trim()
            .strip_prefix("FILLED ")
            .and_then(|n| n.parse().ok())
            .ok_or_else(|| format!("filler said {said:?}"))?;
        let grew = during.saturating_sub(before) * page;
        // The share (64 MiB) and what other tests' sockets may add at the
        // same time.
        let bound = (64 << 20) + (16 << 20);
        ensure(grew <= bound, || {
            format!("the host's TCP memory grew by {grew} bytes (sent {sent}): past {bound}")
        })?;
        // It did fill: the program wrote more than the share could hold
        // before its sockets were pressed (else nothing was tried).
        ensure(sent >= 16 << 20, || {
            format!("the filler moved only {sent} bytes: nothing was filled")
        })
    })
}
