//! The sandbox's mount namespace: the host read-only and `nosuid`, scratch
//! and the read-write grants the only writable places.
//!
//! [`MountPlan::prepare`] runs in the parent and turns the policy into
//! C strings; [`MountPlan::apply`] runs in the child (inside its new user
//! and mount namespaces, before Landlock and seccomp) and issues raw
//! syscalls only.
//!
//! - Every mount is made private (`MS_REC | MS_PRIVATE`), before and
//!   again after the writable mounts (a root host's idmapped clones are
//!   made private when cloned: a clone keeps its source's peer group):
//!   nothing the sandbox mounts (its masks) propagates to the host, and
//!   nothing the host mounts later appears inside without the flags below.
//! - One recursive `mount_setattr(RDONLY | NOSUID)` on `/`: metadata writes
//!   (`chmod`, `utimensat`, `setxattr`, `chown`) on host files, which
//!   Landlock does not govern, fail with `EROFS`, and no setuid/setgid bit
//!   or file capability is honoured anywhere.
//! - A scratch dir whose contents are discarded gets a size-limited tmpfs
//!   (`nosuid,nodev`, mode 0700, owned by the sandbox uid) mounted over it:
//!   nothing the sandbox writes reaches the host's disk, and it vanishes
//!   with the namespace even when the host is SIGKILLed.
//! - On an unprivileged host, a scratch dir the host reads afterwards and
//!   each read-write grant is bind-mounted over itself and made writable
//!   again with `nosuid,nodev`: the sandbox has the caller's uid.
//! - On a root host every such writable place is instead mounted
//!   *idmapped* ([`Idmap`]): through that mount, files the caller owns
//!   appear owned by the sandbox's uid, and what the sandbox creates is
//!   written to disk as the caller's. Nothing a sandbox with a mount
//!   namespace writes is stored as its uid's, so no such file outlives
//!   it as its uid's (which a later sandbox with that uid would own; tier
//!   landlock, with no mount namespace, differs: `uid.rs`), and the
//!   caller's dirs never change owner or mode. A filesystem that cannot be mounted
//!   idmapped (most do since Linux 5.12–6.3: ext4, xfs, btrfs, tmpfs,
//!   overlayfs; not NFS or FUSE) fails the spawn with the path.
//! - With a PID namespace, a fresh read-only procfs of that namespace
//!   covers the host's `/proc`.
//!
//! `nodev` is not applied to the whole host: `/dev/null` and friends live
//! there, and only the device files Landlock grants can be opened anyway.
//! Requires `mount_setattr(2)` (Linux 5.12).

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use cordon_core::SandboxPolicy;

mod idmap_helper;

use idmap_helper::helper_userns;

/// `struct mount_attr` from `<linux/mount.h>` (the one definition of it
/// here: masks and the container's trees use it too).
#[repr(C)]
pub(super) struct MountAttr {
    pub(super) attr_set: u64,
    pub(super) attr_clr: u64,
    pub(super) propagation: u64,
    pub(super) userns_fd: u64,
}

pub(super) const MOUNT_ATTR_RDONLY: u64 = 0x0000_0001;
pub(super) const MOUNT_ATTR_NOSUID: u64 = 0x0000_0002;
pub(super) const MOUNT_ATTR_NODEV: u64 = 0x0000_0004;
const MOUNT_ATTR_IDMAP: u64 = 0x0010_0000;
const AT_RECURSIVE: libc::c_uint = 0x8000;
const OPEN_TREE_CLONE: libc::c_uint = 1;
const MOVE_MOUNT_F_EMPTY_PATH: libc::c_uint = 0x0000_0004;

