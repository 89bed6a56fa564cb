//! The explain-mode filter and the host's answer to it.
//!
//! With `SandboxPolicy::explain`, the sandbox installs [`notify_variant`]
//! of its filter: the same program with every `SECCOMP_RET_ERRNO` turned
//! into `SECCOMP_RET_USER_NOTIF`, so each refused call waits for the host
//! (`linux/explain.rs`), which records it and answers with the errno the
//! original filter returns for those very arguments: [`run`] evaluates the
//! original program on the notification's `seccomp_data`. One filter, two
//! readings: nothing about what is refused can differ between the modes,
//! and no answer lets a call through (the host never sends
//! `SECCOMP_USER_NOTIF_FLAG_CONTINUE`). If the host stops answering (its
//! listener closed), the kernel fails every such call with `ENOSYS`.

use super::asm::{self, ALU_AND_K, JA, JEQ_K, JGE_K, LD_W_ABS, RET_K};
use super::codegen::{audit_arch, SECCOMP_DATA_ARCH, SECCOMP_DATA_ARGS, SECCOMP_DATA_NR};
use super::Program;

/// The filter explain mode installs *after* the notifying one: it
/// refuses (`EPERM`, which outranks `USER_NOTIF`) a `seccomp()` that asks
/// for a listener of its own. Otherwise a process of the sandbox that
/// outlived the host's listener (the kernel then lets a new one be made)
/// could add a newer filter answering `USER_NOTIF` with a listener it
/// holds — the newest filter wins a tie — and let its refused calls run
/// with `SECCOMP_USER_NOTIF_FLAG_CONTINUE`. Without explain mode the
/// filter's `ERRNO` outranks any such filter, so nothing is needed.
pub(crate) fn no_listener_guard() -> Result<Program, String> {
    let mut a = asm::Asm::new();
    let (allow, native, refuse) = (a.label(), a.label(), a.label());
    a.load(SECCOMP_DATA_ARCH);
    a.jump(
        asm::Cmp::Eq,
        audit_arch()?,
        asm::Dest::To(native),
        asm::Dest::Next,
    );
    // A foreign architecture: the main filter kills it.
    a.ret(libc::SECCOMP_RET_ALLOW);
    a.bind(native);
    a.load(SECCOMP_DATA_NR);
    a.jump(
        asm::Cmp::Eq,
        libc::SYS_seccomp as u32,
        asm::Dest::Next,
        asm::Dest::To(allow),
    );
    // seccomp(SECCOMP_SET_MODE_FILTER, flags, …) with NEW_LISTENER in
    // flags (both are 32-bit in the kernel: the low words).
    a.load(SECCOMP_DATA_ARGS);
    a.jump(
        asm::Cmp::Eq,
        libc::SECCOMP_SET_MODE_FILTER,
        asm::Dest::Next,
        asm::Dest::To(allow),
    );
    a.load(SECCOMP_DATA_ARGS + 8);
    a.and(libc::SECCOMP_FILTER_FLAG_NEW_LISTENER as u32);
    a.jump(asm::Cmp::Eq, 0, asm::Dest::To(allow), asm::Dest::To(refuse));
    a.bind(refuse);
    a.ret(libc::SECCOMP_RET_ERRNO | libc::EPERM as u32);
    a.bind(allow);
    a.ret(libc::SECCOMP_RET_ALLOW);
    a.finish()
}

/// `prog` with every `ret ERRNO(e)` replaced by `ret USER_NOTIF`.
pub(crate) fn notify_variant(prog: &Program) -> Program {
    prog.iter()
        .map(|i| {
            let mut i = *i;
            if i.code == RET_K && i.k & libc::SECCOMP_RET_ACTION_FULL == libc::SECCOMP_RET_ERRNO {
                i.k = libc::SECCOMP_RET_USER_NOTIF;
            }
            i
        })
        .collect()
}

