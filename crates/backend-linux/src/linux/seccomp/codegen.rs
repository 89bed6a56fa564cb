//! Compilation: a [`Spec`] of verdicts becomes one classic-BPF program
//! (architecture check, x32 guard, binary search over number intervals,
//! argument-check blocks), emitted through [`asm`].

#![allow(clippy::unnecessary_cast)]

use super::*;

/// `BPF_MAXINSNS`: the kernel refuses a longer filter.
pub(super) const BPF_MAXINSNS: usize = 4096;

pub(super) fn check_len(prog: &Program) -> Result<(), String> {
    if prog.is_empty() || prog.len() > BPF_MAXINSNS {
        return Err(format!(
            "the seccomp filter has {} instructions (must be 1..={BPF_MAXINSNS})",
            prog.len()
        ));
    }
    Ok(())
}

/// `offsetof(struct seccomp_data, nr)`.
pub(super) const SECCOMP_DATA_NR: u32 = 0;
/// `offsetof(struct seccomp_data, arch)`.
pub(super) const SECCOMP_DATA_ARCH: u32 = 4;
/// `offsetof(struct seccomp_data, args)`: six `u64`, in host byte order.
pub(super) const SECCOMP_DATA_ARGS: u32 = 16;
/// `AUDIT_ARCH_X86_64`.
pub(crate) const AUDIT_ARCH_X86_64: u32 = 62 | 0x8000_0000 | 0x4000_0000;
/// `AUDIT_ARCH_AARCH64`.
pub(super) const AUDIT_ARCH_AARCH64: u32 = 183 | 0x8000_0000 | 0x4000_0000;
/// `AUDIT_ARCH_RISCV64`.
pub(super) const AUDIT_ARCH_RISCV64: u32 = 243 | 0x8000_0000 | 0x4000_0000;
/// `__X32_SYSCALL_BIT`: x32 syscalls report the x86_64 arch with this bit
/// set in the number.
pub(crate) const X32_SYSCALL_BIT: u32 = 0x4000_0000;

/// The `seccomp_data.arch` value the tables' numbers belong to.
pub(super) fn audit_arch() -> Result<u32, String> {
    if cfg!(target_arch = "x86_64") {
        Ok(AUDIT_ARCH_X86_64)
    } else if cfg!(target_arch = "aarch64") {
        Ok(AUDIT_ARCH_AARCH64)
    } else if cfg!(target_arch = "riscv64") {
        Ok(AUDIT_ARCH_RISCV64)
    } else {
        Err(format!(
            "the seccomp filter cannot be built for the `{}` architecture (supported: x86_64, \
             aarch64 and riscv64)",
            std::env::consts::ARCH
        ))
    }
}

/// Where the search for one interval of numbers ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Leaf {
    /// Return this `SECCOMP_RET_*` value.
    Ret(u32),
    /// Continue in this argument-check block.
    Block(usize),
}

/// An argument-check block: `matched` when any rule holds, else
/// `otherwise`.
pub(super) type Block<'a> = (&'a [Rule], u32, u32);

/// Compiles `spec` to:
///
/// ```text
///       ld   [arch]
///       jeq  AUDIT_ARCH, +1, +0
///       ret  KILL_PROCESS
///       ld   [nr]
///       jge  X32_SYSCALL_BIT, +0, +1     (x86_64, when guarded)
///       ret  KILL_PROCESS
///       binary search on nr: one `jge` per node, jumping to the next
///       node, to a shared `ret`, or to an argument-check block
///       ret ALLOW / ret ERRNO(EPERM) / … (one per verdict)
///       the argument-check blocks, one per distinct rule set
/// ```
///
/// Every jump is forward; the assembler adds a `ja` where a conditional
/// jump is too long for its 8-bit offset.
pub(super) fn compile(spec: &Spec) -> Result<Program, String> {
    let arch = audit_arch()?;
    // One block per distinct rule set (the mode-setting calls share
    // theirs), so neighbours with the same block also share an interval.
    let mut blocks: Vec<Block> = Vec::new();
    let mut leaves = Vec::new();
    for (nr, verdict) in &spec.verdicts {
        let leaf = match verdict {
            Verdict::Ret(r) => Leaf::Ret(*r),
            Verdict::Check {
                rules,
                matched,
                otherwise,
            } => {
                for c in rules.iter().flatten() {
                    validate(c).map_err(|e| format!("the {} seccomp filter: {e}", spec.what))?;
                }
                let block = (rules.as_slice(), *matched, *otherwise);
                let i = match blocks.iter().position(|b| *b == block) {
                    Some(i) => i,
                    None => {
                        blocks.push(block);
                        blocks.len() - 1
                    }
                };
                Leaf::Block(i)
            }
        };
        leaves.push((*nr, leaf));
    }
    let intervals = intervals(&leaves, Leaf::Ret(spec.default));

    let mut a = asm::Asm::new();
    let native = a.label();
    a.load(SECCOMP_DATA_ARCH);
    a.jump(asm::Cmp::Eq, arch, asm::Dest::To(native), asm::Dest::Next);
    a.ret(RET_KILL);
    a.bind(native);
    a.load(SECCOMP_DATA_NR);
    if spec.x32_guard && arch == AUDIT_ARCH_X86_64 {
        let not_x32 = a.label();
        a.jump(
            asm::Cmp::Ge,
            X32_SYSCALL_BIT,
            asm::Dest::Next,
            asm::Dest::To(not_x32),
        );
        a.ret(RET_KILL);
        a.bind(not_x32);
    }
    let mut targets = Targets {
        blocks: blocks.iter().map(|_| a.label()).collect(),
        rets: BTreeMap::new(),
    };
    search(&mut a, &intervals, &mut targets);
    for (r, label) in &targets.rets {
        a.bind(*label);
        a.ret(*r);
    }
    for ((rules, matched, otherwise), label) in blocks.iter().zip(&targets.blocks) {
        a.bind(*label);
        check_block(&mut a, rules, *matched, *otherwise);
    }
    let prog = a
        .finish()
        .map_err(|e| format!("cannot assemble the {} seccomp filter: {e}", spec.what))?;
    check_len(&prog)?;
    Ok(prog)
}

