//! The store key's file (made private, refused when others could read
//! it) and the notification senders against a real server on 127.0.0.1.
//! What every persistent store must do is the shared suite's
//! (`tests/store_suite`), run on SQLite and PostgreSQL.
#![cfg(feature = "sqlite")]

use std::sync::Arc;
use std::time::Duration;

use cordon_starlark::*;
use serde_json::json;

#[test]
fn the_key_file_is_made_private_and_a_readable_one_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("keys/store.key");
    // (The tests never set CORDON_STORE_KEY, so the file is used.)
    let (_, origin) = StoreKey::from_env_or_file(&file, true).unwrap();
    assert_eq!(origin, KeyOrigin::Created(file.clone()));
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(&file).unwrap().permissions().mode() & 0o777,
        0o600
    );
    let (_, origin) = StoreKey::from_env_or_file(&file, false).unwrap();
    assert_eq!(origin, KeyOrigin::File(file.clone()));
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
    let e = StoreKey::from_env_or_file(&file, true).unwrap_err();
    assert!(e.contains("chmod 600"), "{e}");
    // A key file of another user is refused even with mode 0600: that
    // user could replace it. (Made by chown, so as root, which is how the
    // tests and CI run; the mode checks above run for any uid.)
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        let theirs = dir.path().join("theirs.key");
        std::fs::write(&theirs, format!("{}\n", "ab".repeat(32))).unwrap();
        std::fs::set_permissions(&theirs, std::fs::Permissions::from_mode(0o600)).unwrap();
        std::os::unix::fs::chown(&theirs, Some(65534), Some(65534)).unwrap();
        let e = StoreKey::from_env_or_file(&theirs, false).unwrap_err();
        assert!(
            e.contains("refusing the store key file") && e.contains("uid 65534"),
            "{e}"
        );
    }
    // A missing key file is made only when asked (for a new database).
    let lost = dir.path().join("lost.key");
    let e = StoreKey::from_env_or_file(&lost, false).unwrap_err();
    assert!(e.contains("missing") && e.contains(STORE_KEY_ENV), "{e}");
    assert!(!lost.exists());
}

