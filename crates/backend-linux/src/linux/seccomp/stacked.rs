//! A caller's own seccomp profile (an OCI bundle's `linux.seccomp`:
//! [`cordon_core::policy::SeccompProfile`]), compiled to filters that are
//! installed after Cordon's own. The kernel runs every filter and takes
//! the most restrictive answer, so they can only take away.
//!
//! seccompiler compiles one match action per filter, so a profile becomes
//! one filter per action its rules use (that action for the calls they
//! match, allow for the rest) and one for its default (allow for a call
//! any rule matches, the default for the rest). A call no table of
//! Cordon's names is unlisted in Cordon's filter, which fails it with
//! `ENOSYS` whatever the profile says: its rules are left out.

use std::collections::BTreeMap;

use cordon_core::policy::{SeccompAction, SeccompOp, SeccompProfile};
use seccompiler::{SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter, SeccompRule};

use super::Program;

/// A call's number on this architecture, from the kernel's whole table
/// (not Cordon's: a call Cordon's filter leaves out, such as `clone3`,
/// must still get the profile's own answer, its `ENOSYS` say, rather than
/// the profile's default).
fn number(name: &str) -> Option<i64> {
    name.parse::<syscalls::Sysno>()
        .ok()
        .map(|s| i64::from(s.id()))
}

fn action(a: SeccompAction) -> seccompiler::SeccompAction {
    match a {
        SeccompAction::Allow => seccompiler::SeccompAction::Allow,
        SeccompAction::Errno(e) => seccompiler::SeccompAction::Errno(e),
        SeccompAction::KillThread => seccompiler::SeccompAction::KillThread,
        SeccompAction::KillProcess => seccompiler::SeccompAction::KillProcess,
        SeccompAction::Trap => seccompiler::SeccompAction::Trap,
        SeccompAction::Log => seccompiler::SeccompAction::Log,
    }
}

/// The filters for `profile`, in install order.
pub(crate) fn compile(profile: &SeccompProfile) -> Result<Vec<Program>, String> {
    let arch = seccompiler::TargetArch::try_from(std::env::consts::ARCH)
        .map_err(|e| format!("seccomp profile: {e}"))?;
    let err = |e: seccompiler::BackendError| format!("seccomp profile: {e}");
    // Each rule's calls with its conditions, under its action; `None` for
    // a call matched whatever its arguments (seccompiler's empty list).
    type Calls = BTreeMap<i64, Option<Vec<SeccompRule>>>;
    let mut by_action: Vec<(SeccompAction, Calls)> = Vec::new();
    let mut any: Calls = BTreeMap::new();
    for rule in &profile.rules {
        let conditions = rule
            .args
            .iter()
            .map(|a| {
                let (op, value) = match a.op {
                    SeccompOp::Ne => (SeccompCmpOp::Ne, a.value),
                    SeccompOp::Lt => (SeccompCmpOp::Lt, a.value),
                    SeccompOp::Le => (SeccompCmpOp::Le, a.value),
                    SeccompOp::Eq => (SeccompCmpOp::Eq, a.value),
                    SeccompOp::Ge => (SeccompCmpOp::Ge, a.value),
                    SeccompOp::Gt => (SeccompCmpOp::Gt, a.value),
                    SeccompOp::MaskedEq => (SeccompCmpOp::MaskedEq(a.value), a.value_two),
                };
                SeccompCondition::new(a.index, SeccompCmpArgLen::Qword, op, value)
            })
            .collect::<Result<Vec<_>, _>>()
            .map_err(err)?;
        for name in &rule.names {
            // A name this architecture has no call of (another's): as
            // libseccomp, nothing to filter.
            let Some(nr) = number(name) else {
                continue;
            };
            if !by_action.iter().any(|(a, _)| *a == rule.action) {
                by_action.push((rule.action, BTreeMap::new()));
            }
            let slot = &mut by_action
                .iter_mut()
                .find(|(a, _)| *a == rule.action)
                .expect("pushed above")
                .1;
            for m in [slot, &mut any] {
                let entry = m.entry(nr).or_insert_with(|| Some(Vec::new()));
                match (entry.as_mut(), conditions.is_empty()) {
                    // Matched whatever the arguments already.
                    (None, _) => {}
                    (Some(_), true) => *entry = None,
                    (Some(v), false) => v.push(SeccompRule::new(conditions.clone()).map_err(err)?),
                }
            }
        }
    }
    let flat = |calls: Calls| -> BTreeMap<i64, Vec<SeccompRule>> {
        calls
            .into_iter()
            .map(|(nr, r)| (nr, r.unwrap_or_default()))
            .collect()
    };
    let mut filters = Vec::new();
    let mut add = |rules: BTreeMap<i64, Vec<SeccompRule>>,
                   mismatch: seccompiler::SeccompAction,
                   matched: seccompiler::SeccompAction|
     -> Result<(), String> {
        let f = SeccompFilter::new(rules, mismatch, matched, arch).map_err(err)?;
        let prog: seccompiler::BpfProgram = f.try_into().map_err(err)?;
        filters.push(
            prog.into_iter()
                .map(|i| libc::sock_filter {
                    code: i.code,
                    jt: i.jt,
                    jf: i.jf,
                    k: i.k,
                })
                .collect(),
        );
        Ok(())
    };
    if profile.default != SeccompAction::Allow {
        add(
            flat(any),
            action(profile.default),
            seccompiler::SeccompAction::Allow,
        )?;
    }
    for (a, calls) in by_action {
        if a != SeccompAction::Allow {
            add(flat(calls), seccompiler::SeccompAction::Allow, action(a))?;
        }
    }
    Ok(filters)
}
