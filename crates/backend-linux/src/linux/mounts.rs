//! The sandbox's mount namespace: the host read-only and `nosuid`, scratch
//! and the read-write grants the only writable places.
//!
//! [`MountPlan::prepare`] runs in the parent and turns the policy into
//! C strings; [`MountPlan::apply`] runs in the child (inside its new user
//! and mount namespaces, before Landlock and seccomp) and issues raw
//! syscalls only.
//!
//! - Every mount is made private (`MS_REC | MS_PRIVATE`): nothing the
//!   sandbox mounts propagates to the host, and nothing the host mounts
//!   later appears inside without the flags below.
//! - One recursive `mount_setattr(RDONLY | NOSUID)` on `/`: metadata writes
//!   (`chmod`, `utimensat`, `setxattr`, `chown`) on host files, which
//!   Landlock does not govern, fail with `EROFS`, and no setuid/setgid bit
//!   or file capability is honoured anywhere.
//! - A scratch dir whose contents are discarded gets a size-limited tmpfs
//!   (`nosuid,nodev`, mode 0700, owned by the sandbox uid) mounted over it:
//!   nothing the sandbox writes reaches the host's disk, and it vanishes
//!   with the namespace even when the host is SIGKILLed. A scratch dir the
//!   host reads afterwards, and each read-write grant, is bind-mounted over
//!   itself and made writable again with `nosuid,nodev`.
//! - As root, a caller's own scratch dir (`--scratch DIR`) is instead
//!   mounted *idmapped* ([`idmapped_tree`]): through that mount, files the
//!   caller owns appear owned by the sandbox's uid, and what the sandbox
//!   creates is written to disk as the caller's. The program gets a
//!   writable cwd; DIR's owner and mode never change.
//!
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

/// `struct mount_attr` from `<linux/mount.h>`.
#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

const MOUNT_ATTR_RDONLY: u64 = 0x0000_0001;
const MOUNT_ATTR_NOSUID: u64 = 0x0000_0002;
const MOUNT_ATTR_NODEV: u64 = 0x0000_0004;
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
    /// Read-write grants (canonical), bind-mounted writable.
    writable: Vec<CString>,
    /// The caller's scratch dir as a detached, idmapped mount
    /// ([`idmapped_tree`]), moved over the scratch dir in the child instead
    /// of a plain bind.
    scratch_tree: Option<std::os::fd::OwnedFd>,
}

fn c_path(p: &Path) -> Result<CString, String> {
    CString::new(p.as_os_str().as_bytes())
        .map_err(|_| format!("path `{}` contains a NUL byte", p.display()))
}

impl MountPlan {
    /// Prepares the mounts for `policy`. `scratch` and `read_write` are the
    /// canonical paths the Landlock rules were built for; `uid`/`gid` are
    /// the sandbox's ids (mapped to themselves in its user namespace).
    pub(crate) fn prepare(
        policy: &SandboxPolicy,
        scratch: &Path,
        read_write: &[&Path],
        uid: u32,
        gid: u32,
        scratch_tree: Option<std::os::fd::OwnedFd>,
    ) -> Result<MountPlan, String> {
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
        Ok(MountPlan {
            scratch: c_path(scratch)?,
            tmpfs_options,
            writable: read_write
                .iter()
                .map(|p| c_path(p))
                .collect::<Result<_, _>>()?,
            scratch_tree,
        })
    }

    /// True when scratch is a private tmpfs rather than the host's dir.
    pub(crate) fn scratch_is_private(&self) -> bool {
        self.tmpfs_options.is_some()
    }

    /// Runs in the child, inside its new mount namespace, while it still
    /// holds the namespace's capabilities. With `fresh_proc` (the caller is
    /// the init of a new PID namespace) a procfs of that namespace is
    /// mounted over the host's `/proc`, read-only, so not even the
    /// existence of a host process shows. Async-signal-safe: raw syscalls
    /// on data prepared in the parent.
    pub(crate) fn apply(&self, fresh_proc: bool) -> std::io::Result<()> {
        // SAFETY: raw syscalls on NUL-terminated strings and a struct that
        // outlive the calls.
        unsafe {
            make_host_read_only()?;
            match &self.tmpfs_options {
                Some(opts) => check(libc::mount(
                    c"tmpfs".as_ptr(),
                    self.scratch.as_ptr(),
                    c"tmpfs".as_ptr(),
                    libc::MS_NOSUID | libc::MS_NODEV,
                    opts.as_ptr().cast(),
                ))?,
                None => match &self.scratch_tree {
                    Some(tree) => check(libc::syscall(
                        libc::SYS_move_mount,
                        std::os::fd::AsRawFd::as_raw_fd(tree),
                        c"".as_ptr(),
                        libc::AT_FDCWD,
                        self.scratch.as_ptr(),
                        MOVE_MOUNT_F_EMPTY_PATH,
                    ) as libc::c_int)?,
                    None => bind_writable(&self.scratch)?,
                },
            }
            for p in &self.writable {
                bind_writable(p)?;
            }
            if fresh_proc {
                check(libc::mount(
                    c"proc".as_ptr(),
                    c"/proc".as_ptr(),
                    c"proc".as_ptr(),
                    libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
                    std::ptr::null(),
                ))?;
            }
            // The cwd still names the host directory under the new mount.
            check(libc::chdir(self.scratch.as_ptr()))?;
        }
        Ok(())
    }
}

