//! `Network::Namespace` is given in a joined network namespace only (a
//! container's, a pod's: `crates/oci/tests/runtime.rs` runs it there):
//! a sandbox of its own is refused it, and nothing runs.

use super::*;

/// Refused for a sandbox with no joined network namespace, in every tier
/// and as every caller, with the reason; the program never runs.
pub(super) fn own_network_is_refused_without_a_joined_namespace() -> Outcome {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("ran");
    let why = if on_container() {
        "Network::Namespace needs a network namespace of the sandbox's own"
    } else {
        "Network::Namespace is given in a joined network namespace only"
    };
    let spawner = spawner_with(RunnerConfig {
        network: Network::Namespace,
        ..config()
    });
    let script = format!("touch {}", marker.display());
    match run_with(&spawner, sh(&script)) {
        Err(e) if e.contains(why) => ensure(!marker.exists(), || "the program ran".into()),
        Err(e) => Err(format!("refused, but not for `{why}`: {e}")),
        Ok(r) => Err(format!("ran where it must be refused: {r}")),
    }
}
