//! A small classic-BPF assembler: labels, and conditional jumps longer
//! than 255 instructions turned into `ja` trampolines.
//!
//! Classic BPF only jumps forward (seccomp refuses anything else), and a
//! conditional jump's targets are 8-bit offsets: at most 255 instructions
//! ahead. `finish` gives a conditional jump whose target is farther a
//! `ja` (32-bit offset) right after it — a trampoline — and repeats until
//! every offset fits, since each trampoline lengthens the jumps over it.

use super::Program;

/// `BPF_LD | BPF_W | BPF_ABS`: load a 32-bit word of `seccomp_data`.
pub(super) const LD_W_ABS: u16 = 0x20;
/// `BPF_ALU | BPF_AND | BPF_K`.
pub(super) const ALU_AND_K: u16 = 0x54;
/// `BPF_JMP | BPF_JA`: unconditional, 32-bit offset.
pub(super) const JA: u16 = 0x05;
/// `BPF_JMP | BPF_JEQ | BPF_K`.
pub(super) const JEQ_K: u16 = 0x15;
/// `BPF_JMP | BPF_JGE | BPF_K` (unsigned).
pub(super) const JGE_K: u16 = 0x35;
/// `BPF_RET | BPF_K`.
pub(super) const RET_K: u16 = 0x06;
/// The farthest a conditional jump reaches (`jt`/`jf` are `u8`).
pub(super) const MAX_COND_JUMP: usize = 255;

/// A position in the program, bound with [`Asm::bind`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Label(usize);

/// Where a conditional jump goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Dest {
    /// The next instruction emitted.
    Next,
    /// A label, bound before or after the jump (it must end up
    /// after it).
    To(Label),
}

/// A conditional jump's comparison of the accumulator with `k`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Cmp {
    /// `A == k`.
    Eq,
    /// `A >= k`, unsigned.
    Ge,
}

enum Insn {
    /// An instruction without a target (`ld`, `and`, `ret`).
    Plain { code: u16, k: u32 },
    /// A conditional jump.
    Cond {
        code: u16,
        k: u32,
        jt: Dest,
        jf: Dest,
    },
    /// `ja`.
    Ja(Label),
}

/// A program being assembled.
#[derive(Default)]
pub(super) struct Asm {
    insns: Vec<Insn>,
    /// Each label's instruction index, once bound.
    labels: Vec<Option<usize>>,
    /// The first misuse (a label bound twice), reported by `finish`.
    error: Option<String>,
}

impl Asm {
    /// An empty program.
    pub(super) fn new() -> Asm {
        Asm::default()
    }

    /// A new, unbound label.
    pub(super) fn label(&mut self) -> Label {
        self.labels.push(None);
        Label(self.labels.len() - 1)
    }

    /// Binds `l` to the next instruction emitted.
    pub(super) fn bind(&mut self, l: Label) {
        if self.labels[l.0].is_some() {
            self.error
                .get_or_insert_with(|| format!("label {} bound twice", l.0));
        }
        self.labels[l.0] = Some(self.insns.len());
    }

    /// `A = seccomp_data[offset..offset + 4]`.
    pub(super) fn load(&mut self, offset: u32) {
        self.insns.push(Insn::Plain {
            code: LD_W_ABS,
            k: offset,
        });
    }

    /// `A &= mask`.
    pub(super) fn and(&mut self, mask: u32) {
        self.insns.push(Insn::Plain {
            code: ALU_AND_K,
            k: mask,
        });
    }

    /// Returns `k` (a `SECCOMP_RET_*` value).
    pub(super) fn ret(&mut self, k: u32) {
        self.insns.push(Insn::Plain { code: RET_K, k });
    }

    /// Jumps to `jt` when `A cmp k`, else to `jf`.
    pub(super) fn jump(&mut self, cmp: Cmp, k: u32, jt: Dest, jf: Dest) {
        let code = match cmp {
            Cmp::Eq => JEQ_K,
            Cmp::Ge => JGE_K,
        };
        self.insns.push(Insn::Cond { code, k, jt, jf });
    }

    /// Jumps to `to`.
    pub(super) fn ja(&mut self, to: Label) {
        self.insns.push(Insn::Ja(to));
    }

    /// The instruction index a jump at `at` goes to.
    fn target(&self, at: usize, dest: Dest) -> Result<usize, String> {
        let t = match dest {
            Dest::Next => at + 1,
            Dest::To(l) => self.labels[l.0]
                .ok_or_else(|| format!("instruction {at} jumps to label {}, never bound", l.0))?,
        };
        if t <= at {
            return Err(format!("instruction {at} jumps backwards (to {t})"));
        }
        if t >= self.insns.len() {
            return Err(format!("instruction {at} jumps past the end"));
        }
        Ok(t)
    }

