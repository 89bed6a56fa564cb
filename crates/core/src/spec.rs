//! What to run: [`ChildSpec`] and its [`TrustTier`].

use std::ffi::OsString;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::policy::Limits;

/// How far the host trusts a child.
///
/// The default is [`TrustTier::Untrusted`]: a spec must say `Trusted`
/// explicitly to run without a sandbox.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TrustTier {
    /// First-party code: runs under [`TrustedProcessRunner`](crate::TrustedProcessRunner)
    /// (hygiene only, no OS sandbox).
    Trusted,
    /// Third-party code: runs only under a conforming
    /// [`SandboxRunner`](crate::SandboxRunner), never with less.
    #[default]
    Untrusted,
}

/// A SHA-256 digest that the program file must match before it runs.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Sha256Pin(pub [u8; 32]);

impl Sha256Pin {
    /// Parses 64 hex digits.
    pub fn from_hex(s: &str) -> Result<Self, hex::FromHexError> {
        let mut out = [0u8; 32];
        hex::decode_to_slice(s.trim(), &mut out)?;
        Ok(Sha256Pin(out))
    }

    /// Lowercase hex form.
    pub fn to_hex(&self) -> String {
        hex::encode(self.0)
    }
}

impl std::fmt::Debug for Sha256Pin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Sha256Pin({})", self.to_hex())
    }
}

/// Where the child's standard streams go.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum StdioMode {
    /// stdin and stdout are pipes the host holds ([`RunningChild::stdin`],
    /// [`RunningChild::stdout`]); stderr is captured into a bounded ring.
    ///
    /// [`RunningChild::stdin`]: crate::RunningChild::stdin
    /// [`RunningChild::stdout`]: crate::RunningChild::stdout
    #[default]
    Piped,
    /// The host's own stdin, stdout and stderr reach the child through
    /// pipes the runner creates and copies (a CLI passing its terminal or
    /// its redirections through). The child never holds one of the host's
    /// own descriptors, so it cannot change what the host shares with
    /// others: not the flags or offset of the caller's `>> log` (clear
    /// `O_APPEND`, truncate, write over it), not the modes or permissions of
    /// the caller's terminal.
    ///
    /// The runner copies the host's stdin to the child until host EOF (the
    /// child then sees EOF) or until the child ends, and the child's stdout
    /// and stderr to the host's until every writer in the sandbox is gone;
    /// [`RunningChild::wait`] returns after that output arrived. The host's
    /// fds are never made non-blocking. When the host's stdout refuses
    /// writes (`EPIPE`, as in `| head -1`), the child's stdout pipe is
    /// closed, so the child gets `EPIPE`/`SIGPIPE` as in a plain pipeline.
    /// When the host's stdout and stderr are the same file (a terminal,
    /// `2>&1`), the child's stdout and stderr share one pipe, so their order
    /// is kept. The child sees pipes, not a terminal (`isatty` is false).
    ///
    /// [`RunningChild::wait`]: crate::RunningChild::wait
    Relay,
    /// A terminal of the child's own: the runner opens a new
    /// pseudo-terminal, gives the child its slave as fds 0, 1 and 2 and
    /// makes it the controlling terminal of the child's session, and
    /// relays between its master and the host's fds 0 and 1 (a CLI's
    /// `-t`). The child never holds a descriptor of the host's terminal:
    /// what it does to its terminal (modes, `TIOCSTI`, which a Linux
    /// backend refuses anyway) reaches only its own pty.
    ///
    /// When the host's stdin is a terminal, the runner puts it in raw mode
    /// while the child runs (so `^C`, `^Z`, `^\` reach the child's terminal
    /// as bytes, where its line discipline makes them signals for the
    /// child, never for the host), copies its window size to the child's
    /// terminal when it changes (looked at every
    /// [`WINDOW_SIZE_POLL`](crate::WINDOW_SIZE_POLL)), and restores its
    /// modes exactly once the child's output has been relayed, or when the
    /// [`RunningChild`](crate::RunningChild) is dropped, whichever comes
    /// first. When it is not a terminal the child still gets its pty, but
    /// no modes are changed on the host's side.
    ///
    /// The child's stdout and stderr are the one terminal, so everything
    /// it writes arrives on the host's stdout (and in the stderr ring).
    ///
    /// The pty is the backend's when it makes one
    /// ([`SandboxBackend::open_terminal`](crate::SandboxBackend::open_terminal):
    /// the Linux backend's tier namespaces, from a devpts instance no path
    /// leads to), else one of the host's `/dev/ptmx`.
    ///
    /// Caveats: one `Terminal` child at a time per process (a second one
    /// would save the first one's raw modes as the host's); every key goes
    /// to the child (no escape key: stop a runaway one with a signal to
    /// the host).
    Terminal,
}

