//! Starting cargo from xtask as if the user had typed the command: with the
//! user's environment minus what `cargo run` set for xtask itself.
//!
//! `cargo xtask` is an alias for `cargo run`, and cargo gives the binary it
//! runs the variables it sets for crates (`CARGO_MANIFEST_DIR`,
//! `CARGO_PKG_NAME`, …, with xtask's values). A cargo started with them
//! compares them with what build scripts declared with
//! `rerun-if-env-changed`: `ring` declares `CARGO_MANIFEST_DIR` and
//! `CARGO_PKG_*`, so `ring`, `rustls`, `reqwest`, the Starlark host and
//! `cordon` were rebuilt under xtask, and again under the next plain cargo.
//!
//! [`is_set_by_cargo`] names what is removed: every variable that cargo's
//! reference lists under "Environment variables Cargo sets for crates" (set
//! for `cargo run`/`cargo test` binaries too) and "… for build scripts" (in
//! case xtask runs under one). Everything else is kept, in particular
//! everything cargo reads as configuration: `CARGO_HOME`,
//! `CARGO_TARGET_DIR`, `CARGO_BUILD_*`, `CARGO_TERM_*`, `CARGO_PROFILE_*`,
//! `CARGO_INCREMENTAL`, `CARGO_LOG`, `CARGO_NET_*`, `CARGO_HTTP_*`,
//! `CARGO_REGISTRY_*`, `CARGO_ENCODED_RUSTFLAGS`, `RUSTFLAGS`, and
//! `RUSTUP_TOOLCHAIN` (it keeps the inner cargo on the outer one's
//! toolchain). `LD_LIBRARY_PATH`, which `cargo run` extends with target
//! dirs, is left as it is: no build script in the workspace declares it and
//! cargo's fingerprints do not read it (the freshness test would catch one
//! that did), while restoring the user's value would mean guessing which
//! entries cargo prepended.

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Variables cargo sets, by exact name.
const SET_BY_CARGO: &[&str] = &[
    "CARGO",
    "CARGO_MANIFEST_DIR",
    "CARGO_MANIFEST_PATH",
    "CARGO_MANIFEST_LINKS",
    "CARGO_CRATE_NAME",
    "CARGO_BIN_NAME",
    "CARGO_PRIMARY_PACKAGE",
    "CARGO_TARGET_TMPDIR",
    "CARGO_WORKSPACE_DIR",
    "CARGO_RUSTC_CURRENT_DIR",
    "CARGO_MAKEFLAGS",
];

/// Variables cargo sets, by prefix.
const SET_BY_CARGO_PREFIX: &[&str] = &[
    "CARGO_PKG_",
    "CARGO_BIN_EXE_",
    "CARGO_FEATURE_",
    "CARGO_CFG_",
];

/// Whether `name` is one of the variables cargo sets for the crates it
/// compiles and the binaries it runs (see the module docs for the list and
/// what is kept).
pub fn is_set_by_cargo(name: &OsStr) -> bool {
    let Some(name) = name.to_str() else {
        return false;
    };
    SET_BY_CARGO.contains(&name) || SET_BY_CARGO_PREFIX.iter().any(|p| name.starts_with(p))
}

/// The cargo that started xtask (`$CARGO`), else `cargo` from `PATH`.
pub fn cargo_binary() -> OsString {
    std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into())
}

/// `program` with `base` as its environment, minus what cargo set.
pub fn command_with_env(
    program: impl AsRef<OsStr>,
    base: impl IntoIterator<Item = (OsString, OsString)>,
) -> Command {
    let mut cmd = Command::new(program);
    cmd.env_clear()
        .envs(base.into_iter().filter(|(k, _)| !is_set_by_cargo(k)));
    cmd
}

/// The `cargo` command every build of xtask starts: this process's
/// environment without what cargo set for it.
pub fn cargo() -> Command {
    command_with_env(cargo_binary(), std::env::vars_os())
}

/// The workspace root (xtask's parent dir).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives in the workspace")
        .to_path_buf()
}

/// One `cargo build` of a binary that xtask runs.
#[derive(Debug, Clone, Copy)]
pub struct Build {
    /// `--package`.
    pub package: &'static str,
    /// `--bin`.
    pub bin: &'static str,
    /// `--release` (else the dev profile).
    pub release: bool,
    /// Without `--no-default-features` when true.
    pub default_features: bool,
    /// `--features`, when not empty.
    pub features: &'static str,
}