/// Makes every mount private and the whole tree read-only and `nosuid`.
/// Async-signal-safe; also used by the availability probe.
pub(crate) fn make_host_read_only() -> std::io::Result<()> {
    // SAFETY: raw syscalls on static NUL-terminated strings.
    unsafe {
        check(libc::mount(
            std::ptr::null(),
            c"/".as_ptr(),
            std::ptr::null(),
            libc::MS_REC | libc::MS_PRIVATE,
            std::ptr::null(),
        ))?;
        set_attr(c"/".as_ptr(), MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID, 0)
    }
}

fn check(r: libc::c_int) -> std::io::Result<()> {
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

/// A detached copy of the mount at `dir` (`open_tree(OPEN_TREE_CLONE)`)
/// made `nosuid,nodev` and idmapped so that, through it, files owned by
/// `host` (uid, gid) appear owned by `sandbox` and files the sandbox
/// creates are stored as `host`'s. Runs in the parent, as root (writing a
/// user namespace's maps for another uid needs `CAP_SETUID`/`CAP_SETGID`);
/// the child moves it over `dir` inside its own mount namespace.
///
/// The idmapping is a user namespace that maps `host` to `sandbox`; a
/// short-lived helper process creates it (a user namespace exists only
/// while a process or an fd holds it: the fd we open keeps it). Needs
/// Linux 5.12 and a filesystem that supports idmapped mounts (ext4, xfs,
/// btrfs, tmpfs since 6.3, …); an error means the caller falls back to a
/// plain bind.
pub(crate) fn idmapped_tree(
    dir: &Path,
    host: (u32, u32),
    sandbox: (u32, u32),
) -> Result<std::os::fd::OwnedFd, String> {
    use std::os::fd::{FromRawFd, OwnedFd};
    let userns = helper_userns(host, sandbox)?;
    let path = c_path(dir)?;
    // SAFETY: raw syscalls on a NUL-terminated path and a struct that
    // outlive the calls; the returned fd is ours.
    unsafe {
        let fd = libc::syscall(
            libc::SYS_open_tree,
            libc::AT_FDCWD,
            path.as_ptr(),
            OPEN_TREE_CLONE | libc::O_CLOEXEC as libc::c_uint,
        );
        if fd < 0 {
            return Err(format!(
                "open_tree(`{}`): {}",
                dir.display(),
                std::io::Error::last_os_error()
            ));
        }
        let tree = OwnedFd::from_raw_fd(fd as libc::c_int);
        let attr = MountAttr {
            attr_set: MOUNT_ATTR_IDMAP | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV,
            attr_clr: 0,
            propagation: 0,
            userns_fd: std::os::fd::AsRawFd::as_raw_fd(&userns) as u64,
        };
        let r = libc::syscall(
            libc::SYS_mount_setattr,
            std::os::fd::AsRawFd::as_raw_fd(&tree),
            c"".as_ptr(),
            libc::AT_EMPTY_PATH as libc::c_uint,
            &attr as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        );
        if r < 0 {
            return Err(format!(
                "idmapping the mount of `{}`: {}",
                dir.display(),
                std::io::Error::last_os_error()
            ));
        }
        Ok(tree)
    }
}

/// A user namespace mapping `host` ids to `sandbox` ids (as seen from the
/// initial namespace), held by an fd: a child unshares it and waits while
/// the parent writes its maps and opens it, then exits.
fn helper_userns(host: (u32, u32), sandbox: (u32, u32)) -> Result<std::os::fd::OwnedFd, String> {
    let mut pipe = [0i32; 2];
    // SAFETY: pipe2 into a local array; fork whose child only calls
    // unshare, read and _exit (async-signal-safe); the parent reaps it.
    let pid = unsafe {
        if libc::pipe2(pipe.as_mut_ptr(), libc::O_CLOEXEC) != 0 {
            return Err(format!("pipe: {}", std::io::Error::last_os_error()));
        }
        let pid = libc::fork();
        if pid == 0 {
            libc::close(pipe[1]);
            let ok = libc::unshare(libc::CLONE_NEWUSER) == 0;
            let mut b = 0u8;
            // Wait until the parent has opened the namespace (or gone).
            libc::read(pipe[0], (&mut b as *mut u8).cast(), 1);
            libc::_exit(i32::from(!ok));
        }
        libc::close(pipe[0]);
        pid
    };
    if pid < 0 {
        // SAFETY: closing our own write end.
        unsafe { libc::close(pipe[1]) };
        return Err(format!("fork: {}", std::io::Error::last_os_error()));
    }
    let result = (|| {
        // The maps can be written once the child has unshared: poll for
        // its namespace to differ from ours.
        let ours = std::fs::read_link("/proc/self/ns/user").map_err(|e| e.to_string())?;
        let ns = format!("/proc/{pid}/ns/user");
        let mut tries = 0;
        while std::fs::read_link(&ns).map_err(|e| e.to_string())? == ours {
            tries += 1;
            if tries > 2000 {
                return Err("the helper did not enter its user namespace".to_string());
            }
            std::thread::sleep(std::time::Duration::from_micros(50));
        }
        let write = |file: &str, text: String| {
            std::fs::write(format!("/proc/{pid}/{file}"), text)
                .map_err(|e| format!("writing the helper's {file}: {e}"))
        };
        write("uid_map", format!("{} {} 1\n", host.0, sandbox.0))?;
        write("setgroups", "deny".into())?;
        write("gid_map", format!("{} {} 1\n", host.1, sandbox.1))?;
        std::fs::File::open(&ns)
            .map(std::os::fd::OwnedFd::from)
            .map_err(|e| format!("opening {ns}: {e}"))
    })();
    // SAFETY: releasing and reaping our own child.
    unsafe {
        libc::close(pipe[1]);
        let mut status = 0;
        libc::waitpid(pid, &mut status, 0);
    }
    result
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
