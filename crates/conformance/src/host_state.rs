//! The confinement the host process itself runs under: what its children
//! inherit whatever the backend does, so what decides which checks can
//! tell a sandbox from none on this host.
//!
//! Read from `/proc/self/status` (seccomp mode and filter count,
//! no_new_privs, the capability sets) and `/proc/self/cgroup`. It is part
//! of the report cache's key (a report made under an outer seccomp filter
//! is not reused outside it, nor the other way round), P7 compares the
//! program's state with it, and an unproven probe's detail names it.
//!
//! Not visible to the process, and so not in it: whether it runs inside a
//! Landlock domain (the kernel offers no query for that), an AppArmor or
//! SELinux profile's rules, or a container's mount and network setup.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The host process's own confinement, as `/proc` shows it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostConfinement {
    /// `Seccomp` (0 none, 1 strict, 2 filter).
    pub seccomp: String,
    /// `Seccomp_filters`: how many filters are stacked on it.
    pub seccomp_filters: String,
    /// `NoNewPrivs`.
    pub no_new_privs: String,
    /// `CapEff`, `CapBnd` (hex).
    pub cap_eff: String,
    /// The bounding set.
    pub cap_bnd: String,
    /// `/proc/self/cgroup`, its lines joined.
    pub cgroup: String,
}

impl HostConfinement {
    /// This process's.
    pub fn current() -> HostConfinement {
        let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
        let fields: BTreeMap<&str, &str> = status
            .lines()
            .filter_map(|l| l.split_once(':'))
            .map(|(k, v)| (k, v.trim()))
            .collect();
        let f = |k: &str| fields.get(k).copied().unwrap_or("").to_string();
        HostConfinement {
            seccomp: f("Seccomp"),
            seccomp_filters: f("Seccomp_filters"),
            no_new_privs: f("NoNewPrivs"),
            cap_eff: f("CapEff"),
            cap_bnd: f("CapBnd"),
            cgroup: std::fs::read_to_string("/proc/self/cgroup")
                .unwrap_or_default()
                .trim()
                .replace('\n', " "),
        }
    }

    /// How many seccomp filters the host runs under (0 when none).
    pub fn filters(&self) -> u64 {
        self.seccomp_filters.parse().unwrap_or(0)
    }

    /// What the host's own confinement gives every child, in words, for an
    /// unproven probe's detail; `None` when it is unconfined.
    pub fn describe(&self) -> Option<String> {
        let mut parts = Vec::new();
        if self.seccomp == "2" {
            parts.push(format!(
                "a seccomp filter ({} stacked)",
                self.seccomp_filters
            ));
        }
        if self.no_new_privs == "1" {
            parts.push("no_new_privs".to_string());
        }
        if u64::from_str_radix(&self.cap_eff, 16).unwrap_or(0) == 0 {
            parts.push("no capabilities".to_string());
        }
        (!parts.is_empty()).then(|| {
            format!(
                "the host process itself runs with {} (a container or a service manager's \
                 sandbox), which every child inherits",
                parts.join(", ")
            )
        })
    }
}
