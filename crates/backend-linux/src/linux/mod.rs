//! The Linux implementation. `wrap.rs` prepares a child in the parent;
//! `confine.rs` is the child's list of steps, each in the module of its
//! mechanism (below); `facts.rs` and `probe.rs` say what this host has.

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use cordon_core::{Limits, WrapError};

mod audit;
mod caps;
mod cgroup;
mod confine;
mod container;
mod creds;
mod explain;
pub(crate) mod facts;
mod fd_pass;
mod grant_fs;
pub(crate) mod landlock_rules;
mod maps;
mod masks;
mod mounts;
mod namespaces;
mod net;
mod plan;
mod privileged;
mod probe;
mod quotas;
mod resources;
mod rlimits;
mod scratch;
pub(crate) mod seccomp;
mod sys;
pub(crate) mod terminal;
pub(crate) mod tier;
mod tree;
pub(crate) mod uid;
mod wrap;

pub(crate) use confine::Step;
pub(crate) use facts::{availability, host_facts};
pub(crate) use mounts::shared_mountpoint;
pub(crate) use wrap::wrap;

const NAME: &str = "linux";

fn wrap_err(message: impl Into<String>) -> WrapError {
    WrapError::new(NAME, message)
}

/// The system directories every sandbox may read and execute from.
pub(crate) fn exec_dirs() -> Vec<PathBuf> {
    landlock_rules::SYSTEM_EXEC_DIRS
        .iter()
        .map(PathBuf::from)
        .collect()
}

/// Which sockets a sandbox's filter lets it make.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Sockets {
    /// None (`Network::Deny`).
    None,
    /// TCP clients, for the egress proxy (`Network::Allow`, `Brokered`).
    Proxy,
    /// TCP clients and servers in the sandbox's own network namespace
    /// (`Network::Namespace`).
    OwnNetwork,
}

/// The filter for `layers` in `tier` (`None`, no tier can run: the
/// namespaces' is named), with the `sockets` of its network, for a
/// sandbox that runs as the caller's uid or not.
pub(crate) fn filter_for(
    layers: crate::Layers,
    tier: Option<crate::Tier>,
    sockets: Sockets,
    caller_uid: bool,
) -> seccomp::Filter {
    use seccomp::Filter;
    match (layers.seccomp_allowlist, tier, sockets) {
        (false, _, _) => Filter::DenyList,
        (true, Some(crate::Tier::Landlock), _) => Filter::Landlock { caller_uid },
        (true, _, Sockets::OwnNetwork) => Filter::OwnNetwork,
        (true, _, s) => Filter::Namespaces {
            egress: s == Sockets::Proxy,
        },
    }
}

/// The seccomp filters, compiled once per process: they depend on nothing
/// but the architecture and the variant, and compiling them on every
/// spawn cost more than the rest of `wrap`.
fn compiled_filters(filter: seccomp::Filter) -> Result<Arc<Vec<seccomp::Program>>, String> {
    type Compiled = Result<Arc<Vec<seccomp::Program>>, String>;
    static COMPILED: [OnceLock<Compiled>; seccomp::Filter::ALL.len()] =
        [const { OnceLock::new() }; seccomp::Filter::ALL.len()];
    let i = seccomp::Filter::ALL
        .iter()
        .position(|f| *f == filter)
        .expect("every filter is in Filter::ALL");
    COMPILED[i]
        .get_or_init(|| filter.programs().map(Arc::new))
        .clone()
}

pub(crate) use namespaces::{names as namespace_names, unshare_flags};

/// The smallest sandbox-wide memory limit a sandbox is started with.
/// Until its exec the program shares the host's memory, and what the
/// kernel charges for its set-up (namespaces, mounts, filters, the exec
/// itself) counts against the sandbox's cgroup: were that to reach the
/// limit, the OOM killer would pick the process whose memory is the
/// host's, and kill every process that shares it, the host included. The
/// set-up needs well under a megabyte; no program starts in less than this.
pub(crate) const MIN_SANDBOX_MEMORY: u64 = 16 << 20;

/// Refuses a sandbox-wide memory limit below [`MIN_SANDBOX_MEMORY`].
fn check_memory_floor(limits: &Limits) -> Result<(), WrapError> {
    match limits.memory_bytes {
        Some(bytes) if bytes < MIN_SANDBOX_MEMORY => Err(wrap_err(format!(
            "a memory limit of {bytes} bytes is below the {} MiB a sandbox needs to start \
             (the kernel charges its set-up to the sandbox before the program runs): raise \
             memory_bytes (cordon run --mem)",
            MIN_SANDBOX_MEMORY >> 20
        ))),
        _ => Ok(()),
    }
}
