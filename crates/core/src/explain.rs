//! What a sandbox refused, for the person who ran it: the denials of one
//! sandbox, counted, with the grant that would allow each.
//!
//! A caller opts in per child ([`ChildSpec::explain`](crate::ChildSpec::explain));
//! then [`RunningChild::explanation`](crate::RunningChild::explanation) holds,
//! once the child was waited for, an [`Explanation`]: one [`Denial`] per
//! distinct refusal, from the records of the layer that refused it (the
//! backend collects them, see
//! [`SandboxResources::explain`](crate::SandboxResources::explain); the
//! runner adds the limits that ended the child), and one line per source
//! that was not observable for this caller on this host.
//!
//! The record is bounded whatever the program does: at most
//! [`MAX_DISTINCT`] distinct denials (refusals of further kinds are only
//! counted, in [`Explanation::more`]), objects cut to [`MAX_OBJECT`] bytes, counts
//! saturating. Every object is stored escaped ([`escape`]): a path with a
//! newline or a terminal escape sequence cannot forge a line on the
//! operator's terminal.
//!
//! ```
//! use cordon_core::explain::{DenialKind, DenialLog, Remedy};
//!
//! let log = DenialLog::new();
//! for _ in 0..3 {
//!     log.record(DenialKind::Syscall, "ptrace", "call", Remedy::None);
//! }
//! log.record(DenialKind::File, "/tmp/a\nforged", "read", Remedy::None);
//! let explanation = log.finish();
//! assert_eq!(explanation.denials[0].count, 3);
//! assert_eq!(explanation.denials[1].object, "/tmp/a\\nforged");
//! ```

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Instant;

use serde::{Deserialize, Serialize};

use crate::{ExitOutcome, Limits};

/// The most distinct denials one sandbox's record keeps; further distinct
/// ones are counted in [`Explanation::more`].
pub const MAX_DISTINCT: usize = 256;

/// The most bytes of a denial's object kept (after escaping); a longer one
/// ends with `…`.
pub const MAX_OBJECT: usize = 512;

/// Which layer refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DenialKind {
    /// A file access outside the grants (Landlock, or a read-only mount).
    File,
    /// A network connection (the egress proxy, or a refused socket).
    Network,
    /// A system call the seccomp filter refuses.
    Syscall,
    /// A resource limit that was reached or that ended the sandbox.
    Limit,
    /// A Starlark module call the package's grants do not allow
    /// (`cordon-starlark-host`).
    Module,
}

impl DenialKind {
    /// The kind's name, as in the JSON (`file`, `network`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            DenialKind::File => "file",
            DenialKind::Network => "network",
            DenialKind::Syscall => "syscall",
            DenialKind::Limit => "limit",
            DenialKind::Module => "module",
        }
    }
}

/// What would have allowed a denial, in the policy's terms (a front end
/// such as the `cordon` CLI names its own flag for each).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "remedy", content = "value", rename_all = "snake_case")]
pub enum Remedy {
    /// Granting this path read-only ([`SandboxPolicy::read_only`](crate::SandboxPolicy::read_only)).
    GrantReadOnly(PathBuf),
    /// Granting this path read-write ([`SandboxPolicy::read_write`](crate::SandboxPolicy::read_write)).
    GrantReadWrite(PathBuf),
    /// Listing this `host[:port]` in [`Network::Allow`](crate::Network::Allow)
    /// (for a Starlark package: in its `network_access`, granted again).
    AllowHost(String),
    /// Adding this request rule (`GET https://host/path`) to the
    /// policy's `network.rules`.
    AllowRequest(String),
    /// Listing the hosts the program connects to in
    /// [`Network::Allow`](crate::Network::Allow) (a refused socket names
    /// no host).
    AllowNetwork,
    /// Raising this field of [`Limits`] (e.g. `memory_bytes`), or for a
    /// Starlark package this setting (e.g. `EvalLimits::max_ticks`).
    RaiseLimit(String),
    /// Granting a Starlark package this permission (e.g. `api.http`):
    /// requested in its `package.toml` and granted by the host.
    GrantPermission(String),
    /// No grant allows it: the sandbox refuses it whatever the policy.
    None,
}

