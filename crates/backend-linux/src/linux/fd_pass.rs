//! Handing one fd from the launcher to the host over a socketpair made in
//! `wrap` (`SCM_RIGHTS`): the egress listener (`net.rs`) and the seccomp
//! listener of explain mode (`explain.rs`).

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// Room for one `SCM_RIGHTS` message of one fd, aligned for `cmsghdr`.
const CONTROL_LEN: usize = 64;
#[repr(C, align(8))]
struct ControlBuf([u8; CONTROL_LEN]);

/// Sends `fd` on `sock` with one byte of data. Async-signal-safe: raw
/// syscalls on stack buffers (it runs in the launcher).
pub(crate) fn send_fd(sock: libc::c_int, fd: libc::c_int) -> io::Result<()> {
    // SAFETY: sendmsg of stack buffers that outlive the call; the CMSG_*
    // macros write inside `control`.
    unsafe {
        let mut byte = [0u8; 1];
        let mut iov = libc::iovec {
            iov_base: byte.as_mut_ptr().cast(),
            iov_len: 1,
        };
        let mut control = ControlBuf([0; CONTROL_LEN]);
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.0.as_mut_ptr().cast();
        msg.msg_controllen = libc::CMSG_SPACE(4) as _;
        let c = libc::CMSG_FIRSTHDR(&msg);
        (*c).cmsg_level = libc::SOL_SOCKET;
        (*c).cmsg_type = libc::SCM_RIGHTS;
        (*c).cmsg_len = libc::CMSG_LEN(4) as _;
        std::ptr::write_unaligned(libc::CMSG_DATA(c) as *mut libc::c_int, fd);
        if libc::sendmsg(sock, &msg, libc::MSG_NOSIGNAL) != 1 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
}

/// Receives one fd sent with [`send_fd`] on `sock`, without waiting (the
/// launcher sent it before the program ran). Close-on-exec.
pub(crate) fn receive_fd(sock: &OwnedFd) -> io::Result<OwnedFd> {
    let mut byte = [0u8; 1];
    let mut iov = libc::iovec {
        iov_base: byte.as_mut_ptr().cast(),
        iov_len: 1,
    };
    let mut control = ControlBuf([0; CONTROL_LEN]);
    // SAFETY: a zeroed msghdr is valid; the pointers set below outlive the
    // call.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.0.as_mut_ptr().cast();
    msg.msg_controllen = CONTROL_LEN as _;
    // SAFETY: recvmsg into the buffers above.
    let n = unsafe {
        libc::recvmsg(
            sock.as_raw_fd(),
            &mut msg,
            libc::MSG_DONTWAIT | libc::MSG_CMSG_CLOEXEC,
        )
    };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the CMSG_* macros walk the control buffer the kernel filled.
    unsafe {
        let c = libc::CMSG_FIRSTHDR(&msg);
        if c.is_null()
            || (*c).cmsg_level != libc::SOL_SOCKET
            || (*c).cmsg_type != libc::SCM_RIGHTS
            || (*c).cmsg_len as usize != libc::CMSG_LEN(4) as usize
        {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "the sandbox sent no fd",
            ));
        }
        let fd = std::ptr::read_unaligned(libc::CMSG_DATA(c) as *const libc::c_int);
        Ok(OwnedFd::from_raw_fd(fd))
    }
}
