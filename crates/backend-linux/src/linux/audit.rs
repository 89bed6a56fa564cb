//! File denials in explain mode, from Landlock's own audit records
//! (Linux 6.15+, Landlock ABI ≥ 7).
//!
//! Landlock logs a refused access as an `AUDIT_LANDLOCK_ACCESS` record
//! (`domain=… blockers=fs.read_file path="…" …`), and after a domain's
//! first one an `AUDIT_LANDLOCK_DOMAIN` record saying who made the domain
//! (`domain=… status=allocated … pid=… uid=…`) — only while the kernel's
//! audit is on, and after the program's exec only with
//! `LANDLOCK_RESTRICT_SELF_LOG_NEW_EXEC_ON`, which the sandbox sets in
//! explain mode. [`AuditWatch`] reads them from the audit multicast group
//! (`AUDIT_NLGRP_READLOG`, which needs `CAP_AUDIT_READ`: root) without
//! disturbing `auditd`, and keeps a domain's records only when its
//! domain record names this sandbox's own uid (on a root host every live
//! sandbox has a uid of its own, `uid.rs`) and was made after this
//! sandbox's `wrap`. At the end the host writes a marker record; once it
//! comes back, every record before it has been read (the kernel's audit
//! queue is first in, first out).

use std::collections::{HashMap, HashSet};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use cordon_core::explain::{DenialKind, DenialLog, Remedy};

/// `AUDIT_GET`, `AUDIT_TRUSTED_APP` (free text from a trusted program),
/// `AUDIT_LANDLOCK_ACCESS`, `AUDIT_LANDLOCK_DOMAIN`.
const AUDIT_GET: u16 = 1000;
const AUDIT_TRUSTED_APP: u16 = 1121;
const LANDLOCK_ACCESS: u16 = 1423;
const LANDLOCK_DOMAIN: u16 = 1424;
/// `AUDIT_NLGRP_READLOG`, as a `nl_groups` bit.
const READLOG_GROUP: u32 = 1;
/// How long [`AuditWatch::finish`] waits for its marker at most.
const MARKER_WAIT: Duration = Duration::from_secs(2);

/// Why file denials cannot be read here, for the explanation; `None`
/// when they can ([`AuditWatch::start`]).
pub(crate) fn unavailable(root: bool, own_uid: bool, abi: i32) -> Option<String> {
    if abi < 7 {
        return Some(format!(
            "files: Landlock logs refusals from ABI 7 (Linux 6.15) on; this kernel has ABI {abi}"
        ));
    }
    if !root {
        return Some(
            "files: Landlock's audit records are readable only by root (CAP_AUDIT_READ); as \
             this user they are not observable (a file outside the grants fails with EACCES)"
                .into(),
        );
    }
    if !own_uid {
        return Some(
            "files: this sandbox has no uid of its own (a layer is off), so Landlock's records \
             of it cannot be told from another's: not observable"
                .into(),
        );
    }
    None
}

/// One sandbox's file denials, read by a thread from the audit socket.
#[derive(Debug)]
pub(crate) struct AuditWatch {
    sock: Arc<OwnedFd>,
    log: Arc<DenialLog>,
    marker: String,
    seen_marker: Arc<Seen>,
    worker: super::explain::Worker,
}

impl AuditWatch {
    /// Subscribes to the audit records for a sandbox of host uid `uid`,
    /// or says why it cannot (the line for the explanation).
    pub(crate) fn start(uid: u32) -> Result<AuditWatch, String> {
        let sock = open_socket().map_err(|e| {
            format!("files: cannot read the kernel's audit records ({e}): not observable")
        })?;
        match audit_enabled(&sock) {
            Ok(true) => {}
            Ok(false) => {
                return Err(
                    "files: the kernel's audit is off on this host, and Landlock logs \
                            refusals only while it is on (`auditctl -e 1` turns it on): not \
                            observable"
                        .into(),
                )
            }
            Err(e) => return Err(format!("files: cannot ask whether audit is on ({e})")),
        }
        let sock = Arc::new(sock);
        let since_ms = now_ms();
        let log = Arc::new(DenialLog::new());
        let marker = format!("cordon-explain-end-{uid}-{since_ms}-{:016x}", nonce());
        let seen_marker = Arc::new(Seen::default());
        let worker = {
            let (sock, log) = (Arc::clone(&sock), Arc::clone(&log));
            let (marker, seen) = (marker.clone(), Arc::clone(&seen_marker));
            super::explain::Worker::spawn("cordon-audit", move |stop| {
                let mut reader = Reader::new(uid, since_ms, &log);
                read(&sock, stop, &mut reader, &marker, &seen);
            })
            .map_err(|e| format!("files: cannot start reading audit records ({e})"))?
        };
        Ok(AuditWatch {
            sock,
            log,
            marker,
            seen_marker,
            worker,
        })
    }

