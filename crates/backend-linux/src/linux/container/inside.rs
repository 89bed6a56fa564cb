//! Paths inside a container's root, resolved and made by the child from
//! the root's fd only (`openat2(RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS)`):
//! a link the container put in its root never leads out of it.

use std::ffi::{CStr, CString};
use std::os::fd::RawFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path};

use super::super::mounts::{check, MOUNT_ATTR_NODEV, MOUNT_ATTR_NOSUID, MOUNT_ATTR_RDONLY};
use super::{fresh, move_mount, MOUNT_ATTR_NOEXEC};

const RESOLVE_NO_MAGICLINKS: u64 = 0x02;
const RESOLVE_IN_ROOT: u64 = 0x10;

/// `struct open_how` for `openat2`.
#[repr(C)]
struct OpenHow {
    flags: u64,
    mode: u64,
    resolve: u64,
}

/// A path inside the root, with what making it takes: each prefix
/// (`a`, `a/b`, `a/b/c`) and each prefix's last component.
pub(super) struct Inside {
    pub(super) prefixes: Vec<CString>,
    pub(super) names: Vec<CString>,
}

impl Inside {
    pub(super) fn new(p: &Path) -> Result<Inside, String> {
        let mut prefixes = Vec::new();
        let mut names = Vec::new();
        let mut acc = Vec::<u8>::new();
        for c in p.components() {
            match c {
                Component::RootDir => {}
                Component::Normal(n) => {
                    if !acc.is_empty() {
                        acc.push(b'/');
                    }
                    acc.extend_from_slice(n.as_bytes());
                    let cs = |b: &[u8]| {
                        CString::new(b).map_err(|_| format!("`{}` has a NUL byte", p.display()))
                    };
                    prefixes.push(cs(&acc)?);
                    names.push(cs(n.as_bytes())?);
                }
                _ => return Err(format!("`{}` is not a plain absolute path", p.display())),
            }
        }
        if prefixes.is_empty() {
            return Err("a mount over the container's `/`".into());
        }
        Ok(Inside { prefixes, names })
    }
}

/// Closes on drop.
pub(super) struct Fd(pub(super) RawFd);

impl Drop for Fd {
    fn drop(&mut self) {
        // SAFETY: we own the fd.
        unsafe { libc::close(self.0) };
    }
}

pub(super) fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

pub(super) fn check_fd(r: libc::c_int) -> std::io::Result<RawFd> {
    if r < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

/// `openat2(root, path, O_PATH, RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS)`.
///
/// # Safety
/// `root` must be an open directory fd.
pub(super) unsafe fn open_in(root: RawFd, path: &CStr, flags: u64) -> std::io::Result<Fd> {
    let how = OpenHow {
        flags: flags | (libc::O_PATH | libc::O_CLOEXEC) as u64,
        mode: 0,
        resolve: RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS,
    };
    // SAFETY: the kernel reads `size_of::<OpenHow>()` bytes of `how`.
    let r = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            root,
            path.as_ptr(),
            &how as *const OpenHow,
            std::mem::size_of::<OpenHow>(),
        )
    };
    check_fd(r as libc::c_int).map(Fd)
}

/// Enters the directory `path` of the root this process is in (a
/// container's, after `pivot_root` or `setns`), resolved inside it: no
/// link, and no magic link such as `/proc/1/cwd` (which could name a
/// directory of the host's tree), leads out. Async-signal-safe.
pub(crate) fn enter_dir(path: &CStr) -> std::io::Result<()> {
    // SAFETY: raw syscalls on a NUL-terminated path and fds we close.
    unsafe {
        let root = Fd(check_fd(libc::open(
            c"/".as_ptr(),
            libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
        ))?);
        let dir = open_in(root.0, path, libc::O_DIRECTORY as u64)?;
        check(libc::fchdir(dir.0))?;
    }
    Ok(())
}

/// The directory holding `at`'s last component, resolved inside the root.
///
/// # Safety
/// `root` must be an open directory fd.
pub(super) unsafe fn parent_of(root: RawFd, at: &Inside) -> std::io::Result<Fd> {
    match at.prefixes.len() {
        // SAFETY: dup of an open fd.
        1 => Ok(Fd(check_fd(unsafe { libc::dup(root) })?)),
        // SAFETY: the caller's root fd.
        n => unsafe { open_in(root, &at.prefixes[n - 2], libc::O_DIRECTORY as u64) },
    }
}

/// Resolves `at` inside the root, making what is missing: directories on
/// the way, and the last component as a directory or (`file`) an empty
/// file.
///
/// # Safety
/// `root` must be an open directory fd.
pub(super) unsafe fn make(root: RawFd, at: &Inside, file: bool) -> std::io::Result<Fd> {
    let last = at.prefixes.len() - 1;
    for (i, prefix) in at.prefixes.iter().enumerate() {
        let is_last = i == last;
        let want_dir = !(is_last && file);
        let dir_flag = if want_dir {
            libc::O_DIRECTORY as u64
        } else {
            0
        };
        // SAFETY: the caller's root fd.
        match unsafe { open_in(root, prefix, dir_flag) } {
            Ok(fd) if is_last => return Ok(fd),
            Ok(_) => continue,
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {}
            Err(e) => return Err(e),
        }
        let parent = match i {
            // SAFETY: dup of an open fd.
            0 => Fd(check_fd(unsafe { libc::dup(root) })?),
            // SAFETY: the caller's root fd.
            _ => unsafe { open_in(root, &at.prefixes[i - 1], libc::O_DIRECTORY as u64) }?,
        };
        let name = &at.names[i];
        // SAFETY: an open dir fd and a NUL-terminated name.
        let r = unsafe {
            if want_dir {
                libc::mkdirat(parent.0, name.as_ptr(), 0o755)
            } else {
                let fd = libc::openat(
                    parent.0,
                    name.as_ptr(),
                    libc::O_CREAT
                        | libc::O_EXCL
                        | libc::O_WRONLY
                        | libc::O_NOFOLLOW
                        | libc::O_CLOEXEC,
                    0o644,
                );
                if fd >= 0 {
                    libc::close(fd);
                }
                fd.min(0)
            }
        };
        if r < 0 && errno() != libc::EEXIST {
            return Err(std::io::Error::last_os_error());
        }
        if is_last {
            // SAFETY: the caller's root fd.
            return unsafe { open_in(root, prefix, dir_flag) };
        }
    }
    unreachable!("the loop returns at the last component")
}

/// Covers `at` if it exists inside the root: a directory with an empty
/// read-only tmpfs, anything else with `null` (a detached `/dev/null`).
///
/// # Safety
/// `root` and `null` must be open fds.
pub(super) unsafe fn mask(root: RawFd, at: &Inside, null: RawFd) -> std::io::Result<()> {
    // SAFETY: the caller's fds; a local stat.
    unsafe {
        let target = match open_in(root, at.prefixes.last().expect("not empty"), 0) {
            Ok(fd) => fd,
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => return Ok(()),
            Err(e) => return Err(e),
        };
        let mut st: libc::stat = std::mem::zeroed();
        check(libc::fstat(target.0, &mut st))?;
        if st.st_mode & libc::S_IFMT == libc::S_IFDIR {
            let empty = Fd(fresh(
                c"tmpfs",
                &[],
                MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC | MOUNT_ATTR_RDONLY,
            )?);
            check(move_mount(empty.0, target.0))
        } else {
            check(move_mount(null, target.0))
        }
    }
}