impl Remedy {
    /// The remedy, or [`Remedy::None`] where its text is longer than any
    /// real one (a path past `PATH_MAX`, a host or setting past
    /// [`MAX_OBJECT`]): a record holds at most that much per denial, and a
    /// cut name would name something else.
    fn bounded(self) -> Remedy {
        const PATH_MAX: usize = 4096;
        let fits = match &self {
            Remedy::GrantReadOnly(p) | Remedy::GrantReadWrite(p) => p.as_os_str().len() <= PATH_MAX,
            Remedy::AllowHost(s)
            | Remedy::AllowRequest(s)
            | Remedy::RaiseLimit(s)
            | Remedy::GrantPermission(s) => s.len() <= MAX_OBJECT,
            Remedy::AllowNetwork | Remedy::None => true,
        };
        if fits {
            self
        } else {
            Remedy::None
        }
    }
}

/// One distinct refusal, counted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Denial {
    /// Which layer refused.
    pub kind: DenialKind,
    /// What was refused — a path, `host:port`, a syscall's name, a limit —
    /// escaped by [`escape`] and at most [`MAX_OBJECT`] bytes.
    pub object: String,
    /// The access: `read`, `write`, `execute`, `create`, `connect`,
    /// `call`, `reached`, `killed`, …
    pub access: String,
    /// How often (saturating).
    pub count: u64,
    /// Milliseconds from the start of the record (the spawn) to the first.
    pub first_seen_ms: u64,
    /// What would allow it.
    pub remedy: Remedy,
}

/// One sandbox's denials, once it ended.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Explanation {
    /// Distinct denials, in the order first seen.
    pub denials: Vec<Denial>,
    /// Refusals of further kinds, once [`MAX_DISTINCT`] are kept: counted
    /// (saturating), not kept.
    pub more: u64,
    /// One line per source of denials this caller could not observe on
    /// this host, saying why (e.g. file denials as an unprivileged user).
    pub unobservable: Vec<String>,
}

/// A bounded, thread-safe collector of one sandbox's denials: the sources
/// (a backend's supervisor thread, the egress proxy, the runner) record
/// into it while the sandbox runs, and [`DenialLog::finish`] turns it into
/// the [`Explanation`].
#[derive(Debug)]
pub struct DenialLog {
    start: Instant,
    inner: Mutex<LogInner>,
}

#[derive(Debug, Default)]
struct LogInner {
    index: HashMap<(DenialKind, String, String), usize>,
    explanation: Explanation,
}

impl Default for DenialLog {
    fn default() -> Self {
        DenialLog::new()
    }
}

impl DenialLog {
    /// An empty record starting now.
    pub fn new() -> Self {
        DenialLog {
            start: Instant::now(),
            inner: Mutex::new(LogInner::default()),
        }
    }

    /// Counts one refusal of `access` to `object` (escaped here).
    pub fn record(&self, kind: DenialKind, object: &str, access: &str, remedy: Remedy) {
        self.record_n(kind, object, access, remedy, 1);
    }