/// The `SECCOMP_RET_*` value `prog` returns for `data` (the kernel's
/// `struct seccomp_data`: nr, arch, instruction pointer, six arguments),
/// for the instructions the assembler emits; anything else is `None`.
pub(crate) fn run(prog: &Program, data: &libc::seccomp_data) -> Option<u32> {
    // SAFETY: seccomp_data is plain integers; viewed as its bytes.
    let bytes = unsafe {
        std::slice::from_raw_parts(
            (data as *const libc::seccomp_data).cast::<u8>(),
            std::mem::size_of::<libc::seccomp_data>(),
        )
    };
    let (mut pc, mut acc) = (0usize, 0u32);
    loop {
        let i = prog.get(pc)?;
        pc += 1;
        let k = i.k;
        match i.code {
            LD_W_ABS => {
                let at = usize::try_from(k).ok()?;
                let word = bytes.get(at..at.checked_add(4)?)?;
                acc = u32::from_ne_bytes(word.try_into().ok()?);
            }
            ALU_AND_K => acc &= k,
            JA => pc = pc.checked_add(usize::try_from(k).ok()?)?,
            JEQ_K | JGE_K => {
                let taken = if i.code == JEQ_K { acc == k } else { acc >= k };
                pc += usize::from(if taken { i.jt } else { i.jf });
            }
            RET_K => return Some(k),
            _ => return None,
        }
    }
}

/// The errno a refusal answers with: the `SECCOMP_RET_DATA` of an
/// `ERRNO` action; any other action (there is none in the programs this
/// module reads) as `EPERM`, which refuses.
pub(crate) fn errno_of(action: u32) -> i32 {
    if action & libc::SECCOMP_RET_ACTION_FULL == libc::SECCOMP_RET_ERRNO {
        (action & libc::SECCOMP_RET_DATA) as i32
    } else {
        libc::EPERM
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(nr: i64, args: [u64; 6]) -> libc::seccomp_data {
        libc::seccomp_data {
            nr: nr as i32,
            arch: super::super::codegen::audit_arch().unwrap(),
            instruction_pointer: 0,
            args,
        }
    }

    /// The emulation answers as the tables say, and the notifying variant
    /// differs exactly where the filter refuses.
    #[test]
    fn the_emulated_filter_answers_as_its_tables_say() {
        let eperm = libc::SECCOMP_RET_ERRNO | libc::EPERM as u32;
        let enosys = libc::SECCOMP_RET_ERRNO | libc::ENOSYS as u32;
        let plain = &super::super::programs().unwrap()[0];
        let egress = &super::super::egress_programs().unwrap()[0];
        let tcp = [libc::AF_INET as u64, libc::SOCK_STREAM as u64, 0, 0, 0, 0];
        let udp = [libc::AF_INET as u64, libc::SOCK_DGRAM as u64, 0, 0, 0, 0];
        for (prog, nr, args, want) in [
            (plain, libc::SYS_ptrace, [0; 6], eperm),
            (plain, libc::SYS_getpid, [0; 6], libc::SECCOMP_RET_ALLOW),
            (plain, 999, [0; 6], enosys),
            (plain, libc::SYS_socket, tcp, eperm),
            (egress, libc::SYS_socket, tcp, libc::SECCOMP_RET_ALLOW),
            (egress, libc::SYS_socket, udp, eperm),
        ] {
            let d = data(nr, args);
            assert_eq!(run(prog, &d), Some(want), "nr {nr}");
            let notified = run(&notify_variant(prog), &d);
            if want == libc::SECCOMP_RET_ALLOW {
                assert_eq!(notified, Some(want), "nr {nr}");
            } else {
                assert_eq!(notified, Some(libc::SECCOMP_RET_USER_NOTIF), "nr {nr}");
                assert_eq!(errno_of(want), (want & 0xffff) as i32);
            }
        }
        // The guard refuses a listener of the sandbox's own, nothing else.
        let guard = no_listener_guard().unwrap();
        let listen = |flags: u64| {
            let op = libc::SECCOMP_SET_MODE_FILTER as u64;
            data(libc::SYS_seccomp, [op, flags, 0, 0, 0, 0])
        };
        let new_listener = libc::SECCOMP_FILTER_FLAG_NEW_LISTENER;
        assert_eq!(run(&guard, &listen(new_listener)), Some(eperm));
        assert_eq!(run(&guard, &listen(new_listener | 1)), Some(eperm));
        assert_eq!(run(&guard, &listen(0)), Some(libc::SECCOMP_RET_ALLOW));
        let get_sizes = data(libc::SYS_seccomp, [3, new_listener, 0, 0, 0, 0]);
        assert_eq!(run(&guard, &get_sizes), Some(libc::SECCOMP_RET_ALLOW));
        assert_eq!(
            run(&guard, &data(libc::SYS_ptrace, [0; 6])),
            Some(libc::SECCOMP_RET_ALLOW)
        );
        // A foreign architecture is still killed, not notified.
        let mut foreign = data(libc::SYS_getpid, [0; 6]);
        foreign.arch ^= 1;
        assert_eq!(
            run(&notify_variant(plain), &foreign),
            Some(libc::SECCOMP_RET_KILL_PROCESS)
        );
    }
}
