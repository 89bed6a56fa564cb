//! Entering a container's root ([`cordon_core::policy::ContainerRoot`]):
//! the filesystems a container expects mounted inside the root, then
//! `pivot_root` into it, the host's tree detached.
//!
//! [`ContainerPlan::prepare`] runs in the parent: every path as a C string
//! relative to the root, and a detached copy (`open_tree(OPEN_TREE_CLONE)`)
//! of every host file or tree bound in, with its flags set.
//! [`ContainerPlan::enter`] runs in the child, after the sandbox's other
//! mounts and before Landlock and seccomp, with raw syscalls only:
//!
//! - The root, a detached copy the parent made of it (read-only, or on a
//!   root host an idmapped writable tree), is attached over the scratch
//!   dir (the sandbox's uid may not be able to reach the root's own path:
//!   an image's root under a 0700 store) and opened.
//! - Each destination is resolved with `openat2(RESOLVE_IN_ROOT |
//!   RESOLVE_NO_MAGICLINKS)` from that fd: the container shapes its own
//!   root, and a symbolic link there (`/proc -> /etc`, or `-> /` of the
//!   host) stays inside it. A missing destination is made, one component
//!   at a time, each resolved the same way.
//! - New filesystems are made with `fsopen`/`fsmount` and moved onto the
//!   destination's fd (`move_mount`); nothing is mounted by path.
//! - Then `pivot_root(".", ".")` from the root and the old root detached:
//!   nothing of the host is reachable by path any more.

use std::ffi::{CStr, CString};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::{AtomicI32, Ordering};

use cordon_core::policy::{ContainerMountKind, ContainerRoot};

use super::mounts::{check, MountAttr, MOUNT_ATTR_NODEV, MOUNT_ATTR_NOSUID, MOUNT_ATTR_RDONLY};

mod inside;
pub(crate) mod join;

pub(crate) use inside::enter_dir;

use inside::{check_fd, errno, make, mask, parent_of, Fd, Inside};

pub(super) const MOUNT_ATTR_NOEXEC: u64 = 0x0000_0008;
const AT_RECURSIVE: libc::c_uint = 0x8000;
const OPEN_TREE_CLONE: libc::c_uint = 1;
const MOVE_MOUNT_F_EMPTY_PATH: libc::c_uint = 0x0000_0004;
const MOVE_MOUNT_T_EMPTY_PATH: libc::c_uint = 0x0000_0040;
const FSOPEN_CLOEXEC: libc::c_uint = 1;
const FSMOUNT_CLOEXEC: libc::c_uint = 1;
const FSCONFIG_SET_STRING: libc::c_uint = 1;
const FSCONFIG_CMD_CREATE: libc::c_uint = 6;

/// The OCI runtime spec's default devices, bound from the host's.
const DEVICES: [&str; 6] = ["null", "zero", "full", "random", "urandom", "tty"];
/// The links a `/dev` of a container has.
const DEV_LINKS: [(&str, &str); 5] = [
    ("fd", "/proc/self/fd"),
    ("stdin", "/proc/self/fd/0"),
    ("stdout", "/proc/self/fd/1"),
    ("stderr", "/proc/self/fd/2"),
    ("ptmx", "pts/ptmx"),
];

/// A detached copy of a host mount tree: made by the parent (a root host:
/// the sandbox's uid may not reach the path, an image's root under a 0700
/// store), or by the child in its own mount namespace (an unprivileged
/// host: only there may it clone a mount, and the paths are the caller's
/// own, which it can reach). The child makes its copies first thing in
/// that namespace, before any mount of the sandbox's
/// ([`ContainerPlan::clone_early`]): a copy made later would take the sandbox's own mounts
/// with it (its scratch, with the container's root attached, under a bind
/// of `/tmp`), and the read-only flag the sandbox set on the host.
pub(crate) enum Tree {
    Made(OwnedFd),
    InChild {
        path: CString,
        set: u64,
        /// The copy, once the child made it (-1 before).
        fd: AtomicI32,
    },
}

