//! Which [`Tier`] a backend uses on this host, decided once: the one it
//! was told to require, or the strongest whose mechanisms the host really
//! has (tried, not guessed: `probe.rs`). Never a quiet step down: a
//! required tier the host lacks makes the backend unavailable, and the
//! host facts say why a stronger tier was passed over.

use super::{probe, uid};
use crate::{Layers, Tier};

/// The decision, kept by the backend for its whole life.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Choice {
    /// The tier, or why no tier can run here (each one's reason).
    tier: Result<Tier, String>,
    /// The tier was required, not chosen.
    pub(crate) required: bool,
    /// Why the stronger tier was not taken (a chosen [`Tier::Landlock`]).
    pub(crate) passed_over: Option<String>,
}

impl Choice {
    /// `required`, or the strongest tier whose mechanisms this host has.
    pub(crate) fn decide(
        required: Option<Tier>,
        layers: Layers,
        pool: Result<&uid::UidPool, &str>,
    ) -> Choice {
        if let Some(tier) = required {
            return Choice {
                tier: Ok(tier),
                required: true,
                passed_over: None,
            };
        }
        let namespaces = match probe::namespaces(layers) {
            Ok(()) => {
                return Choice {
                    tier: Ok(Tier::Namespaces),
                    required: false,
                    passed_over: None,
                }
            }
            Err(why) => why,
        };
        let landlock = missing(Tier::Landlock, layers, pool);
        Choice {
            tier: if landlock.is_empty() {
                Ok(Tier::Landlock)
            } else {
                Err(format!(
                    "no tier can run here: tier namespaces: {namespaces}; tier landlock: {}",
                    landlock.join("; ")
                ))
            },
            required: false,
            passed_over: Some(namespaces),
        }
    }

    /// The tier in use, or why none can run here.
    pub(crate) fn tier(&self) -> Result<Tier, String> {
        self.tier.clone()
    }

    /// What the `tier` host fact says.
    pub(crate) fn describe(&self) -> String {
        let how = if self.required {
            " (required)"
        } else {
            " (the strongest this host allows)"
        };
        match (&self.tier, &self.passed_over) {
            (Ok(Tier::Namespaces), _) => format!("namespaces{how}"),
            (Ok(Tier::Landlock), Some(why)) => format!(
                "landlock: no namespaces, because tier namespaces is unavailable here ({why})"
            ),
            (Ok(Tier::Landlock), None) => format!("landlock: no namespaces{how}"),
            (Err(why), _) => format!("none: {why}"),
        }
    }
}

/// Why `tier` cannot run here, one reason per missing mechanism (empty:
/// it can).
pub(crate) fn missing(
    tier: Tier,
    layers: Layers,
    pool: Result<&uid::UidPool, &str>,
) -> Vec<String> {
    let mut reasons = Vec::new();
    // SAFETY: geteuid has no preconditions.
    if layers.own_uid && unsafe { libc::geteuid() } == 0 {
        if let Err(r) = pool.map_err(str::to_string).and_then(uid::UidPool::usable) {
            reasons.push(r);
        }
    }
    match probe::landlock_abi() {
        Ok(abi) if tier == Tier::Landlock && abi < probe::SCOPING_ABI => reasons.push(format!(
            "tier landlock needs Landlock ABI {} (Linux >= 6.12), which scopes signals and \
             abstract UNIX sockets to the sandbox (what the PID and IPC namespaces do in tier \
             namespaces); this kernel has Landlock ABI {abi}: upgrade the kernel, or allow \
             user namespaces for tier namespaces",
            probe::SCOPING_ABI
        )),
        Ok(_) => {}
        Err(r) => reasons.push(r),
    }
    if let Err(r) = probe::seccomp() {
        reasons.push(r);
    }
    // SAFETY: geteuid has no preconditions.
    let caller_uid = unsafe { libc::geteuid() } != 0;
    if let Err(r) = super::compiled_filters(super::filter_for(
        layers,
        Some(tier),
        super::Sockets::None,
        caller_uid,
    )) {
        reasons.push(r);
    }
    if tier == Tier::Namespaces {
        if let Err(r) = probe::namespaces(layers) {
            reasons.push(r);
        }
    }
    reasons
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_required_tier_is_kept_and_named() {
        let pool = crate::UidPool::from_env();
        let pool = pool.as_ref().map_err(String::as_str);
        for tier in Tier::ALL {
            let c = Choice::decide(Some(tier), Layers::ALL, pool);
            assert_eq!(c.tier(), Ok(tier));
            assert!(c.describe().starts_with(tier.name()), "{}", c.describe());
            assert!(c.passed_over.is_none());
        }
    }

    #[test]
    fn a_passed_over_tier_is_named_with_its_reason() {
        let c = Choice {
            tier: Ok(Tier::Landlock),
            required: false,
            passed_over: Some("unshare: EPERM".into()),
        };
        assert!(c
            .describe()
            .contains("tier namespaces is unavailable here (unshare: EPERM)"));
        let none = Choice {
            tier: Err("no tier can run here: ...".into()),
            required: false,
            passed_over: None,
        };
        assert!(none.describe().starts_with("none: "));
    }

    #[test]
    fn names_parse_back() {
        for tier in Tier::ALL {
            assert_eq!(Tier::parse(tier.name()), Some(tier));
        }
        assert_eq!(Tier::parse("namespace"), None);
    }
}
