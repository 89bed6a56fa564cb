//! The probes: P1–P7 for every backend, P8 for one that claims the egress
//! allowlist. Each file holds both sides of one probe: `host`
//! (plants, spawns, verifies from outside) and `child` (runs in the sandbox).

pub(crate) mod p1;
pub(crate) mod p2;
pub(crate) mod p3;
pub(crate) mod p4;
pub(crate) mod p5;
pub(crate) mod p6;
pub(crate) mod p7;
pub(crate) mod p8;