impl Tree {
    /// The tree of `path` with `set`.
    pub(crate) fn new(path: &Path, set: u64, in_parent: bool) -> Result<Tree, String> {
        if in_parent {
            return clone_tree(path, set).map(Tree::Made);
        }
        Ok(Tree::InChild {
            path: CString::new(path.as_os_str().as_bytes())
                .map_err(|_| format!("`{}` has a NUL byte", path.display()))?,
            set,
            fd: AtomicI32::new(-1),
        })
    }

    /// In the child, before its first mount: makes the copy of a tree the
    /// child makes. Async-signal-safe.
    fn clone_early(&self) -> std::io::Result<()> {
        if let Tree::InChild { path, set, fd } = self {
            // SAFETY: raw syscalls on a NUL-terminated path and a local
            // struct.
            let made = unsafe { raw_tree(path, *set, 0) }?;
            fd.store(made, Ordering::Relaxed);
        }
        Ok(())
    }

    /// In the child: the tree's fd, and the fd to close once it is moved
    /// (a copy the child made). Async-signal-safe.
    fn fd(&self) -> std::io::Result<(RawFd, Option<Fd>)> {
        match self {
            Tree::Made(fd) => Ok((fd.as_raw_fd(), None)),
            Tree::InChild { fd, .. } => match fd.swap(-1, Ordering::Relaxed) {
                -1 => Err(std::io::Error::from_raw_os_error(libc::EBADF)),
                made => Ok((made, Some(Fd(made)))),
            },
        }
    }
}

/// What one mount is, ready for the child.
enum Source {
    /// A new filesystem: `fsopen(fstype)`, its options, `fsmount` with
    /// `attrs`.
    Fresh {
        fstype: &'static CStr,
        options: Vec<(CString, CString)>,
        attrs: u64,
    },
    /// A detached tree.
    Tree(Tree),
    /// Cover what exists there: a directory with an empty read-only
    /// tmpfs, anything else with this detached copy of `/dev/null`.
    Mask(Tree),
}

struct Op {
    at: Inside,
    /// The destination is a file (a bind of a file), not a directory.
    file: bool,
    source: Source,
    /// A fresh `/dev`: its devices and links go in after it.
    devices: Option<Vec<(Inside, Tree)>>,
}

/// Everything the child needs to enter the root, prepared in the parent.
pub(crate) struct ContainerPlan {
    /// The root, a detached tree.
    tree: Tree,
    /// Where the child attaches it before entering it: the scratch dir,
    /// which the sandbox's uid can reach.
    attach_at: CString,
    ops: Vec<Op>,
    links: Vec<(Inside, CString)>,
    cwd: CString,
}