impl Build {
    /// What `cargo xtask conformance` runs: `cordon` without its `starlark`
    /// feature, so the Starlark host, reqwest and rustls are not built;
    /// under its other name, `cordon-gate`, so the build leaves the user's
    /// `target/debug/cordon` (with `cordon star`) as it was.
    pub const GATE: Build = Build {
        package: "cordon",
        bin: "cordon-gate",
        release: false,
        default_features: false,
        features: "gate",
    };

    /// The `cordon` command `cargo xtask bench` measures end to end
    /// (`cordon run -- /bin/true`): release, without the Starlark host.
    pub const BENCH_CLI: Build = Build {
        package: "cordon",
        bin: "cordon-gate",
        release: true,
        default_features: false,
        features: "gate",
    };

    /// The Starlark worker `cargo xtask bench` starts in its sandboxes:
    /// the dedicated `cordon-star-worker`, release (the bench's own binary,
    /// with PostgreSQL and TLS clients linked in, would measure those).
    pub const BENCH_WORKER: Build = Build {
        package: "cordon-starlark-worker",
        bin: "cordon-star-worker",
        release: true,
        default_features: true,
        features: "",
    };

    /// The OCI runtime `cargo xtask bench` measures against runc.
    pub const BENCH_RUNTIME: Build = Build {
        package: "cordon-oci",
        bin: "cordon-runtime",
        release: true,
        default_features: true,
        features: "",
    };

    /// What `cargo xtask bench` runs: the harness, in release mode (debug
    /// builds would measure the compiler, not Cordon).
    pub const BENCH: Build = Build {
        package: "xtask",
        bin: "cordon-bench",
        release: true,
        default_features: true,
        features: "",
    };

    /// What `cargo xtask docs` runs: the doc generator (debug: the same
    /// build `cargo test --workspace` makes for the tidy test).
    pub const DOCS: Build = Build {
        package: "xtask",
        bin: "cordon-docs",
        release: false,
        default_features: true,
        features: "",
    };

    /// The arguments after `cargo`.
    pub fn args(&self) -> Vec<&'static str> {
        let mut args = vec![
            "build",
            "--package",
            self.package,
            "--bin",
            self.bin,
            // Diagnostics and progress on stderr as usual; JSON messages,
            // which name the executable, on stdout.
            "--message-format=json-render-diagnostics",
        ];
        if self.release {
            args.push("--release");
        }
        if !self.default_features {
            args.push("--no-default-features");
        }
        if !self.features.is_empty() {
            args.extend(["--features", self.features]);
        }
        args
    }

    /// Runs the build with `cargo` (a cargo command with its environment
    /// set) in the workspace root; returns cargo's JSON messages.
    pub fn run(&self, mut cargo: Command) -> Result<Vec<String>, String> {
        let out = cargo
            .args(self.args())
            .current_dir(workspace_root())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .output()
            .map_err(|e| format!("cannot run cargo: {e}"))?;
        if !out.status.success() {
            return Err(format!("building `{}` failed", self.bin));
        }
        Ok(String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(str::to_string)
            .collect())
    }

    /// Builds with [`cargo()`] and returns the binary's path, as cargo
    /// reports it (so `CARGO_TARGET_DIR`, `build.target-dir` and
    /// `--target` are all honoured).
    pub fn executable(&self) -> Result<PathBuf, String> {
        let messages = self.run(cargo())?;
        executable(&messages, self.bin)
            .ok_or_else(|| format!("cargo did not report an executable for `{}`", self.bin))
    }
}

