//! The seccomp deny-list, compiled to classic BPF in the parent.
//!
//! Two filters: the deny-list (default allow, listed calls → `EPERM`) and
//! `clone3` → `ENOSYS` (its flags live in a struct seccomp cannot read, and
//! glibc falls back to `clone`, whose flags we can check). See README.md
//! for the reason behind every rule.

// `libc`'s syscall-number and ioctl types differ between targets and C
// libraries (`c_long`, `c_int`, `c_ulong`); the casts keep this portable.
#![allow(clippy::unnecessary_cast)]

use std::collections::BTreeMap;

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch,
};

/// One compiled filter, ready for `seccomp(SECCOMP_SET_MODE_FILTER)`.
pub(crate) type Program = Vec<libc::sock_filter>;

/// The `CLONE_NEW*` flags: `clone` with any of them is refused.
pub(crate) const CLONE_NS_FLAGS: [(u64, &str); 8] = [
    (libc::CLONE_NEWUSER as u64, "CLONE_NEWUSER"),
    (libc::CLONE_NEWNS as u64, "CLONE_NEWNS"),
    (libc::CLONE_NEWPID as u64, "CLONE_NEWPID"),
    (libc::CLONE_NEWNET as u64, "CLONE_NEWNET"),
    (libc::CLONE_NEWUTS as u64, "CLONE_NEWUTS"),
    (libc::CLONE_NEWIPC as u64, "CLONE_NEWIPC"),
    (libc::CLONE_NEWCGROUP as u64, "CLONE_NEWCGROUP"),
    (0x80, "CLONE_NEWTIME"),
];

/// Personalities `personality(2)` may still set (Docker's list):
/// `PER_LINUX`, `PER_LINUX32`, each with `UNAME26`, and `0xffffffff` (the
/// query). Anything else (e.g. `READ_IMPLIES_EXEC`, `MMAP_PAGE_ZERO`,
/// `ADDR_NO_RANDOMIZE`) is refused.
const PERSONALITY_ALLOWED: [u64; 5] = [0x0, 0x8, 0x20000, 0x20008, 0xffff_ffff];

/// Syscalls refused outright, with the reason (documented in README.md).
pub(crate) fn denied_syscalls() -> Vec<(libc::c_long, &'static str)> {
    vec![
        (libc::SYS_socket, "socket"),
        (libc::SYS_io_uring_setup, "io_uring_setup"),
        (libc::SYS_io_uring_enter, "io_uring_enter"),
        (libc::SYS_io_uring_register, "io_uring_register"),
        (libc::SYS_ptrace, "ptrace"),
        (libc::SYS_process_vm_readv, "process_vm_readv"),
        (libc::SYS_process_vm_writev, "process_vm_writev"),
        (libc::SYS_unshare, "unshare"),
        (libc::SYS_setns, "setns"),
        (libc::SYS_mount, "mount"),
        (libc::SYS_umount2, "umount2"),
        (libc::SYS_pivot_root, "pivot_root"),
        (libc::SYS_move_mount, "move_mount"),
        (libc::SYS_open_tree, "open_tree"),
        (libc::SYS_fsopen, "fsopen"),
        (libc::SYS_fsmount, "fsmount"),
        (libc::SYS_fsconfig, "fsconfig"),
        (libc::SYS_fspick, "fspick"),
        (libc::SYS_mount_setattr, "mount_setattr"),
        (libc::SYS_bpf, "bpf"),
        (libc::SYS_perf_event_open, "perf_event_open"),
        (libc::SYS_userfaultfd, "userfaultfd"),
        (libc::SYS_keyctl, "keyctl"),
        (libc::SYS_add_key, "add_key"),
        (libc::SYS_request_key, "request_key"),
        (libc::SYS_kexec_load, "kexec_load"),
        (libc::SYS_kexec_file_load, "kexec_file_load"),
        (libc::SYS_init_module, "init_module"),
        (libc::SYS_finit_module, "finit_module"),
        (libc::SYS_delete_module, "delete_module"),
        (libc::SYS_reboot, "reboot"),
        (libc::SYS_swapon, "swapon"),
        (libc::SYS_swapoff, "swapoff"),
        (libc::SYS_acct, "acct"),
        (libc::SYS_name_to_handle_at, "name_to_handle_at"),
        (libc::SYS_open_by_handle_at, "open_by_handle_at"),
        (libc::SYS_pidfd_getfd, "pidfd_getfd"),
        (libc::SYS_setsid, "setsid"),
        (libc::SYS_setpgid, "setpgid"),
    ]
}

