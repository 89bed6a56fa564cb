//! Entering a running container (an OCI runtime's `exec`,
//! [`ContainerRoot::enter`]): its namespaces joined instead of new ones
//! made, its mounts and root used as they are.
//!
//! In the parent, [`JoinPlan::open`] opens the container's namespaces
//! through a directory fd of `/proc/PID` (which keeps naming that process
//! however the pid is reused), checks through the same fd that the
//! process is the one named (its start time), and refuses any namespace
//! that is this process's own: a pid that names a host process never
//! joins the host's namespaces. In the child, [`JoinPlan::enter`] joins
//! them (the user namespace first: its capabilities are what the others
//! are joined with), becomes the sandbox's ids inside, and enters the
//! working directory. What follows is what every sandbox takes (a process
//! tree of its own inside the container's PID namespace, rlimits,
//! capabilities, no_new_privs, Landlock, seccomp).
//!
//! [`ContainerRoot::enter`]: cordon_core::policy::ContainerRoot::enter

use std::ffi::CString;
use std::io::Read;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;

use cordon_core::policy::{ContainerRoot, RunningContainer};

use super::super::sys::check_long;

/// The namespaces joined (`/proc/PID/ns/` name, `setns` type): on a root
/// host the network namespace first, while this process is still root in
/// the host's user namespace (a pod's, which the host's owns, can be
/// joined from there only), then the user namespace, whose capabilities
/// the others are joined with; the mount namespace last: joining it moves
/// the root and cwd.
const NAMESPACES: [(&str, libc::c_int); 7] = [
    ("net", libc::CLONE_NEWNET),
    ("user", libc::CLONE_NEWUSER),
    ("pid", libc::CLONE_NEWPID),
    ("ipc", libc::CLONE_NEWIPC),
    ("uts", libc::CLONE_NEWUTS),
    ("cgroup", libc::CLONE_NEWCGROUP),
    ("mnt", libc::CLONE_NEWNS),
];

/// What the child needs to enter a running container.
pub(crate) struct JoinPlan {
    /// The container's namespaces, in the order they are joined.
    namespaces: Vec<(OwnedFd, libc::c_int)>,
    /// Clear the supplementary groups before joining (a root host: inside,
    /// the user namespace may refuse `setgroups`).
    clear_groups: bool,
    /// The sandbox's ids inside the container's user namespace.
    inside: (u32, u32),
    /// The working directory, inside the container.
    cwd: CString,
}

impl JoinPlan {
    /// Opens the namespaces of `running` for a sandbox whose ids inside
    /// are `inside`.
    pub(crate) fn open(
        root: &ContainerRoot,
        running: RunningContainer,
        inside: (u32, u32),
        root_host: bool,
    ) -> Result<JoinPlan, String> {
        let proc_dir = open_at(None, &format!("/proc/{}", running.pid), true)
            .map_err(|e| format!("the running container (pid {}): {e}", running.pid))?;
        let mut namespaces = Vec::with_capacity(NAMESPACES.len());
        // An unprivileged caller holds no capability over a network
        // namespace before it is in the user namespace that owns it.
        let mut order = NAMESPACES;
        if !root_host {
            order.swap(0, 1);
        }
        for (name, kind) in order {
            let fd = open_at(Some(&proc_dir), &format!("ns/{name}"), false)
                .map_err(|e| format!("the running container's {name} namespace: {e}"))?;
            let mine = std::fs::metadata(format!("/proc/self/ns/{name}"))
                .map_err(|e| format!("this process's {name} namespace: {e}"))?;
            let theirs = fstat(&fd).map_err(|e| format!("{name} namespace: {e}"))?;
            if (theirs.st_dev, theirs.st_ino) == (mine_dev(&mine), mine_ino(&mine)) {
                return Err(format!(
                    "pid {} shares this host's {name} namespace: it is not a container's, \
                     and is never joined",
                    running.pid
                ));
            }
            namespaces.push((fd, kind));
        }
        // After the opens, through the same directory: the namespaces are
        // the named process's, not a later one's under its pid.
        let started = start_time(&proc_dir)
            .map_err(|e| format!("the running container (pid {}): {e}", running.pid))?;
        if started != running.start_time {
            return Err(format!(
                "pid {} is no longer the container's process (it has ended)",
                running.pid
            ));
        }
        let cwd = CString::new(root.cwd.as_os_str().as_bytes())
            .map_err(|_| "the working directory has a NUL byte".to_string())?;
        Ok(JoinPlan {
            namespaces,
            clear_groups: root_host,
            inside,
            cwd,
        })
    }

