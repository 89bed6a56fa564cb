//! A small HTTP server and a git repository it can serve, for the tests
//! of the egress allowlist and of the policy examples.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use super::text;

/// A small HTTP server on 127.0.0.1 that serves files under `root` (and
/// `/` as a greeting) and records every request line.
pub struct HostServer {
    pub port: u16,
    requests: Arc<Mutex<Vec<String>>>,
}

pub const GREETING: &str = "hello from the host\n";

impl HostServer {
    pub fn start(root: PathBuf) -> HostServer {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let requests = Arc::new(Mutex::new(Vec::new()));
        let seen = Arc::clone(&requests);
        std::thread::spawn(move || {
            for c in l.incoming() {
                let Ok(c) = c else { return };
                let (root, seen) = (root.clone(), Arc::clone(&seen));
                std::thread::spawn(move || serve(c, &root, &seen));
            }
        });
        HostServer { port, requests }
    }

    pub fn requests(&self) -> Vec<String> {
        self.requests.lock().unwrap().clone()
    }
}

fn serve(mut c: std::net::TcpStream, root: &Path, seen: &Mutex<Vec<String>>) {
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        match c.read(&mut b) {
            Ok(1) => head.push(b[0]),
            _ => return,
        }
    }
    let head = String::from_utf8_lossy(&head).into_owned();
    let line = head.lines().next().unwrap_or_default().to_owned();
    seen.lock().unwrap().push(line.clone());
    let path = line.split(' ').nth(1).unwrap_or("/");
    let path = path.split('?').next().unwrap_or("/");
    // A directory's page, as a static server gives it (a package index's
    // `/simple/NAME/`).
    let page;
    let path = if path.len() > 1 && path.ends_with('/') {
        page = format!("{path}index.html");
        page.as_str()
    } else {
        path
    };
    let body = if path == "/" {
        Some(GREETING.as_bytes().to_vec())
    } else if path.contains("..") {
        None
    } else {
        std::fs::read(root.join(path.trim_start_matches('/'))).ok()
    };
    let _ = match body {
        Some(b) => {
            let html = if path.ends_with(".html") {
                "Content-Type: text/html\r\n"
            } else {
                ""
            };
            let _ = write!(
                c,
                "HTTP/1.1 200 OK\r\n{html}Content-Length: {}\r\nConnection: close\r\n\r\n",
                b.len()
            );
            c.write_all(&b)
        }
        None => write!(
            c,
            "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
        ),
    };
}

/// A bare repository served over git's dumb HTTP protocol from `root`.
pub fn git_repo(root: &Path) {
    let git = |args: &[&str], dir: &Path| {
        let out = std::process::Command::new("/usr/bin/git")
            .args(args)
            .current_dir(dir)
            .env("GIT_AUTHOR_NAME", "t")
            .env("GIT_AUTHOR_EMAIL", "t@t")
            .env("GIT_COMMITTER_NAME", "t")
            .env("GIT_COMMITTER_EMAIL", "t@t")
            .output()
            .unwrap();
        assert!(out.status.success(), "git {args:?}: {}", text(&out.stderr));
    };
    let src = root.join("src");
    std::fs::create_dir_all(&src).unwrap();
    git(&["init", "-q"], &src);
    std::fs::write(src.join("file.txt"), "cloned through the proxy\n").unwrap();
    git(&["add", "file.txt"], &src);
    git(&["commit", "-q", "-m", "one"], &src);
    git(&["clone", "-q", "--bare", "src", "repo.git"], root);
    git(&["update-server-info"], &root.join("repo.git"));
}