/// The per-instance working directory of a child.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Scratch {
    /// A fresh 0700 directory under the runner's scratch base, removed after
    /// the child is reaped.
    #[default]
    Fresh,
    /// A fresh directory that is kept after the child exits (for debugging).
    FreshKept,
    /// A directory the caller owns: used as is, never removed, its owner
    /// and mode never changed. A backend that runs the child as another
    /// uid says how the child gets to write it (the Linux backend, as
    /// root: an idmapped mount, so what the child creates is the caller's).
    Existing(PathBuf),
}

/// Everything needed to start one child.
#[derive(Debug, Clone, Default)]
pub struct ChildSpec {
    /// The program to execute (absolute path, or a name resolved on the
    /// child's `PATH` by the runner before spawn).
    pub program: PathBuf,
    /// Arguments, not including the program name.
    pub args: Vec<OsString>,
    /// Explicit environment entries, set after the allowlist.
    pub env: Vec<(OsString, OsString)>,
    /// Names of host environment variables to pass through if set.
    pub pass_env: Vec<OsString>,
    /// Variables set to a path inside the scratch dir (the dir joined
    /// with the relative path), which is known only at spawn: a policy
    /// file's `${CORDON_SCRATCH}/...` values.
    pub env_in_scratch: Vec<(OsString, PathBuf)>,
    /// The scratch directory (the child's cwd).
    pub scratch: Scratch,
    /// The package or artifact directory, granted read + execute. `None`
    /// grants no directory: only the program file itself and what loading
    /// it needs (its `#!` interpreter, its ELF loader) are granted.
    pub package_dir: Option<PathBuf>,
    /// If set, the program file must hash to this value; it is then executed
    /// from the very file that was hashed (no re-open by path).
    pub program_sha256: Option<Sha256Pin>,
    /// Trust tier; decides which runner may start it.
    pub trust: TrustTier,
    /// Limits; each must be at most the runner's ceiling.
    pub limits: Limits,
    /// Where stdin/stdout/stderr go.
    pub stdio: StdioMode,
    /// A label for logs (module or package id).
    pub label: Option<String>,
    /// Record what the sandbox refuses, for
    /// [`RunningChild::explanation`](crate::RunningChild::explanation)
    /// (see [`explain`](crate::explain)). Off by default.
    pub explain: bool,
    /// Run in a container's root ([`ContainerRoot`](crate::policy::ContainerRoot)):
    /// `program` is then a path inside that root (a name without `/` is
    /// looked up on the `PATH` of `env`, inside the root), the
    /// environment is exactly `env` (nothing passed from the host, no
    /// `HOME`/`TMPDIR` set) and the working directory the root's `cwd`.
    /// The program is not pinned: the container owns its root.
    pub container: Option<crate::policy::ContainerRoot>,
    /// A seccomp profile stacked on the backend's own filter (an OCI
    /// bundle's): it can only take away.
    pub seccomp: Option<crate::policy::SeccompProfile>,
    /// Directories granted for writing through a layer the host keeps
    /// apart (`cordon run --rw-review`): see
    /// [`SandboxPolicy::reviewed`](crate::SandboxPolicy::reviewed). Needs a
    /// sandbox (the trusted runner refuses it); each must not overlap a
    /// read-write grant or the scratch dir.
    pub reviewed: Vec<crate::policy::ReviewedDir>,
}

impl ChildSpec {
    /// A spec for `program` with default (untrusted) settings.
    pub fn new(program: impl Into<PathBuf>) -> Self {
        ChildSpec {
            program: program.into(),
            ..ChildSpec::default()
        }
    }

    /// Appends an argument.
    pub fn arg(mut self, arg: impl Into<OsString>) -> Self {
        self.args.push(arg.into());
        self
    }

    /// Appends arguments.
    pub fn args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<OsString>,
    {
        self.args.extend(args.into_iter().map(Into::into));
        self
    }

    /// Sets an explicit environment entry.
    pub fn env(mut self, key: impl Into<OsString>, value: impl Into<OsString>) -> Self {
        self.env.push((key.into(), value.into()));
        self
    }

    /// Sets the trust tier.
    pub fn trust(mut self, trust: TrustTier) -> Self {
        self.trust = trust;
        self
    }

    /// Sets the limits.
    pub fn limits(mut self, limits: Limits) -> Self {
        self.limits = limits;
        self
    }

    /// Sets the stdio mode.
    pub fn stdio(mut self, stdio: StdioMode) -> Self {
        self.stdio = stdio;
        self
    }

    /// Sets the scratch directory choice.
    pub fn scratch(mut self, scratch: Scratch) -> Self {
        self.scratch = scratch;
        self
    }

    /// Records what the sandbox refuses ([`ChildSpec::explain`]).
    pub fn explain(mut self, on: bool) -> Self {
        self.explain = on;
        self
    }
}
