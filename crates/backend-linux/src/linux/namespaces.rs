//! The sandbox's namespaces: one `unshare` of a user namespace and,
//! created inside it so that it owns them, the UTS, PID, IPC and mount
//! namespaces of the enabled layers (and a network namespace with an
//! egress allowlist, `net.rs`).

use super::sys::check_long;
use crate::Layers;

/// `CLONE_NEWUSER` plus the namespaces of the enabled layers (the user
/// namespace is created first, so the others belong to it).
pub(crate) fn unshare_flags(layers: Layers) -> libc::c_int {
    let mut flags = libc::CLONE_NEWUSER;
    if layers.uts_namespace {
        flags |= libc::CLONE_NEWUTS;
    }
    if layers.mount_namespace {
        flags |= libc::CLONE_NEWNS;
    }
    if layers.pid_namespace {
        flags |= libc::CLONE_NEWPID;
    }
    if layers.ipc_namespace {
        flags |= libc::CLONE_NEWIPC;
    }
    flags
}

/// The namespaces a sandbox gets with `layers`, for facts and messages.
pub(crate) fn names(layers: Layers) -> Vec<&'static str> {
    let mut names = vec!["user"];
    if layers.uts_namespace {
        names.push("uts");
    }
    if layers.pid_namespace {
        names.push("pid");
    }
    if layers.ipc_namespace {
        names.push("ipc");
    }
    if layers.mount_namespace {
        names.push("mount");
    }
    names
}

/// `unshare(flags)`. Async-signal-safe.
pub(crate) fn enter(flags: libc::c_int) -> std::io::Result<()> {
    // SAFETY: unshare on integers.
    check_long(unsafe { libc::unshare(flags) }.into())
}