/// Everything the child needs to set up its mounts, prepared in the parent.
pub(crate) struct MountPlan {
    /// The scratch dir (canonical).
    scratch: CString,
    /// tmpfs options when scratch is backed by private memory; `None` when
    /// the host's directory is bind-mounted.
    tmpfs_options: Option<CString>,
    /// Read-write grants (canonical), made writable in the child.
    writable: Vec<Writable>,
    /// How a scratch dir the host keeps is made writable (`None` with a
    /// private tmpfs).
    scratch_mount: Option<Writable>,
    /// The masks (`masks.rs`), over the writable mounts.
    masks: Option<super::masks::MaskPlan>,
    /// A container's root (`container.rs`), entered after the mounts.
    container: Option<super::container::ContainerPlan>,
    /// Reviewed directories (`SandboxPolicy::reviewed`): an overlay each.
    reviewed: Vec<Overlay>,
}

/// A reviewed directory: an overlay of its layer's upper dir over it,
/// mounted by the child in its user namespace (`userxattr`), before the
/// host is made read-only (the upper's mount must still be writable then;
/// the overlay keeps a private clone of it), and made writable again
/// after. On a root host its lower is the directory's idmapped tree,
/// moved over it first: copying a file up keeps its owner, which must be
/// one the sandbox's namespace maps.
struct Overlay {
    dir: CString,
    options: CString,
    lower: Option<std::os::fd::OwnedFd>,
}

impl Overlay {
    fn new(r: &cordon_core::ReviewedDir, idmap: Option<&Idmap>) -> Result<Overlay, String> {
        let mut options = String::from("lowerdir=");
        for (key, p) in [
            ("", &r.dir),
            (",upperdir=", &r.upper),
            (",workdir=", &r.work),
        ] {
            let s = p
                .to_str()
                .filter(|s| !s.contains([',', ':', '\\', '\n']))
                .ok_or_else(|| {
                    format!(
                        "`{}` cannot be named to overlayfs (a comma, colon, backslash, newline or \
                         bytes not UTF-8 in it): review a directory whose path has none",
                        p.display()
                    )
                })?;
            options.push_str(key);
            options.push_str(s);
        }
        options.push_str(",userxattr");
        Ok(Overlay {
            dir: c_path(&r.dir)?,
            options: CString::new(options).map_err(|_| "a NUL byte in a path".to_string())?,
            lower: idmap.map(|i| i.tree(&r.dir)).transpose()?,
        })
    }

    /// In the child, before the host is made read-only. Async-signal-safe.
    fn mount(&self) -> std::io::Result<()> {
        // SAFETY: raw syscalls on NUL-terminated strings and an fd we hold.
        unsafe {
            if let Some(tree) = &self.lower {
                check(libc::syscall(
                    libc::SYS_move_mount,
                    std::os::fd::AsRawFd::as_raw_fd(tree),
                    c"".as_ptr(),
                    libc::AT_FDCWD,
                    self.dir.as_ptr(),
                    MOVE_MOUNT_F_EMPTY_PATH,
                ) as libc::c_int)?;
            }
            check(libc::mount(
                c"overlay".as_ptr(),
                self.dir.as_ptr(),
                c"overlay".as_ptr(),
                libc::MS_NOSUID | libc::MS_NODEV,
                self.options.as_ptr().cast(),
            ))
        }
    }

    /// In the child, after the host was made read-only: the overlay
    /// writable again. Async-signal-safe.
    fn reopen(&self) -> std::io::Result<()> {
        // SAFETY: a NUL-terminated path.
        unsafe {
            set_attr(
                self.dir.as_ptr(),
                MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV,
                MOUNT_ATTR_RDONLY,
            )
        }
    }
}

/// A host directory the sandbox may write.
enum Writable {
    /// Bound over itself, writable, `nosuid,nodev` (an unprivileged host).
    Bind(CString),
    /// A detached idmapped copy of its mount ([`Idmap::tree`]), moved
    /// over it (a root host).
    Tree(CString, std::os::fd::OwnedFd),
}

