//! Masks ([`SandboxPolicy::masked`](cordon_core::SandboxPolicy::masked)):
//! each masked path is covered, in the sandbox's mount namespace, by an
//! empty file or directory mounted read-only over it.
//!
//! The empty file and directory come from a tiny tmpfs the child mounts
//! for a moment over the scratch dir (the one path it is sure to have)
//! and detaches once every mask is bound: the masks keep its two inodes,
//! nothing else can reach them. Each mask mount is `ro,nosuid,nodev,
//! noexec`; the program can neither unmount it (no capability, and
//! seccomp refuses `umount2`, `mount` and the new mount API) nor rename
//! or remove it (a mount point: `EBUSY`), and behind it there is nothing
//! to link or open (the name resolves to the empty inode). Only tier
//! namespaces has a mount namespace: tier landlock refuses masks.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use super::mounts::{check, MOUNT_ATTR_NODEV, MOUNT_ATTR_NOSUID, MOUNT_ATTR_RDONLY};

const MOUNT_ATTR_NOEXEC: u64 = 0x0000_0008;
const OPEN_TREE_CLONE: libc::c_uint = 1;
const MOVE_MOUNT_F_EMPTY_PATH: libc::c_uint = 0x0000_0004;
const MOVE_MOUNT_T_EMPTY_PATH: libc::c_uint = 0x0000_0040;
const RESOLVE_NO_SYMLINKS: u64 = 0x04;

/// `struct open_how` from `<linux/openat2.h>`.
#[repr(C)]
struct OpenHow {
    flags: u64,
    mode: u64,
    resolve: u64,
}

use super::mounts::MountAttr;

/// Mounts a read-only copy of `source` over `target`. The target is
/// opened with `openat2(RESOLVE_NO_SYMLINKS)` and the mount moved onto
/// that fd: a symlink put anywhere in its path since the parent resolved
/// it fails the spawn instead of moving the mask elsewhere (the paths
/// are canonical, `cordon_core::policy::resolve_masks`).
/// Async-signal-safe: raw syscalls only.
///
/// # Safety
/// Both must be valid NUL-terminated strings.
unsafe fn cover(source: &CString, target: &CString) -> std::io::Result<()> {
    let how = OpenHow {
        flags: (libc::O_PATH | libc::O_CLOEXEC) as u64,
        mode: 0,
        resolve: RESOLVE_NO_SYMLINKS,
    };
    let attr = MountAttr {
        attr_set: MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC,
        attr_clr: 0,
        propagation: 0,
        userns_fd: 0,
    };
    // SAFETY: raw syscalls on NUL-terminated strings, structs that outlive
    // them, and fds this function opens and closes.
    unsafe {
        let to = libc::syscall(
            libc::SYS_openat2,
            libc::AT_FDCWD,
            target.as_ptr(),
            &how as *const OpenHow,
            std::mem::size_of::<OpenHow>(),
        ) as libc::c_int;
        check(to)?;
        let tree = libc::syscall(
            libc::SYS_open_tree,
            libc::AT_FDCWD,
            source.as_ptr(),
            OPEN_TREE_CLONE | libc::O_CLOEXEC as libc::c_uint,
        ) as libc::c_int;
        if tree < 0 {
            let e = std::io::Error::last_os_error();
            libc::close(to);
            return Err(e);
        }
        let mut r = libc::syscall(
            libc::SYS_mount_setattr,
            tree,
            c"".as_ptr(),
            libc::AT_EMPTY_PATH as libc::c_uint,
            &attr as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        );
        if r == 0 {
            r = libc::syscall(
                libc::SYS_move_mount,
                tree,
                c"".as_ptr(),
                to,
                c"".as_ptr(),
                MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH,
            );
        }
        let e = std::io::Error::last_os_error();
        libc::close(tree);
        libc::close(to);
        if r < 0 {
            Err(e)
        } else {
            Ok(())
        }
    }
}

/// The masks of one sandbox, prepared in the parent.
pub(crate) struct MaskPlan {
    stage: CString,
    stage_file: CString,
    stage_dir: CString,
    masks: Vec<(CString, bool)>,
    /// Host files shown over files of the sandbox's view: (from, at).
    placed: Vec<(CString, CString)>,
}

impl MaskPlan {
    /// `None` without masks. Each path must exist and not be a symlink
    /// (core resolved them so; a change since is refused here, and a
    /// change after this check fails the bind in the child).
    pub(crate) fn prepare(
        scratch: &Path,
        masked: &[std::path::PathBuf],
        placed: &[cordon_core::policy::PlacedFile],
    ) -> Result<Option<MaskPlan>, String> {
        if masked.is_empty() && placed.is_empty() {
            return Ok(None);
        }
        let c = |p: &Path| {
            CString::new(p.as_os_str().as_bytes())
                .map_err(|_| format!("path `{}` contains a NUL byte", p.display()))
        };
        let mut masks = Vec::new();
        for p in masked {
            let meta = std::fs::symlink_metadata(p)
                .map_err(|e| format!("cannot mask `{}`: {e}", p.display()))?;
            if meta.file_type().is_symlink() {
                return Err(format!("cannot mask `{}`: it is a symlink", p.display()));
            }
            masks.push((c(p)?, meta.is_dir()));
        }
        let mut over = Vec::new();
        for p in placed {
            for (what, path) in [("place over", &p.at), ("place", &p.from)] {
                let meta = std::fs::symlink_metadata(path)
                    .map_err(|e| format!("cannot {what} `{}`: {e}", path.display()))?;
                if !meta.file_type().is_file() {
                    return Err(format!(
                        "cannot {what} `{}`: not a regular file",
                        path.display()
                    ));
                }
            }
            over.push((c(&p.from)?, c(&p.at)?));
        }
        Ok(Some(MaskPlan {
            stage: c(scratch)?,
            stage_file: c(&scratch.join("f"))?,
            stage_dir: c(&scratch.join("d"))?,
            masks,
            placed: over,
        }))
    }

    /// In the child, after the writable mounts (so a mask inside a
    /// read-write grant lies on top of it) and while it holds its
    /// namespace's capabilities. Async-signal-safe: raw syscalls on data
    /// prepared in the parent.
    pub(crate) fn apply(&self) -> std::io::Result<()> {
        // SAFETY: raw syscalls on NUL-terminated strings that outlive them.
        unsafe {
            check(libc::mount(
                c"tmpfs".as_ptr(),
                self.stage.as_ptr(),
                c"tmpfs".as_ptr(),
                libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
                c"mode=0700,size=4k,nr_inodes=8".as_ptr().cast(),
            ))?;
            let fd = libc::open(
                self.stage_file.as_ptr(),
                libc::O_CREAT | libc::O_EXCL | libc::O_WRONLY | libc::O_CLOEXEC,
                0o444,
            );
            check(fd)?;
            libc::close(fd);
            check(libc::mkdir(self.stage_dir.as_ptr(), 0o555))?;
            for (path, is_dir) in &self.masks {
                let source = if *is_dir {
                    &self.stage_dir
                } else {
                    &self.stage_file
                };
                cover(source, path)?;
            }
            for (from, at) in &self.placed {
                cover(from, at)?;
            }
            check(libc::umount2(self.stage.as_ptr(), libc::MNT_DETACH))
        }
    }
}
