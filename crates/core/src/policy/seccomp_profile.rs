//! A seccomp profile of the caller's own (an OCI bundle's
//! `linux.seccomp`), stacked on the backend's filter: the kernel runs
//! every filter and takes the most restrictive answer, so this can only
//! take away. Backend-neutral; a backend that cannot stack one refuses a
//! policy that has one.

use serde::{Deserialize, Serialize};

/// A profile: what each listed call gets, and the default for the rest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SeccompProfile {
    /// For a call no rule matches.
    pub default: SeccompAction,
    /// The rules; several for one call match if any does.
    pub rules: Vec<SeccompRule>,
}

/// What a matched call gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum SeccompAction {
    /// Runs (if the backend's filter lets it).
    Allow,
    /// Fails with this errno.
    Errno(u32),
    /// The calling thread is killed.
    KillThread,
    /// The process is killed.
    KillProcess,
    /// `SIGSYS` is sent.
    Trap,
    /// Runs, and is logged.
    Log,
}

/// One rule: calls by name, the conditions on their arguments (all must
/// hold), the action.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SeccompRule {
    /// Call names (`openat`).
    pub names: Vec<String>,
    /// What they get when every condition holds.
    pub action: SeccompAction,
    /// Conditions on the arguments.
    pub args: Vec<SeccompArg>,
}

/// A condition on one argument, compared as 64 bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SeccompArg {
    /// Which argument (0 to 5).
    pub index: u8,
    /// How it is compared.
    pub op: SeccompOp,
    /// The value compared with (for [`SeccompOp::MaskedEq`], the mask).
    pub value: u64,
    /// [`SeccompOp::MaskedEq`]'s value: `arg & value == value_two`.
    pub value_two: u64,
}

/// A comparison ([`SeccompArg`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum SeccompOp {
    /// `!=`
    Ne,
    /// `<`
    Lt,
    /// `<=`
    Le,
    /// `==`
    Eq,
    /// `>=`
    Ge,
    /// `>`
    Gt,
    /// `arg & value == value_two`
    MaskedEq,
}
