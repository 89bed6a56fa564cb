//! Raw syscalls that never touch `errno`: core's, for the processes that
//! run in the host's memory beside a running host thread (the init, the
//! map writer, the idmap helper).

pub(crate) use cordon_core::sys::raw;

/// A libc call's `-1` as the errno it set (the calls here run in the
/// launcher or the program, whose `errno` is their own thread's view).
pub(crate) fn check_long(r: libc::c_long) -> std::io::Result<()> {
    if r < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(())
    }
}