/// A tiny HTTP server: answers 503 to the first `fail` requests, then 200,
/// and keeps the bodies it saw.
async fn webhook_server(fail: usize) -> (String, Arc<std::sync::Mutex<Vec<String>>>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let s = seen.clone();
    tokio::spawn(async move {
        let mut n = 0;
        loop {
            let Ok((mut sock, _)) = listener.accept().await else {
                return;
            };
            let mut buf = vec![0u8; 65536];
            let mut len = 0;
            loop {
                let r = sock.read(&mut buf[len..]).await.unwrap_or(0);
                len += r;
                let text = String::from_utf8_lossy(&buf[..len]).to_string();
                if let Some((head, body)) = text.split_once("\r\n\r\n") {
                    let want: usize = head
                        .lines()
                        .find_map(|l| {
                            l.to_ascii_lowercase()
                                .strip_prefix("content-length:")
                                .map(|v| v.trim().parse().unwrap_or(0))
                        })
                        .unwrap_or(0);
                    if body.len() >= want || r == 0 {
                        s.lock().unwrap().push(body.to_owned());
                        break;
                    }
                }
                if r == 0 {
                    break;
                }
            }
            n += 1;
            let status = if n <= fail { "503 Busy" } else { "200 OK" };
            let _ = sock
                .write_all(
                    format!("HTTP/1.1 {status}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
                        .as_bytes(),
                )
                .await;
        }
    });
    (url, seen)
}

fn note(body: &str) -> Notification {
    Notification {
        package_id: "p".into(),
        user_id: Some("u".into()),
        channel_id: None,
        title: "t".into(),
        body: body.into(),
        level: "info".into(),
        url: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_webhook_retries_with_backoff_and_caps_the_body() {
    let (url, seen) = webhook_server(2).await;
    let hook =
        WebhookNotifier::new(&url, Duration::from_secs(2), 3, Duration::from_millis(50)).unwrap();
    hook.send(&note("hello")).await.unwrap();
    let stats = hook.flush(Duration::from_secs(10));
    assert!(stats.all_delivered(), "{stats:?}");
    assert_eq!(stats.delivered, 1);
    let bodies = seen.lock().unwrap().clone();
    assert_eq!(bodies.len(), 3, "two 503s, then delivered");
    let v: serde_json::Value = serde_json::from_str(&bodies[2]).unwrap();
    assert_eq!(
        (v["package_id"].clone(), v["body"].clone()),
        (json!("p"), json!("hello"))
    );
    // Too many failures: counted, and the last error says so.
    let (url, _) = webhook_server(10).await;
    let hook =
        WebhookNotifier::new(&url, Duration::from_secs(2), 2, Duration::from_millis(10)).unwrap();
    hook.send(&note("x")).await.unwrap();
    let stats = hook.flush(Duration::from_secs(10));
    assert_eq!((stats.delivered, stats.failed), (0, 1), "{stats:?}");
    let e = hook.last_error().unwrap();
    assert!(e.contains("503") && e.contains("2 attempts"), "{e}");
    // Too large: refused before queueing.
    let e = hook.send(&note(&"x".repeat(100_000))).await.unwrap_err();
    assert!(e.contains("cap"), "{e}");
    // Nobody listening: unreachable, after the retries.
    let hook = WebhookNotifier::new(
        "http://127.0.0.1:9/",
        Duration::from_secs(1),
        2,
        Duration::from_millis(10),
    )
    .unwrap();
    hook.send(&note("x")).await.unwrap();
    assert_eq!(hook.flush(Duration::from_secs(10)).failed, 1);
    assert!(hook.last_error().unwrap().contains("unreachable"));
}

/// A webhook that never answers holds no call: `send` only queues, a
/// full queue refuses at once, and `flush` gives up when told.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stuck_webhook_holds_no_call() {
    // Accepts, reads nothing, answers nothing.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    let held = Arc::new(std::sync::Mutex::new(Vec::new()));
    let h = held.clone();
    std::thread::spawn(move || {
        for c in listener.incoming().flatten() {
            h.lock().unwrap().push(c);
        }
    });
    let hook =
        WebhookNotifier::new(&url, Duration::from_secs(30), 1, Duration::from_millis(10)).unwrap();
    let mut refused = 0;
    for i in 0..2000 {
        // A send that waited for the stuck webhook (30 s) would trip this.
        let sent =
            tokio::time::timeout(Duration::from_secs(10), hook.send(&note(&format!("n{i}"))))
                .await
                .expect("send waited for the webhook");
        if sent.is_err() {
            refused += 1;
        }
    }
    assert!(refused > 0, "the queue is bounded");
    let stats = hook.flush(Duration::from_millis(200));
    assert_eq!(stats.delivered, 0);
    // At most a full queue waits, and one in delivery.
    assert!(stats.pending > 0 && stats.pending <= 1024 + 1, "{stats:?}");
    assert_eq!(stats.refused, refused);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_lines_go_one_per_notification() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("n.jsonl");
    let file = std::fs::File::create(&path).unwrap();
    let sink = JsonLinesNotifier::new(file).unwrap();
    sink.send(&note("one")).await.unwrap();
    sink.send(&note("two\nlines")).await.unwrap();
    assert!(sink.flush(Duration::from_secs(5)).all_delivered());
    let text = std::fs::read_to_string(&path).unwrap();
    let lines: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2);
    assert_eq!(lines[1]["body"], json!("two\nlines"));
}

/// A pipe nobody reads: the writer thread blocks, `send` does not; the
/// queue stops at its limit and the memory it holds with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_lines_to_a_pipe_nobody_reads_never_block_a_send() {
    let mut fds = [0; 2];
    // SAFETY: pipe writes two fds.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    use std::os::fd::FromRawFd;
    // SAFETY: both fds are fresh and ours; the read end is kept, unread.
    let (_r, w) = unsafe {
        (
            std::fs::File::from_raw_fd(fds[0]),
            std::fs::File::from_raw_fd(fds[1]),
        )
    };
    let limits = QueueLimits {
        max_items: 1000,
        max_bytes: 256 * 1024,
    };
    let sink = JsonLinesNotifier::on(LineQueue::new("test", limits, w).unwrap());
    let big = "x".repeat(10_000);
    let mut refused = 0;
    for _ in 0..200 {
        // A send that waited on the full pipe would never return.
        let sent = tokio::time::timeout(Duration::from_secs(10), sink.send(&note(&big)))
            .await
            .expect("send waited on the pipe");
        if let Err(e) = sent {
            assert!(e.contains("not keeping up"), "{e}");
            refused += 1;
        }
    }
    // About 64 KiB fit in the pipe, 256 KiB in the queue; the rest refused.
    assert!(refused >= 200 - 40, "refused {refused}");
    let stats = sink.flush(Duration::from_millis(100));
    assert!(stats.pending > 0, "{stats:?}");
}
