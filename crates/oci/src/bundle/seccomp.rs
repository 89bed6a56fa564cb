//! `linux.seccomp` mapped onto a [`SeccompProfile`] stacked on Cordon's
//! filter.

use cordon_core::policy::{SeccompAction, SeccompArg, SeccompOp, SeccompProfile, SeccompRule};
use oci_spec::runtime::{LinuxSeccomp, LinuxSeccompAction, LinuxSeccompOperator};

/// `linux.seccomp`, stacked on Cordon's filter (it can only take away).
pub(super) fn seccomp_profile(p: &LinuxSeccomp) -> Result<SeccompProfile, String> {
    if p.listener_path().is_some() {
        return Err("linux.seccomp.listenerPath: a seccomp notify listener is refused".into());
    }
    if p.flags().as_ref().is_some_and(|f| !f.is_empty()) {
        return Err("linux.seccomp.flags: filter flags are not supported".into());
    }
    let act = |a: LinuxSeccompAction, errno: Option<u32>, field: &str| {
        Ok(match a {
            LinuxSeccompAction::ScmpActAllow => SeccompAction::Allow,
            // 0 would make a refused call look as if it ran; past 4095 it
            // is no errno.
            LinuxSeccompAction::ScmpActErrno => match errno.unwrap_or(libc::EPERM as u32) {
                e @ 1..=4095 => SeccompAction::Errno(e),
                e => return Err(format!("{field}: errnoRet {e} is refused (1 to 4095)")),
            },
            LinuxSeccompAction::ScmpActKill | LinuxSeccompAction::ScmpActKillThread => {
                SeccompAction::KillThread
            }
            LinuxSeccompAction::ScmpActKillProcess => SeccompAction::KillProcess,
            LinuxSeccompAction::ScmpActTrap => SeccompAction::Trap,
            LinuxSeccompAction::ScmpActLog => SeccompAction::Log,
            other => return Err(format!("{field}: {other:?} is not supported")),
        })
    };
    let mut rules = Vec::new();
    for (i, sc) in p.syscalls().iter().flatten().enumerate() {
        let field = format!("linux.seccomp.syscalls[{i}]");
        let mut args = Vec::new();
        for a in sc.args().iter().flatten() {
            if a.index() > 5 {
                return Err(format!(
                    "{field}: argument index {} is out of range",
                    a.index()
                ));
            }
            args.push(SeccompArg {
                index: a.index() as u8,
                op: match a.op() {
                    LinuxSeccompOperator::ScmpCmpNe => SeccompOp::Ne,
                    LinuxSeccompOperator::ScmpCmpLt => SeccompOp::Lt,
                    LinuxSeccompOperator::ScmpCmpLe => SeccompOp::Le,
                    LinuxSeccompOperator::ScmpCmpEq => SeccompOp::Eq,
                    LinuxSeccompOperator::ScmpCmpGe => SeccompOp::Ge,
                    LinuxSeccompOperator::ScmpCmpGt => SeccompOp::Gt,
                    LinuxSeccompOperator::ScmpCmpMaskedEq => SeccompOp::MaskedEq,
                },
                value: a.value(),
                value_two: a.value_two().unwrap_or(0),
            });
        }
        let action = act(sc.action(), sc.errno_ret(), &field)?;
        // Several conditions on one argument: any of them, one rule each
        // (runc's reading; libseccomp cannot AND them).
        let repeated = args
            .iter()
            .any(|a| args.iter().filter(|b| b.index == a.index).count() > 1);
        if repeated {
            for a in args {
                rules.push(SeccompRule {
                    names: sc.names().clone(),
                    action,
                    args: vec![a],
                });
            }
        } else {
            rules.push(SeccompRule {
                names: sc.names().clone(),
                action,
                args,
            });
        }
    }
    Ok(SeccompProfile {
        default: act(
            p.default_action(),
            p.default_errno_ret(),
            "linux.seccomp.defaultAction",
        )?,
        rules,
    })
}