impl Writable {
    fn new(path: &Path, idmap: Option<&Idmap>) -> Result<Writable, String> {
        let c = c_path(path)?;
        Ok(match idmap {
            Some(idmap) => {
                let tree = idmap.tree(path)?;
                Writable::Tree(c, tree)
            }
            None => Writable::Bind(c),
        })
    }

    /// In the child: mounts it. Async-signal-safe.
    fn apply(&self) -> std::io::Result<()> {
        match self {
            Writable::Bind(path) => bind_writable(path),
            Writable::Tree(path, tree) => {
                // SAFETY: a raw syscall on an fd we hold and a
                // NUL-terminated path.
                check(unsafe {
                    libc::syscall(
                        libc::SYS_move_mount,
                        std::os::fd::AsRawFd::as_raw_fd(tree),
                        c"".as_ptr(),
                        libc::AT_FDCWD,
                        path.as_ptr(),
                        MOVE_MOUNT_F_EMPTY_PATH,
                    ) as libc::c_int
                })
            }
        }
    }
}

fn c_path(p: &Path) -> Result<CString, String> {
    CString::new(p.as_os_str().as_bytes())
        .map_err(|_| format!("path `{}` contains a NUL byte", p.display()))
}

impl MountPlan {
    /// Prepares the mounts for `policy`. `scratch` and `read_write` are the
    /// canonical paths the Landlock rules were built for; `inside` are the
    /// sandbox's ids in its own user namespace (the private tmpfs's
    /// owner); `idmap` (a root host) maps the caller's ids to the
    /// sandbox's for every writable host directory.
    pub(crate) fn prepare(
        policy: &SandboxPolicy,
        scratch: &Path,
        read_write: &[&Path],
        inside: (u32, u32),
        idmap: Option<&Idmap>,
        root_host: bool,
    ) -> Result<MountPlan, String> {
        let (uid, gid) = inside;
        let tmpfs_options = if policy.scratch_persists {
            None
        } else {
            let mut opts = format!("mode=0700,uid={uid},gid={gid}");
            if let Some(size) = policy.limits.disk_bytes {
                // tmpfs rounds the size up to whole pages; inodes are not
                // part of `size`, so bound them too (one per 4 KiB, within
                // sane limits) or empty files could pin kernel memory.
                let inodes = (size / 4096).clamp(4096, 1 << 20);
                opts.push_str(&format!(",size={size},nr_inodes={inodes}"));
            }
            Some(CString::new(opts).expect("no NUL in numbers"))
        };
        let scratch_mount = match tmpfs_options {
            Some(_) => None,
            None => Some(Writable::new(scratch, idmap)?),
        };
        Ok(MountPlan {
            scratch: c_path(scratch)?,
            tmpfs_options,
            writable: read_write
                .iter()
                .map(|p| Writable::new(p, idmap))
                .collect::<Result<_, _>>()?,
            scratch_mount,
            masks: super::masks::MaskPlan::prepare(scratch, &policy.masked, &policy.placed)?,
            reviewed: policy
                .reviewed
                .iter()
                .map(|r| Overlay::new(r, idmap))
                .collect::<Result<_, _>>()?,
            container: match &policy.container {
                Some(root) => {
                    // The root as a detached tree, made here (the sandbox's
                    // uid may not be able to reach its path: an image's
                    // root under a 0700 store): idmapped when writable on
                    // a root host, as a read-write grant is.
                    use super::container::Tree;
                    let attrs = MOUNT_ATTR_NOSUID
                        | MOUNT_ATTR_NODEV
                        | if root.readonly { MOUNT_ATTR_RDONLY } else { 0 };
                    let tree = match (root.readonly, idmap) {
                        (false, Some(idmap)) => {
                            let tree = idmap.tree(&root.rootfs)?;
                            super::privileged::refuse_in_tree(
                                std::os::fd::AsFd::as_fd(&tree),
                                &root.rootfs,
                                "container root",
                            )?;
                            Tree::Made(tree)
                        }
                        _ => Tree::new(&root.rootfs, attrs, root_host)?,
                    };
                    Some(super::container::ContainerPlan::prepare(
                        root,
                        tree,
                        scratch,
                        policy.limits.disk_bytes,
                        root_host,
                    )?)
                }
                None => None,
            },
        })
    }

