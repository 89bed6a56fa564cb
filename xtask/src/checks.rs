//! `cargo xtask checks`: the checks that must run cargo itself, kept out
//! of `cargo test` (a test that starts cargo builds again inside the test
//! build, with feature sets it does not share). CI runs them after
//! `cargo xtask conformance`, whose gate build they reuse.
//!
//! - **A second `cargo xtask` rebuilds nothing.** The builds xtask runs,
//!   again and alternating with plain `cargo`, read by cargo's own `fresh`
//!   flag for every compiled unit (no timing). A small fixture crate in a
//!   temp dir, with a build script that declares
//!   `rerun-if-env-changed=CARGO_MANIFEST_DIR` as `ring` does, shows the
//!   check failing under the environment xtask used to pass on.
//! - **The Starlark host's layers keep to their dependencies**
//!   (`docs/decisions/0011-starlark-layers.md`): the protocol and the
//!   worker build without an HTTP client or TLS (no reqwest, rustls or
//!   ring, on any target), the protocol without the interpreter, and no
//!   layer depends on one above it; read from `cargo tree`, with the host
//!   above them as the control that the check sees a client where there
//!   is one.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::cargo::{self, Build};

/// Runs every check; the failures, one per line.
pub fn run() -> Result<(), String> {
    let mut failures = Vec::new();
    for (name, check) in [
        ("fresh builds", fresh_builds as fn() -> Result<(), String>),
        ("the check catches an unscrubbed environment", fixture_check),
        ("Starlark layers", layers),
    ] {
        eprintln!("xtask checks: {name}");
        if let Err(e) = check() {
            failures.push(format!("{name}: {e}"));
        }
    }
    if failures.is_empty() {
        Ok(())
    } else {
        Err(failures.join("\n"))
    }
}

