//! The conformance tests that are plain programs (`harness = false`), one
//! binary: each re-executes this binary (under a seccomp filter of its
//! own, as uid 65534 with another HOME and cwd, as a gate it then kills)
//! or is itself the probe child of a registry of its own, which libtest's
//! harness cannot host. `main` first lets a re-executed copy do its part
//! and exit, then runs the tests libtest's arguments choose, one after
//! another.

#[cfg(target_os = "linux")]
#[path = "../common/mod.rs"]
mod common;
#[cfg(target_os = "linux")]
#[path = "../../../backend-linux/tests/common/container_filter.rs"]
mod container_filter;
// libtest's arguments (filters, `--list`, `--skip`), read the way the
// backend's drivers read them.
#[cfg(target_os = "linux")]
#[path = "../../../backend-linux/tests/common/driver.rs"]
#[allow(dead_code)]
mod driver;
#[cfg(target_os = "linux")]
mod gate_killed;
#[cfg(target_os = "linux")]
mod outer_filter;
#[cfg(target_os = "linux")]
mod registry;
#[cfg(target_os = "linux")]
mod tier_landlock;
#[cfg(target_os = "linux")]
mod uid_and_home;

#[cfg(not(target_os = "linux"))]
fn main() {}

#[cfg(target_os = "linux")]
fn main() {
    // A re-executed copy: a probe child (through P42's registry, which
    // dispatches the standard probes as the standard one does), or the
    // inner side of a test.
    registry::child_or_return();
    gate_killed::gate_or_return();
    outer_filter::inner_or_return();
    tier_landlock::inner_or_return();
    uid_and_home::inner_or_return();

    let tests: [(&str, fn()); 5] = [
        (registry::NAME, registry::run),
        (outer_filter::NAME, outer_filter::run),
        (uid_and_home::NAME, uid_and_home::run),
        (tier_landlock::NAME, tier_landlock::run),
        (gate_killed::NAME, gate_killed::run),
    ];
    let names: Vec<&str> = tests.iter().map(|(n, _)| *n).collect();
    let chosen = driver::Selection::from_env().chosen_or_exit(&names);
    println!("running {} tests", chosen.len());
    for (name, test) in tests {
        if chosen.contains(&name) {
            test();
            println!("test {name} ... ok");
        }
    }
}