    /// The container's root to enter after the mounts, if any.
    pub(crate) fn container(&self) -> Option<&super::container::ContainerPlan> {
        self.container.as_ref()
    }

    /// The reviewed dirs, each now an overlay's root (their Landlock rules
    /// are added in the child: a rule on the dir beneath is ignored).
    pub(crate) fn reviewed_dirs(&self) -> impl Iterator<Item = &std::ffi::CStr> {
        self.reviewed.iter().map(|o| o.dir.as_c_str())
    }

    /// True when scratch is a private tmpfs rather than the host's dir.
    pub(crate) fn scratch_is_private(&self) -> bool {
        self.tmpfs_options.is_some()
    }

    /// Runs in the child, inside its new mount namespace, while it still
    /// holds the namespace's capabilities. With `fresh_proc` (the caller is
    /// the first process of a new PID namespace) a procfs of that namespace
    /// is mounted over the host's `/proc`, so not even the existence of a
    /// host process shows; it stays writable until [`seal_proc`], so that
    /// the kernel quotas can be written through it first (a lookup under
    /// the host's `/proc/sys/user` compares the dentries of every recent
    /// user namespace: ~90 µs more per spawn for five files on Linux 6.18).
    /// Async-signal-safe: raw syscalls on data prepared in the parent.
    ///
    /// [`seal_proc`]: MountPlan::seal_proc
    pub(crate) fn apply(&self, fresh_proc: bool) -> std::io::Result<()> {
        // SAFETY: raw syscalls on NUL-terminated strings and a struct that
        // outlive the calls.
        unsafe {
            // Before any mount of the sandbox's: the host trees a
            // container takes in, copied as the host has them.
            if let Some(c) = &self.container {
                c.clone_early()?;
            }
            for o in &self.reviewed {
                o.mount()?;
            }
            make_host_read_only()?;
            for o in &self.reviewed {
                o.reopen()?;
            }
            match (&self.tmpfs_options, &self.scratch_mount) {
                (Some(opts), _) => check(libc::mount(
                    c"tmpfs".as_ptr(),
                    self.scratch.as_ptr(),
                    c"tmpfs".as_ptr(),
                    libc::MS_NOSUID | libc::MS_NODEV,
                    opts.as_ptr().cast(),
                ))?,
                (None, Some(w)) => w.apply()?,
                (None, None) => return Err(std::io::Error::from_raw_os_error(libc::EINVAL)),
            }
            for w in &self.writable {
                w.apply()?;
            }
            // Again, now that every writable mount is in: none of them may
            // share a mount with the host (`Idmap::tree` made its clones
            // private already; this holds whatever a mount brought in).
            make_private()?;
            if let Some(masks) = &self.masks {
                masks.apply()?;
            }
            if fresh_proc {
                check(libc::mount(
                    c"proc".as_ptr(),
                    c"/proc".as_ptr(),
                    c"proc".as_ptr(),
                    libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
                    std::ptr::null(),
                ))?;
            }
            // The cwd still names the host directory under the new mount.
            check(libc::chdir(self.scratch.as_ptr()))?;
        }
        Ok(())
    }
}

impl MountPlan {
    /// Makes the fresh procfs of [`apply`](MountPlan::apply) read-only;
    /// without `fresh_proc` there is none (the host's is read-only with the
    /// rest). Runs before anything of the program does. Async-signal-safe.
    pub(crate) fn seal_proc(&self, fresh_proc: bool) -> std::io::Result<()> {
        if !fresh_proc {
            return Ok(());
        }
        // SAFETY: a static NUL-terminated path.
        unsafe { set_attr(c"/proc".as_ptr(), MOUNT_ATTR_RDONLY, 0) }
    }
}