    /// Adds a line about what these records cannot show.
    pub(crate) fn note(&self, why: &str) {
        self.log.unobservable(why);
    }

    /// Once every process of the sandbox is gone: writes the marker, waits
    /// (at most [`MARKER_WAIT`]) for it to come back, stops, and moves what
    /// was read into `log`.
    pub(crate) fn finish(&self, log: &DenialLog) {
        // NUL-terminated: the kernel drops a message's last byte as its NUL.
        let mut text = self.marker.clone().into_bytes();
        text.push(0);
        let sent = send(&self.sock, AUDIT_TRUSTED_APP, &text).is_ok();
        if !(sent && self.seen_marker.wait(MARKER_WAIT)) {
            self.log.unobservable(
                "files: the audit records may be incomplete (the end marker did not come back)",
            );
        }
        self.worker.halt();
        log.absorb(&self.log);
    }
}

/// Whether the end marker came back: set by the reader, waited for by
/// [`AuditWatch::finish`] (woken at once, not polled).
#[derive(Debug, Default)]
struct Seen {
    seen: std::sync::Mutex<bool>,
    changed: std::sync::Condvar,
}

impl Seen {
    fn set(&self) {
        *self.seen.lock().unwrap_or_else(|e| e.into_inner()) = true;
        self.changed.notify_all();
    }

    /// Waits at most `limit` for [`set`](Self::set); whether it was.
    fn wait(&self, limit: Duration) -> bool {
        let seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        let (seen, _) = self
            .changed
            .wait_timeout_while(seen, limit, |seen| !*seen)
            .unwrap_or_else(|e| e.into_inner());
        *seen
    }
}