    /// Counts `n` refusals at once (a source that counts them itself).
    pub fn record_n(&self, kind: DenialKind, object: &str, access: &str, remedy: Remedy, n: u64) {
        let object = escape(object);
        let access = escape(access);
        let remedy = remedy.bounded();
        let ms = u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX);
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let LogInner { index, explanation } = &mut *inner;
        let key = (kind, object, access);
        if let Some(&i) = index.get(&key) {
            let d = &mut explanation.denials[i];
            d.count = d.count.saturating_add(n);
            return;
        }
        if explanation.denials.len() >= MAX_DISTINCT {
            explanation.more = explanation.more.saturating_add(n);
            return;
        }
        let (kind, object, access) = key.clone();
        index.insert(key, explanation.denials.len());
        explanation.denials.push(Denial {
            kind,
            object,
            access,
            count: n,
            first_seen_ms: ms,
            remedy,
        });
    }

    /// Notes a source this caller cannot observe (kept once).
    pub fn unobservable(&self, why: impl Into<String>) {
        let why = escape(&why.into());
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        if !inner.explanation.unobservable.contains(&why) {
            inner.explanation.unobservable.push(why);
        }
    }

    /// Adds everything `other` recorded (a source that kept its own
    /// record while the sandbox ran), its times counted from this
    /// record's start.
    pub fn absorb(&self, other: &DenialLog) {
        let theirs = other.finish();
        let shift = other.start.saturating_duration_since(self.start);
        let shift = u64::try_from(shift.as_millis()).unwrap_or(u64::MAX);
        for d in theirs.denials {
            let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
            let LogInner { index, explanation } = &mut *inner;
            let key = (d.kind, d.object.clone(), d.access.clone());
            if let Some(&i) = index.get(&key) {
                let mine = &mut explanation.denials[i];
                mine.count = mine.count.saturating_add(d.count);
            } else if explanation.denials.len() >= MAX_DISTINCT {
                explanation.more = explanation.more.saturating_add(d.count);
            } else {
                index.insert(key, explanation.denials.len());
                explanation.denials.push(Denial {
                    first_seen_ms: d.first_seen_ms.saturating_add(shift),
                    ..d
                });
            }
        }
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        inner.explanation.more = inner.explanation.more.saturating_add(theirs.more);
        for u in theirs.unobservable {
            if !inner.explanation.unobservable.contains(&u) {
                inner.explanation.unobservable.push(u);
            }
        }
    }

    /// The record so far.
    pub fn finish(&self) -> Explanation {
        let inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        inner.explanation.clone()
    }
}

/// `s` as one printable line: `\` as `\\`, `\n` `\r` `\t` as themselves
/// escaped, every other control character (C0, DEL, C1, which is how
/// terminal escape sequences start) and the invisible ones (bidirectional
/// overrides, zero-width marks) as `\u{…}`; cut to [`MAX_OBJECT`] bytes
/// with a trailing `…`. For bytes that may not be UTF-8 (a path), see
/// [`escape_bytes`].
pub fn escape(s: &str) -> String {
    let mut out = Escaped::default();
    for c in s.chars() {
        out.char(c);
    }
    out.0
}

/// Bytes (a path, say) as [`escape`] gives them, every byte that is not
/// part of valid UTF-8 as `\xNN` (unambiguous: a literal `\` is doubled).
pub fn escape_bytes(bytes: &[u8]) -> String {
    let mut out = Escaped::default();
    for chunk in bytes.utf8_chunks() {
        for c in chunk.valid().chars() {
            out.char(c);
        }
        for b in chunk.invalid() {
            out.piece(&format!("\\x{b:02x}"));
        }
    }
    out.0
}

/// An escaped string being built, and whether it was cut at [`MAX_OBJECT`].
#[derive(Default)]
struct Escaped(String, bool);

impl Escaped {
    fn char(&mut self, c: char) {
        match c {
            '\\' => self.piece("\\\\"),
            '\n' => self.piece("\\n"),
            '\r' => self.piece("\\r"),
            '\t' => self.piece("\\t"),
            c if c.is_control() || is_invisible(c) => self.piece(&format!("\\u{{{:x}}}", c as u32)),
            c => self.piece(c.encode_utf8(&mut [0; 4])),
        }
    }

    fn piece(&mut self, p: &str) {
        if self.1 {
            return;
        }
        if self.0.len() + p.len() > MAX_OBJECT {
            self.0.push('…');
            self.1 = true;
            return;
        }
        self.0.push_str(p);
    }
}

/// Characters that print as nothing or reorder a line (bidirectional
/// overrides, zero-width marks): shown escaped, like control characters.
fn is_invisible(c: char) -> bool {
    matches!(c as u32, 0x200b..=0x200f | 0x202a..=0x202e | 0x2066..=0x2069 | 0xfeff)
}

