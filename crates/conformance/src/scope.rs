//! The scope a backend claims for each limit (its `limit_*` host facts),
//! so that P6 checks each limit at that scope: a backend that claims
//! `sandbox` gets the sandbox-wide checks and fails them if the claim does
//! not hold; one that says `per-process`, or says nothing, gets the
//! per-process checks only, and the report says so.

use std::collections::BTreeMap;

/// What a backend claims for one limit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Scope {
    /// `sandbox: <mechanism>`: the limit holds for every process of the
    /// sandbox together.
    Sandbox,
    /// `per-process: ...`, `per-file: ...` or anything else but
    /// `sandbox`: each process (or file) has its own.
    PerProcess,
    /// No `limit_*` fact at all (a third-party backend, say).
    Unstated,
}

impl Scope {
    /// Reads the fact `key`: a value starting with `sandbox` (`sandbox:`
    /// or just `sandbox`) claims sandbox scope, anything else does not.
    fn of(facts: &BTreeMap<String, String>, key: &str) -> Scope {
        match facts.get(key).map(|v| v.trim_start()) {
            None => Scope::Unstated,
            Some(v) if v == "sandbox" || v.starts_with("sandbox:") => Scope::Sandbox,
            Some(_) => Scope::PerProcess,
        }
    }

    /// True when the backend claims the limit for the sandbox as a whole.
    pub(crate) fn is_sandbox(&self) -> bool {
        *self == Scope::Sandbox
    }

    /// How the report names the scope a limit was checked at, for the
    /// per-process check of a limit whose sandbox-wide check is
    /// `sandbox_check`: the words say when that check was *not* run, and
    /// why.
    pub(crate) fn describe(&self, sandbox_check: &str) -> String {
        match self {
            Scope::Sandbox => format!(
                "claimed sandbox-wide: checked per process here and sandbox-wide by \
                 {sandbox_check}"
            ),
            Scope::PerProcess => format!(
                "per-process (not claimed sandbox-wide: the backend says per-process), so \
                 {sandbox_check} was not run"
            ),
            Scope::Unstated => format!(
                "per-process (not claimed sandbox-wide: the backend states no scope), so \
                 {sandbox_check} was not run"
            ),
        }
    }
}

/// The scope of each limit P6 checks at more than one scope.
/// (P6's process-limit check always counts every process of the
/// sandbox, whatever the backend claims; `limit_processes` only says
/// whether the budget is shared with the host's other processes of the
/// same uid.)
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LimitScopes {
    /// `limit_memory`.
    pub memory: Scope,
    /// `limit_cpu`.
    pub cpu: Scope,
    /// `limit_disk` (for a discarded scratch dir).
    pub disk: Scope,
    /// `limit_processes` starts `per-uid`: the process limit counts every
    /// task of the uid the sandbox runs as (no user namespace, and no uid
    /// of its own). Every sandbox of that uid shares it, and so does the
    /// unconfined control: the suite then runs P6, whose fork loop fills
    /// it, after every other probe and alone (`suite.rs`), and P6 its
    /// fork loop before its other children.
    pub processes_per_uid: bool,
}

impl LimitScopes {
    /// The scopes a backend's host facts claim.
    pub(crate) fn from_facts(facts: &BTreeMap<String, String>) -> Self {
        LimitScopes {
            memory: Scope::of(facts, "limit_memory"),
            cpu: Scope::of(facts, "limit_cpu"),
            disk: Scope::of(facts, "limit_disk"),
            processes_per_uid: facts
                .get("limit_processes")
                .is_some_and(|v| v.trim_start().starts_with("per-uid")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_sandbox_prefix_claims_sandbox_scope() {
        let facts: BTreeMap<String, String> = [
            ("limit_memory", "sandbox: cgroup v1 memory limit"),
            ("limit_memory_too", "sandbox"),
            ("limit_cpu", "per-process: RLIMIT_CPU"),
            ("limit_disk", "sandboxed per file"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let s = LimitScopes::from_facts(&facts);
        assert_eq!(s.memory, Scope::Sandbox);
        assert_eq!(Scope::of(&facts, "limit_memory_too"), Scope::Sandbox);
        assert_eq!(s.cpu, Scope::PerProcess);
        assert_eq!(s.disk, Scope::PerProcess);
        let none = LimitScopes::from_facts(&BTreeMap::new());
        assert_eq!(none.memory, Scope::Unstated);
        let said = none.memory.describe("sandbox-memory-limit");
        assert!(
            said.contains("per-process (not claimed sandbox-wide"),
            "{said}"
        );
        assert!(said.contains("sandbox-memory-limit was not run"), "{said}");
        assert!(!none.cpu.is_sandbox());
        assert!(!none.processes_per_uid && !s.processes_per_uid);
        let shared = BTreeMap::from([(
            "limit_processes".to_string(),
            "per-uid: RLIMIT_NPROC".to_string(),
        )]);
        assert!(LimitScopes::from_facts(&shared).processes_per_uid);
    }
}