    /// In the child: joins the namespaces, becomes the sandbox's ids
    /// inside, and enters the working directory (resolved inside the
    /// root: `enter_dir`). Raw syscalls on data
    /// prepared in the parent only (async-signal-safe).
    pub(crate) fn enter(&self) -> std::io::Result<()> {
        // SAFETY: raw syscalls on integers, fds the plan holds, a null
        // list and a NUL-terminated path.
        unsafe {
            if self.clear_groups {
                check_long(libc::syscall(
                    libc::SYS_setgroups,
                    0usize,
                    std::ptr::null::<libc::gid_t>(),
                ))?;
            }
            for (fd, kind) in &self.namespaces {
                check_long(libc::syscall(libc::SYS_setns, fd.as_raw_fd(), *kind))?;
            }
            let (uid, gid) = self.inside;
            check_long(libc::syscall(libc::SYS_setresgid, gid, gid, gid))?;
            check_long(libc::syscall(libc::SYS_setresuid, uid, uid, uid))?;
        }
        // Resolved inside the container's root (the mount namespace's),
        // never through a magic link: this process still holds the user
        // namespace's capabilities, and `/proc/1/cwd` could name a
        // directory outside the root.
        super::enter_dir(&self.cwd)
    }
}

fn open_at(dir: Option<&OwnedFd>, path: &str, directory: bool) -> std::io::Result<OwnedFd> {
    let c = CString::new(path).map_err(|_| std::io::Error::from_raw_os_error(libc::EINVAL))?;
    let flags = libc::O_RDONLY
        | libc::O_CLOEXEC
        | if directory {
            libc::O_DIRECTORY | libc::O_NOFOLLOW
        } else {
            0
        };
    let base = dir.map_or(libc::AT_FDCWD, AsRawFd::as_raw_fd);
    // SAFETY: openat on a NUL-terminated path; the fd is ours.
    let fd = unsafe { libc::openat(base, c.as_ptr(), flags) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: a new fd of ours.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn fstat(fd: &OwnedFd) -> std::io::Result<libc::stat> {
    // SAFETY: fstat into a zeroed local.
    unsafe {
        let mut st: libc::stat = std::mem::zeroed();
        if libc::fstat(fd.as_raw_fd(), &mut st) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(st)
    }
}

fn mine_dev(m: &std::fs::Metadata) -> libc::dev_t {
    std::os::unix::fs::MetadataExt::dev(m) as libc::dev_t
}

fn mine_ino(m: &std::fs::Metadata) -> libc::ino_t {
    std::os::unix::fs::MetadataExt::ino(m) as libc::ino_t
}

/// Field 22 of `stat` in the process directory `dir`.
fn start_time(dir: &OwnedFd) -> std::io::Result<u64> {
    let mut text = String::new();
    std::fs::File::from(open_at(Some(dir), "stat", false)?).read_to_string(&mut text)?;
    // The command name (field 2) may hold spaces and parentheses: the
    // fields after it follow the last `)`.
    let after = text
        .rsplit_once(')')
        .map(|(_, rest)| rest)
        .ok_or_else(|| std::io::Error::from_raw_os_error(libc::EPROTO))?;
    after
        .split_whitespace()
        .nth(19)
        .and_then(|f| f.parse().ok())
        .ok_or_else(|| std::io::Error::from_raw_os_error(libc::EPROTO))
}

/// `NS_GET_NSTYPE` (`linux/nsfs.h`): the `CLONE_NEW*` type of a namespace
/// fd.
const NS_GET_NSTYPE: libc::c_ulong = 0xb703;
/// `NS_GET_USERNS`: an fd of the user namespace that owns a namespace.
const NS_GET_USERNS: libc::c_ulong = 0xb701;
/// `NSFS_MAGIC` (`linux/magic.h`): the namespace filesystem.
const NSFS_MAGIC: libc::__fsword_t = 0x6e73_6673;

/// A pod's network namespace ([`ContainerRoot::network`]), opened in the
/// parent: a network namespace, and not this process's own. Joined by
/// [`enter_network`] while the launcher is still root.
pub(crate) fn open_network(path: &std::path::Path, root_host: bool) -> Result<OwnedFd, String> {
    if !root_host {
        return Err(format!(
            "joining the network namespace `{}` needs a root host: the launcher must hold \
             CAP_SYS_ADMIN over the namespace's owner",
            path.display()
        ));
    }
    let what = || format!("the network namespace `{}`", path.display());
    // Looked at before it is opened: `O_PATH` opens nothing (a FIFO would
    // block, a device act), and only a namespace file is opened for real,
    // through the same inode (`/proc/self/fd`).
    let c = CString::new(path.as_os_str().as_bytes()).map_err(|_| format!("{}: NUL", what()))?;
    // SAFETY: open on a NUL-terminated path; the fd is ours.
    let raw = unsafe { libc::open(c.as_ptr(), libc::O_PATH | libc::O_CLOEXEC) };
    if raw < 0 {
        return Err(format!("{}: {}", what(), std::io::Error::last_os_error()));
    }
    // SAFETY: a new fd of ours.
    let located = unsafe { OwnedFd::from_raw_fd(raw) };
    // SAFETY: fstatfs into a zeroed local.
    let on_nsfs = unsafe {
        let mut st: libc::statfs = std::mem::zeroed();
        libc::fstatfs(located.as_raw_fd(), &mut st) == 0 && st.f_type == NSFS_MAGIC
    };
    if !on_nsfs {
        return Err(format!("{} is not a network namespace", what()));
    }
    let fd = open_at(
        None,
        &format!("/proc/self/fd/{}", located.as_raw_fd()),
        false,
    )
    .map_err(|e| format!("{}: {e}", what()))?;
    // SAFETY: an ioctl with no argument on an fd of ours.
    let kind = unsafe { libc::ioctl(fd.as_raw_fd(), NS_GET_NSTYPE) };
    if kind != libc::CLONE_NEWNET {
        return Err(format!("{} is not a network namespace", what()));
    }
    // Made by root (owned by the host's user namespace), as a network
    // plugin makes a pod's: a namespace an unprivileged user owns could be
    // watched and steered by that user, who holds CAP_NET_ADMIN in it.
    // SAFETY: an ioctl with no argument on an fd of ours; the fd it
    // returns is ours.
    let owner = unsafe { libc::ioctl(fd.as_raw_fd(), NS_GET_USERNS) };
    if owner < 0 {
        return Err(format!(
            "{}'s owner: {}",
            what(),
            std::io::Error::last_os_error()
        ));
    }
    // SAFETY: a new fd of ours.
    let owner = unsafe { OwnedFd::from_raw_fd(owner) };
    let host_users = std::fs::metadata("/proc/self/ns/user")
        .map_err(|e| format!("this process's user namespace: {e}"))?;
    let owner = fstat(&owner).map_err(|e| format!("{}'s owner: {e}", what()))?;
    if (owner.st_dev, owner.st_ino) != (mine_dev(&host_users), mine_ino(&host_users)) {
        return Err(format!(
            "{} is owned by a user namespace other than the host's: a pod's is made by root",
            what()
        ));
    }
    let mine = std::fs::metadata("/proc/self/ns/net")
        .map_err(|e| format!("this process's network namespace: {e}"))?;
    let theirs = fstat(&fd).map_err(|e| format!("{}: {e}", what()))?;
    if (theirs.st_dev, theirs.st_ino) == (mine_dev(&mine), mine_ino(&mine)) {
        return Err(format!(
            "{} is this host's own: a container never joins it",
            what()
        ));
    }
    Ok(fd)
}

/// In the child, while it is root on the host: joins the network
/// namespace `fd`. Async-signal-safe.
pub(crate) fn enter_network(fd: &OwnedFd) -> std::io::Result<()> {
    // SAFETY: setns on an fd the plan holds.
    check_long(unsafe { libc::syscall(libc::SYS_setns, fd.as_raw_fd(), libc::CLONE_NEWNET) })
}
