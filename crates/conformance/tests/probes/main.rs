//! The probes against real and broken backends, one binary: the Linux
//! backend whole and with only its base layers (`linux_backend`), the
//! no-op backend failing every probe (`noop_fails`), P8 (`egress`), forged
//! and unreachable manifests (`manifest`) and the baseline's keeper
//! (`keeper`). The tests that re-execute themselves or change this
//! process's environment are binaries of their own (`harness = false`,
//! `swapped_targets`).

#[path = "../common/mod.rs"]
mod common;
#[cfg(target_os = "linux")]
mod egress;
#[cfg(target_os = "linux")]
mod keeper;
#[cfg(target_os = "linux")]
mod linux_backend;
#[cfg(target_os = "linux")]
mod manifest;
mod noop_fails;