/// What the runner itself knows: the limit that ended the child (from its
/// outcome), a process the memory limit killed, and, where the backend
/// reports nothing (`reported` false), that it does not.
pub(crate) fn runner_records(
    log: &DenialLog,
    reported: bool,
    outcome: ExitOutcome,
    limits: &Limits,
    memory_limit_hit: bool,
    cpu_time: Option<std::time::Duration>,
) {
    if !reported {
        log.unobservable(
            "this sandbox's backend reports no denials: only the limits that ended the \
             program are listed",
        );
    }
    let raise = |field: &str| Remedy::RaiseLimit(field.to_string());
    let mib = |b: u64| format!("{} MiB", b >> 20);
    match outcome {
        ExitOutcome::MemoryExceeded => log.record(
            DenialKind::Limit,
            &format!(
                "memory {}",
                limits.memory_bytes.map(mib).unwrap_or_default()
            ),
            "killed",
            raise("memory_bytes"),
        ),
        ExitOutcome::CpuTimeExceeded => log.record(
            DenialKind::Limit,
            &format!("cpu {} ms", limits.cpu_ms.unwrap_or_default()),
            "killed",
            raise("cpu_ms"),
        ),
        ExitOutcome::DeadlineExceeded => log.record(
            DenialKind::Limit,
            &format!(
                "deadline {} ms",
                limits.deadline.map(|d| d.as_millis()).unwrap_or_default()
            ),
            "killed",
            raise("deadline"),
        ),
        // The kernel's per-process limits end a process with these.
        ExitOutcome::Signaled(libc::SIGXCPU) => log.record(
            DenialKind::Limit,
            &format!(
                "cpu {} s per process",
                limits.cpu_rlimit_seconds().unwrap_or_default()
            ),
            "killed",
            raise("cpu_ms"),
        ),
        ExitOutcome::Signaled(libc::SIGXFSZ) => log.record(
            DenialKind::Limit,
            &format!(
                "file size {}",
                limits.file_size_bytes.map(mib).unwrap_or_default()
            ),
            "killed",
            raise("file_size_bytes"),
        ),
        // RLIMIT_CPU (soft = hard) ends a process with SIGKILL: the CPU
        // limit did it when the sandbox's time reached it.
        ExitOutcome::Signaled(libc::SIGKILL)
            if !memory_limit_hit
                && limits
                    .cpu_ms
                    .zip(cpu_time)
                    .is_some_and(|(ms, used)| used.as_millis() >= u128::from(ms)) =>
        {
            log.record(
                DenialKind::Limit,
                &format!("cpu {} ms", limits.cpu_ms.unwrap_or_default()),
                "killed",
                raise("cpu_ms"),
            )
        }
        _ if memory_limit_hit => log.record(
            DenialKind::Limit,
            &format!(
                "memory {}",
                limits.memory_bytes.map(mib).unwrap_or_default()
            ),
            "killed a process",
            raise("memory_bytes"),
        ),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_what_could_forge_a_line() {
        assert_eq!(escape("a\nb"), "a\\nb");
        assert_eq!(escape("\u{1b}[2Jcordon: ok"), "\\u{1b}[2Jcordon: ok");
        assert_eq!(escape("\u{9b}31m"), "\\u{9b}31m");
        assert_eq!(escape("x\u{202e}y"), "x\\u{202e}y");
        assert_eq!(escape("back\\slash"), "back\\\\slash");
        assert_eq!(escape_bytes(b"/tmp/\xff\n"), "/tmp/\\xff\\n");
        // A literal `\xff` stays distinguishable from the byte.
        assert_eq!(escape_bytes(b"\\xff"), "\\\\xff");
        let long = "a".repeat(MAX_OBJECT * 2);
        assert!(escape(&long).len() <= MAX_OBJECT + '…'.len_utf8());
    }

    #[test]
    fn the_record_is_bounded() {
        let log = DenialLog::new();
        for i in 0..(MAX_DISTINCT as u64 + 10) {
            log.record(DenialKind::File, &format!("/f{i}"), "read", Remedy::None);
        }
        log.record_n(DenialKind::File, "/f0", "read", Remedy::None, u64::MAX);
        log.record_n(DenialKind::File, "/f1000", "read", Remedy::None, 5);
        // A remedy longer than any real one is not kept.
        let host = "h".repeat(MAX_OBJECT + 1);
        let one = DenialLog::new();
        one.record(DenialKind::Network, "x", "connect", Remedy::AllowHost(host));
        assert_eq!(one.finish().denials[0].remedy, Remedy::None);
        let e = log.finish();
        assert_eq!(e.denials.len(), MAX_DISTINCT);
        assert_eq!(e.more, 15);
        assert_eq!(e.denials[0].count, u64::MAX);
    }
}
