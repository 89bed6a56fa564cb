//! The guard for "a second `cargo xtask` rebuilds nothing": runs the builds
//! xtask runs, again and alternating with plain `cargo`, and reads cargo's
//! own `fresh` flag for every compiled unit (no timing).
//!
//! It uses the workspace's target dir, so it only compiles what is missing
//! there (the first time: the gate build and the default `cordon`, which
//! `cargo test -p cordon` builds anyway) and never rebuilds anything that
//! is up to date. A small fixture crate in a temp dir, with a build script
//! that declares `rerun-if-env-changed=CARGO_MANIFEST_DIR` as `ring` does,
//! shows the check failing under the environment xtask used to pass on.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::Path;
use std::process::Command;

use serde_json::Value;

use crate::cargo::{self, Build};

/// The environment `cargo run -p xtask` gives xtask: this test's own plus
/// the variables cargo sets for a binary it runs, with xtask's values (set
/// explicitly, so the test does not depend on how it was started).
fn as_under_cargo_run() -> Vec<(OsString, OsString)> {
    let mut env: BTreeMap<OsString, OsString> = std::env::vars_os().collect();
    let set = [
        (
            "CARGO",
            cargo::cargo_binary().into_string().unwrap_or_default(),
        ),
        ("CARGO_MANIFEST_DIR", env!("CARGO_MANIFEST_DIR").into()),
        (
            "CARGO_MANIFEST_PATH",
            format!("{}/Cargo.toml", env!("CARGO_MANIFEST_DIR")),
        ),
        ("CARGO_PKG_NAME", env!("CARGO_PKG_NAME").into()),
        ("CARGO_PKG_VERSION", env!("CARGO_PKG_VERSION").into()),
        (
            "CARGO_PKG_VERSION_MAJOR",
            env!("CARGO_PKG_VERSION_MAJOR").into(),
        ),
        (
            "CARGO_PKG_VERSION_MINOR",
            env!("CARGO_PKG_VERSION_MINOR").into(),
        ),
        (
            "CARGO_PKG_VERSION_PATCH",
            env!("CARGO_PKG_VERSION_PATCH").into(),
        ),
        (
            "CARGO_PKG_VERSION_PRE",
            env!("CARGO_PKG_VERSION_PRE").into(),
        ),
        ("CARGO_CRATE_NAME", env!("CARGO_CRATE_NAME").into()),
        ("CARGO_BIN_NAME", "xtask".into()),
    ];
    env.extend(set.map(|(k, v)| (k.into(), v.into())));
    env.into_iter().collect()
}

/// The cargo xtask starts, in the environment it has under `cargo run`.
fn xtask_cargo() -> Command {
    cargo::command_with_env(cargo::cargo_binary(), as_under_cargo_run())
}

/// The same cargo with that environment passed on as it is (what xtask did
/// before it removed cargo's variables).
fn unscrubbed_cargo() -> Command {
    let mut cmd = Command::new(cargo::cargo_binary());
    cmd.env_clear().envs(as_under_cargo_run());
    cmd
}

/// A cargo as a user starts it from a shell: this test's environment
/// without any `CARGO_*` variable that is not cargo configuration. An
/// allowlist, built independently of [`cargo::is_set_by_cargo`]'s list of
/// what to drop, so a variable that list misses shows up as a difference.
fn plain_cargo() -> Command {
    const CONFIG: &[&str] = &[
        "CARGO_HOME",
        "CARGO_TARGET_DIR",
        "CARGO_INCREMENTAL",
        "CARGO_LOG",
        "CARGO_CACHE_RUSTC_INFO",
        "CARGO_ENCODED_RUSTFLAGS",
        "CARGO_ENCODED_RUSTDOCFLAGS",
    ];
    const CONFIG_PREFIXES: &[&str] = &[
        "CARGO_BUILD_",
        "CARGO_PROFILE_",
        "CARGO_TERM_",
        "CARGO_NET_",
        "CARGO_HTTP_",
        "CARGO_REGISTRY_",
        "CARGO_REGISTRIES_",
        "CARGO_UNSTABLE_",
    ];
    let mut cmd = Command::new(cargo::cargo_binary());
    cmd.env_clear().envs(std::env::vars_os().filter(|(k, _)| {
        let k = k.to_string_lossy();
        !k.starts_with("CARGO")
            || CONFIG.contains(&&*k)
            || CONFIG_PREFIXES.iter().any(|p| k.starts_with(p))
    }));
    cmd
}