impl ContainerPlan {
    /// Prepares `root` (already checked: [`ContainerRoot::check`]), with
    /// `disk_bytes` the default size of a tmpfs.
    pub(crate) fn prepare(
        root: &ContainerRoot,
        tree: Tree,
        scratch: &Path,
        disk_bytes: Option<u64>,
        in_parent: bool,
    ) -> Result<ContainerPlan, String> {
        let base = MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV;
        let ro = |r: bool| if r { MOUNT_ATTR_RDONLY } else { 0 };
        let mut ops = Vec::new();
        let mut links = Vec::new();
        for m in &root.mounts {
            let at = Inside::new(&m.destination)?;
            let base = base | if m.no_exec { MOUNT_ATTR_NOEXEC } else { 0 };
            let tmpfs = |size: Option<u64>, mode: Option<u32>| {
                let size = size.or(disk_bytes).unwrap_or(64 << 20);
                let mut o = vec![
                    (c"size".to_owned(), num(size)),
                    (
                        c"nr_inodes".to_owned(),
                        num((size / 4096).clamp(1024, 1 << 20)),
                    ),
                ];
                if let Some(mode) = mode {
                    o.push((c"mode".to_owned(), oct(mode)));
                }
                o
            };
            let (file, source, devices) = match &m.kind {
                ContainerMountKind::Proc => (
                    false,
                    Source::Fresh {
                        fstype: c"proc",
                        options: Vec::new(),
                        // Read-only, as `cordon run`'s own procfs.
                        attrs: base | MOUNT_ATTR_NOEXEC | MOUNT_ATTR_RDONLY,
                    },
                    None,
                ),
                ContainerMountKind::Tmpfs { size, mode } => (
                    false,
                    Source::Fresh {
                        fstype: c"tmpfs",
                        options: tmpfs(*size, *mode),
                        attrs: base | ro(m.read_only),
                    },
                    None,
                ),
                ContainerMountKind::Devices => {
                    let mut devs = Vec::new();
                    for d in DEVICES {
                        let host = Path::new("/dev").join(d);
                        // A device file must stay usable: no `nodev` here.
                        let tree =
                            Tree::new(&host, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NOEXEC, in_parent)?;
                        devs.push((Inside::new(&m.destination.join(d))?, tree));
                    }
                    for (name, target) in DEV_LINKS {
                        links.push((
                            Inside::new(&m.destination.join(name))?,
                            CString::new(target).expect("no NUL"),
                        ));
                    }
                    (
                        false,
                        Source::Fresh {
                            fstype: c"tmpfs",
                            options: tmpfs(Some(1 << 20), Some(0o755)),
                            // The binds of host devices need it without
                            // `nodev`; the sandbox cannot make a device
                            // node (no CAP_MKNOD in the host's namespace).
                            attrs: MOUNT_ATTR_NOSUID | MOUNT_ATTR_NOEXEC | ro(m.read_only),
                        },
                        Some(devs),
                    )
                }
                ContainerMountKind::Devpts => (
                    false,
                    Source::Fresh {
                        fstype: c"devpts",
                        options: vec![
                            (c"ptmxmode".to_owned(), c"0666".to_owned()),
                            (c"mode".to_owned(), c"0620".to_owned()),
                        ],
                        attrs: MOUNT_ATTR_NOSUID | MOUNT_ATTR_NOEXEC | ro(m.read_only),
                    },
                    None,
                ),
                ContainerMountKind::Mqueue => (
                    false,
                    Source::Fresh {
                        fstype: c"mqueue",
                        options: Vec::new(),
                        attrs: base | MOUNT_ATTR_NOEXEC | ro(m.read_only),
                    },
                    None,
                ),
                ContainerMountKind::Empty => (
                    false,
                    Source::Fresh {
                        fstype: c"tmpfs",
                        options: tmpfs(Some(4096), Some(0o555)),
                        attrs: base | MOUNT_ATTR_NOEXEC | MOUNT_ATTR_RDONLY,
                    },
                    None,
                ),
                ContainerMountKind::Mask => (
                    false,
                    Source::Mask(Tree::new(
                        Path::new("/dev/null"),
                        MOUNT_ATTR_NOSUID | MOUNT_ATTR_NOEXEC | MOUNT_ATTR_RDONLY,
                        in_parent,
                    )?),
                    None,
                ),
                // A sysfs of the sandbox's own network namespace (its
                // network devices only; nothing mounted under the host's
                // /sys, such as its cgroup trees, comes with it).
                ContainerMountKind::Sysfs => (
                    false,
                    Source::Fresh {
                        fstype: c"sysfs",
                        options: Vec::new(),
                        attrs: base | MOUNT_ATTR_NOEXEC | MOUNT_ATTR_RDONLY,
                    },
                    None,
                ),
                ContainerMountKind::Bind { source } => {
                    // File or directory: of the tree cloned, not of a
                    // second lookup of the path.
                    let tree = Tree::new(source, base | ro(m.read_only), in_parent)?;
                    // SAFETY: a plain C struct, all zeroes is valid.
                    let mut st: libc::stat = unsafe { std::mem::zeroed() };
                    let r = match &tree {
                        // SAFETY: fstat of an fd we hold into a local struct.
                        Tree::Made(fd) => unsafe { libc::fstat(fd.as_raw_fd(), &mut st) },
                        // SAFETY: stat of a NUL-terminated path.
                        Tree::InChild { path, .. } => unsafe { libc::stat(path.as_ptr(), &mut st) },
                    };
                    if r != 0 {
                        return Err(format!(
                            "bind mount source `{}`: {}",
                            source.display(),
                            std::io::Error::last_os_error()
                        ));
                    }
                    let dir = st.st_mode & libc::S_IFMT == libc::S_IFDIR;
                    (!dir, Source::Tree(tree), None)
                }
            };
            // The bundle's source for a new filesystem, as mountinfo
            // shows it (`proc`, `tmpfs`): the first option, before the
            // others are parsed.
            let mut source = source;
            let named = m
                .source
                .as_ref()
                .filter(|_| m.kind != ContainerMountKind::Empty);
            if let (Source::Fresh { options, .. }, Some(name)) = (&mut source, named) {
                let name = CString::new(name.as_str())
                    .map_err(|_| format!("mount source `{name}` has a NUL byte"))?;
                options.insert(0, (c"source".to_owned(), name));
            }
            ops.push(Op {
                at,
                file,
                source,
                devices,
            });
        }
        Ok(ContainerPlan {
            tree,
            attach_at: CString::new(scratch.as_os_str().as_bytes())
                .map_err(|_| "the scratch path has a NUL byte".to_string())?,
            ops,
            links,
            cwd: CString::new(root.cwd.as_os_str().as_bytes())
                .map_err(|_| "the working directory has a NUL byte".to_string())?,
        })
    }

