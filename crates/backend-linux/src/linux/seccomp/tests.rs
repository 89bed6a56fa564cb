//! The compiled programs run on an independent classic-BPF interpreter
//! and checked against the tables; the assembler's jumps and trampolines.

use super::asm::{Asm, Cmp, Dest, ALU_AND_K, JA, JEQ_K, JGE_K, LD_W_ABS, MAX_COND_JUMP, RET_K};
use super::*;

// A classic-BPF interpreter for every instruction the assembler
// emits, so the compiled programs themselves are checked against an
// independent model of the tables (the integration test
// `seccomp_programs` checks the kernel agrees).

#[cfg(target_arch = "x86_64")]
const ARCH: u32 = AUDIT_ARCH_X86_64;
#[cfg(target_arch = "aarch64")]
const ARCH: u32 = AUDIT_ARCH_AARCH64;
#[cfg(target_arch = "riscv64")]
const ARCH: u32 = AUDIT_ARCH_RISCV64;
/// `AUDIT_ARCH_I386`: `int 0x80` on x86_64.
const AUDIT_ARCH_I386: u32 = 3 | 0x4000_0000;

const ALLOW: u32 = RET_ALLOW;
const KILL: u32 = RET_KILL;
const EPERM: u32 = RET_EPERM;
const ENOSYS: u32 = RET_ENOSYS;

/// `struct seccomp_data` as the kernel fills it: `nr`, `arch`,
/// `instruction_pointer`, `args`, all in host byte order.
fn data(arch: u32, nr: u32, args: [u64; 6]) -> [u8; 64] {
    let mut d = [0u8; 64];
    d[0..4].copy_from_slice(&nr.to_ne_bytes());
    d[4..8].copy_from_slice(&arch.to_ne_bytes());
    for (i, a) in args.iter().enumerate() {
        d[16 + 8 * i..24 + 8 * i].copy_from_slice(&a.to_ne_bytes());
    }
    d
}

/// One run of a program: its verdict, how many instructions ran, and
/// whether it read an argument (then the kernel's action cache cannot
/// answer that number without running the filter).
struct Trace {
    verdict: u32,
    steps: usize,
    read_args: bool,
}

/// Runs `prog` on `d` as the kernel's classic-BPF interpreter does.
/// Panics on an instruction the assembler never emits, a load outside
/// `seccomp_data`, a jump out of the program or running off its end.
fn trace(prog: &[libc::sock_filter], d: &[u8; 64]) -> Trace {
    let (mut pc, mut acc, mut steps, mut read_args) = (0usize, 0u32, 0usize, false);
    loop {
        assert!(pc < prog.len(), "ran off the end of the program");
        let i = prog[pc];
        let k = i.k;
        pc += 1;
        steps += 1;
        match i.code {
            LD_W_ABS => {
                let o = k as usize;
                assert!(o % 4 == 0 && o + 4 <= d.len(), "load at offset {o}");
                read_args |= o >= SECCOMP_DATA_ARGS as usize;
                acc = u32::from_ne_bytes(d[o..o + 4].try_into().unwrap());
            }
            ALU_AND_K => acc &= k,
            JA => pc += k as usize,
            JEQ_K | JGE_K => {
                let taken = if i.code == JEQ_K { acc == k } else { acc >= k };
                pc += if taken { i.jt } else { i.jf } as usize;
            }
            RET_K => {
                return Trace {
                    verdict: k,
                    steps,
                    read_args,
                }
            }
            c => panic!("instruction {c:#x} not understood by the test interpreter"),
        }
    }
}

fn run(prog: &[libc::sock_filter], d: &[u8; 64]) -> u32 {
    trace(prog, d).verdict
}

/// What the kernel checks when a filter is installed
/// (`bpf_check_classic`, `seccomp_check_filter`), for the instructions
/// used here: a length in 1..=4096, known instructions, aligned loads
/// inside `seccomp_data`, every jump inside the program, a `ret` last.
fn assert_valid(prog: &[libc::sock_filter]) {
    assert!(!prog.is_empty() && prog.len() <= BPF_MAXINSNS);
    for (pc, i) in prog.iter().enumerate() {
        let inside = |offset: usize| pc + 1 + offset < prog.len();
        match i.code {
            LD_W_ABS => assert!(i.k % 4 == 0 && i.k < 64, "load at {pc}: {}", i.k),
            ALU_AND_K | RET_K => {}
            JA => assert!(inside(i.k as usize), "ja at {pc} leaves the program"),
            JEQ_K | JGE_K => assert!(
                inside(i.jt.max(i.jf) as usize),
                "jump at {pc} leaves the program"
            ),
            c => panic!("instruction {c:#x} at {pc}"),
        }
    }
    assert_eq!(prog.last().unwrap().code, RET_K, "the last instruction");
}

/// The kernel's combination (`seccomp_run_filters`): newest filter
/// first, the lowest action value (as s32) wins, ties keep the newer.
fn run_all(progs: &[Program], d: &[u8; 64]) -> u32 {
    let mut ret = ALLOW;
    for p in progs.iter().rev() {
        let cur = run(p, d);
        let action = |r: u32| (r & libc::SECCOMP_RET_ACTION_FULL) as i32;
        if action(cur) < action(ret) {
            ret = cur;
        }
    }
    ret
}

fn verdict(nr: i64, args: [u64; 6]) -> u32 {
    run_all(&programs().unwrap(), &data(ARCH, nr as u32, args))
}

fn name_of(r: u32) -> String {
    match r {
        ALLOW => "ALLOW".into(),
        KILL => "KILL".into(),
        EPERM => "EPERM".into(),
        ENOSYS => "ENOSYS".into(),
        r => format!("{r:#x}"),
    }
}

// ------------------------------------------------------------ model

/// Whether `c` holds for `args`, by plain Rust comparison.
fn cond_holds(c: &Cond, args: &[u64; 6]) -> bool {
    let a = args[c.arg as usize];
    let a = match c.width {
        Width::Low32 => a & 0xffff_ffff,
        Width::Full64 => a,
    };
    match c.op {
        Op::Eq(v) => a == v,
        Op::Ne(v) => a != v,
        Op::MaskedEq { mask, value } => a & mask == value,
    }
}

/// Whether any of `rules` holds (all of one rule's conditions).
fn any_holds(rules: &[Rule], args: &[u64; 6]) -> bool {
    rules.iter().any(|r| r.iter().all(|c| cond_holds(c, args)))
}

/// The verdicts the tables define, computed straight from
/// `allowed()`, `denied()` and `checked()`: no intervals, no BPF.
struct Model {
    allowed: Vec<i64>,
    denied: Vec<i64>,
    checked: Vec<Checked>,
}

