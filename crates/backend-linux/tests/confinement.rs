//! Confinement tests for the Linux backend, through `Spawner::confined`.
//!
//! `harness = false`: every scenario runs in its own process (this binary
//! re-executed with `CORDON_LINUX_SCENARIO=<name>`), so the fail-closed
//! scenarios can install a seccomp filter on themselves. When run as root,
//! every scenario runs twice: as root and as uid 65534 (a copy of this
//! binary in a 0755 temp dir, started with uid/gid 65534). Every scenario
//! also runs under the container profile's filter
//! (`common/container_filter.rs`), where the backend must choose tier
//! landlock; `--host=plain|container` runs one of the two.
//!
//! Arguments as libtest's (`tests/common/driver.rs`): bare words filter,
//! `--exact`, `--skip NAME`, `--list`; a filter that matches no scenario
//! is an error. Prints `N passed, M reduced, K failed` (a reduced pass
//! checked less than its scenario claims, and says what with a `reduced:`
//! line) and exits non-zero on any
//! failure.

#[cfg(target_os = "linux")]
#[path = "common/driver.rs"]
mod driver;

#[cfg(target_os = "linux")]
#[path = "confinement/linux.rs"]
mod linux;

#[cfg(target_os = "linux")]
fn main() {
    linux::main();
}

#[cfg(not(target_os = "linux"))]
fn main() {
    println!("0 passed, 0 failed (the Linux backend is tested on Linux only)");
}
