//! An HTTPS server on 127.0.0.1 with a test CA of its own, for the
//! credential broker's tests: it answers only requests that carry the
//! key it expects (`Authorization: Bearer KEY`), echoes `/echo` (head and
//! body, so a test sees what reached the server and what an echo hands
//! back), serves files under its root (a git repository over the dumb
//! protocol), and records everything it was sent.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};

pub struct HttpsServer {
    pub port: u16,
    /// The test CA's certificate (what `--upstream-ca` names), readable
    /// by every uid.
    pub ca: PathBuf,
    seen: Arc<Mutex<Vec<u8>>>,
}

impl HttpsServer {
    /// Serves `root` to requests carrying `key` (to every request when
    /// `key` is empty); writes its CA into `dir`.
    pub fn start(root: PathBuf, dir: &Path, key: &str) -> HttpsServer {
        use std::os::unix::fs::PermissionsExt;
        let _ = rustls::crypto::ring::default_provider().install_default();
        let mut ca = rcgen::CertificateParams::default();
        ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        ca.distinguished_name
            .push(rcgen::DnType::CommonName, "cordon test upstream CA");
        let ca_key = rcgen::KeyPair::generate().unwrap();
        let ca = rcgen::CertifiedIssuer::self_signed(ca, ca_key).unwrap();
        let leaf = rcgen::CertificateParams::new(vec!["localhost".to_owned()]).unwrap();
        let leaf_key = rcgen::KeyPair::generate().unwrap();
        let leaf = leaf.signed_by(&leaf_key, &ca).unwrap();
        let ca_path = dir.join("upstream-ca.pem");
        std::fs::write(&ca_path, ca.pem()).unwrap();
        std::fs::set_permissions(&ca_path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let config = Arc::new(
            rustls::ServerConfig::builder()
                .with_no_client_auth()
                .with_single_cert(
                    vec![leaf.der().clone(), ca.der().clone()],
                    PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(leaf_key.serialize_der())),
                )
                .unwrap(),
        );
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let (s, key) = (Arc::clone(&seen), key.to_owned());
        std::thread::spawn(move || {
            for c in l.incoming() {
                let Ok(c) = c else { return };
                let (root, seen, key, config) = (
                    root.clone(),
                    Arc::clone(&s),
                    key.clone(),
                    Arc::clone(&config),
                );
                std::thread::spawn(move || {
                    let Ok(tls) = rustls::ServerConnection::new(config) else {
                        return;
                    };
                    serve(rustls::StreamOwned::new(tls, c), &root, &seen, &key);
                });
            }
        });
        HttpsServer {
            port,
            ca: ca_path,
            seen,
        }
    }

    /// Everything the server was sent, heads and bodies, as text.
    pub fn seen(&self) -> String {
        String::from_utf8_lossy(&self.seen.lock().unwrap()).into_owned()
    }
}

fn serve<S: Read + Write>(stream: S, root: &Path, seen: &Mutex<Vec<u8>>, key: &str) {
    let mut r = BufReader::new(stream);
    loop {
        let mut head = String::new();
        loop {
            let mut line = String::new();
            match r.read_line(&mut line) {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
            head.push_str(&line);
            if line == "\r\n" {
                break;
            }
        }
        let lower = head.to_ascii_lowercase();
        let header = |name: &str| {
            lower.lines().find_map(|l| {
                l.strip_prefix(&format!("{name}:"))
                    .map(|v| v.trim().to_owned())
            })
        };
        let mut body = Vec::new();
        if let Some(n) = header("content-length").and_then(|n| n.parse::<usize>().ok()) {
            body.resize(n, 0);
            if r.read_exact(&mut body).is_err() {
                return;
            }
        } else if header("transfer-encoding").is_some_and(|t| t == "chunked") {
            loop {
                let mut size = String::new();
                if r.read_line(&mut size).is_err() {
                    return;
                }
                let Ok(n) = usize::from_str_radix(size.trim(), 16) else {
                    return;
                };
                let mut chunk = vec![0u8; n + 2];
                if r.read_exact(&mut chunk).is_err() {
                    return;
                }
                if n == 0 {
                    break;
                }
                body.extend_from_slice(&chunk[..n]);
            }
        }
        {
            let mut s = seen.lock().unwrap();
            s.extend_from_slice(head.as_bytes());
            s.extend_from_slice(&body);
        }
        let target = head.split(' ').nth(1).unwrap_or("/").to_owned();
        let path = target.split('?').next().unwrap_or("/");
        // An empty key: a server anyone may read (a public git host).
        let authorized = key.is_empty()
            || head
                .lines()
                .any(|l| l.eq_ignore_ascii_case(&format!("authorization: bearer {key}")));
        let auth = head
            .lines()
            .find_map(|l| {
                l.split_once(':')
                    .filter(|(n, _)| n.eq_ignore_ascii_case("authorization"))
                    .map(|(_, v)| v.trim().replace(' ', "%20"))
            })
            .unwrap_or_default();
        let out = r.get_mut();
        // A server that reflects the key into a redirect, and one that
        // encodes its answer whatever was asked.
        if path == "/redirect-reflect" {
            let _ = write!(
                out,
                "HTTP/1.1 302 Found\r\nLocation: /done?token={auth}\r\nContent-Length: 0\r\n\r\n"
            );
            let _ = out.flush();
            continue;
        }
        if path == "/gzip" {
            let _ = write!(
                out,
                "HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: 4\r\n\r\nxxxx"
            );
            let _ = out.flush();
            continue;
        }
        let (status, answer) = if !authorized {
            ("401 Unauthorized", b"no key\n".to_vec())
        } else if path == "/echo" || path.starts_with("/allowed/") || path.starts_with("/other") {
            let mut b = head.clone().into_bytes();
            b.extend_from_slice(&body);
            ("200 OK", b)
        } else if path.contains("..") {
            ("404 Not Found", Vec::new())
        } else {
            match std::fs::read(root.join(path.trim_start_matches('/'))) {
                Ok(b) => ("200 OK", b),
                Err(_) => ("404 Not Found", Vec::new()),
            }
        };
        let out = r.get_mut();
        let _ = write!(
            out,
            "HTTP/1.1 {status}\r\nContent-Length: {}\r\nContent-Type: text/plain\r\n\r\n",
            answer.len()
        );
        let _ = out.write_all(&answer);
        let _ = out.flush();
        if header("connection").is_some_and(|c| c == "close") {
            return;
        }
    }
}