impl Model {
    fn new() -> Model {
        Model {
            allowed: allowed().iter().map(|s| s.nr).collect(),
            denied: denied().iter().map(|s| s.nr).collect(),
            checked: checked(),
        }
    }

    fn verdict(&self, arch: u32, nr: u32, args: &[u64; 6]) -> u32 {
        if arch != ARCH || (cfg!(target_arch = "x86_64") && nr >= X32_SYSCALL_BIT) {
            return KILL;
        }
        let nr = i64::from(nr);
        if self.allowed.contains(&nr) {
            ALLOW
        } else if self.denied.contains(&nr) {
            EPERM
        } else if let Some(c) = self.checked.iter().find(|c| c.sys.nr == nr) {
            if any_holds(&c.allow, args) {
                ALLOW
            } else {
                EPERM
            }
        } else {
            ENOSYS
        }
    }
}

/// The deny-list pair's verdicts, written out from its rules.
fn deny_list_model(arch: u32, nr: u32, args: &[u64; 6]) -> u32 {
    if arch != ARCH || (cfg!(target_arch = "x86_64") && nr >= X32_SYSCALL_BIT) {
        return KILL;
    }
    let nr = i64::from(nr);
    let low = |i: usize| args[i] & 0xffff_ffff;
    let refused = deny_listed_syscalls().iter().any(|(n, _)| *n as i64 == nr)
        || (nr == libc::SYS_clone as i64 && CLONE_NS_FLAGS.iter().any(|(f, _)| low(0) & f != 0))
        || (nr == libc::SYS_ioctl as i64
            && [libc::TIOCSTI as u64, libc::TIOCLINUX as u64].contains(&low(1)))
        || (nr == libc::SYS_personality as i64 && !PERSONALITY_ALLOWED.contains(&low(0)));
    if nr == libc::SYS_clone3 as i64 {
        ENOSYS
    } else if refused {
        EPERM
    } else {
        ALLOW
    }
}

/// splitmix64: a fixed seed gives the same vectors on every run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// Every constant and mask bit the checked rules mention, and the
/// usual edge values.
fn rule_constants() -> Vec<u64> {
    let mut v = vec![0, 1, 2, 3, 5, 8, 10, 0x7fff_ffff, 0xffff_ffff, u64::MAX];
    v.push(libc::SIGCHLD as u64);
    for c in checked() {
        for cond in c.allow.iter().chain(&c.deny).flatten() {
            match cond.op {
                Op::Eq(x) | Op::Ne(x) => v.push(x),
                Op::MaskedEq { mask, value } => {
                    v.extend([mask, value]);
                    v.extend((0..64).filter(|b| mask >> b & 1 == 1).map(|b| 1u64 << b));
                }
            }
        }
    }
    v.sort_unstable();
    v.dedup();
    v
}

/// A random argument, biased towards the rules' constants, their
/// neighbours, combinations and high halves.
fn random_arg(rng: &mut Rng, pool: &[u64]) -> u64 {
    let pick = |rng: &mut Rng| pool[rng.below(pool.len())];
    match rng.below(7) {
        0 => rng.next(),
        1 => rng.next() & 0xffff_ffff,
        2 => pick(rng),
        3 => pick(rng) | pick(rng),
        4 => pick(rng) | (rng.next() << 32),
        5 => pick(rng) ^ (1 << rng.below(64)),
        _ => pick(rng).wrapping_add(rng.below(3) as u64).wrapping_sub(1),
    }
}

/// Arguments that satisfy `rule` (the others random): so both the
/// allow and the deny side of every checked call are reached often.
fn satisfying(rule: &[Cond], rng: &mut Rng, pool: &[u64]) -> [u64; 6] {
    let mut args = [0u64; 6];
    for a in &mut args {
        *a = random_arg(rng, pool);
    }
    for c in rule {
        let high = if c.width == Width::Low32 && rng.below(2) == 0 {
            rng.next() << 32
        } else {
            0
        };
        let a = &mut args[c.arg as usize];
        match c.op {
            Op::Eq(v) => *a = v | high,
            Op::MaskedEq { mask, value } => *a = (rng.next() & !mask) | value | high,
            Op::Ne(_) => {}
        }
    }
    // A `Ne` left unsatisfied by chance is fine: the model decides.
    args
}

// ------------------------------------------------------------ tests

