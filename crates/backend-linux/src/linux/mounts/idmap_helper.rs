//! The idmap helper: the process that owns the user namespace a root
//! host's idmapped mounts map through ([`super::Idmap::new`]).

/// What the idmap helper reads (on this thread's stack, alive until the
/// helper is reaped).
#[repr(C)]
struct HelperArgs {
    ready_w: libc::c_int,
    go_r: libc::c_int,
    /// The parent's ends, which the helper's copy of the fd table holds
    /// too: closed first thing, or it would never see the go pipe's EOF.
    ready_r: libc::c_int,
    go_w: libc::c_int,
}

/// The helper's stack (it calls nothing but raw syscalls).
const HELPER_STACK: usize = 16 * 1024;

/// The idmap helper: unshares a user namespace, says so (one byte: 0, or
/// the errno), waits until its parent closes the go pipe, exits. Raw
/// syscalls only: it shares the host's memory and this thread's
/// thread-local storage.
extern "C" fn helper_main(arg: *mut libc::c_void) -> libc::c_int {
    use super::super::sys::raw;
    // SAFETY: `arg` is the parent's `HelperArgs`, alive until we are
    // reaped; raw syscalls on integers and on a local byte.
    unsafe {
        let a = &*(arg as *const HelperArgs);
        raw(libc::SYS_close, a.go_w as usize, 0, 0, 0);
        raw(libc::SYS_close, a.ready_r as usize, 0, 0, 0);
        let r = raw(libc::SYS_unshare, libc::CLONE_NEWUSER as usize, 0, 0, 0);
        let b: u8 = if r < 0 { (-r).clamp(1, 255) as u8 } else { 0 };
        raw(
            libc::SYS_write,
            a.ready_w as usize,
            &b as *const u8 as usize,
            1,
            0,
        );
        let mut x = 0u8;
        while raw(
            libc::SYS_read,
            a.go_r as usize,
            &mut x as *mut u8 as usize,
            1,
            0,
        ) == -(libc::EINTR as isize)
        {}
        raw(libc::SYS_exit, 0, 0, 0, 0);
    }
    0
}

pub(super) fn helper_userns(
    host: (u32, u32),
    sandbox: (u32, u32),
) -> Result<std::os::fd::OwnedFd, String> {
    use std::os::fd::{FromRawFd, OwnedFd};
    let pipe = || -> Result<(OwnedFd, OwnedFd), String> {
        let mut p = [0i32; 2];
        // SAFETY: pipe2 into a local array; the fds are ours.
        unsafe {
            if libc::pipe2(p.as_mut_ptr(), libc::O_CLOEXEC) != 0 {
                return Err(format!("pipe: {}", std::io::Error::last_os_error()));
            }
            Ok((OwnedFd::from_raw_fd(p[0]), OwnedFd::from_raw_fd(p[1])))
        }
    };
    let (ready_r, ready_w) = pipe()?;
    let (go_r, go_w) = pipe()?;
    let args = HelperArgs {
        ready_w: std::os::fd::AsRawFd::as_raw_fd(&ready_w),
        go_r: std::os::fd::AsRawFd::as_raw_fd(&go_r),
        ready_r: std::os::fd::AsRawFd::as_raw_fd(&ready_r),
        go_w: std::os::fd::AsRawFd::as_raw_fd(&go_w),
    };
    let stack = vec![0u8; HELPER_STACK];
    let top = (stack.as_ptr() as usize + HELPER_STACK) & !15;
    let all: u64 = !0;
    let mut old: u64 = 0;
    // SAFETY: every signal is blocked around the clone and stays blocked in
    // the helper (no host handler may run in it); it runs `helper_main` on
    // `stack` with `args`, both alive until it is reaped below.
    let pid = unsafe {
        libc::syscall(
            libc::SYS_rt_sigprocmask,
            libc::SIG_SETMASK,
            &all as *const u64,
            &mut old as *mut u64,
            8usize,
        );
        let pid = libc::clone(
            helper_main,
            top as *mut libc::c_void,
            libc::CLONE_VM | libc::SIGCHLD,
            &args as *const HelperArgs as *mut libc::c_void,
        );
        let e = std::io::Error::last_os_error();
        libc::syscall(
            libc::SYS_rt_sigprocmask,
            libc::SIG_SETMASK,
            &old as *const u64,
            std::ptr::null_mut::<u64>(),
            8usize,
        );
        if pid < 0 {
            return Err(format!("cannot start the idmap helper (clone): {e}"));
        }
        pid
    };
    drop(ready_w);
    drop(go_r);
    let result = (|| {
        let mut b = [0u8; 1];
        let n = loop {
            // SAFETY: a read into a local byte from our fd.
            let n = unsafe {
                libc::read(
                    std::os::fd::AsRawFd::as_raw_fd(&ready_r),
                    b.as_mut_ptr().cast(),
                    1,
                )
            };
            if n < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            break n;
        };
        if n != 1 || b[0] != 0 {
            return Err(format!(
                "the idmap helper could not make a user namespace: {}",
                std::io::Error::from_raw_os_error(if n == 1 { i32::from(b[0]) } else { libc::EIO })
            ));
        }
        let write = |file: &str, text: String| {
            std::fs::write(format!("/proc/{pid}/{file}"), text)
                .map_err(|e| format!("writing the idmap helper's {file}: {e}"))
        };
        write("uid_map", format!("{} {} 1\n", host.0, sandbox.0))?;
        write("setgroups", "deny".into())?;
        write("gid_map", format!("{} {} 1\n", host.1, sandbox.1))?;
        let ns = format!("/proc/{pid}/ns/user");
        std::fs::File::open(&ns)
            .map(OwnedFd::from)
            .map_err(|e| format!("opening {ns}: {e}"))
    })();
    drop(go_w);
    let mut status = 0;
    // SAFETY: reaping our own child; its stack is freed only after.
    while unsafe { libc::waitpid(pid, &mut status, libc::__WALL) } < 0 {
        if std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            // Whether it still runs on `stack` is unknown: never free it.
            std::mem::forget(stack);
            return result;
        }
    }
    drop(stack);
    result
}