/// What the installed filters are, for `host_facts()["seccomp"]`.
pub(crate) fn description(_layers: crate::Layers) -> &'static str {
    "deny-list (listed syscalls return EPERM, clone3 returns ENOSYS)"
}

fn target_arch() -> Result<TargetArch, String> {
    if cfg!(target_arch = "x86_64") {
        Ok(TargetArch::x86_64)
    } else if cfg!(target_arch = "aarch64") {
        Ok(TargetArch::aarch64)
    } else if cfg!(target_arch = "riscv64") {
        Ok(TargetArch::riscv64)
    } else {
        Err(format!(
            "the seccomp filter cannot be built for the `{}` architecture (seccompiler supports \
             x86_64, aarch64 and riscv64)",
            std::env::consts::ARCH
        ))
    }
}

fn cond(arg: u8, op: SeccompCmpOp, value: u64) -> Result<SeccompCondition, String> {
    SeccompCondition::new(arg, SeccompCmpArgLen::Dword, op, value)
        .map_err(|e| format!("invalid seccomp condition: {e}"))
}

fn rule(conds: Vec<SeccompCondition>) -> Result<SeccompRule, String> {
    SeccompRule::new(conds).map_err(|e| format!("invalid seccomp rule: {e}"))
}

/// The deny-list filter (listed syscalls → `EPERM`), with the x32 guard
/// on x86_64.
pub(crate) fn deny_list() -> Result<Program, String> {
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    for (nr, _) in denied_syscalls() {
        // An empty chain matches every call of that syscall.
        rules.insert(nr as i64, Vec::new());
    }
    // clone: refused when any CLONE_NEW* flag is set (flags is argument 0
    // on every supported arch; all the flags are in the low 32 bits).
    let mut clone_rules = Vec::new();
    for (flag, _) in CLONE_NS_FLAGS {
        clone_rules.push(rule(vec![cond(0, SeccompCmpOp::MaskedEq(flag), flag)?])?);
    }
    rules.insert(libc::SYS_clone as i64, clone_rules);
    // ioctl: terminal injection. The kernel reads `cmd` as 32 bits, so the
    // comparison is 32-bit too (high bits cannot smuggle it past).
    rules.insert(
        libc::SYS_ioctl as i64,
        vec![
            rule(vec![cond(1, SeccompCmpOp::Eq, libc::TIOCSTI as u64)?])?,
            rule(vec![cond(1, SeccompCmpOp::Eq, libc::TIOCLINUX as u64)?])?,
        ],
    );
    // personality: refuse everything but the allowlist.
    let conds = PERSONALITY_ALLOWED
        .iter()
        .map(|v| cond(0, SeccompCmpOp::Ne, *v))
        .collect::<Result<Vec<_>, _>>()?;
    rules.insert(libc::SYS_personality as i64, vec![rule(conds)?]);

    let arch = target_arch()?;
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EPERM as u32),
        arch,
    )
    .map_err(|e| format!("cannot build the seccomp filter: {e}"))?;
    let bpf: BpfProgram = BpfProgram::try_from(filter)
        .map_err(|e| format!("cannot compile the seccomp filter: {e}"))?;
    let mut prog = convert(bpf);
    if arch == TargetArch::x86_64 {
        insert_x32_guard(&mut prog)?;
    }
    check_len(&prog)?;
    Ok(prog)
}

/// The `clone3` → `ENOSYS` filter.
pub(crate) fn clone3() -> Result<Program, String> {
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    rules.insert(libc::SYS_clone3 as i64, Vec::new());
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::ENOSYS as u32),
        target_arch()?,
    )
    .map_err(|e| format!("cannot build the clone3 seccomp filter: {e}"))?;
    let bpf: BpfProgram = BpfProgram::try_from(filter)
        .map_err(|e| format!("cannot compile the clone3 seccomp filter: {e}"))?;
    let prog = convert(bpf);
    check_len(&prog)?;
    Ok(prog)
}

fn convert(bpf: BpfProgram) -> Program {
    bpf.into_iter()
        .map(|i| libc::sock_filter {
            code: i.code,
            jt: i.jt,
            jf: i.jf,
            k: i.k,
        })
        .collect()
}

