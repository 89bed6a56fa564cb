//! A container's root: the sandbox sees a directory of the host (an OCI
//! bundle's `root.path`) as `/`, with the filesystems a container expects
//! mounted in it, instead of the host read-only.
//!
//! Backend-neutral: this says *what* the sandbox's root is; a backend that
//! cannot pivot into a root (macOS, the no-op backend, Linux's tier
//! landlock) refuses a policy that has one. The OCI runtime
//! (`cordon-oci`) maps a bundle's `config.json` onto it.

use std::path::{Component, Path, PathBuf};

use serde::{Deserialize, Serialize};

/// The sandbox's root filesystem ([`SandboxPolicy::container`](super::SandboxPolicy::container)).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContainerRoot {
    /// The host directory that becomes `/` (canonical). With `readonly`
    /// false it is writable by the sandbox, and on a root host what the
    /// sandbox writes there is stored as the caller's (an idmapped mount,
    /// as for a read-write grant).
    pub rootfs: PathBuf,
    /// `/` is mounted read-only.
    pub readonly: bool,
    /// Mounted inside the root, in order, before the sandbox enters it.
    pub mounts: Vec<ContainerMount>,
    /// The program's working directory, inside the root (absolute).
    pub cwd: PathBuf,
    /// The UTS namespace's hostname (`None`: the backend's own).
    #[serde(default)]
    pub hostname: Option<String>,
    /// Run in this container, already running, instead of making one (an
    /// OCI runtime's `exec`): the sandbox joins its namespaces, and
    /// `readonly`, `mounts` and `hostname` are the running container's
    /// (not made again). `rootfs` still names the root the program is
    /// found in and the Landlock rules are made on; `cwd` is entered
    /// inside the running container.
    #[serde(default)]
    pub enter: Option<RunningContainer>,
    /// Join this network namespace (a file such as `/var/run/netns/NAME`)
    /// instead of making one: a pod's, which its containers share. Never
    /// the host's own (a backend refuses it). A sysfs cannot be mounted
    /// in a namespace the container's user namespace does not own, so
    /// [`ContainerMountKind::Sysfs`] is refused with it.
    #[serde(default)]
    pub network: Option<PathBuf>,
}

/// A container that is running ([`ContainerRoot::enter`]): named by a
/// process of its sandbox and that process's start time, so a pid that
/// was reused by another process is never joined.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunningContainer {
    /// The host pid of the container's sandbox: what
    /// [`RunningChild::pid`](crate::RunningChild::pid) gave when it was
    /// started.
    pub pid: u32,
    /// That process's start time in clock ticks after boot (on Linux,
    /// field 22 of `/proc/PID/stat`).
    pub start_time: u64,
}

/// One filesystem mounted inside a [`ContainerRoot`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContainerMount {
    /// Where, inside the root: absolute, without `..`. Resolved inside the
    /// root only (a symlink in the root cannot lead a mount out of it), and
    /// created (as a directory, or an empty file for a file bind) when
    /// missing.
    pub destination: PathBuf,
    /// What is mounted there.
    pub kind: ContainerMountKind,
    /// Mounted read-only.
    pub read_only: bool,
    /// Mounted `noexec`.
    #[serde(default)]
    pub no_exec: bool,
    /// The source a new filesystem is given (what `/proc/self/mountinfo`
    /// shows for it: an OCI bundle's `source`, such as `proc`); `None`:
    /// the kernel's `none`. Not used by binds, masks and empty directories.
    #[serde(default)]
    pub source: Option<String>,
}

/// What a [`ContainerMount`] mounts. Every mount is `nosuid`, and
/// `nodev` but the `/dev` of [`ContainerMountKind::Devices`] (binds of the
/// host's own device files) and devpts; a filesystem the sandbox's user
/// namespace mounts opens no device node the sandbox could make anyway.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ContainerMountKind {
    /// A procfs of the sandbox's own PID namespace (`noexec`).
    Proc,
    /// A tmpfs, of at most `size` bytes (the default: the sandbox's disk
    /// limit) with the root directory's `mode`.
    Tmpfs {
        /// The size limit in bytes.
        size: Option<u64>,
        /// The root directory's mode.
        mode: Option<u32>,
    },
    /// A tmpfs holding the OCI runtime spec's default devices (`null`,
    /// `zero`, `full`, `random`, `urandom`, `tty`: binds of the host's
    /// own) and its links (`fd`, `stdin`, `stdout`, `stderr`, `ptmx`).
    Devices,
    /// A new instance of devpts (`ptmxmode=0666`).
    Devpts,
    /// A POSIX message queue filesystem of the sandbox's IPC namespace.
    Mqueue,
    /// A sysfs of the sandbox's own network namespace, read-only whatever
    /// `read_only` says.
    Sysfs,
    /// An empty read-only directory: what the sandbox sees where the
    /// bundle asked for its cgroup tree (it gets none; decision 0017).
    Empty,
    /// Covered where it exists (nothing is made where it does not): a
    /// directory by an empty read-only tmpfs, anything else by the host's
    /// `/dev/null` (an OCI bundle's `maskedPaths`).
    Mask,
    /// A host path bound there (a file or a directory, recursively).
    Bind {
        /// The host path (absolute).
        source: PathBuf,
    },
}