    /// Resolves every label to a relative offset, with a `ja`
    /// trampoline after each conditional jump whose target is more than
    /// [`MAX_COND_JUMP`] instructions ahead. Errors: a label never
    /// bound or bound twice, a backward jump or one past the end, a
    /// last instruction that is not a `ret` (the kernel refuses it).
    pub(super) fn finish(self) -> Result<Program, String> {
        if let Some(e) = self.error {
            return Err(e);
        }
        let n = self.insns.len();
        match self.insns.last() {
            Some(Insn::Plain { code: RET_K, .. }) => {}
            _ => return Err("the program does not end with a ret".into()),
        }
        // Targets as instruction indexes: [jt, jf] (a `ja`'s twice).
        let mut targets = vec![[0usize; 2]; n];
        for (i, insn) in self.insns.iter().enumerate() {
            targets[i] = match insn {
                Insn::Plain { .. } => [0, 0],
                Insn::Cond { jt, jf, .. } => [self.target(i, *jt)?, self.target(i, *jf)?],
                Insn::Ja(l) => {
                    let t = self.target(i, Dest::To(*l))?;
                    [t, t]
                }
            };
        }
        // far[i][side]: that side of conditional jump i goes through a
        // trampoline. Only ever set, so this ends (at most 2n rounds).
        let mut far = vec![[false; 2]; n];
        let pos = loop {
            let pos = positions(&far);
            let mut changed = false;
            for (i, insn) in self.insns.iter().enumerate() {
                if let Insn::Cond { .. } = insn {
                    for side in 0..2 {
                        let offset = pos[targets[i][side]] - pos[i] - 1;
                        if !far[i][side] && offset > MAX_COND_JUMP {
                            far[i][side] = true;
                            changed = true;
                        }
                    }
                }
            }
            if !changed {
                break pos;
            }
        };
        let mut out = Program::with_capacity(pos[n]);
        let offset = |from: usize, to: usize| to - from - 1;
        for (i, insn) in self.insns.iter().enumerate() {
            let p = pos[i];
            match insn {
                Insn::Plain { code, k } => out.push(stmt(*code, *k)),
                Insn::Ja(_) => {
                    let k = u32::try_from(offset(p, pos[targets[i][0]]))
                        .map_err(|_| "a ja offset beyond 32 bits".to_string())?;
                    out.push(stmt(JA, k));
                }
                Insn::Cond { code, k, .. } => {
                    let [far_t, far_f] = far[i];
                    // The trampolines' slots, right after the jump.
                    let ja_t = p + 1;
                    let ja_f = p + 1 + usize::from(far_t);
                    let [t, f] = targets[i];
                    let jt = if far_t {
                        offset(p, ja_t)
                    } else {
                        offset(p, pos[t])
                    };
                    let jf = if far_f {
                        offset(p, ja_f)
                    } else {
                        offset(p, pos[f])
                    };
                    let short = |o: usize| {
                        u8::try_from(o).map_err(|_| format!("jump offset {o} left unresolved"))
                    };
                    out.push(libc::sock_filter {
                        code: *code,
                        jt: short(jt)?,
                        jf: short(jf)?,
                        k: *k,
                    });
                    for (is_far, slot, target) in [(far_t, ja_t, t), (far_f, ja_f, f)] {
                        if is_far {
                            let k = u32::try_from(offset(slot, pos[target]))
                                .map_err(|_| "a ja offset beyond 32 bits".to_string())?;
                            out.push(stmt(JA, k));
                        }
                    }
                }
            }
        }
        debug_assert_eq!(out.len(), pos[n]);
        Ok(out)
    }
}

/// Where each instruction lands once the trampolines in `far` are in:
/// `pos[i]` for `i` in `0..=n` (`pos[n]` is the length).
fn positions(far: &[[bool; 2]]) -> Vec<usize> {
    let mut pos = Vec::with_capacity(far.len() + 1);
    let mut p = 0;
    for f in far {
        pos.push(p);
        p += 1 + usize::from(f[0]) + usize::from(f[1]);
    }
    pos.push(p);
    pos
}

fn stmt(code: u16, k: u32) -> libc::sock_filter {
    libc::sock_filter {
        code,
        jt: 0,
        jf: 0,
        k,
    }
}
