//! The check that a tree a sandbox may write, on a root host, holds no
//! setuid, setgid or file-capability file: through the idmapped mount the
//! sandbox owns the caller's (root's) files, and a store through a shared
//! writable `mmap` rewrites one without the kernel clearing those bits
//! (`write` and `truncate` would), so the host would later run the
//! sandbox's code with them. The sandbox itself cannot make such a file
//! (seccomp's mode checks) nor move one in (another mount: `EXDEV`), so
//! what is there at the start is all there is.
//!
//! The walk is by fds only (`openat(O_NOFOLLOW)`, `fstatat(
//! AT_SYMLINK_NOFOLLOW)`, `fgetxattr` on the file opened): a tree another
//! sandbox writes at the same time (two containers of one root) can swap
//! a directory for a link, and the walk never follows it out of the tree.
//! For a container's root it walks the very tree that is mounted (the
//! clone the parent made), not the path again.

use std::ffi::{CStr, CString};
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};

/// Refuses the tree at `dir` (a canonical host directory) if it holds a
/// privileged file; `what` names it in the error.
pub(crate) fn refuse_in_dir(dir: &Path, what: &str) -> Result<(), String> {
    let c = CString::new(std::os::unix::ffi::OsStrExt::as_bytes(dir.as_os_str()))
        .map_err(|_| format!("{} has a NUL byte", dir.display()))?;
    // SAFETY: a NUL-terminated path; the fd is ours.
    let fd = unsafe {
        libc::open(
            c.as_ptr(),
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(format!(
            "cannot check {}: {}",
            dir.display(),
            std::io::Error::last_os_error()
        ));
    }
    // SAFETY: a new fd of ours.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    refuse_in_tree(std::os::fd::AsFd::as_fd(&fd), dir, what)
}

/// Refuses the tree whose top is the directory `top` (shown as `shown`).
pub(crate) fn refuse_in_tree(top: BorrowedFd<'_>, shown: &Path, what: &str) -> Result<(), String> {
    // Depth-first; each directory on the current path held open (a tree
    // deeper than the fds this process may hold fails the check: refused).
    let first = dup_dir(top).map_err(|e| format!("cannot check {}: {e}", shown.display()))?;
    let mut stack: Vec<(OwnedFd, PathBuf)> = vec![(first, shown.to_path_buf())];
    while let Some((dir, path)) = stack.pop() {
        let names = list(&dir).map_err(|e| format!("cannot check {}: {e}", path.display()))?;
        for name in names {
            let here = path.join(
                <std::ffi::OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(name.as_bytes()),
            );
            let err = |e: std::io::Error| format!("cannot check {}: {e}", here.display());
            let st = stat_at(&dir, &name).map_err(err)?;
            match st.st_mode & libc::S_IFMT {
                libc::S_IFDIR => {
                    let sub =
                        open_at(&dir, &name, libc::O_RDONLY | libc::O_DIRECTORY).map_err(err)?;
                    stack.push((sub, here));
                }
                libc::S_IFREG => {
                    let setid = st.st_mode & (libc::S_ISUID | libc::S_ISGID) != 0;
                    let caps = !setid && {
                        let f =
                            open_at(&dir, &name, libc::O_RDONLY | libc::O_NONBLOCK).map_err(err)?;
                        has_file_caps(&f)
                    };
                    if setid || caps {
                        return Err(format!(
                            "the writable {what} {} holds {}, a {} file: the sandbox could \
                             rewrite it and keep that, so cordon refuses; remove the bit (chmod \
                             u-s,g-s), move the file out, or give that tree read-only",
                            shown.display(),
                            here.display(),
                            if setid {
                                "setuid/setgid"
                            } else {
                                "file-capability"
                            },
                        ));
                    }
                }
                _ => {}
            }
        }
    }
    Ok(())
}

fn dup_dir(fd: BorrowedFd<'_>) -> std::io::Result<OwnedFd> {
    // Reopened (not dup'd): a directory stream of its own, readable even
    // when `fd` is an `O_PATH` or detached-tree fd.
    // SAFETY: openat of "." relative to an fd we borrow.
    let r = unsafe {
        libc::openat(
            fd.as_raw_fd(),
            c".".as_ptr(),
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
        )
    };
    if r < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: a new fd of ours.
    Ok(unsafe { OwnedFd::from_raw_fd(r) })
}

fn open_at(dir: &OwnedFd, name: &CStr, flags: libc::c_int) -> std::io::Result<OwnedFd> {
    // SAFETY: openat relative to an fd we hold, of a NUL-terminated name.
    let r = unsafe {
        libc::openat(
            dir.as_raw_fd(),
            name.as_ptr(),
            flags | libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NOCTTY,
        )
    };
    if r < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: a new fd of ours.
    Ok(unsafe { OwnedFd::from_raw_fd(r) })
}

fn stat_at(dir: &OwnedFd, name: &CStr) -> std::io::Result<libc::stat> {
    // SAFETY: a plain C struct, all zeroes is valid.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstatat relative to an fd we hold into a local struct.
    let r = unsafe {
        libc::fstatat(
            dir.as_raw_fd(),
            name.as_ptr(),
            &mut st,
            libc::AT_SYMLINK_NOFOLLOW,
        )
    };
    if r < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(st)
}

/// The names in `dir` but `.` and `..`.
fn list(dir: &OwnedFd) -> std::io::Result<Vec<CString>> {
    let fd = dup_dir(std::os::fd::AsFd::as_fd(dir))?;
    let mut names = Vec::new();
    for entry in rustix::fs::Dir::new(fd)? {
        let entry = entry?;
        let name = entry.file_name();
        if name != c"." && name != c".." {
            names.push(name.to_owned());
        }
    }
    Ok(names)
}

/// Whether the open file `f` carries `security.capability`.
fn has_file_caps(f: &OwnedFd) -> bool {
    // SAFETY: a null buffer of size 0 asks for the size.
    let n = unsafe {
        libc::fgetxattr(
            f.as_raw_fd(),
            c"security.capability".as_ptr(),
            std::ptr::null_mut(),
            0,
        )
    };
    n >= 0
}