fn check_len(prog: &Program) -> Result<(), String> {
    if prog.is_empty() || prog.len() > u16::MAX as usize || prog.len() > 4096 {
        return Err(format!(
            "the seccomp filter has {} instructions (must be 1..=4096)",
            prog.len()
        ));
    }
    Ok(())
}

/// `BPF_LD | BPF_W | BPF_ABS` (both `BPF_LD` and `BPF_W` are 0).
const BPF_LD_W_ABS: u16 = 0x20;
const BPF_JMP_JEQ_K: u16 = 0x05 | 0x10;
const BPF_JMP_JGE_K: u16 = 0x05 | 0x30;
const BPF_RET_K: u16 = 0x06;
/// `offsetof(struct seccomp_data, arch)`.
const SECCOMP_DATA_ARCH: u32 = 4;
/// `offsetof(struct seccomp_data, nr)`.
const SECCOMP_DATA_NR: u32 = 0;
/// `AUDIT_ARCH_X86_64`.
pub(crate) const AUDIT_ARCH_X86_64: u32 = 62 | 0x8000_0000 | 0x4000_0000;
/// `__X32_SYSCALL_BIT`: x32 syscalls report the x86_64 arch with this bit
/// set in the number.
pub(crate) const X32_SYSCALL_BIT: u32 = 0x4000_0000;

/// seccompiler starts with `ld arch; jeq ARCH, +1; ret KILL_PROCESS`. On
/// x86_64 that lets x32 syscalls (same arch value, `nr | 0x40000000`)
/// through to a deny-list keyed on x86_64 numbers, so a prefix kills them
/// too. The prologue's shape is checked: if seccompiler ever changes it we
/// refuse rather than guess.
fn insert_x32_guard(prog: &mut Program) -> Result<(), String> {
    let ok = prog.len() > 3
        && prog[0].code == BPF_LD_W_ABS
        && prog[0].k == SECCOMP_DATA_ARCH
        && prog[1].code == BPF_JMP_JEQ_K
        && prog[1].k == AUDIT_ARCH_X86_64
        && prog[1].jt == 1
        && prog[1].jf == 0
        && prog[2].code == BPF_RET_K
        && prog[2].k == libc::SECCOMP_RET_KILL_PROCESS;
    if !ok {
        return Err(
            "unexpected seccomp filter prologue from seccompiler: refusing to add the x32 guard \
             blindly (update cordon-backend-linux)"
                .into(),
        );
    }
    let guard = [
        libc::sock_filter {
            code: BPF_LD_W_ABS,
            jt: 0,
            jf: 0,
            k: SECCOMP_DATA_NR,
        },
        libc::sock_filter {
            code: BPF_JMP_JGE_K,
            jt: 0,
            jf: 1,
            k: X32_SYSCALL_BIT,
        },
        libc::sock_filter {
            code: BPF_RET_K,
            jt: 0,
            jf: 0,
            k: libc::SECCOMP_RET_KILL_PROCESS,
        },
    ];
    // Jumps are relative and no jump crosses index 3, so inserting here
    // keeps every existing offset valid.
    prog.splice(3..3, guard);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deny_list_compiles_with_guard() {
        let prog = deny_list().unwrap();
        assert!(prog.len() > 40);
        if cfg!(target_arch = "x86_64") {
            assert_eq!(prog[4].code, BPF_JMP_JGE_K);
            assert_eq!(prog[4].k, X32_SYSCALL_BIT);
            assert_eq!(prog[5].k, libc::SECCOMP_RET_KILL_PROCESS);
            assert_eq!(prog[6].code, BPF_LD_W_ABS);
            assert_eq!(prog[6].k, SECCOMP_DATA_NR);
        }
    }

    #[test]
    fn clone3_compiles() {
        let prog = clone3().unwrap();
        assert!(prog
            .iter()
            .any(|i| i.code == BPF_RET_K && i.k == libc::SECCOMP_RET_ERRNO | libc::ENOSYS as u32));
    }

    #[test]
    fn denied_list_has_no_duplicates() {
        let mut nrs: Vec<_> = denied_syscalls().into_iter().map(|(n, _)| n).collect();
        let len = nrs.len();
        nrs.sort();
        nrs.dedup();
        assert_eq!(nrs.len(), len);
    }
}