/// Makes every mount private and the whole tree read-only and `nosuid`.
/// Async-signal-safe; also used by the availability probe.
pub(crate) fn make_host_read_only() -> std::io::Result<()> {
    make_private()?;
    // SAFETY: a raw syscall on a static NUL-terminated string.
    unsafe { set_attr(c"/".as_ptr(), MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID, 0) }
}

/// `mount(NULL, "/", NULL, MS_REC | MS_PRIVATE)`. Async-signal-safe.
fn make_private() -> std::io::Result<()> {
    // SAFETY: a raw syscall on a static NUL-terminated string.
    check(unsafe {
        libc::mount(
            std::ptr::null(),
            c"/".as_ptr(),
            std::ptr::null(),
            libc::MS_REC | libc::MS_PRIVATE,
            std::ptr::null(),
        )
    })
}

pub(super) fn check(r: libc::c_int) -> std::io::Result<()> {
    if r < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// `mount_setattr(AT_FDCWD, path, AT_RECURSIVE, {set, clr})`.
///
/// # Safety
/// `path` must be a valid NUL-terminated string.
unsafe fn set_attr(path: *const libc::c_char, set: u64, clr: u64) -> std::io::Result<()> {
    let attr = MountAttr {
        attr_set: set,
        attr_clr: clr,
        propagation: 0,
        userns_fd: 0,
    };
    // SAFETY: the kernel reads `size_of::<MountAttr>()` bytes from `attr`.
    let r = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            libc::AT_FDCWD,
            path,
            AT_RECURSIVE,
            &attr as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        )
    };
    if r < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// Bind-mounts `path` over itself and makes the new mount writable,
/// `nosuid` and `nodev`. The flags were set by this namespace (not locked
/// by a more privileged one), so clearing `RDONLY` is allowed; a host mount
/// that is read-only itself stays read-only (the kernel refuses to clear a
/// locked flag, and the spawn fails).
fn bind_writable(path: &CString) -> std::io::Result<()> {
    // SAFETY: raw syscalls on a NUL-terminated string.
    unsafe {
        check(libc::mount(
            path.as_ptr(),
            path.as_ptr(),
            std::ptr::null(),
            libc::MS_BIND | libc::MS_REC,
            std::ptr::null(),
        ))?;
        set_attr(
            path.as_ptr(),
            MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV,
            MOUNT_ATTR_RDONLY,
        )
    }
}

/// The idmapping of one sandbox's writable host directories (a root
/// host): a user namespace that maps the caller's ids to the sandbox's
/// (as seen from the initial namespace), held by an fd. Through a mount
/// idmapped with it, a file the caller owns appears owned by the sandbox,
/// and a file the sandbox creates is stored as the caller's.
pub(crate) struct Idmap {
    userns: std::os::fd::OwnedFd,
}

impl Idmap {
    /// Makes the namespace: a helper process unshares it and waits while
    /// this process (root: writing another uid's maps needs `CAP_SETUID`
    /// and `CAP_SETGID`) writes its maps and opens it. The helper is a
    /// `clone(CLONE_VM)` on a small stack of its own running raw syscalls
    /// only, like the launcher: a `fork` would copy the host.
    pub(crate) fn new(caller: (u32, u32), sandbox: (u32, u32)) -> Result<Idmap, String> {
        helper_userns(caller, sandbox).map(|userns| Idmap { userns })
    }

