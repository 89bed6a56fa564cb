//! The standard probes: P1–P7 for every backend, P8 for one that claims
//! the egress allowlist. Each file holds one probe: its registry entry
//! (a type implementing [`Probe`](crate::registry::Probe): id, title,
//! who must pass it, its declared checks), its `host` side (plants,
//! spawns, verifies from outside) and its `child` side (runs in the
//! sandbox).
//!
//! The list below is the registry's: adding a probe is a file here and
//! one line in it.

use std::sync::Arc;

use crate::registry::Probe;

/// Declares each probe's module and lists its type, in order.
macro_rules! standard_probes {
    ($($module:ident :: $probe:ident),* $(,)?) => {
        $(pub(crate) mod $module;)*

        /// The standard probes, in order.
        pub(crate) fn standard() -> Vec<Arc<dyn Probe>> {
            vec![$(Arc::new($module::$probe)),*]
        }
    };
}

/// P8's run with the credential broker (part of P8, not a probe of its
/// own; Linux only, as the broker).
#[cfg(all(target_os = "linux", feature = "broker"))]
pub(crate) mod p8_broker;

standard_probes![
    p1::P1,
    p2::P2,
    p3::P3,
    p4::P4,
    p5::P5,
    p6::P6,
    p7::P7,
    p8::P8,
];
