//! The kernel's quotas, held per sandbox: what one sandbox may take of
//! what the kernel counts per user namespace or per uid, so that it cannot
//! exhaust what other sandboxes or the host need.
//!
//! - **Per user namespace** (`/proc/sys/user/max_*`): the kernel counts
//!   inotify instances and watches, fanotify groups and marks and every
//!   kind of namespace per (user namespace, uid), and checks each count
//!   against the maximum of every namespace up to the initial one. The
//!   launcher, which holds `CAP_SYS_RESOURCE` in the sandbox's new user
//!   namespace, writes [`USERNS_MAXIMA`] into that namespace's own files
//!   (a sysctl under `/proc/sys/user` is the caller's namespace's), so the
//!   sandbox can take at most that much of its uid's share.
//! - **Counted through rlimits** ([`RLIMITS`]): pending signals, POSIX
//!   message queue bytes and locked shared memory are counted per (user
//!   namespace, uid) too, against the caller's rlimit; the program gets
//!   small ones.
//! - **Per uid only** (epoll watches, `fs.epoll.max_user_watches`; pipe
//!   buffers, `fs.pipe-user-pages-soft`): no namespace holds them. On a
//!   root host every sandbox has a uid of its own (`uid.rs`), so these are
//!   its own; for an unprivileged caller they are the caller's, shared
//!   with the caller's other processes, bounded only by open files ×
//!   processes (the README's quota table).
//!
//! A file that this kernel does not have (an older kernel without that
//! quota) is skipped; any other failure fails the spawn.

/// The sandbox's maxima in its own user namespace, as
/// `(file under /proc/sys/user/, value)`.
///
/// Only the quotas a process without capabilities can use up: inotify,
/// fanotify (unprivileged `fanotify_init` exists since Linux 5.13) and
/// user namespaces. Every other kind of namespace takes `CAP_SYS_ADMIN` in
/// the creator's user namespace, which the program never has there (its
/// capabilities and bounding set are empty, `caps.rs`) and could only get
/// in a nested user namespace, which `max_user_namespaces` = 0 refuses; a
/// maximum for each of them would hold nothing more, and each file costs
/// a sysctl lookup (~10 µs on Linux 6.18) on every spawn.
pub(crate) const USERNS_MAXIMA: [(&str, u64); 5] = [
    // File watchers (editors' language servers, `tsc --watch`) use a few.
    ("max_inotify_instances", 32),
    ("max_inotify_watches", 8192),
    // seccomp refuses fanotify_init and every namespace-making call; these
    // hold should a filter ever let one through.
    ("max_fanotify_groups", 0),
    ("max_fanotify_marks", 0),
    ("max_user_namespaces", 0),
];

/// The rlimits that bound what the kernel counts per (user namespace, uid)
/// through them, each never above the hard limit the program would
/// otherwise get.
pub(crate) const RLIMITS: [(libc::__rlimit_resource_t, &str, u64); 3] = [
    // Queued signals (sigqueue, POSIX timers): a shell needs a handful.
    (libc::RLIMIT_SIGPENDING, "RLIMIT_SIGPENDING", 1024),
    // Bytes of POSIX message queues (private to the IPC namespace anyway).
    (libc::RLIMIT_MSGQUEUE, "RLIMIT_MSGQUEUE", 256 << 10),
    // mlock'd memory (gpg-agent keeps its keys there) and SHM_LOCK.
    (libc::RLIMIT_MEMLOCK, "RLIMIT_MEMLOCK", 8 << 20),
];

/// The hostname a sandbox with a UTS namespace has.
pub(crate) const HOSTNAME: &str = "cordon";

/// The quotas as the launcher writes them, prepared in the parent.
pub(crate) struct QuotaPlan {
    /// NUL-terminated path and decimal value of each maximum.
    files: Vec<(std::ffi::CString, Vec<u8>)>,
}

impl QuotaPlan {
    pub(crate) fn new() -> QuotaPlan {
        QuotaPlan {
            files: USERNS_MAXIMA
                .iter()
                .map(|(f, v)| {
                    (
                        std::ffi::CString::new(format!("/proc/sys/user/{f}")).expect("no NUL"),
                        v.to_string().into_bytes(),
                    )
                })
                .collect(),
        }
    }

    /// In the launcher, inside the sandbox's new user namespace (before it
    /// drops its capabilities there). Raw syscalls on prepared data only.
    pub(crate) fn apply(&self) -> std::io::Result<()> {
        for (path, value) in &self.files {
            // SAFETY: open/write/close on a NUL-terminated path and a byte
            // slice that outlive the calls.
            unsafe {
                let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
                if fd < 0 {
                    let e = std::io::Error::last_os_error();
                    if e.raw_os_error() == Some(libc::ENOENT) {
                        continue;
                    }
                    return Err(e);
                }
                let n = libc::write(fd, value.as_ptr().cast(), value.len());
                let e = std::io::Error::last_os_error();
                libc::close(fd);
                if n != value.len() as isize {
                    return Err(if n < 0 {
                        e
                    } else {
                        std::io::Error::from_raw_os_error(libc::EIO)
                    });
                }
            }
        }
        Ok(())
    }
}

/// Sets the UTS namespace's host name (`name`) and domain name. Raw
/// syscalls.
pub(crate) fn set_hostname(name: &std::ffi::CStr) -> std::io::Result<()> {
    // SAFETY: the kernel reads `len` bytes of strings that outlive the call.
    unsafe {
        if libc::sethostname(name.as_ptr(), name.to_bytes().len()) != 0
            || libc::setdomainname(c"(none)".as_ptr(), 6) != 0
        {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}
