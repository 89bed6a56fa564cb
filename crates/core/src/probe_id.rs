//! [`ProbeId`]: names a conformance probe, and says which probes the gate
//! requires of a backend.
//!
//! The probes themselves (their titles, checks and both sides) live in
//! `cordon-conformance`'s registry; core knows only their ids and the
//! gate's contract: every backend passes [`ProbeId::REQUIRED`], and a
//! backend that claims what a probe of [`ProbeId::CLAIMED`] tests passes
//! that one too ([`ProbeId::required_of`]). A suite may run more probes
//! than these (a registry can hold others); each one it runs must pass.

use serde::{Deserialize, Serialize};

use crate::backend::SandboxBackend;

/// A conformance probe, by number: `P1`, `P2`, … (its `Display` and its
/// JSON form).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ProbeId(u8);

impl ProbeId {
    /// Process isolation.
    pub const P1: ProbeId = ProbeId(1);
    /// No inherited secret.
    pub const P2: ProbeId = ProbeId(2);
    /// No inherited file descriptor.
    pub const P3: ProbeId = ProbeId(3);
    /// No network egress.
    pub const P4: ProbeId = ProbeId(4);
    /// Filesystem confinement.
    pub const P5: ProbeId = ProbeId(5);
    /// Resource limits.
    pub const P6: ProbeId = ProbeId(6);
    /// No privilege re-escalation.
    pub const P7: ProbeId = ProbeId(7);
    /// The egress allowlist holds (`Network::Allow`): required only of a
    /// backend that claims it
    /// ([`SandboxBackend::claims_egress_allowlist`]).
    pub const P8: ProbeId = ProbeId(8);

    /// The probes every backend must pass, P1 to P7.
    pub const REQUIRED: [ProbeId; 7] = [
        ProbeId::P1,
        ProbeId::P2,
        ProbeId::P3,
        ProbeId::P4,
        ProbeId::P5,
        ProbeId::P6,
        ProbeId::P7,
    ];

    /// The probes required only of a backend that claims what they test:
    /// P8, the egress allowlist.
    pub const CLAIMED: [ProbeId; 1] = [ProbeId::P8];

    /// The probe numbered `n` (`P<n>`); `None` for 0.
    pub const fn new(n: u8) -> Option<ProbeId> {
        if n == 0 {
            None
        } else {
            Some(ProbeId(n))
        }
    }

    /// Its number.
    pub const fn number(self) -> u8 {
        self.0
    }

    /// Every probe `backend` must pass for the gate to admit it:
    /// [`REQUIRED`](Self::REQUIRED), then P8 if it claims the egress
    /// allowlist.
    pub fn required_of(backend: &dyn SandboxBackend) -> Vec<ProbeId> {
        let mut ids = ProbeId::REQUIRED.to_vec();
        if backend.claims_egress_allowlist() {
            ids.push(ProbeId::P8);
        }
        ids
    }

    /// Parses `P<n>` (case-insensitive, `n` from 1 to 255). Whether a
    /// suite has that probe is the suite's to say.
    pub fn parse(s: &str) -> Option<ProbeId> {
        let s = s.trim();
        let digits = s.strip_prefix(['P', 'p'])?;
        if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        digits.parse().ok().and_then(ProbeId::new)
    }
}

impl std::fmt::Display for ProbeId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "P{}", self.0)
    }
}

impl Serialize for ProbeId {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for ProbeId {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        ProbeId::parse(&s)
            .ok_or_else(|| serde::de::Error::custom(format!("`{s}` is not a probe id (P1, P2, …)")))
    }
}

#[cfg(test)]
mod tests {
    use super::ProbeId;

    #[test]
    fn parses_what_it_prints_and_nothing_else() {
        for n in 1..=255u8 {
            let id = ProbeId::new(n).unwrap();
            assert_eq!(ProbeId::parse(&id.to_string()), Some(id));
        }
        assert_eq!(ProbeId::parse(" p8 "), Some(ProbeId::P8));
        for bad in ["", "P", "P0", "P256", "P+1", "P-1", "Q1", "P1x", "1"] {
            assert_eq!(ProbeId::parse(bad), None, "{bad:?}");
        }
        let json = serde_json::to_string(&ProbeId::P7).unwrap();
        assert_eq!(json, "\"P7\"");
        assert_eq!(serde_json::from_str::<ProbeId>(&json).unwrap(), ProbeId::P7);
        assert!(serde_json::from_str::<ProbeId>("\"P0\"").is_err());
    }
}