/// The `executable` of the `compiler-artifact` message for `bin`.
pub fn executable(messages: &[String], bin: &str) -> Option<PathBuf> {
    messages
        .iter()
        .filter(|m| m.contains(r#""reason":"compiler-artifact""#))
        .filter_map(|m| json_string_after(m, r#""executable":"#))
        .map(PathBuf::from)
        .find(|p| p.file_stem() == Some(OsStr::new(bin)))
}

/// The JSON string value right after `key` in `line`, unescaped. Enough
/// for cargo's messages: `"key":` can only match a real key there, since a
/// `"` inside a JSON string is always escaped.
pub fn json_string_after(line: &str, key: &str) -> Option<String> {
    let rest = &line[line.find(key)? + key.len()..];
    let mut chars = rest.strip_prefix('"')?.chars();
    let mut out = String::new();
    loop {
        match chars.next()? {
            '"' => return Some(out),
            '\\' => match chars.next()? {
                'n' => out.push('\n'),
                't' => out.push('\t'),
                'r' => out.push('\r'),
                'b' => out.push('\u{8}'),
                'f' => out.push('\u{c}'),
                'u' => {
                    let mut unit = || {
                        let hex: String = chars.by_ref().take(4).collect();
                        u32::from_str_radix(&hex, 16).ok()
                    };
                    let hi = unit()?;
                    let c = if (0xD800..0xDC00).contains(&hi) {
                        // A surrogate pair: `\uD83D\uDE00`.
                        if chars.next()? != '\\' || chars.next()? != 'u' {
                            return None;
                        }
                        let hex: String = chars.by_ref().take(4).collect();
                        let lo = u32::from_str_radix(&hex, 16).ok()?;
                        char::from_u32(0x10000 + ((hi - 0xD800) << 10) + (lo.checked_sub(0xDC00)?))?
                    } else {
                        char::from_u32(hi)?
                    };
                    out.push(c);
                }
                other => out.push(other), // `"`, `\`, `/`
            },
            c => out.push(c),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_cargo_sets_is_removed_and_configuration_kept() {
        for set in [
            "CARGO",
            "CARGO_MANIFEST_DIR",
            "CARGO_MANIFEST_PATH",
            "CARGO_PKG_NAME",
            "CARGO_PKG_VERSION_PRE",
            "CARGO_CRATE_NAME",
            "CARGO_BIN_NAME",
            "CARGO_BIN_EXE_cordon",
            "CARGO_PRIMARY_PACKAGE",
            "CARGO_TARGET_TMPDIR",
            "CARGO_FEATURE_STD",
            "CARGO_CFG_TARGET_OS",
        ] {
            assert!(is_set_by_cargo(OsStr::new(set)), "{set}");
        }
        for kept in [
            "CARGO_HOME",
            "CARGO_TARGET_DIR",
            "CARGO_TERM_COLOR",
            "CARGO_BUILD_JOBS",
            "CARGO_BUILD_TARGET_DIR",
            "CARGO_PROFILE_DEV_OPT_LEVEL",
            "CARGO_INCREMENTAL",
            "CARGO_ENCODED_RUSTFLAGS",
            "CARGO_NET_OFFLINE",
            "RUSTFLAGS",
            "RUSTUP_TOOLCHAIN",
            "PATH",
        ] {
            assert!(!is_set_by_cargo(OsStr::new(kept)), "{kept}");
        }
    }

    #[test]
    fn command_with_env_drops_what_cargo_set() {
        // What cargo set for this very test binary, with its real values.
        let given = [
            ("CARGO_MANIFEST_DIR", env!("CARGO_MANIFEST_DIR")),
            ("CARGO_PKG_NAME", env!("CARGO_PKG_NAME")),
            ("CARGO_PKG_VERSION", env!("CARGO_PKG_VERSION")),
            ("CARGO_CRATE_NAME", env!("CARGO_CRATE_NAME")),
            ("CARGO", env!("CARGO")),
        ];
        let cmd = command_with_env(
            "true",
            given
                .iter()
                .map(|(k, v)| (OsString::from(k), OsString::from(v)))
                .chain([("CARGO_TARGET_DIR".into(), "/t".into())]),
        );
        let envs: Vec<_> = cmd.get_envs().filter(|(_, v)| v.is_some()).collect();
        assert_eq!(
            envs,
            [(OsStr::new("CARGO_TARGET_DIR"), Some(OsStr::new("/t")))]
        );
    }

    #[test]
    fn build_arguments() {
        assert_eq!(
            Build::GATE.args(),
            [
                "build",
                "--package",
                "cordon",
                "--bin",
                "cordon-gate",
                "--message-format=json-render-diagnostics",
                "--no-default-features",
                "--features",
                "gate"
            ]
        );
        assert!(Build::BENCH.args().contains(&"--release"));
        assert!(!Build::BENCH.args().contains(&"--no-default-features"));
    }

    #[test]
    fn the_executable_is_read_from_cargo_messages() {
        let messages = [
            r#"{"reason":"compiler-artifact","package_id":"x","target":{"name":"libc"},"executable":null,"fresh":true}"#,
            r#"{"reason":"compiler-artifact","target":{"name":"cordon"},"executable":"/t/a \"q\" \\ \u00e9\ud83d\ude00/cordon","fresh":false}"#,
            r#"{"reason":"build-finished","success":true}"#,
        ]
        .map(String::from);
        assert_eq!(
            executable(&messages, "cordon"),
            Some(PathBuf::from("/t/a \"q\" \\ \u{e9}\u{1F600}/cordon"))
        );
        assert_eq!(executable(&messages, "other"), None);
        assert_eq!(json_string_after(r#"{"k":"\u12"}"#, r#""k":"#), None);
    }
}