/// `(unit, fresh)` for every `compiler-artifact` message.
fn units(messages: &[String]) -> Vec<(String, bool)> {
    messages
        .iter()
        .filter_map(|m| serde_json::from_str::<Value>(m).ok())
        .filter(|v| v["reason"] == "compiler-artifact")
        .map(|v| {
            let unit = format!("{} ({})", v["package_id"], v["target"]["name"]);
            (unit, v["fresh"].as_bool().expect("fresh is a bool"))
        })
        .collect()
}

/// Panics unless every unit cargo reported was fresh.
fn assert_fresh(what: &str, messages: &[String]) {
    let units = units(messages);
    assert!(!units.is_empty(), "{what}: cargo reported no units");
    let rebuilt: Vec<_> = units.iter().filter(|(_, fresh)| !fresh).collect();
    assert!(rebuilt.is_empty(), "{what}: rebuilt {rebuilt:#?}");
}

/// Which file is at `path` (device, inode, size, modification time): a
/// build that replaced or rewrote it changes this.
fn identity(path: &Path) -> (u64, u64, u64, std::time::SystemTime) {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    (m.dev(), m.ino(), m.len(), m.modified().unwrap())
}

#[test]
fn xtask_builds_are_fresh_when_repeated_and_alternated_with_plain_cargo() {
    // What `cargo test -p cordon` and a plain `cargo build -p cordon` make:
    // default features, so the Starlark host and `ring` are in the graph.
    let full = Build {
        bin: "cordon",
        default_features: true,
        features: "",
        ..Build::GATE
    };
    let gate = Build::GATE;

    let first = gate.run(xtask_cargo()).unwrap();
    assert!(
        cargo::executable(&first, "cordon-gate").is_some_and(|p| p.is_file()),
        "no executable in {first:?}"
    );
    let names: Vec<String> = units(&first).into_iter().map(|(u, _)| u).collect();
    for heavy in ["cordon-starlark", "starlark", "reqwest", "rustls", "ring"] {
        assert!(
            !names
                .iter()
                .any(|u| u.contains(&format!("#{heavy}@")) || u.contains(&format!("/{heavy}#"))),
            "the gate build compiles {heavy}: {names:#?}"
        );
    }
    assert_fresh("the gate build again", &gate.run(xtask_cargo()).unwrap());
    assert_fresh(
        "the gate build from a plain cargo",
        &gate.run(plain_cargo()).unwrap(),
    );

    let users = cargo::executable(&full.run(plain_cargo()).unwrap(), "cordon")
        .expect("the default-feature build names its executable");
    let before = identity(&users);
    assert_fresh(
        "the gate build after a default-feature build",
        &gate.run(xtask_cargo()).unwrap(),
    );
    // The gate's build leaves the user's `cordon` (with `cordon star`)
    // where and as it was.
    assert_eq!(
        identity(&users),
        before,
        "the gate build replaced {}",
        users.display()
    );
    assert_fresh(
        "the default-feature build under xtask's environment",
        &full.run(xtask_cargo()).unwrap(),
    );
    assert_fresh(
        "the default-feature build from a plain cargo again",
        &full.run(plain_cargo()).unwrap(),
    );
}

/// A crate whose build script reads `CARGO_MANIFEST_DIR` the way `ring`'s
/// does, with a target dir of its own.
struct Fixture {
    dir: tempfile::TempDir,
}

impl Fixture {
    fn new() -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let write = |p: &str, s: &str| std::fs::write(dir.path().join(p), s).unwrap();
        write(
            "Cargo.toml",
            "[package]\nname = \"fixture\"\nversion = \"0.0.0\"\nedition = \"2021\"\n\n[workspace]\n",
        );
        write(
            "build.rs",
            "fn main() { println!(\"cargo:rerun-if-env-changed=CARGO_MANIFEST_DIR\"); }\n",
        );
        std::fs::create_dir(dir.path().join("src")).unwrap();
        write("src/lib.rs", "");
        Fixture { dir }
    }

    fn build(&self, mut cargo: Command) -> Vec<String> {
        let out = cargo
            .args(["build", "--message-format=json"])
            .env("CARGO_TARGET_DIR", self.dir.path().join("target"))
            .current_dir(self.dir.path())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(str::to_string)
            .collect()
    }
}

#[test]
fn the_check_catches_what_xtask_used_to_pass_on() {
    let fixture = Fixture::new();
    fixture.build(plain_cargo());
    assert_fresh("xtask's environment", &fixture.build(xtask_cargo()));
    // Without removing cargo's variables the build script runs again and
    // the crate is rebuilt: the assertion above can fail.
    let rebuilt = units(&fixture.build(unscrubbed_cargo()));
    assert!(
        rebuilt.iter().any(|(_, fresh)| !fresh),
        "the unscrubbed environment should rebuild the fixture: {rebuilt:?}"
    );
}