/// Sorted `(first number, leaf)` intervals covering `0..=u32::MAX`: every
/// listed number, the gaps between them as `default`, and neighbours with
/// the same leaf merged into one interval (most allowed syscalls are
/// neighbours).
pub(super) fn intervals(leaves: &[(u32, Leaf)], default: Leaf) -> Vec<(u32, Leaf)> {
    pub(super) fn push(out: &mut Vec<(u32, Leaf)>, start: u32, leaf: Leaf) {
        if out.last().map(|(_, l)| *l) != Some(leaf) {
            out.push((start, leaf));
        }
    }
    let mut out = Vec::new();
    // The first number not covered yet (u64: it can pass u32::MAX).
    let mut next: u64 = 0;
    for &(nr, leaf) in leaves {
        if u64::from(nr) > next {
            push(&mut out, next as u32, default);
        }
        push(&mut out, nr, leaf);
        next = u64::from(nr) + 1;
    }
    if next <= u64::from(u32::MAX) {
        push(&mut out, next as u32, default);
    }
    out
}

/// Where the search's leaves go: each argument-check block's label, and
/// one shared `ret` per verdict, placed right after the tree.
pub(super) struct Targets {
    pub(super) blocks: Vec<asm::Label>,
    pub(super) rets: BTreeMap<u32, asm::Label>,
}

impl Targets {
    pub(super) fn of(&mut self, a: &mut asm::Asm, leaf: Leaf) -> asm::Label {
        match leaf {
            Leaf::Block(b) => self.blocks[b],
            Leaf::Ret(r) => *self.rets.entry(r).or_insert_with(|| a.label()),
        }
    }
}

/// Emits the binary search over `iv` (the accumulator holds the number,
/// which lies in the intervals' range): each node splits the intervals in
/// half with one `jge` on the first number of the upper half. A half that
/// is a single interval is no code at all: the `jge` jumps straight to
/// its shared `ret` or to its argument-check block, so the tree is one
/// instruction per node and a number's verdict is one `jge` per level
/// and a `ret`.
pub(super) fn search(a: &mut asm::Asm, iv: &[(u32, Leaf)], t: &mut Targets) {
    let (lower, upper) = iv.split_at(iv.len() / 2);
    if lower.is_empty() {
        // A tree of one interval (no node to jump from).
        match iv[0].1 {
            Leaf::Ret(r) => a.ret(r),
            leaf => {
                let l = t.of(a, leaf);
                a.ja(l);
            }
        }
        return;
    }
    let single = |half: &[(u32, Leaf)]| match half {
        [(_, leaf)] => Some(*leaf),
        _ => None,
    };
    let upper_label = match single(upper) {
        Some(leaf) => t.of(a, leaf),
        None => a.label(),
    };
    let lower_dest = match single(lower) {
        Some(leaf) => asm::Dest::To(t.of(a, leaf)),
        None => asm::Dest::Next,
    };
    a.jump(
        asm::Cmp::Ge,
        upper[0].0,
        asm::Dest::To(upper_label),
        lower_dest,
    );
    if single(lower).is_none() {
        search(a, lower, t);
    }
    if single(upper).is_none() {
        a.bind(upper_label);
        search(a, upper, t);
    }
}

/// Refuses a condition the filter cannot compare as written: an argument
/// index past 5, or a 32-bit comparison with a constant wider than 32
/// bits (it could never match, or would be silently truncated).
pub(super) fn validate(c: &Cond) -> Result<(), String> {
    if c.arg > 5 {
        return Err(format!("argument index {} (syscalls have 6)", c.arg));
    }
    let (mask, value) = match c.op {
        Op::Eq(v) | Op::Ne(v) => (0, v),
        Op::MaskedEq { mask, value } => (mask, value),
    };
    if c.width == Width::Low32 && (mask | value) >> 32 != 0 {
        return Err(format!(
            "a 32-bit comparison of argument {} with {value:#x} (mask {mask:#x}) wider than 32 \
             bits",
            c.arg
        ));
    }
    Ok(())
}