/// 64 random bits (the kernel's), so that no two markers are alike.
fn nonce() -> u64 {
    let mut b = [0u8; 8];
    // SAFETY: getrandom into a local buffer.
    unsafe { libc::getrandom(b.as_mut_ptr().cast(), 8, 0) };
    u64::from_ne_bytes(b)
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

fn open_socket() -> std::io::Result<OwnedFd> {
    // SAFETY: socket/bind/setsockopt on the new fd and local structs.
    unsafe {
        let fd = libc::socket(
            libc::AF_NETLINK,
            libc::SOCK_RAW | libc::SOCK_CLOEXEC,
            libc::NETLINK_AUDIT,
        );
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let sock = OwnedFd::from_raw_fd(fd);
        // Room for a burst of records; root may go past rmem_max.
        let size: libc::c_int = 4 << 20;
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_RCVBUFFORCE,
            (&size as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        );
        let mut addr: libc::sockaddr_nl = std::mem::zeroed();
        addr.nl_family = libc::AF_NETLINK as libc::sa_family_t;
        addr.nl_groups = READLOG_GROUP;
        if libc::bind(
            fd,
            (&addr as *const libc::sockaddr_nl).cast(),
            std::mem::size_of::<libc::sockaddr_nl>() as libc::socklen_t,
        ) < 0
        {
            return Err(std::io::Error::last_os_error());
        }
        Ok(sock)
    }
}

/// Sends one netlink request of `kind` with `payload` to the kernel.
fn send(sock: &OwnedFd, kind: u16, payload: &[u8]) -> std::io::Result<()> {
    let len = 16 + payload.len();
    let mut msg = Vec::with_capacity(len);
    msg.extend_from_slice(&(len as u32).to_ne_bytes());
    msg.extend_from_slice(&kind.to_ne_bytes());
    msg.extend_from_slice(&(libc::NLM_F_REQUEST as u16).to_ne_bytes());
    msg.extend_from_slice(&1u32.to_ne_bytes());
    msg.extend_from_slice(&0u32.to_ne_bytes());
    msg.extend_from_slice(payload);
    // SAFETY: send of a local buffer to the kernel (the default address).
    let n = unsafe { libc::send(sock.as_raw_fd(), msg.as_ptr().cast(), msg.len(), 0) };
    if n < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Whether the kernel's audit is on (`AUDIT_GET`'s `enabled`).
fn audit_enabled(sock: &OwnedFd) -> std::io::Result<bool> {
    send(sock, AUDIT_GET, &[])?;
    let mut buf = vec![0u8; 8192];
    for _ in 0..64 {
        let mut p = libc::pollfd {
            fd: sock.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: poll on one fd we hold.
        if unsafe { libc::poll(&mut p, 1, 1000) } <= 0 {
            break;
        }
        // SAFETY: recv into our buffer.
        let n = unsafe { libc::recv(sock.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
        if n < 20 {
            continue;
        }
        let kind = u16::from_ne_bytes([buf[4], buf[5]]);
        if kind == AUDIT_GET {
            return Ok(u32::from_ne_bytes([buf[20], buf[21], buf[22], buf[23]]) != 0);
        }
    }
    Err(std::io::Error::new(
        std::io::ErrorKind::TimedOut,
        "no answer to AUDIT_GET",
    ))
}

fn read(sock: &OwnedFd, stop: &OwnedFd, reader: &mut Reader<'_>, marker: &str, seen: &Seen) {
    let mut buf = vec![0u8; 65536];
    loop {
        let mut fds = [
            libc::pollfd {
                fd: sock.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: stop.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        // SAFETY: poll on two fds we hold.
        if unsafe { libc::poll(fds.as_mut_ptr(), 2, -1) } < 0 {
            if std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            return;
        }
        if fds[1].revents != 0 {
            return;
        }
        // SAFETY: recv into our buffer.
        let n = unsafe { libc::recv(sock.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
        if n < 0 {
            if std::io::Error::last_os_error().raw_os_error() == Some(libc::ENOBUFS) {
                reader.log.unobservable(
                    "files: some audit records were lost (the socket overflowed): counts are \
                     lower bounds",
                );
            }
            continue;
        }
        let mut at = 0usize;
        let n = n as usize;
        while at + 16 <= n {
            let len = u32::from_ne_bytes(buf[at..at + 4].try_into().unwrap_or_default()) as usize;
            let kind = u16::from_ne_bytes([buf[at + 4], buf[at + 5]]);
            let end = (at + len.max(16)).min(n);
            let text = String::from_utf8_lossy(&buf[at + 16..end]);
            let text = text.trim_end_matches('\0');
            if kind == AUDIT_TRUSTED_APP && text.contains(&format!("msg='{marker}'")) {
                seen.set();
            } else {
                reader.record(kind, text);
            }
            at += (len.max(16) + 3) & !3;
        }
    }
}

/// Attributes records to this sandbox and turns them into denials.
struct Reader<'a> {
    uid: u32,
    since_ms: u64,
    log: &'a DenialLog,
    /// This sandbox's domains (live ones: removed when deallocated).
    ours: HashSet<String>,
    /// The current event's access records of domains not yet known: a
    /// domain's record follows its first access record in the same event
    /// (same serial), so nothing older is kept.
    pending: (String, Vec<(String, String, String)>),
}

/// Access records of one event kept at most, and domains of this sandbox
/// followed at most (a program making domain after domain is only not
/// followed further).
const MAX_PENDING: usize = 64;
const MAX_DOMAINS: usize = 4096;

impl<'a> Reader<'a> {
    fn new(uid: u32, since_ms: u64, log: &'a DenialLog) -> Self {
        Reader {
            uid,
            since_ms,
            log,
            ours: HashSet::new(),
            pending: (String::new(), Vec::new()),
        }
    }

    fn record(&mut self, kind: u16, text: &str) {
        let fields = fields(text);
        let Some(domain) = fields.get("domain").cloned() else {
            return;
        };
        let serial = serial(text).unwrap_or_default();
        if self.pending.0 != serial {
            self.pending = (serial, Vec::new());
        }
        match kind {
            LANDLOCK_ACCESS => {
                let blockers = fields.get("blockers").cloned().unwrap_or_default();
                let path = fields.get("path").cloned().unwrap_or_default();
                if self.ours.contains(&domain) {
                    denial(self.log, &blockers, &path);
                } else if self.pending.1.len() < MAX_PENDING {
                    self.pending.1.push((domain, blockers, path));
                }
            }
            LANDLOCK_DOMAIN => match fields.get("status").map(String::as_str) {
                Some("allocated") => {
                    let mine = fields.get("uid").and_then(|u| u.parse().ok()) == Some(self.uid)
                        && stamp_ms(text).is_some_and(|t| t >= self.since_ms);
                    let pending = std::mem::take(&mut self.pending.1);
                    for (d, blockers, path) in pending {
                        if d == domain && mine {
                            denial(self.log, &blockers, &path);
                        } else {
                            self.pending.1.push((d, blockers, path));
                        }
                    }
                    if mine && self.ours.len() < MAX_DOMAINS {
                        self.ours.insert(domain);
                    }
                }
                Some("deallocated") => {
                    self.ours.remove(&domain);
                }
                _ => {}
            },
            _ => {}
        }
    }
}

/// The record's event serial, `audit(SECONDS.MILLIS:SERIAL)`.
fn serial(text: &str) -> Option<String> {
    let inner = text.strip_prefix("audit(")?;
    Some(inner.split_once(':')?.1.split_once(')')?.0.to_string())
}

/// The record's time, `audit(SECONDS.MILLIS:SERIAL)`, in ms.
fn stamp_ms(text: &str) -> Option<u64> {
    let inner = text.strip_prefix("audit(")?.split(':').next()?;
    let (s, ms) = inner.split_once('.')?;
    Some(s.parse::<u64>().ok()? * 1000 + ms.parse::<u64>().ok()?)
}

/// `key=value` fields of a record; a quoted value unquoted, a hex-encoded
/// one (how audit writes a string with spaces or control characters)
/// decoded, then escaped by the log.
fn fields(text: &str) -> HashMap<String, String> {
    let body = text.split_once("): ").map(|(_, b)| b).unwrap_or(text);
    let mut out = HashMap::new();
    for part in body.split(' ') {
        let Some((k, v)) = part.split_once('=') else {
            continue;
        };
        let v = if let Some(q) = v.strip_prefix('"').and_then(|v| v.strip_suffix('"')) {
            q.to_string()
        } else if k == "path" && v.len() % 2 == 0 && v.bytes().all(|b| b.is_ascii_hexdigit()) {
            let bytes: Vec<u8> = (0..v.len())
                .step_by(2)
                .filter_map(|i| u8::from_str_radix(&v[i..i + 2], 16).ok())
                .collect();
            // Escaped by the log; an invalid byte shows as U+FFFD.
            String::from_utf8_lossy(&bytes).into_owned()
        } else {
            v.to_string()
        };
        out.insert(k.to_string(), v);
    }
    out
}

/// One access record as a denial: what was refused and the grant that
/// allows it.
fn denial(log: &DenialLog, blockers: &str, path: &str) {
    let first = blockers.split(',').next().unwrap_or("");
    let (kind, access, remedy) = match first {
        "fs.read_file" | "fs.read_dir" => (
            DenialKind::File,
            "read",
            Remedy::GrantReadOnly(PathBuf::from(path)),
        ),
        "fs.execute" => (
            DenialKind::File,
            "execute",
            Remedy::GrantReadOnly(PathBuf::from(path)),
        ),
        "fs.write_file" | "fs.truncate" | "fs.ioctl_dev" => (
            DenialKind::File,
            "write",
            Remedy::GrantReadWrite(PathBuf::from(path)),
        ),
        b if b.starts_with("fs.make_") || b == "fs.refer" => (
            DenialKind::File,
            "create in",
            Remedy::GrantReadWrite(PathBuf::from(path)),
        ),
        b if b.starts_with("fs.remove_") => (
            DenialKind::File,
            "remove in",
            Remedy::GrantReadWrite(PathBuf::from(path)),
        ),
        b if b.starts_with("net.") => (DenialKind::Network, b, Remedy::AllowNetwork),
        b => (DenialKind::Syscall, b, Remedy::None),
    };
    let object = if path.is_empty() { blockers } else { path };
    log.record(kind, object, access, remedy);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_are_attributed_by_the_domains_uid_and_time() {
        let log = DenialLog::new();
        let mut r = Reader::new(2000000001, 1_000_000, &log);
        // Ours: the access first, its domain record after (same event).
        r.record(
            LANDLOCK_ACCESS,
            "audit(1000.500:7): domain=1a blockers=fs.read_file path=\"/etc/shadow\" dev=\"vda\" ino=5",
        );
        r.record(
            LANDLOCK_DOMAIN,
            "audit(1000.500:7): domain=1a status=allocated mode=enforcing pid=9 uid=2000000001 exe=\"/x\" comm=\"x\"",
        );
        r.record(
            LANDLOCK_ACCESS,
            "audit(1000.600:8): domain=1a blockers=fs.make_reg path=2F746D702F61200A62 dev=\"vda\" ino=6",
        );
        // Another sandbox's, and an earlier holder of the same uid's.
        for (d, uid, t) in [
            ("2b", "2000000002", "1000.700"),
            ("3c", "2000000001", "999.999"),
        ] {
            r.record(
                LANDLOCK_ACCESS,
                &format!("audit({t}:9): domain={d} blockers=fs.read_file path=\"/other\""),
            );
            r.record(LANDLOCK_DOMAIN, &format!("audit({t}:9): domain={d} status=allocated mode=enforcing pid=1 uid={uid} exe=\"/x\" comm=\"x\""));
        }
        let e = log.finish();
        let objects: Vec<_> = e
            .denials
            .iter()
            .map(|d| (d.object.as_str(), d.access.as_str()))
            .collect();
        assert_eq!(
            objects,
            [("/etc/shadow", "read"), ("/tmp/a \\nb", "create in")]
        );
        assert_eq!(
            e.denials[0].remedy,
            Remedy::GrantReadOnly("/etc/shadow".into())
        );
    }
}
