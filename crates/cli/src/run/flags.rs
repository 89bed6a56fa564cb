//! What the flags of `cordon run` parse to: limit scopes, environment entries, and a note on grants the sandbox cannot write.

#[allow(unused_imports)]
use super::*;

/// A `--*-scope` value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(super) enum ScopeArg {
    /// Every process of the sandbox together.
    Sandbox,
    /// Each process alone.
    Process,
}

impl ScopeArg {
    fn scope(self) -> LimitScope {
        match self {
            ScopeArg::Sandbox => LimitScope::Sandbox,
            ScopeArg::Process => LimitScope::PerProcess,
        }
    }
}

/// The scope a limit flag asks for: what `--X-scope` says, else the
/// sandbox as a whole when the flag was given (what `--mem 64M` means),
/// else per process (the defaults are safety nets).
pub(super) fn scope_of(flag_given: bool, asked: Option<ScopeArg>) -> LimitScope {
    match (asked, flag_given) {
        (Some(a), _) => a.scope(),
        (None, true) => LimitScope::Sandbox,
        (None, false) => LimitScope::PerProcess,
    }
}

pub(super) fn parse_env(s: &str) -> Result<(OsString, Option<OsString>), String> {
    let (k, v) = match s.split_once('=') {
        Some((k, v)) => (k, Some(OsString::from(v))),
        None => (s, None),
    };
    if k.is_empty() || k.contains('\0') {
        return Err(format!("`{s}` is not KEY or KEY=VALUE"));
    }
    Ok((OsString::from(k), v))
}

/// As root, a backend may run the child as another uid (the Linux
/// backend: a uid of its own per sandbox). A `--scratch` or `--rw` dir
/// root owns is mounted idmapped for it (root's files appear as its own,
/// and what it creates is stored as root's), but a dir another user owns
/// is handed over as it is: the sandbox must be able to write it, or the
/// program fails on its first write.
pub(super) fn warn_if_sandbox_cannot_write(dir: &std::path::Path, sandbox: Option<SandboxUser>) {
    use std::os::unix::fs::MetadataExt;
    // SAFETY: geteuid cannot fail.
    let caller = unsafe { libc::geteuid() };
    let Some(user) = sandbox.filter(|u| caller == 0 && u.uid != caller) else {
        return;
    };
    if let Ok(m) = std::fs::metadata(dir) {
        if m.uid() != 0 && m.uid() != user.uid && m.mode() & 0o002 == 0 {
            eprintln!(
                "cordon: note: as root the sandbox runs as {user}, which cannot write {} \
                 (owned by uid {}); chown it to root (whose files the sandbox may write), or \
                 make it world-writable",
                dir.display(),
                m.uid()
            );
        }
    }
}