fn ensure(ok: bool, what: impl FnOnce() -> String) -> Result<(), String> {
    if ok {
        Ok(())
    } else {
        Err(what())
    }
}

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
        .filter(|m| m.contains(r#""reason":"compiler-artifact""#))
        .map(|m| {
            let id = cargo::json_string_after(m, r#""package_id":"#).unwrap_or_default();
            let target = m
                .find(r#""target":"#)
                .and_then(|at| cargo::json_string_after(&m[at..], r#""name":"#))
                .unwrap_or_default();
            (format!("{id} ({target})"), !m.contains(r#""fresh":false"#))
        })
        .collect()
}

/// An error unless every unit cargo reported was fresh.
fn fresh(what: &str, messages: &[String]) -> Result<(), String> {
    let units = units(messages);
    ensure(!units.is_empty(), || {
        format!("{what}: cargo reported no units")
    })?;
    let rebuilt: Vec<&String> = units.iter().filter(|(_, f)| !f).map(|(u, _)| u).collect();
    ensure(rebuilt.is_empty(), || {
        format!("{what}: rebuilt {rebuilt:#?}")
    })
}

/// Which file is at `path` (device, inode, size, modification time): a
/// build that replaced or rewrote it changes this.
fn identity(path: &Path) -> Result<(u64, u64, u64, std::time::SystemTime), String> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(path).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok((
        m.dev(),
        m.ino(),
        m.len(),
        m.modified().map_err(|e| e.to_string())?,
    ))
}

fn fresh_builds() -> Result<(), String> {
    // What `cargo test -p cordon` and a plain `cargo build -p cordon` make:
    // default features, so the Starlark host and `ring` are in the graph.
    let full = Build {
        bin: "cordon",
        default_features: true,
        features: "",
        ..Build::GATE
    };
    let gate = Build::GATE;

    let first = gate.run(xtask_cargo())?;
    ensure(
        cargo::executable(&first, "cordon-gate").is_some_and(|p| p.is_file()),
        || "the gate build names no executable".into(),
    )?;
    let names: Vec<String> = units(&first).into_iter().map(|(u, _)| u).collect();
    for heavy in ["cordon-starlark", "starlark", "reqwest", "rustls", "ring"] {
        ensure(
            !names
                .iter()
                .any(|u| u.contains(&format!("#{heavy}@")) || u.contains(&format!("/{heavy}#"))),
            || format!("the gate build compiles {heavy}: {names:#?}"),
        )?;
    }
    fresh("the gate build again", &gate.run(xtask_cargo())?)?;
    fresh(
        "the gate build from a plain cargo",
        &gate.run(plain_cargo())?,
    )?;
    let users = cargo::executable(&full.run(plain_cargo())?, "cordon")
        .ok_or("the default-feature build names no executable")?;
    let before = identity(&users)?;
    fresh(
        "the gate build after a default-feature build",
        &gate.run(xtask_cargo())?,
    )?;
    // The gate's build leaves the user's `cordon` (with `cordon star`)
    // where and as it was.
    ensure(identity(&users)? == before, || {
        format!("the gate build replaced {}", users.display())
    })?;
    fresh(
        "the default-feature build under xtask's environment",
        &full.run(xtask_cargo())?,
    )?;
    fresh(
        "the default-feature build from a plain cargo again",
        &full.run(plain_cargo())?,
    )
}

/// A crate whose build script reads `CARGO_MANIFEST_DIR` the way `ring`'s
/// does, with a target dir of its own, in a temp dir removed on drop.
struct Fixture {
    dir: PathBuf,
}

impl Fixture {
    fn new() -> Result<Fixture, String> {
        let dir = std::env::temp_dir().join(format!("xtask-fixture-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let write = |p: &str, s: &str| {
            std::fs::write(dir.join(p), s).map_err(|e| format!("{}: {e}", dir.join(p).display()))
        };
        std::fs::create_dir_all(dir.join("src")).map_err(|e| e.to_string())?;
        let fixture = Fixture { dir: dir.clone() };
        write(
            "Cargo.toml",
            "[package]\nname = \"fixture\"\nversion = \"0.0.0\"\nedition = \"2021\"\n\n[workspace]\n",
        )?;
        write(
            "build.rs",
            "fn main() { println!(\"cargo:rerun-if-env-changed=CARGO_MANIFEST_DIR\"); }\n",
        )?;
        write("src/lib.rs", "")?;
        Ok(fixture)
    }

    fn build(&self, mut cargo: Command) -> Result<Vec<String>, String> {
        let out = cargo
            .args(["build", "--message-format=json"])
            .env("CARGO_TARGET_DIR", self.dir.join("target"))
            .current_dir(&self.dir)
            .output()
            .map_err(|e| format!("cannot run cargo: {e}"))?;
        ensure(out.status.success(), || {
            String::from_utf8_lossy(&out.stderr).into_owned()
        })?;
        Ok(String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(str::to_string)
            .collect())
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn fixture_check() -> Result<(), String> {
    let fixture = Fixture::new()?;
    fixture.build(plain_cargo())?;
    fresh("xtask's environment", &fixture.build(xtask_cargo())?)?;
    // Without removing cargo's variables the build script runs again and
    // the crate is rebuilt: the check above can fail.
    let rebuilt = units(&fixture.build(unscrubbed_cargo())?);
    ensure(rebuilt.iter().any(|(_, fresh)| !fresh), || {
        format!("the unscrubbed environment should rebuild the fixture: {rebuilt:?}")
    })
}

/// The packages `package` depends on for building it (normal edges only:
/// not its tests, not build scripts), on every target.
fn normal_dependencies(package: &str) -> Result<BTreeSet<String>, String> {
    let out = plain_cargo()
        .current_dir(cargo::workspace_root())
        .args(["tree", "-p", package, "-e", "normal", "--target", "all"])
        .args(["--prefix", "none", "--format", "{p}"])
        .output()
        .map_err(|e| format!("cannot run cargo tree: {e}"))?;
    ensure(out.status.success(), || {
        format!(
            "cargo tree -p {package}: {}",
            String::from_utf8_lossy(&out.stderr)
        )
    })?;
    let names: BTreeSet<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_owned)
        .collect();
    ensure(names.contains(package), || {
        format!("cargo tree's output names the package itself: {names:?}")
    })?;
    Ok(names)
}

/// The HTTP client and TLS stack the host's `http` and `provider` modules
/// use, which the layers below it must never pull in.
fn http_or_tls(names: &BTreeSet<String>) -> Vec<&String> {
    names
        .iter()
        .filter(|n| *n == "reqwest" || *n == "ring" || n.starts_with("rustls"))
        .collect()
}

fn layers() -> Result<(), String> {
    let protocol = normal_dependencies("cordon-starlark-protocol")?;
    ensure(http_or_tls(&protocol).is_empty(), || {
        format!("the protocol has {:?}", http_or_tls(&protocol))
    })?;
    for above in ["starlark", "cordon-starlark-worker", "cordon-starlark"] {
        ensure(!protocol.contains(above), || {
            format!("the protocol depends on {above}")
        })?;
    }
    let worker = normal_dependencies("cordon-starlark-worker")?;
    ensure(http_or_tls(&worker).is_empty(), || {
        format!("the worker has {:?}", http_or_tls(&worker))
    })?;
    ensure(worker.contains("starlark"), || {
        "control: the worker is the interpreter layer".into()
    })?;
    ensure(!worker.contains("cordon-starlark"), || {
        "the worker depends on the host above it".into()
    })?;
    // Control: the check sees an HTTP client where there is one, so the
    // checks above cannot pass by reading nothing.
    let host = normal_dependencies("cordon-starlark")?;
    ensure(!http_or_tls(&host).is_empty(), || {
        format!("the host's tree shows no reqwest or rustls: {host:?}")
    })?;
    for below in ["cordon-starlark-protocol", "cordon-starlark-worker"] {
        ensure(host.contains(below), || {
            format!("the host builds on {below}")
        })?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_and_freshness_are_read_from_cargos_messages() {
        let m = |fresh: bool| {
            format!(
                r#"{{"reason":"compiler-artifact","package_id":"path+file:///w/crates/core#cordon-core@0.1.0","manifest_path":"/w/Cargo.toml","target":{{"kind":["lib"],"name":"cordon_core","src_path":"/w/src/lib.rs"}},"fresh":{fresh}}}"#
            )
        };
        let messages = vec![
            m(true),
            r#"{"reason":"build-finished","success":true}"#.to_string(),
        ];
        assert_eq!(
            units(&messages),
            vec![(
                "path+file:///w/crates/core#cordon-core@0.1.0 (cordon_core)".to_string(),
                true
            )]
        );
        assert!(fresh("fresh", &messages).is_ok());
        assert!(fresh("rebuilt", &[m(false)]).is_err());
        assert!(fresh("nothing", &[]).is_err());
    }
}