    /// A detached copy of the mount tree at `dir`
    /// (`open_tree(OPEN_TREE_CLONE | AT_RECURSIVE)`), idmapped and made
    /// `nosuid,nodev`; the child moves it over `dir` inside its own mount
    /// namespace.
    pub(crate) fn tree(&self, dir: &Path) -> Result<std::os::fd::OwnedFd, String> {
        use std::os::fd::{FromRawFd, OwnedFd};
        let path = c_path(dir)?;
        // SAFETY: raw syscalls on a NUL-terminated path and a struct that
        // outlive the calls; the returned fd is ours.
        unsafe {
            let fd = libc::syscall(
                libc::SYS_open_tree,
                libc::AT_FDCWD,
                path.as_ptr(),
                OPEN_TREE_CLONE | AT_RECURSIVE | libc::O_CLOEXEC as libc::c_uint,
            );
            if fd < 0 {
                return Err(format!(
                    "cannot make a private mount of `{}` for the sandbox (open_tree): {}",
                    dir.display(),
                    std::io::Error::last_os_error()
                ));
            }
            let tree = OwnedFd::from_raw_fd(fd as libc::c_int);
            // Private: a clone keeps its source's peer group, so a mount
            // the child made on it (a mask) would appear in the host's
            // mount namespace, and the host's later mounts in the sandbox.
            let attr = MountAttr {
                attr_set: MOUNT_ATTR_IDMAP | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV,
                attr_clr: 0,
                propagation: libc::MS_PRIVATE,
                userns_fd: std::os::fd::AsRawFd::as_raw_fd(&self.userns) as u64,
            };
            let r = libc::syscall(
                libc::SYS_mount_setattr,
                std::os::fd::AsRawFd::as_raw_fd(&tree),
                c"".as_ptr(),
                (libc::AT_EMPTY_PATH as libc::c_uint) | AT_RECURSIVE,
                &attr as *const MountAttr,
                std::mem::size_of::<MountAttr>(),
            );
            if r < 0 {
                return Err(format!(
                    "cannot mount `{}` idmapped for the sandbox ({}): as root, cordon lets a \
                     sandbox write a host directory only through an idmapped mount, so that \
                     what it creates is yours; put the directory on a filesystem that supports \
                     idmapped mounts (ext4, xfs, btrfs, tmpfs, overlayfs), or run cordon as \
                     the directory's owner instead of root",
                    dir.display(),
                    std::io::Error::last_os_error()
                ));
            }
            Ok(tree)
        }
    }
}

/// The one mount point every sandbox of this user mounts its private
/// scratch tmpfs over: `<base>/.cordon-scratch-<uid>`, an empty 0700
/// directory created on first use and checked on every use (a real
/// directory, not a symlink, owned by this user, mode 0700). Each sandbox
/// sees only its own tmpfs there, so the host creates and removes nothing
/// per sandbox — on this host's ext4 `/tmp` a `mkdir` + `rmdir` pair cost
/// 0.35 ms, a third of a sandboxed spawn — and nothing is left behind when
/// the host is SIGKILLed. `None` when it cannot be made ours (e.g. someone
/// else created it first): the spawner then makes a directory per sandbox
/// as usual.
pub(crate) fn shared_mountpoint(base: &Path) -> Option<std::path::PathBuf> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
    // SAFETY: geteuid cannot fail.
    let uid = unsafe { libc::geteuid() };
    let base = base.canonicalize().ok()?;
    let path = base.join(format!(".cordon-scratch-{uid}"));
    let ours = |m: &std::fs::Metadata| {
        m.file_type().is_dir() && m.uid() == uid && m.permissions().mode() & 0o7777 == 0o700
    };
    match std::fs::symlink_metadata(&path) {
        Ok(m) if ours(&m) => return Some(path),
        Ok(_) => {
            tracing::warn!(path = %path.display(), "shared scratch mount point is not this user's own 0700 directory; using a directory per sandbox");
            return None;
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(_) => return None,
    }
    match std::fs::DirBuilder::new().mode(0o700).create(&path) {
        Ok(()) => {
            // The umask may have taken bits away; 0700 is what is checked.
            let _ = std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o700));
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(_) => return None,
    }
    match std::fs::symlink_metadata(&path) {
        Ok(m) if ours(&m) => Some(path),
        _ => None,
    }
}