#[test]
fn the_filter_compiles_with_the_x32_guard() {
    let progs = programs().unwrap();
    assert_eq!(progs.len(), 1, "one filter");
    let base = deny_list_programs().unwrap();
    // The full filter and the deny-list are guarded.
    for p in [&progs[0], &base[0]] {
        assert_valid(p);
        assert!(p.len() > 40 && p.len() <= BPF_MAXINSNS);
        if cfg!(target_arch = "x86_64") {
            assert_eq!(p[3].code, LD_W_ABS);
            assert_eq!(p[3].k, SECCOMP_DATA_NR);
            assert_eq!(p[4].code, JGE_K);
            assert_eq!(p[4].k, X32_SYSCALL_BIT);
            assert_eq!(p[5].k, KILL);
            // Behaviour, not just shape: an x32 getpid is killed.
            let x32 = (libc::SYS_getpid as u32) | X32_SYSCALL_BIT;
            assert_eq!(run(p, &data(ARCH, x32, [0; 6])), KILL);
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[test]
fn the_guard_is_what_kills_x32() {
    // Without the guard, an x32 call would be matched against x86_64
    // numbers: a filter refusing `socket` would let an x32 `socket`
    // through. The guard is what makes it a kill.
    let mut spec = Spec::new("test", RET_ALLOW, false);
    spec.insert(sys![SYS_socket][0], Verdict::Ret(RET_EPERM))
        .unwrap();
    let unguarded = compile(&spec).unwrap();
    let x32_socket = (libc::SYS_socket as u32) | X32_SYSCALL_BIT;
    assert_eq!(run(&unguarded, &data(ARCH, x32_socket, [0; 6])), ALLOW);
    assert_eq!(verdict(x32_socket as i64, [0; 6]), KILL);
}

#[test]
fn foreign_arch_is_killed() {
    // AUDIT_ARCH_I386 (int 0x80 on x86_64) / any other value.
    let d = data(3 | 0x4000_0000, libc::SYS_getpid as u32, [0; 6]);
    assert_eq!(run_all(&programs().unwrap(), &d), KILL);
}

#[test]
fn lists_have_no_duplicates_and_are_disjoint() {
    let mut seen: BTreeMap<i64, &str> = BTreeMap::new();
    let checked: Vec<Sys> = checked().into_iter().map(|c| c.sys).collect();
    for (list, s) in allowed()
        .into_iter()
        .map(|s| ("allowed", s))
        .chain(denied().into_iter().map(|s| ("denied", s)))
        .chain(checked.into_iter().map(|s| ("checked", s)))
    {
        if let Some(prev) = seen.insert(s.nr, list) {
            panic!("{} (nr {}) is in `{prev}` and `{list}`", s.name(), s.nr);
        }
    }
    assert!(seen.len() > 250, "only {} syscalls listed", seen.len());
    // clone3 must stay unlisted (ENOSYS → libc falls back to clone).
    assert!(!seen.contains_key(&(libc::SYS_clone3 as i64)));
}

#[test]
fn unified_numbers_match_libc_where_it_has_them() {
    #[cfg(target_arch = "x86_64")]
    {
        assert_eq!(nr::FCHMODAT2, libc::SYS_fchmodat2 as i64);
        assert_eq!(nr::MSEAL, libc::SYS_mseal as i64);
        assert_eq!(nr::QUOTACTL_FD, libc::SYS_quotactl_fd as i64);
    }
    #[cfg(target_arch = "aarch64")]
    {
        assert_eq!(nr::MSEAL, libc::SYS_mseal as i64);
        assert_eq!(nr::QUOTACTL_FD, libc::SYS_quotactl_fd as i64);
        assert_eq!(nr::KEXEC_FILE_LOAD, libc::SYS_kexec_file_load as i64);
    }
}

#[test]
fn every_listed_syscall_gets_its_action() {
    for s in allowed() {
        let r = verdict(s.nr, [0; 6]);
        assert_eq!(r, ALLOW, "{} gets {}", s.name(), name_of(r));
    }
    for s in denied() {
        let r = verdict(s.nr, [0; 6]);
        assert_eq!(r, EPERM, "{} gets {}", s.name(), name_of(r));
    }
}

#[test]
fn unlisted_syscalls_get_enosys() {
    let listed: Vec<i64> = allowed()
        .iter()
        .chain(denied().iter())
        .map(|s| s.nr)
        .chain(checked().iter().map(|c| c.sys.nr))
        .collect();
    let mut unlisted = 0;
    for nr in (0..600).chain([1000, 4095, 0x3fff_ffff]) {
        if listed.contains(&nr) {
            continue;
        }
        unlisted += 1;
        let r = verdict(nr, [0; 6]);
        assert_eq!(r, ENOSYS, "unlisted nr {nr} gets {}", name_of(r));
    }
    assert!(unlisted > 200);
    assert_eq!(verdict(libc::SYS_clone3 as i64, [0; 6]), ENOSYS);
}

/// The calls a process supervisor inside the sandbox (a shell, a test
/// runner; the pid-1 init makes the same ones, though before any filter)
/// makes with the filters in force.
#[test]
fn helper_process_calls_are_allowed() {
    let sigchld = libc::SIGCHLD as u64;
    let mut calls: Vec<(i64, [u64; 6])> = vec![
        (libc::SYS_clone as i64, [sigchld, 0, 0, 0, 0, 0]),
        (
            libc::SYS_clone as i64,
            [
                (libc::CLONE_CHILD_SETTID | libc::CLONE_CHILD_CLEARTID) as u64 | sigchld,
                0,
                0,
                0,
                0,
                0,
            ],
        ),
        (
            libc::SYS_prctl as i64,
            [libc::PR_SET_PDEATHSIG as u64, 9, 0, 0, 0, 0],
        ),
    ];
    for s in sys![
        SYS_wait4,
        SYS_pipe2,
        SYS_read,
        SYS_write,
        SYS_close,
        SYS_close_range,
        SYS_ppoll,
        SYS_rt_sigaction,
        SYS_rt_sigprocmask,
        SYS_kill,
        SYS_getpid,
        SYS_chdir,
        SYS_exit_group,
    ] {
        calls.push((s.nr, [0; 6]));
    }
    #[cfg(target_arch = "x86_64")]
    for s in sys![SYS_fork, SYS_poll] {
        calls.push((s.nr, [0; 6]));
    }
    for (nr, args) in calls {
        assert_eq!(verdict(nr, args), ALLOW, "nr {nr} {args:x?}");
    }
}

#[test]
fn argument_checks_decide_as_documented() {
    let hi = 1u64 << 32;
    let (unix, inet) = (libc::AF_UNIX as u64, libc::AF_INET as u64);
    let (stream, dgram, seq, raw) = (
        libc::SOCK_STREAM as u64,
        libc::SOCK_DGRAM as u64,
        libc::SOCK_SEQPACKET as u64,
        libc::SOCK_RAW as u64,
    );
    let cloexec = libc::SOCK_CLOEXEC as u64;
    let nonblock = libc::SOCK_NONBLOCK as u64;
    let sp = libc::SYS_socketpair as i64;
    let cases: Vec<(&str, i64, [u64; 6], u32)> = vec![
        ("pair stream", sp, [unix, stream, 0, 0, 0, 0], ALLOW),
        ("pair seqpacket", sp, [unix, seq, 0, 0, 0, 0], ALLOW),
        (
            "pair stream+flags",
            sp,
            [unix, stream | cloexec | nonblock, 0, 0, 0, 0],
            ALLOW,
        ),
        ("pair dgram", sp, [unix, dgram, 0, 0, 0, 0], EPERM),
        (
            "pair dgram+cloexec",
            sp,
            [unix, dgram | cloexec, 0, 0, 0, 0],
            EPERM,
        ),
        ("pair raw (= dgram)", sp, [unix, raw, 0, 0, 0, 0], EPERM),
        ("pair inet", sp, [inet, stream, 0, 0, 0, 0], EPERM),
        // The kernel reads `int type`: high bits change nothing.
        ("pair stream|hi", sp, [unix, stream | hi, 0, 0, 0, 0], ALLOW),
        ("pair dgram|hi", sp, [unix, dgram | hi, 0, 0, 0, 0], EPERM),
        ("pair unix|hi", sp, [unix | hi, stream, 0, 0, 0, 0], ALLOW),
        (
            "ioctl FIONREAD",
            libc::SYS_ioctl as i64,
            [0, libc::FIONREAD as u64, 0, 0, 0, 0],
            ALLOW,
        ),
        (
            "ioctl TCGETS",
            libc::SYS_ioctl as i64,
            [0, libc::TCGETS as u64, 0, 0, 0, 0],
            ALLOW,
        ),
        (
            "ioctl TIOCSTI",
            libc::SYS_ioctl as i64,
            [0, libc::TIOCSTI as u64, 0, 0, 0, 0],
            EPERM,
        ),
        (
            "ioctl TIOCSTI|hi",
            libc::SYS_ioctl as i64,
            [0, libc::TIOCSTI as u64 | hi, 0, 0, 0, 0],
            EPERM,
        ),
        (
            "ioctl TIOCSETD",
            libc::SYS_ioctl as i64,
            [0, libc::TIOCSETD as u64, 0, 0, 0, 0],
            EPERM,
        ),
        (
            "personality query",
            libc::SYS_personality as i64,
            [0xffff_ffff, 0, 0, 0, 0, 0],
            ALLOW,
        ),
        (
            "personality READ_IMPLIES_EXEC",
            libc::SYS_personality as i64,
            [0x0040_0000, 0, 0, 0, 0, 0],
            EPERM,
        ),
        (
            "prctl PR_SET_MM",
            libc::SYS_prctl as i64,
            [35, 0, 0, 0, 0, 0],
            EPERM,
        ),
        (
            "prctl PR_SET_NAME",
            libc::SYS_prctl as i64,
            [libc::PR_SET_NAME as u64, 0, 0, 0, 0, 0],
            ALLOW,
        ),
        (
            "prctl PR_SET_NO_NEW_PRIVS",
            libc::SYS_prctl as i64,
            [libc::PR_SET_NO_NEW_PRIVS as u64, 1, 0, 0, 0, 0],
            ALLOW,
        ),
        (
            "clone thread",
            libc::SYS_clone as i64,
            [
                (libc::CLONE_VM
                    | libc::CLONE_FS
                    | libc::CLONE_FILES
                    | libc::CLONE_SIGHAND
                    | libc::CLONE_THREAD
                    | libc::CLONE_SYSVSEM
                    | libc::CLONE_SETTLS
                    | libc::CLONE_PARENT_SETTID
                    | libc::CLONE_CHILD_CLEARTID) as u64,
                0,
                0,
                0,
                0,
                0,
            ],
            ALLOW,
        ),
        (
            "clone vfork",
            libc::SYS_clone as i64,
            [
                (libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD) as u64,
                0,
                0,
                0,
                0,
                0,
            ],
            ALLOW,
        ),
        (
            "sched_setaffinity self",
            libc::SYS_sched_setaffinity as i64,
            [0, 8, 0, 0, 0, 0],
            ALLOW,
        ),
        (
            "sched_setaffinity other",
            libc::SYS_sched_setaffinity as i64,
            [1234, 8, 0, 0, 0, 0],
            EPERM,
        ),
        (
            "setpriority self",
            libc::SYS_setpriority as i64,
            [0, 0, 10, 0, 0, 0],
            ALLOW,
        ),
        (
            "setpriority PRIO_USER",
            libc::SYS_setpriority as i64,
            [2, 0, 10, 0, 0, 0],
            EPERM,
        ),
        (
            "setpriority other",
            libc::SYS_setpriority as i64,
            [0, 1234, 10, 0, 0, 0],
            EPERM,
        ),
        (
            "ioprio_set self",
            libc::SYS_ioprio_set as i64,
            [1, 0, 0, 0, 0, 0],
            ALLOW,
        ),
        (
            "ioprio_set other",
            libc::SYS_ioprio_set as i64,
            [1, 1234, 0, 0, 0, 0],
            EPERM,
        ),
        (
            "prlimit64 self set",
            libc::SYS_prlimit64 as i64,
            [0, 7, 0x7fff_0000, 0, 0, 0],
            ALLOW,
        ),
        (
            "prlimit64 other read",
            libc::SYS_prlimit64 as i64,
            [1234, 7, 0, 0x7fff_0000, 0, 0],
            ALLOW,
        ),
        (
            "prlimit64 other set",
            libc::SYS_prlimit64 as i64,
            [1234, 7, 0x7fff_0000, 0, 0, 0],
            EPERM,
        ),
        // A pointer is 64 bits: a non-NULL one with a zero low half
        // is still a set.
        (
            "prlimit64 other set hi",
            libc::SYS_prlimit64 as i64,
            [1234, 7, hi, 0, 0, 0],
            EPERM,
        ),
    ];
    let mut failures = Vec::new();
    for (what, nr, args, want) in &cases {
        let got = verdict(*nr, *args);
        if got != *want {
            failures.push(format!(
                "{what}: want {}, got {}",
                name_of(*want),
                name_of(got)
            ));
        }
    }
    for (flag, name) in CLONE_NS_FLAGS {
        let got = verdict(
            libc::SYS_clone as i64,
            [flag | libc::SIGCHLD as u64, 0, 0, 0, 0, 0],
        );
        if got != EPERM {
            failures.push(format!("clone {name}: got {}", name_of(got)));
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

/// For every checked syscall and many argument values (each constant
/// of its rules, ±1, with high bits, with flag bits): exactly one of
/// "an allow rule holds" and "a deny rule holds" is true (the two
/// lists, written independently, are complements), and the filter —
/// compiled from the allow rules only — answers `ALLOW` for the first
/// and `EPERM` for the second: a refused argument never ends as
/// `ENOSYS`, an allowed one never `EPERM`.
#[test]
fn checked_rules_are_exact_complements() {
    let prog = &programs().unwrap()[0];
    let mut consts: Vec<u64> = vec![0, 1, 2, 3, 5, 8, 10, 0x7fff_ffff, 0xffff_ffff, u64::MAX];
    consts.extend(PERSONALITY_ALLOWED);
    consts.extend(IOCTL_DENIED);
    consts.extend(PRCTL_DENIED);
    consts.extend(socketpair_types());
    consts.extend(CLONE_NS_FLAGS.iter().map(|(f, _)| *f));
    let mut values: Vec<u64> = Vec::new();
    for c in consts {
        for v in [
            c,
            c.wrapping_add(1),
            c.wrapping_sub(1),
            c | (1 << 32),
            c | 0x80,
            c | libc::SIGCHLD as u64,
            c | libc::SOCK_CLOEXEC as u64,
        ] {
            if !values.contains(&v) {
                values.push(v);
            }
        }
    }
    let vectors = || {
        values.iter().flat_map(|a0| {
            values.iter().flat_map(move |a1| {
                [0u64, 1, 1 << 32, 0x7fff_1000].map(|a2| [*a0, *a1, a2, 0, 0, 0])
            })
        })
    };
    for c in checked() {
        for args in vectors() {
            let allow = any_holds(&c.allow, &args);
            let deny = any_holds(&c.deny, &args);
            let got = run(prog, &data(ARCH, c.sys.nr as u32, args));
            assert!(
                allow != deny && got == if allow { ALLOW } else { EPERM },
                "{}({:#x}, {:#x}, {:#x}): allow rules {allow}, deny rules {deny}, filter {}",
                c.sys.name(),
                args[0],
                args[1],
                args[2],
                name_of(got)
            );
        }
    }
    // The check has teeth: socketpair's deny list without its first
    // rule (`domain != AF_UNIX`) is no longer the complement.
    let sp = checked()
        .into_iter()
        .find(|c| c.sys.nr == libc::SYS_socketpair as i64)
        .unwrap();
    assert!(vectors().any(|args| !any_holds(&sp.allow, &args) && !any_holds(&sp.deny[1..], &args)));
}

#[test]
fn every_number_gets_the_models_verdict() {
    let prog = &programs().unwrap()[0];
    let model = Model::new();
    let pool = rule_constants();
    let mut rng = Rng(0x5eed_0001);
    let edges = [
        0x3fff_ffff,
        X32_SYSCALL_BIT,
        X32_SYSCALL_BIT | libc::SYS_getpid as u32,
        0x7fff_ffff,
        0x8000_0000,
        0xffff_fffe,
        u32::MAX,
    ];
    let mut failures = Vec::new();
    let mut seen: BTreeMap<u32, usize> = BTreeMap::new();
    for nr in (0..1024).chain(edges) {
        let mut vectors = vec![[0u64; 6], [u64::MAX; 6]];
        for _ in 0..4 {
            vectors.push(std::array::from_fn(|_| random_arg(&mut rng, &pool)));
        }
        for arch in [ARCH, AUDIT_ARCH_I386, 0, ARCH ^ 1] {
            for args in &vectors {
                let want = model.verdict(arch, nr, args);
                let got = run(prog, &data(arch, nr, *args));
                *seen.entry(want).or_default() += 1;
                if got != want {
                    failures.push(format!(
                        "arch {arch:#x} nr {nr:#x} {args:#x?}: want {}, got {}",
                        name_of(want),
                        name_of(got)
                    ));
                }
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} differences, the first: {:#?}",
        failures.len(),
        &failures[..failures.len().min(20)]
    );
    for v in [ALLOW, EPERM, ENOSYS, KILL] {
        let n = seen.get(&v).copied().unwrap_or(0);
        assert!(n > 50, "only {n} calls expected {}", name_of(v));
    }
}

#[test]
fn checked_calls_get_the_models_verdict_on_random_arguments() {
    let prog = &programs().unwrap()[0];
    let model = Model::new();
    let pool = rule_constants();
    let mut rng = Rng(0x5eed_0002);
    for c in checked() {
        let (mut allowed, mut refused) = (0, 0);
        for i in 0..4000 {
            // Half the vectors satisfy an allow or a deny rule on
            // purpose, half are random.
            let args = match i % 4 {
                0 => satisfying(&c.allow[rng.below(c.allow.len())], &mut rng, &pool),
                1 => satisfying(&c.deny[rng.below(c.deny.len())], &mut rng, &pool),
                _ => std::array::from_fn(|_| random_arg(&mut rng, &pool)),
            };
            let nr = c.sys.nr as u32;
            let got = run(prog, &data(ARCH, nr, args));
            let want = model.verdict(ARCH, nr, &args);
            assert_eq!(
                got,
                want,
                "{}({args:#x?}): want {}, got {}",
                c.sys.name(),
                name_of(want),
                name_of(got)
            );
            // The deny list, written separately, agrees.
            assert_eq!(
                any_holds(&c.deny, &args),
                got == EPERM,
                "deny rules of {} on {args:#x?}",
                c.sys.name()
            );
            if got == ALLOW {
                allowed += 1;
            } else {
                refused += 1;
            }
        }
        assert!(
            allowed >= 100 && refused >= 100,
            "{}: {allowed} allowed, {refused} refused: the vectors miss a side",
            c.sys.name()
        );
    }
}

#[test]
fn deny_list_filters_get_their_models_verdict() {
    let progs = deny_list_programs().unwrap();
    for p in &progs {
        assert_valid(p);
    }
    let pool = rule_constants();
    let mut rng = Rng(0x5eed_0003);
    let argument_checked = [
        libc::SYS_clone as u32,
        libc::SYS_ioctl as u32,
        libc::SYS_personality as u32,
    ];
    let mut sides: BTreeMap<(u32, u32), usize> = BTreeMap::new();
    for nr in (0..1024).chain([0x3fff_ffff, X32_SYSCALL_BIT, u32::MAX]) {
        let n = if argument_checked.contains(&nr) {
            3000
        } else {
            3
        };
        let mut vectors = vec![[0u64; 6]];
        for _ in 0..n {
            vectors.push(std::array::from_fn(|_| random_arg(&mut rng, &pool)));
        }
        for arch in [ARCH, AUDIT_ARCH_I386] {
            for args in &vectors {
                let want = deny_list_model(arch, nr, args);
                let got = run_all(&progs, &data(arch, nr, *args));
                assert_eq!(
                    got,
                    want,
                    "arch {arch:#x} nr {nr} {args:#x?}: want {}, got {}",
                    name_of(want),
                    name_of(got)
                );
                *sides.entry((nr, got)).or_default() += 1;
            }
        }
    }
    for nr in argument_checked {
        for v in [ALLOW, EPERM] {
            let n = sides.get(&(nr, v)).copied().unwrap_or(0);
            assert!(n >= 20, "nr {nr}: only {n} vectors got {}", name_of(v));
        }
    }
}

/// The kernel emulates a new filter for every syscall number when it
/// is installed (to fill its action cache), so the instructions run
/// before a number's verdict bound the install cost. The search is a
/// balanced tree: logarithmic in the number of listed syscalls. The
/// same bound catches a linear chain (what seccompiler emitted).
#[test]
fn numbers_are_found_by_binary_search() {
    let prog = &programs().unwrap()[0];
    let model = Model::new();
    let listed = model.allowed.len() + model.denied.len() + model.checked.len();
    // At most 2·listed + 1 intervals. Prologue (arch and x32 checks:
    // 4 instructions run), one `jge` per level, at most one
    // trampoline per level, the `ret`.
    let levels = (2 * listed + 1).next_power_of_two().trailing_zeros() as usize;
    let bound = 4 + 2 * levels + 1;
    let is_checked = |nr: u32| model.checked.iter().any(|c| c.sys.nr == i64::from(nr));
    let steps = |p: &[libc::sock_filter], nrs: &mut dyn Iterator<Item = u32>| -> Vec<usize> {
        nrs.map(|nr| trace(p, &data(ARCH, nr, [0; 6])).steps)
            .collect()
    };
    let stats = |s: &[usize]| {
        let max = *s.iter().max().unwrap();
        (max, s.iter().sum::<usize>() as f64 / s.len() as f64)
    };
    let (all_max, all_avg) = stats(&steps(prog, &mut (0..1024)));
    let plain = steps(prog, &mut (0..1024).filter(|nr| !is_checked(*nr)));
    let (max, avg) = stats(&plain);
    let top = model.allowed.iter().chain(&model.denied).max().unwrap();
    let (table_max, table_avg) = stats(&steps(prog, &mut (0..=*top as u32)));
    println!(
        "filter: {} instructions; instructions run per number (zero arguments): \
         0..1024 max {all_max} avg {all_avg:.1}; 0..={top} max {table_max} avg \
         {table_avg:.1}; numbers not argument-checked max {max} avg {avg:.1} (bound {bound})",
        prog.len()
    );
    assert!(
        max <= bound,
        "a number ran {max} instructions (bound {bound})"
    );

    // A linear chain of the same verdicts: one `jeq` per number.
    let mut a = Asm::new();
    a.load(SECCOMP_DATA_NR);
    for nr in model.allowed.iter().chain(&model.denied) {
        let next = a.label();
        a.jump(Cmp::Eq, *nr as u32, Dest::Next, Dest::To(next));
        a.ret(model.verdict(ARCH, *nr as u32, &[0; 6]));
        a.bind(next);
    }
    a.ret(ENOSYS);
    let chain = a.finish().unwrap();
    let (chain_max, chain_avg) = stats(&steps(&chain, &mut (0..1024)));
    println!(
        "a linear chain: {} instructions; max {chain_max} avg {chain_avg:.1}",
        chain.len()
    );
    assert!(chain_max > bound, "the bound does not tell a chain apart");
}

/// Every number whose verdict does not depend on the arguments is
/// decided from `nr` and `arch` alone: the kernel's action cache then
/// answers an allowed syscall without running the filter
/// (`seccomp_is_const_allow` gives up at the first argument load).
#[test]
fn only_checked_calls_read_arguments() {
    let prog = &programs().unwrap()[0];
    let checked: Vec<i64> = checked().iter().map(|c| c.sys.nr).collect();
    for nr in 0..1024u32 {
        let t = trace(prog, &data(ARCH, nr, [0; 6]));
        assert_eq!(
            t.read_args,
            checked.contains(&i64::from(nr)),
            "nr {nr} ({})",
            name_of(t.verdict)
        );
    }
}

/// A random condition on a random argument: any comparison, either
/// width, with a constant taken from `base` (that argument's value
/// for this rule, sometimes one bit off), so that several conditions
/// on one argument can hold together.
fn random_cond(rng: &mut Rng, base: &[u64; 6]) -> Cond {
    let arg = rng.below(6) as u8;
    let (width, bits) = if rng.below(2) == 0 {
        (Width::Full64, u64::MAX)
    } else {
        (Width::Low32, 0xffff_ffff)
    };
    let mut value = base[arg as usize];
    if rng.below(4) == 0 {
        value ^= 1 << rng.below(64);
    }
    let op = match rng.below(3) {
        0 => Op::Eq(value & bits),
        1 => Op::Ne(value & bits),
        _ => {
            let mask = rng.next() & bits;
            Op::MaskedEq {
                mask,
                value: value & mask,
            }
        }
    };
    Cond { arg, width, op }
}

/// An argument close to `base`: equal, one half replaced, one bit
/// flipped, or random.
fn near(rng: &mut Rng, base: u64) -> u64 {
    match rng.below(5) {
        0 | 1 => base,
        2 => (base & 0xffff_ffff) | (rng.next() << 32),
        3 => base ^ (1 << rng.below(64)),
        _ => rng.next(),
    }
}

/// Every comparison the compiler supports, at both widths, alone and
/// several in one rule (on the same argument too, where a load is
/// shared or a mask changes the accumulator), against plain Rust on
/// arguments near the constants — including kinds the tables do not
/// use today (a 64-bit `!=`).
#[test]
fn every_kind_of_condition_means_what_it_says() {
    let mut rng = Rng(0x5eed_0004);
    let test = Sys::new(7, "test");
    let mut outcomes = [0usize; 2];
    for _ in 0..1000 {
        let base: [u64; 6] = std::array::from_fn(|_| rng.next());
        let mut rules: Vec<Rule> = (0..1 + rng.below(2))
            .map(|_| {
                (0..1 + rng.below(4))
                    .map(|_| random_cond(&mut rng, &base))
                    .collect()
            })
            .collect();
        // Half the time, rules that differ only in a last 32-bit `==`
        // (compiled as one membership test), before or after others.
        if rng.below(2) == 0 {
            let common: Rule = (0..rng.below(3))
                .map(|_| random_cond(&mut rng, &base))
                .collect();
            let arg = rng.below(6) as u8;
            let group: Vec<Rule> = (0..2 + rng.below(4))
                .map(|_| {
                    let value = (base[arg as usize] ^ (1 << rng.below(3))) & 0xffff_ffff;
                    let mut r = common.clone();
                    r.push(Cond::eq(arg, value));
                    r
                })
                .collect();
            let at = rng.below(rules.len() + 1);
            rules.splice(at..at, group);
        }
        let mut spec = Spec::new("test", RET_ENOSYS, false);
        let check = Verdict::Check {
            rules: rules.clone(),
            matched: ALLOW,
            otherwise: EPERM,
        };
        spec.insert(test, check).unwrap();
        let prog = compile(&spec).unwrap();
        assert_valid(&prog);
        for _ in 0..100 {
            let args: [u64; 6] = std::array::from_fn(|i| near(&mut rng, base[i]));
            let holds = any_holds(&rules, &args);
            outcomes[usize::from(holds)] += 1;
            let want = if holds { ALLOW } else { EPERM };
            let got = run(&prog, &data(ARCH, 7, args));
            assert_eq!(got, want, "{rules:?} on {args:#x?}");
        }
    }
    assert!(outcomes.iter().all(|n| *n > 10_000), "{outcomes:?}");
}

#[test]
fn intervals_merge_neighbours_and_cover_every_number() {
    let (a, b, d) = (Leaf::Ret(1), Leaf::Block(0), Leaf::Ret(9));
    assert_eq!(
        intervals(&[(2, a), (3, a), (5, b), (6, b)], d),
        vec![(0, d), (2, a), (4, d), (5, b), (7, d)]
    );
    assert_eq!(
        intervals(&[(0, a), (u32::MAX, b)], d),
        vec![(0, a), (1, d), (u32::MAX, b)]
    );
    assert_eq!(intervals(&[], d), vec![(0, d)]);
    // A listed number with the default verdict merges into the gap.
    assert_eq!(intervals(&[(4, d)], d), vec![(0, d)]);
}

/// `jeq 1` to a `ret 0xA` `distance` instructions ahead (unreachable
/// fillers in between), else `ret 0xB`.
fn jump_over(distance: usize) -> Program {
    let mut a = Asm::new();
    let far = a.label();
    a.load(SECCOMP_DATA_NR);
    a.jump(Cmp::Eq, 1, Dest::To(far), Dest::Next);
    a.ret(0xB);
    for _ in 1..distance {
        a.load(SECCOMP_DATA_NR);
    }
    a.bind(far);
    a.ret(0xA);
    a.finish().unwrap()
}

#[test]
fn a_jump_of_255_is_direct_and_256_takes_a_trampoline() {
    let near = jump_over(MAX_COND_JUMP);
    assert_valid(&near);
    assert_eq!((near[1].jt as usize, near[1].jf), (MAX_COND_JUMP, 0));
    assert!(!near.iter().any(|i| i.code == JA));
    let far = jump_over(MAX_COND_JUMP + 1);
    assert_valid(&far);
    // jeq → the `ja` right after it; else skip the `ja`.
    assert_eq!((far[1].jt, far[1].jf, far[2].code), (0, 1, JA));
    assert_eq!(far.len(), near.len() + 2, "one filler and one ja more");
    for p in [&near, &far] {
        assert_eq!(run(p, &data(ARCH, 1, [0; 6])), 0xA);
        assert_eq!(run(p, &data(ARCH, 2, [0; 6])), 0xB);
    }
}

#[test]
fn both_sides_of_a_jump_can_be_far() {
    let mut a = Asm::new();
    let (t, f) = (a.label(), a.label());
    a.load(SECCOMP_DATA_NR);
    a.jump(Cmp::Ge, 10, Dest::To(t), Dest::To(f));
    for _ in 0..300 {
        a.load(SECCOMP_DATA_NR);
    }
    a.bind(f);
    a.ret(0xF);
    for _ in 0..300 {
        a.load(SECCOMP_DATA_NR);
    }
    a.bind(t);
    a.ret(0x7);
    let p = a.finish().unwrap();
    assert_valid(&p);
    assert_eq!((p[1].jt, p[1].jf, p[2].code, p[3].code), (0, 1, JA, JA));
    for (nr, want) in [(10, 0x7), (u32::MAX, 0x7), (9, 0xF), (0, 0xF)] {
        assert_eq!(run(&p, &data(ARCH, nr, [0; 6])), want, "nr {nr}");
    }
}

/// One jump reaches exactly 255 ahead; a later jump's trampoline lands
/// between it and its target, so it needs one too.
#[test]
fn a_trampoline_that_pushes_another_jump_out_of_reach_gives_it_one_too() {
    let build = |with_far_jump: bool| {
        let mut a = Asm::new();
        let (near, far) = (a.label(), a.label());
        a.load(SECCOMP_DATA_NR); // 0
        a.jump(Cmp::Eq, 1, Dest::To(near), Dest::Next); // 1
        if with_far_jump {
            a.jump(Cmp::Eq, 2, Dest::To(far), Dest::Next); // 2
        } else {
            a.load(SECCOMP_DATA_NR);
        }
        for _ in 3..256 {
            a.load(SECCOMP_DATA_NR);
        }
        a.ret(0xC); // 256
        a.bind(near);
        a.ret(0xA); // 257: 255 after the jump at 1
        for _ in 0..300 {
            a.load(SECCOMP_DATA_NR);
        }
        a.bind(far);
        a.ret(0xB);
        a.finish().unwrap()
    };
    let alone = build(false);
    assert_valid(&alone);
    assert_eq!(alone[1].jt, 255);
    assert_eq!(alone.iter().filter(|i| i.code == JA).count(), 0);
    let both = build(true);
    assert_valid(&both);
    assert_eq!(both.iter().filter(|i| i.code == JA).count(), 2);
    assert_eq!((both[1].jt, both[2].code), (0, JA));
    for (nr, want) in [(1, 0xA), (2, 0xB), (3, 0xC)] {
        assert_eq!(run(&both, &data(ARCH, nr, [0; 6])), want, "nr {nr}");
    }
}

#[test]
fn the_assembler_refuses_what_the_kernel_would() {
    // A label never bound.
    let mut a = Asm::new();
    let l = a.label();
    a.load(0);
    a.jump(Cmp::Eq, 0, Dest::To(l), Dest::Next);
    a.ret(0);
    assert!(a.finish().is_err());
    // A backward jump.
    let mut a = Asm::new();
    let l = a.label();
    a.bind(l);
    a.load(0);
    a.jump(Cmp::Eq, 0, Dest::To(l), Dest::Next);
    a.ret(0);
    assert!(a.finish().is_err());
    // A label bound twice.
    let mut a = Asm::new();
    let l = a.label();
    a.load(0);
    a.jump(Cmp::Eq, 0, Dest::To(l), Dest::Next);
    a.bind(l);
    a.ret(0);
    a.bind(l);
    a.ret(1);
    assert!(a.finish().is_err());
    // A jump past the end.
    let mut a = Asm::new();
    let l = a.label();
    a.load(0);
    a.jump(Cmp::Eq, 0, Dest::To(l), Dest::Next);
    a.ret(0);
    a.bind(l);
    assert!(a.finish().is_err());
    // No `ret` last.
    let mut a = Asm::new();
    a.ret(0);
    a.load(0);
    assert!(a.finish().is_err());
    // The control: the smallest program assembles.
    let mut a = Asm::new();
    a.ret(0);
    assert_eq!(a.finish().unwrap().len(), 1);
}

#[test]
fn wide_constants_and_bad_argument_indexes_are_refused() {
    let spec_with = |cond: Cond| {
        let mut spec = Spec::new("test", RET_ENOSYS, true);
        let rules = vec![vec![cond]];
        let check = Verdict::Check {
            rules,
            matched: ALLOW,
            otherwise: EPERM,
        };
        spec.insert(sys![SYS_ioctl][0], check).unwrap();
        spec
    };
    for cond in [
        Cond::eq(0, 1 << 32),
        Cond::ne(0, u64::MAX),
        Cond::masked_eq(1, 1 << 40, 0),
        Cond::eq(6, 0),
    ] {
        assert!(compile(&spec_with(cond)).is_err(), "{cond:?}");
    }
    // The control: a 64-bit comparison with the same constant compiles.
    assert!(compile(&spec_with(Cond::eq64(0, 1 << 32))).is_ok());
    // A syscall listed twice is refused.
    let mut spec = Spec::new("test", RET_ENOSYS, true);
    let getpid = sys![SYS_getpid][0];
    spec.insert(getpid, Verdict::Ret(ALLOW)).unwrap();
    assert!(spec.insert(getpid, Verdict::Ret(EPERM)).is_err());
}

#[test]
fn deny_list_programs_are_the_deny_list_and_clone3() {
    let progs = deny_list_programs().unwrap();
    assert_eq!(progs.len(), 2);
    let v = |nr: i64| run_all(&progs, &data(ARCH, nr as u32, [0; 6]));
    assert_eq!(v(libc::SYS_setsid as i64), EPERM);
    assert_eq!(v(libc::SYS_setpgid as i64), EPERM);
    assert_eq!(v(libc::SYS_socket as i64), EPERM);
    assert_eq!(v(libc::SYS_clone3 as i64), ENOSYS);
    // Default allow: an unlisted call goes through (what the allowlist
    // exists to change).
    assert_eq!(v(libc::SYS_kcmp as i64), ALLOW);
    assert!(progs[1].iter().any(|i| i.code == RET_K && i.k == ENOSYS));
    let mut nrs: Vec<_> = deny_listed_syscalls().into_iter().map(|(n, _)| n).collect();
    let len = nrs.len();
    nrs.sort();
    nrs.dedup();
    assert_eq!(nrs.len(), len);
}

#[test]
fn setsid_and_setpgid_are_allowed_now() {
    assert_eq!(verdict(libc::SYS_setsid as i64, [0; 6]), ALLOW);
    assert_eq!(verdict(libc::SYS_setpgid as i64, [0; 6]), ALLOW);
}

#[test]
fn the_egress_filter_adds_tcp_sockets_and_connect_and_refuses_fast_open() {
    let egress = &egress_programs().unwrap()[0];
    let plain = &programs().unwrap()[0];
    assert_valid(egress);
    let socket = libc::SYS_socket as u32;
    let connect = libc::SYS_connect as u32;
    let call = |prog: &Program, nr: u32, a: [u64; 3]| {
        run(prog, &data(ARCH, nr, [a[0], a[1], a[2], 0, 0, 0]))
    };
    let (inet, inet6) = (libc::AF_INET as u64, libc::AF_INET6 as u64);
    let stream = libc::SOCK_STREAM as u64;
    let flags = (libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK) as u64;
    for a in [
        [inet, stream, 0],
        [inet6, stream | flags, 0],
        [
            inet,
            stream | libc::SOCK_CLOEXEC as u64,
            libc::IPPROTO_TCP as u64,
        ],
    ] {
        assert_eq!(call(egress, socket, a), ALLOW, "{a:?}");
        assert_eq!(call(plain, socket, a), EPERM, "{a:?}: only with egress");
    }
    for a in [
        [inet, libc::SOCK_DGRAM as u64, 0],
        [inet6, libc::SOCK_DGRAM as u64, libc::IPPROTO_UDP as u64],
        [inet, libc::SOCK_RAW as u64, libc::IPPROTO_ICMP as u64],
        [inet, stream, libc::IPPROTO_SCTP as u64],
        [inet, libc::SOCK_SEQPACKET as u64, 0],
        [libc::AF_PACKET as u64, libc::SOCK_RAW as u64, 0],
        [libc::AF_NETLINK as u64, libc::SOCK_RAW as u64, 0],
        [libc::AF_UNIX as u64, stream, 0],
        [libc::AF_VSOCK as u64, stream, 0],
    ] {
        assert_eq!(call(egress, socket, a), EPERM, "{a:?}");
    }
    assert_eq!(call(egress, connect, [3, 0, 16]), ALLOW);
    assert_eq!(call(plain, connect, [3, 0, 16]), ENOSYS);
    // Fast Open (a connect inside a send) is refused; other sends run.
    let (sendto, sendmsg, sendmmsg) = (
        libc::SYS_sendto as u32,
        libc::SYS_sendmsg as u32,
        libc::SYS_sendmmsg as u32,
    );
    let fo = MSG_FASTOPEN;
    let nosig = libc::MSG_NOSIGNAL as u64;
    let run6 = |nr: u32, args: [u64; 6]| run(egress, &data(ARCH, nr, args));
    assert_eq!(run6(sendto, [3, 0, 1, fo, 0, 0]), EPERM);
    assert_eq!(run6(sendto, [3, 0, 1, fo | nosig, 0, 0]), EPERM);
    assert_eq!(run6(sendto, [3, 0, 1, nosig, 0, 0]), ALLOW);
    assert_eq!(run6(sendmsg, [3, 0, fo, 0, 0, 0]), EPERM);
    assert_eq!(run6(sendmsg, [3, 0, 0, 0, 0, 0]), ALLOW);
    assert_eq!(run6(sendmmsg, [3, 0, 1, fo, 0, 0]), EPERM);
    assert_eq!(run6(sendmmsg, [3, 0, 1, 0, 0, 0]), ALLOW);
    for c in egress_send() {
        for flags in [0, fo, nosig, fo | nosig, u64::MAX, 1 << 32 | fo] {
            let mut args = [3u64, 0, 0, 0, 0, 0];
            args[c.allow[0][0].arg as usize] = flags;
            assert_ne!(any_holds(&c.allow, &args), any_holds(&c.deny, &args));
        }
    }
    // The deny rules are the exact complement of the allow rules.
    let rules = egress_socket();
    let pool = [
        0,
        1,
        2,
        3,
        5,
        6,
        10,
        17,
        132,
        0x80000,
        0x800,
        0x80801,
        u64::MAX,
    ];
    for a0 in pool {
        for a1 in pool {
            for a2 in pool {
                let args = [a0, a1, a2, 0, 0, 0];
                assert_ne!(
                    any_holds(&rules.allow, &args),
                    any_holds(&rules.deny, &args)
                );
                let want = if any_holds(&rules.allow, &args) {
                    ALLOW
                } else {
                    EPERM
                };
                assert_eq!(run(egress, &data(ARCH, socket, args)), want, "{args:x?}");
            }
        }
    }
    // Every other number gets the same verdict as without egress.
    let mut rng = Rng(0x5eed_0e9e);
    let consts = rule_constants();
    let changed = [socket, connect, sendto, sendmsg, sendmmsg];
    for nr in (0..1024u32).filter(|n| !changed.contains(n)) {
        for _ in 0..3 {
            let args: [u64; 6] = std::array::from_fn(|_| random_arg(&mut rng, &consts));
            let d = data(ARCH, nr, args);
            assert_eq!(run(egress, &d), run(plain, &d), "nr {nr} {args:x?}");
        }
    }
}
