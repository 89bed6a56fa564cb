//! `--tier`: a required tier is used or refused, never replaced. Under a
//! container runtime's seccomp filter (no user namespaces) `cordon run
//! --tier namespaces` exits 125 with the reason and runs nothing, while
//! plain `cordon run` and `cordon conformance` name tier landlock; on
//! this host as it is, `--tier landlock` is used (and said to be
//! required), and only the Linux backend takes a tier.

use std::process::Command;

mod common;
use common::{cordon, run, text};
#[path = "../../backend-linux/tests/common/container_filter.rs"]
mod container_filter;

const PATH: &str = "/usr/local/bin:/usr/bin:/bin";

fn in_container(cmd: &mut Command) -> &mut Command {
    container_filter::install_on(cmd.env("PATH", PATH))
}

#[test]
fn a_required_tier_namespaces_is_refused_in_a_container() {
    let cache = tempfile::tempdir().unwrap();
    let out = run(in_container(cordon(cache.path()).args([
        "run",
        "--tier",
        "namespaces",
        "--",
        "sh",
        "-c",
        "echo ran",
    ])));
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "{err}");
    assert_eq!(text(&out.stdout), "", "nothing ran: {err}");
    assert!(
        err.contains("tier namespaces is required and cannot run here")
            && err.contains("unshare: Operation not permitted"),
        "the refusal says why: {err}"
    );
    // The same command without --tier runs, in tier landlock, said once.
    let out = run(in_container(
        cordon(cache.path()).args(["run", "--", "sh", "-c", "echo ran"]),
    ));
    let err = text(&out.stderr);
    assert_eq!(text(&out.stdout), "ran\n", "{err}");
    assert_eq!(
        err.matches("cordon: sandbox tier landlock: no namespaces, because tier namespaces is unavailable here")
            .count(),
        1,
        "{err}"
    );
}

#[test]
fn cordon_conformance_names_tier_landlock_in_a_container() {
    let cache = tempfile::tempdir().unwrap();
    let out = run(in_container(
        cordon(cache.path()).args(["conformance", "--json"]),
    ));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", text(&out.stderr)));
    let tier = report["host"]["backend_facts"]["tier"]
        .as_str()
        .unwrap_or_default();
    assert!(tier.starts_with("landlock: no namespaces"), "{tier}");
    let given_up: Vec<String> = report["probes"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|p| p["checks"].as_array().unwrap().clone())
        .filter(|c| c["status"] == "given_up")
        .map(|c| c["name"].as_str().unwrap().to_string())
        .collect();
    assert!(
        given_up.contains(&"hostname-hidden".to_string()),
        "the given-up checks are in the report: {given_up:?}"
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stdout));
}

#[test]
fn tier_landlock_can_be_required_where_namespaces_work() {
    let cache = tempfile::tempdir().unwrap();
    let out = run(cordon(cache.path())
        .env("PATH", PATH)
        .args(["run", "--tier", "landlock", "--", "sh", "-c", "echo ran"]));
    let err = text(&out.stderr);
    assert_eq!(text(&out.stdout), "ran\n", "{err}");
    assert!(
        err.contains("cordon: sandbox tier landlock: no namespaces (required)"),
        "{err}"
    );
    let out = run(cordon(cache.path()).args([
        "run",
        "--backend",
        "noop",
        "--tier",
        "landlock",
        "--",
        "true",
    ]));
    assert_eq!(out.status.code(), Some(125));
    assert!(
        text(&out.stderr).contains("only the linux backend has tiers"),
        "{}",
        text(&out.stderr)
    );
}