    /// In the child, before its first mount: the copies of host trees the
    /// child makes ([`Tree`]). Async-signal-safe.
    pub(crate) fn clone_early(&self) -> std::io::Result<()> {
        self.tree.clone_early()?;
        for op in &self.ops {
            match &op.source {
                Source::Tree(t) | Source::Mask(t) => t.clone_early()?,
                Source::Fresh { .. } => {}
            }
            for (_, t) in op.devices.iter().flatten() {
                t.clone_early()?;
            }
        }
        Ok(())
    }

    /// In the child: mounts everything inside the root and enters it.
    /// Async-signal-safe: raw syscalls on data prepared in the parent.
    pub(crate) fn enter(&self) -> std::io::Result<()> {
        // SAFETY: raw syscalls on NUL-terminated strings, structs and fds
        // that outlive the calls; every fd opened here is closed here.
        unsafe {
            let (tree, _made) = self.tree.fd()?;
            check(libc::syscall(
                libc::SYS_move_mount,
                tree,
                c"".as_ptr(),
                libc::AT_FDCWD,
                self.attach_at.as_ptr(),
                MOVE_MOUNT_F_EMPTY_PATH,
            ) as libc::c_int)?;
            let root = Fd(check_fd(libc::open(
                self.attach_at.as_ptr(),
                libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
            ))?);
            for op in &self.ops {
                if let Source::Mask(null) = &op.source {
                    let (null, _made) = null.fd()?;
                    mask(root.0, &op.at, null)?;
                    continue;
                }
                let target = make(root.0, &op.at, op.file)?;
                // A tree from the parent is moved once, as is a fresh one.
                let (mnt, _fresh) = match &op.source {
                    Source::Fresh {
                        fstype,
                        options,
                        attrs,
                    } => {
                        let fd = fresh(fstype, options, *attrs)?;
                        (fd, Some(Fd(fd)))
                    }
                    Source::Tree(tree) => tree.fd()?,
                    Source::Mask(_) => unreachable!("handled above"),
                };
                check(move_mount(mnt, target.0))?;
                drop(target);
                if let Some(devs) = &op.devices {
                    for (at, tree) in devs {
                        let t = make(root.0, at, true)?;
                        let (fd, _made) = tree.fd()?;
                        check(move_mount(fd, t.0))?;
                    }
                }
            }
            for (at, target) in &self.links {
                let parent = parent_of(root.0, at)?;
                let name = at.names.last().expect("not empty");
                let r = libc::symlinkat(target.as_ptr(), parent.0, name.as_ptr());
                if r < 0 && errno() != libc::EEXIST {
                    return Err(std::io::Error::last_os_error());
                }
            }
            check(libc::fchdir(root.0))?;
            drop(root);
            check(libc::syscall(libc::SYS_pivot_root, c".".as_ptr(), c".".as_ptr()) as i32)?;
            // The old root is stacked under the new one at ".": detached,
            // nothing of the host is reachable by path.
            check(libc::umount2(c".".as_ptr(), libc::MNT_DETACH))?;
            check(libc::chdir(c"/".as_ptr()))?;
            enter_dir(&self.cwd)?;
        }
        Ok(())
    }
}