impl ContainerRoot {
    /// Checks what a backend relies on: every path absolute and free of
    /// `..`, a `/proc` among the mounts (the backend writes the user
    /// namespace's quotas through the sandbox's own procfs), the
    /// root an existing directory.
    pub fn check(&self) -> Result<(), String> {
        if !self.rootfs.is_absolute() {
            return Err(format!(
                "the container's root `{}` is not an absolute path",
                self.rootfs.display()
            ));
        }
        if !self.rootfs.is_dir() {
            return Err(format!(
                "the container's root `{}` is not a directory",
                self.rootfs.display()
            ));
        }
        plain_inside("the working directory", &self.cwd)?;
        if let Some(n) = &self.network {
            if !n.is_absolute() {
                return Err(format!(
                    "the network namespace `{}` is not an absolute path",
                    n.display()
                ));
            }
            if self
                .mounts
                .iter()
                .any(|m| m.kind == ContainerMountKind::Sysfs)
            {
                return Err(
                    "a sysfs mount needs a network namespace of the container's own, not a \
                     joined one"
                        .into(),
                );
            }
        }
        if let Some(h) = &self.hostname {
            if h.is_empty() || h.len() > 64 || h.bytes().any(|b| b == 0 || b == b'/') {
                return Err(format!("hostname `{h}`: 1 to 64 bytes, no NUL or `/`"));
            }
        }
        for m in &self.mounts {
            plain_inside("a mount's destination", &m.destination)?;
            if m.destination == Path::new("/") {
                return Err("a mount over the container's `/` is not supported".into());
            }
            if let ContainerMountKind::Bind { source } = &m.kind {
                if !source.is_absolute() {
                    return Err(format!(
                        "bind mount source `{}` is not an absolute path",
                        source.display()
                    ));
                }
            }
        }
        if !self
            .mounts
            .iter()
            .any(|m| m.kind == ContainerMountKind::Proc && m.destination == Path::new("/proc"))
        {
            return Err("a container needs a proc mount at /proc".into());
        }
        Ok(())
    }
}

/// `p` is absolute and has no `.` or `..` component.
fn plain_inside(what: &str, p: &Path) -> Result<(), String> {
    let plain = p.is_absolute()
        && p.components()
            .all(|c| matches!(c, Component::RootDir | Component::Normal(_)));
    if plain {
        Ok(())
    } else {
        Err(format!(
            "{what} `{}` must be an absolute path without `.` or `..`",
            p.display()
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn root(mounts: Vec<ContainerMount>) -> ContainerRoot {
        ContainerRoot {
            rootfs: PathBuf::from("/"),
            readonly: true,
            mounts,
            cwd: PathBuf::from("/"),
            hostname: None,
            enter: None,
            network: None,
        }
    }

    fn proc_at(d: &str) -> ContainerMount {
        ContainerMount {
            destination: PathBuf::from(d),
            kind: ContainerMountKind::Proc,
            read_only: false,
            no_exec: false,
            source: None,
        }
    }

    #[test]
    fn a_root_needs_proc_at_proc_and_plain_destinations() {
        assert!(root(vec![proc_at("/proc")]).check().is_ok());
        assert!(root(vec![]).check().unwrap_err().contains("/proc"));
        for bad in ["proc", "/a/../proc", "./proc", "/"] {
            let e = root(vec![proc_at("/proc"), proc_at(bad)]).check();
            assert!(e.is_err(), "{bad} accepted");
        }
        let mut r = root(vec![proc_at("/proc")]);
        r.cwd = PathBuf::from("/x/../..");
        assert!(r.check().is_err());
    }
}
