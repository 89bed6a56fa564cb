//! Which of the dangerous syscalls the probes try the running kernel has at
//! all, learnt by the host before any probe runs.
//!
//! `ENOSYS` is ambiguous: the kernel was built without the call
//! (`sys_ni_syscall`, kernel/sys_ni.c) or a seccomp filter answered it. The
//! probes count a child's `ENOSYS` as "nothing to reach" only when this
//! host-side check saw `ENOSYS` too, outside any sandbox; where the kernel
//! has the call, only `EPERM`/`EACCES` count, so a filter must say
//! `EPERM` for the probe to tell refusal from absence.
//!
//! The host learns it by running the probe executable unconfined in
//! `kernel` mode (a separate process, so nothing runs in the host itself),
//! with the same harmless arguments the P4/P7 child uses.

use std::collections::BTreeSet;
use std::path::Path;

use crate::child::{errno, PROBE_ARG};

/// One probed call: makes the syscall, returns its raw result.
pub(crate) type Call = fn() -> i64;

/// Calls whose presence the host checks, with arguments that change
/// nothing even when the call goes through.
pub(crate) const CALLS: [(&str, Call); 7] = [
    ("bpf", bpf),
    ("perf_event_open", perf_event_open),
    ("userfaultfd", userfaultfd),
    ("keyctl", keyctl),
    ("kexec_load", kexec_load),
    ("init_module", init_module),
    ("io_uring_setup", io_uring_setup),
];

fn bpf() -> i64 {
    // BPF_MAP_CREATE with an invalid map type: EINVAL if reachable.
    let mut attr = [0u32; 32];
    attr[0] = 0xffff;
    // SAFETY: the kernel reads at most size_of_val(&attr) bytes of attr.
    unsafe {
        libc::syscall(
            libc::SYS_bpf,
            0,
            attr.as_mut_ptr(),
            std::mem::size_of_val(&attr),
        )
    }
}

fn perf_event_open() -> i64 {
    // A software dummy event on ourselves, user space only.
    let mut attr = [0u64; 16];
    let size = std::mem::size_of_val(&attr) as u64;
    attr[0] = 1 | (size << 32); // type = PERF_TYPE_SOFTWARE, size
    attr[1] = 9; // config = PERF_COUNT_SW_DUMMY
    attr[5] = (1 << 5) | (1 << 6); // exclude_kernel | exclude_hv
                                   // SAFETY: attr is a valid perf_event_attr of the size it declares.
    close_fd(unsafe { libc::syscall(libc::SYS_perf_event_open, attr.as_ptr(), 0, -1, -1, 0) })
}

fn userfaultfd() -> i64 {
    // UFFD_USER_MODE_ONLY is allowed to unprivileged users by default.
    // SAFETY: integer arguments only.
    close_fd(unsafe { libc::syscall(libc::SYS_userfaultfd, libc::O_CLOEXEC | 1) })
}

fn keyctl() -> i64 {
    // KEYCTL_GET_KEYRING_ID of the session keyring, without creating it.
    // SAFETY: integer arguments only.
    unsafe { libc::syscall(libc::SYS_keyctl, 0, -3i64, 0) }
}

fn kexec_load() -> i64 {
    // Invalid flags: EINVAL once past the capability check.
    // SAFETY: integer arguments only; no segment is read.
    unsafe { libc::syscall(libc::SYS_kexec_load, 0, 0, 0, 0xffff_0000u64) }
}

fn init_module() -> i64 {
    // A zero-length image: ENOEXEC once past the capability check.
    // SAFETY: the kernel reads 0 bytes of the image and an empty string.
    unsafe {
        libc::syscall(
            libc::SYS_init_module,
            std::ptr::null::<u8>(),
            0,
            c"".as_ptr(),
        )
    }
}

fn io_uring_setup() -> i64 {
    // struct io_uring_params is 120 bytes; all zero asks for defaults.
    let mut params = [0u8; 120];
    // SAFETY: params is a zeroed io_uring_params the kernel may write.
    close_fd(unsafe { libc::syscall(libc::SYS_io_uring_setup, 1, params.as_mut_ptr()) })
}

/// Closes the fd a successful call returned; keeps the result.
fn close_fd(rc: i64) -> i64 {
    if rc >= 0 {
        // SAFETY: closing an fd this call just created.
        unsafe { libc::close(rc as i32) };
    }
    rc
}

/// Calls one entry of [`CALLS`]: `Ok(())` if it went through, else errno.
pub(crate) fn try_call(call: Call) -> Result<(), i32> {
    if call() >= 0 {
        Ok(())
    } else {
        Err(errno())
    }
}

/// The `kernel` mode of the probe executable: one line per call, `name`
/// and `nosys` or `present`.
pub(crate) fn child() {
    for (name, call) in CALLS {
        let state = match try_call(call) {
            Err(libc::ENOSYS) => "nosys",
            _ => "present",
        };
        println!("{name}\t{state}");
    }
}

/// What the host learnt about the kernel.
#[derive(Debug, Clone, Default)]
pub(crate) struct KernelFacts {
    /// Calls the kernel answered with `ENOSYS` outside any sandbox.
    missing: BTreeSet<String>,
}

impl KernelFacts {
    /// Runs `exe` unconfined in `kernel` mode. If that fails, nothing is
    /// known to be missing: a child's `ENOSYS` then never counts as a pass.
    pub(crate) fn learn(exe: &Path) -> KernelFacts {
        let out = std::process::Command::new(exe)
            .arg(PROBE_ARG)
            .arg("kernel")
            .env_clear()
            .current_dir("/")
            .stdin(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .output();
        let missing = match out {
            Ok(o) if o.status.success() => String::from_utf8_lossy(&o.stdout)
                .lines()
                .filter_map(|l| l.split_once('\t'))
                .filter(|(_, state)| *state == "nosys")
                .map(|(name, _)| name.to_string())
                .collect(),
            _ => BTreeSet::new(),
        };
        KernelFacts { missing }
    }

    /// The calls the kernel lacks, comma-separated (a probe argument).
    pub(crate) fn missing_arg(&self) -> String {
        self.missing.iter().cloned().collect::<Vec<_>>().join(",")
    }
}