/// A new filesystem of `fstype`, mounted detached with `attrs`.
///
/// # Safety
/// Raw syscalls on NUL-terminated strings.
pub(super) unsafe fn fresh(
    fstype: &CStr,
    options: &[(CString, CString)],
    attrs: u64,
) -> std::io::Result<RawFd> {
    // SAFETY: as the function says.
    unsafe {
        let fs = Fd(check_fd(
            libc::syscall(libc::SYS_fsopen, fstype.as_ptr(), FSOPEN_CLOEXEC) as libc::c_int,
        )?);
        for (k, v) in options {
            check(libc::syscall(
                libc::SYS_fsconfig,
                fs.0,
                FSCONFIG_SET_STRING,
                k.as_ptr(),
                v.as_ptr(),
                0,
            ) as libc::c_int)?;
        }
        check(libc::syscall(
            libc::SYS_fsconfig,
            fs.0,
            FSCONFIG_CMD_CREATE,
            std::ptr::null::<libc::c_char>(),
            std::ptr::null::<libc::c_char>(),
            0,
        ) as libc::c_int)?;
        check_fd(libc::syscall(libc::SYS_fsmount, fs.0, FSMOUNT_CLOEXEC, attrs) as libc::c_int)
    }
}

/// `move_mount(mnt, "", target, "", F_EMPTY_PATH | T_EMPTY_PATH)`.
///
/// # Safety
/// Both must be open fds.
pub(super) unsafe fn move_mount(mnt: RawFd, target: RawFd) -> libc::c_int {
    // SAFETY: as the function says.
    unsafe {
        libc::syscall(
            libc::SYS_move_mount,
            mnt,
            c"".as_ptr(),
            target,
            c"".as_ptr(),
            MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH,
        ) as libc::c_int
    }
}

/// In the parent: a detached copy of the mount tree at `path`, made
/// private, with `attrs` set.
pub(crate) fn clone_tree(path: &Path, attrs: u64) -> Result<OwnedFd, String> {
    let c = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| format!("`{}` has a NUL byte", path.display()))?;
    // SAFETY: a NUL-terminated path; the fd returned is ours.
    match unsafe { raw_tree(&c, attrs, 0) } {
        // SAFETY: a new fd of ours.
        Ok(fd) => Ok(unsafe { OwnedFd::from_raw_fd(fd) }),
        Err(e) => Err(format!(
            "cannot bind `{}` into the container: {e}",
            path.display()
        )),
    }
}

/// `open_tree(path, CLONE | RECURSIVE)` with `set` set and `clr` cleared,
/// made private. Async-signal-safe: raw syscalls only.
///
/// # Safety
/// `path` must be NUL-terminated.
unsafe fn raw_tree(path: &CStr, set: u64, clr: u64) -> std::io::Result<RawFd> {
    // SAFETY: raw syscalls on a NUL-terminated path and a local struct.
    unsafe {
        let fd = check_fd(libc::syscall(
            libc::SYS_open_tree,
            libc::AT_FDCWD,
            path.as_ptr(),
            OPEN_TREE_CLONE | AT_RECURSIVE | libc::O_CLOEXEC as libc::c_uint,
        ) as libc::c_int)?;
        let attr = MountAttr {
            attr_set: set,
            attr_clr: clr,
            propagation: libc::MS_PRIVATE,
            userns_fd: 0,
        };
        let r = libc::syscall(
            libc::SYS_mount_setattr,
            fd,
            c"".as_ptr(),
            (libc::AT_EMPTY_PATH as libc::c_uint) | AT_RECURSIVE,
            &attr as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        );
        if r < 0 {
            let e = std::io::Error::last_os_error();
            libc::close(fd);
            return Err(e);
        }
        Ok(fd)
    }
}

fn num(n: u64) -> CString {
    CString::new(n.to_string()).expect("no NUL in numbers")
}

fn oct(n: u32) -> CString {
    CString::new(format!("{n:o}")).expect("no NUL in numbers")
}
