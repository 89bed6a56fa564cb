//! A tiny real HTTP/1.1 server on 127.0.0.1 for tests (one request per
//! connection, `Connection: close`).

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

#[derive(Debug, Clone)]
pub struct Seen {
    pub method: String,
    pub path: String,
    pub headers: HashMap<String, String>,
    pub body: String,
}

pub struct TestServer {
    pub port: u16,
    pub hits: Arc<AtomicUsize>,
    pub seen: Arc<Mutex<Vec<Seen>>>,
}

impl TestServer {
    pub fn base(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }
    pub fn hits(&self) -> usize {
        self.hits.load(Ordering::SeqCst)
    }
    pub fn last(&self) -> Seen {
        self.seen
            .lock()
            .unwrap()
            .last()
            .cloned()
            .expect("no request seen")
    }
}

fn response(status: u16, headers: &[(&str, String)], body: &[u8]) -> Vec<u8> {
    let mut out = format!(
        "HTTP/1.1 {status} X\r\ncontent-length: {}\r\nconnection: close\r\n",
        body.len()
    );
    for (k, v) in headers {
        out.push_str(&format!("{k}: {v}\r\n"));
    }
    out.push_str("\r\n");
    let mut out = out.into_bytes();
    out.extend_from_slice(body);
    out
}

/// Routes:
/// - `/hello` → "hello"
/// - `/json` → a JSON object
/// - `/echo` → JSON describing the request
/// - `/redirect?to=URL` → 302 to URL
/// - `/big` → 200 KiB body
/// - `/slow` → waits 3 s
/// - `/v1/chat/completions` → OpenAI-compatible answer echoing the last message
pub async fn start() -> TestServer {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let hits = Arc::new(AtomicUsize::new(0));
    let seen = Arc::new(Mutex::new(Vec::new()));
    let (h2, s2) = (hits.clone(), seen.clone());
    tokio::spawn(async move {
        loop {
            let Ok((mut sock, _)) = listener.accept().await else {
                return;
            };
            let (hits, seen) = (h2.clone(), s2.clone());
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut tmp = [0u8; 4096];
                let head_end = loop {
                    let n = match sock.read(&mut tmp).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => n,
                    };
                    buf.extend_from_slice(&tmp[..n]);
                    if let Some(p) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                        break p + 4;
                    }
                    if buf.len() > 1 << 20 {
                        return;
                    }
                };
                let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
                let mut lines = head.split("\r\n");
                let first = lines.next().unwrap_or("");
                let mut parts = first.split(' ');
                let method = parts.next().unwrap_or("").to_owned();
                let target = parts.next().unwrap_or("").to_owned();
                let mut headers = HashMap::new();
                for l in lines {
                    if let Some((k, v)) = l.split_once(':') {
                        headers.insert(k.trim().to_ascii_lowercase(), v.trim().to_owned());
                    }
                }
                let len: usize = headers
                    .get("content-length")
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(0);
                let mut body = buf[head_end..].to_vec();
                while body.len() < len {
                    let n = match sock.read(&mut tmp).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => n,
                    };
                    body.extend_from_slice(&tmp[..n]);
                }
                let body = String::from_utf8_lossy(&body).to_string();
                let (path, query) = target.split_once('?').unwrap_or((target.as_str(), ""));
                hits.fetch_add(1, Ordering::SeqCst);
                seen.lock().unwrap().push(Seen {
                    method: method.clone(),
                    path: path.to_owned(),
                    headers: headers.clone(),
                    body: body.clone(),
                });
                // `/after-N/rest`: answers `/rest` N seconds late (a slow
                // model).
                let mut path = path.to_owned();
                if let Some((secs, rest)) = path
                    .strip_prefix("/after-")
                    .and_then(|p| p.split_once('/'))
                    .and_then(|(n, rest)| Some((n.parse::<u64>().ok()?, rest.to_owned())))
                {
                    tokio::time::sleep(Duration::from_secs(secs)).await;
                    path = format!("/{rest}");
                }
                let resp = match path.as_str() {
                    "/hello" => response(200, &[("content-type", "text/plain".into())], b"hello"),
                    "/json" => response(
                        200,
                        &[("content-type", "application/json".into())],
                        br#"{"a": [1, 2.5, null], "b": "x", "ok": true}"#,
                    ),
                    "/echo" => {
                        let j = serde_json::json!({
                            "method": method,
                            "body": body,
                            "x_test": headers.get("x-test"),
                            "authorization": headers.get("authorization"),
                            "content_type": headers.get("content-type"),
                        });
                        response(200, &[], j.to_string().as_bytes())
                    }
                    "/redirect" => {
                        let to = query.strip_prefix("to=").unwrap_or("/hello").to_owned();
                        response(302, &[("location", to)], b"")
                    }
                    "/loop" => response(302, &[("location", "/loop".into())], b""),
                    "/redirect303" => response(303, &[("location", "/echo".into())], b""),
                    "/big" => response(200, &[], &vec![b'x'; 200 * 1024]),
                    "/slow" => {
                        tokio::time::sleep(Duration::from_secs(3)).await;
                        response(200, &[], b"late")
                    }
                    "/v1/chat/completions" => {
                        let auth = headers.get("authorization").cloned().unwrap_or_default();
                        if auth != "Bearer sk-user"
                            && auth != "Bearer sk-channel"
                            && auth != "Bearer sk-package"
                            && auth != "Bearer sk-host"
                        {
                            let msg =
                                format!("{{\"error\": \"Incorrect API key provided: {auth}\"}}");
                            response(401, &[], msg.as_bytes())
                        } else {
                            let req: serde_json::Value =
                                serde_json::from_str(&body).unwrap_or_default();
                            let last = req["messages"]
                                .as_array()
                                .and_then(|m| m.last())
                                .map(|m| m["content"].as_str().unwrap_or("").to_owned())
                                .unwrap_or_default();
                            let j = serde_json::json!({
                                "id": "c1", "object": "chat.completion",
                                "model": req["model"],
                                "choices": [{"index": 0, "message": {"role": "assistant", "content": format!("echo: {last}")}, "finish_reason": "stop"}],
                                "usage": {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7}
                            });
                            response(
                                200,
                                &[("content-type", "application/json".into())],
                                j.to_string().as_bytes(),
                            )
                        }
                    }
                    _ => response(404, &[], b"not found"),
                };
                let _ = sock.write_all(&resp).await;
                let _ = sock.shutdown().await;
            });
        }
    });
    TestServer { port, hits, seen }
}
