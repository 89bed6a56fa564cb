//! The init could not start the program: reported as the launch's failure.

#[allow(unused_imports)]
use super::*;

/// The init could not start the program: reports `errno` as the launch's
/// failure, at [`Step::ProcessTree`](super::super::confine::Step::ProcessTree) (so the spawn fails instead of looking like the program's exit)
/// and exits. Raw syscalls only.
pub(super) fn init_fail(shared: &Shared, errno: isize) -> ! {
    let step = ChildContext::step_record(super::super::confine::Step::ProcessTree as u32);
    let rec = ChildContext::error_record(errno as libc::c_int);
    let fd = shared.report_fd.load(Ordering::Relaxed);
    // SAFETY: writes of local buffers, then the exit.
    unsafe {
        if fd >= 0 {
            for r in [&step, &rec] {
                raw(
                    libc::SYS_write,
                    fd as usize,
                    r.as_ptr() as usize,
                    r.len(),
                    0,
                );
            }
        }
        raw(libc::SYS_exit_group, 1, 0, 0, 0);
    }
    unreachable!("exit_group returned")
}