/// The 32-bit words a condition compares: `(offset in seccomp_data, mask,
/// value)`, the low word first. `seccomp_data.args` are `u64` in host
/// byte order, so the low word is the first on little-endian machines.
pub(super) fn words(c: &Cond) -> Vec<(u32, u32, u32)> {
    let (mask, value) = match c.op {
        Op::Eq(v) | Op::Ne(v) => (u64::MAX, v),
        Op::MaskedEq { mask, value } => (mask, value),
    };
    let slot = SECCOMP_DATA_ARGS + 8 * u32::from(c.arg);
    let (low, high) = if cfg!(target_endian = "little") {
        (slot, slot + 4)
    } else {
        (slot + 4, slot)
    };
    let mut w = vec![(low, mask as u32, value as u32)];
    if c.width == Width::Full64 {
        w.push((high, (mask >> 32) as u32, (value >> 32) as u32));
    }
    w
}

/// Emits one block: each rule's conditions in turn (a failed one jumps to
/// the next rule), `ret matched` after a rule that held, `ret otherwise`
/// after the last rule. Neighbouring rules that differ only in a last
/// 32-bit `==` on the same argument (`AF_UNIX` and one of eight socket
/// types; one of five personalities) are one set-membership test: their
/// common conditions once, the argument loaded once, one `jeq` per value.
pub(super) fn check_block(a: &mut asm::Asm, rules: &[Rule], matched: u32, otherwise: u32) {
    use asm::{Cmp, Dest};
    let mut rest = rules;
    while let Some(first) = rest.first() {
        let group = 1 + rest[1..]
            .iter()
            .take_while(|r| same_but_value(first, r))
            .count();
        let fail = a.label();
        // Which argument word the accumulator holds, if known: consecutive
        // conditions on one word load it once.
        let mut acc = None;
        if group > 1 {
            let (last, common) = first
                .split_last()
                .expect("a rule in a group has conditions");
            for c in common {
                condition(a, c, fail, &mut acc);
            }
            let (offset, _, _) = words(last)[0];
            if acc != Some(offset) {
                a.load(offset);
            }
            let hit = a.label();
            for (i, rule) in rest[..group].iter().enumerate() {
                let value = match rule.last().map(|c| c.op) {
                    Some(Op::Eq(v)) => v as u32,
                    _ => unreachable!("same_but_value groups 32-bit `==` only"),
                };
                if i + 1 < group {
                    a.jump(Cmp::Eq, value, Dest::To(hit), Dest::Next);
                } else {
                    a.jump(Cmp::Eq, value, Dest::Next, Dest::To(fail));
                }
            }
            a.bind(hit);
        } else {
            for c in first {
                condition(a, c, fail, &mut acc);
            }
        }
        a.ret(matched);
        a.bind(fail);
        rest = &rest[group..];
    }
    a.ret(otherwise);
}

/// Whether `r` is `first` with only the value of its last condition
/// changed, that condition being a 32-bit `==` (so `first OR r` is "the
/// common conditions, and that argument is one of the values").
pub(super) fn same_but_value(first: &Rule, r: &Rule) -> bool {
    let is_eq32 = |c: &Cond| c.width == Width::Low32 && matches!(c.op, Op::Eq(_));
    match (first.split_last(), r.split_last()) {
        (Some((a, common_a)), Some((b, common_b))) => {
            common_a == common_b && is_eq32(a) && is_eq32(b) && a.arg == b.arg
        }
        _ => false,
    }
}

/// Emits `c`: falls through when it holds, jumps to `fail` when not.
pub(super) fn condition(a: &mut asm::Asm, c: &Cond, fail: asm::Label, acc: &mut Option<u32>) {
    use asm::{Cmp, Dest};
    let words = words(c);
    match c.op {
        // Every word must be equal (under its mask).
        Op::Eq(_) | Op::MaskedEq { .. } => {
            for (offset, mask, value) in words {
                if *acc != Some(offset) {
                    a.load(offset);
                }
                *acc = Some(offset);
                if mask != u32::MAX {
                    a.and(mask);
                    *acc = None;
                }
                a.jump(Cmp::Eq, value, Dest::Next, Dest::To(fail));
            }
        }
        // Some word must differ: a differing word before the last one
        // settles it (jump past the rest), the last one decides.
        Op::Ne(_) => {
            let holds = a.label();
            let last = words.len() - 1;
            for (i, (offset, _, value)) in words.into_iter().enumerate() {
                if *acc != Some(offset) {
                    a.load(offset);
                }
                *acc = Some(offset);
                if i == last {
                    a.jump(Cmp::Eq, value, Dest::To(fail), Dest::Next);
                } else {
                    a.jump(Cmp::Eq, value, Dest::Next, Dest::To(holds));
                }
            }
            a.bind(holds);
            if last > 0 {
                // Reached from two places holding different words.
                *acc = None;
            }
        }
    }
}
