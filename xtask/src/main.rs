//! `cargo xtask`: project commands that need more than `cargo` itself.
//!
//! - `cargo xtask conformance [--backend NAME] [--json] [--probe P]...`
//!   builds the `cordon` binary without its `starlark` feature (the gate
//!   needs no Starlark host, reqwest or rustls) and runs `cordon
//!   conformance` (one code path for both), passing the exit status
//!   through: 0 conforms, 1 not, 2 usage error.
//! - `cargo xtask bench [--quick] [--json]`: builds the `cordon-bench`
//!   harness in release mode and runs it (see benches/README.md).
//! - `cargo xtask docs [--check]`: builds `cordon-docs` and runs it: it
//!   writes the docs' tables that mirror code from the code (with
//!   `--check`, exits 1 where the committed text differs; the tidy test
//!   runs that).
//! - `cargo xtask oci-validation SUITE_DIR [NAME]...`: runs the OCI
//!   runtime-tools validation suite (a checkout the operator gives)
//!   against `cordon-runtime` and prints each test's results
//!   (`oci_validation.rs`).
//! - `cargo xtask checks`: the checks that run cargo itself, which
//!   `cargo test` must not (`checks.rs`): a repeated or alternated build
//!   is fresh, and the Starlark layers keep to their dependencies. CI runs
//!   it after `cargo xtask conformance`.
//!
//! This front has no dependencies: the `cargo xtask` alias
//! (`.cargo/config.toml`) builds the package with `--no-default-features`,
//! which leaves out the harness, the doc generator and all they link (the
//! `tools` feature, on by default so `cargo build/test/clippy --workspace`
//! still build and check them). Every cargo the front starts gets the user's environment without
//! what `cargo run` set for xtask (see `cargo.rs`), so its builds are the
//! same units a plain `cargo build` makes: repeating or alternating them
//! rebuilds nothing (`cargo xtask checks` guards that).

mod cargo;
mod checks;
mod oci_validation;

use std::process::ExitCode;

use cargo::Build;

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let Some(task) = args.next() else {
        return usage();
    };
    let rest: Vec<String> = args.collect();
    match task.as_str() {
        "conformance" => build_and_run(Build::GATE, Some("conformance"), &rest, &[]),
        "bench" => {
            // The harness measures the whole `cordon run` command too, and
            // runs its sandboxed Starlark workers from the dedicated
            // worker binary (what a host embedding Cordon would ship).
            let mut env = vec![];
            for (build, var) in [
                (Build::BENCH_CLI, "CORDON_BENCH_CLI"),
                (Build::BENCH_WORKER, "CORDON_BENCH_WORKER"),
                (Build::BENCH_RUNTIME, "CORDON_BENCH_RUNTIME"),
            ] {
                match build.executable() {
                    Ok(p) => env.push((var, p.into())),
                    Err(e) => {
                        eprintln!("xtask: {e}");
                        return ExitCode::from(2);
                    }
                }
            }
            build_and_run(Build::BENCH, None, &rest, &env)
        }
        "docs" => build_and_run(Build::DOCS, None, &rest, &[]),
        "oci-validation" => oci_validation::run(&rest),
        "checks" => match checks::run() {
            Ok(()) => {
                eprintln!("xtask checks: all passed");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("xtask checks failed:\n{e}");
                ExitCode::FAILURE
            }
        },
        "-h" | "--help" | "help" => {
            print_usage();
            ExitCode::SUCCESS
        }
        other => {
            eprintln!("xtask: unknown task `{other}`");
            usage()
        }
    }
}

fn print_usage() {
    eprintln!("usage: cargo xtask <task> [args]\n\ntasks:\n  conformance [--backend NAME] [--json] [--probe P]...   run the conformance probes on this host\n  bench [--quick] [--json]                              run the benchmarks\n  docs [--check]                                        write (check) the docs' generated tables\n  oci-validation SUITE_DIR [NAME]...                    run the OCI runtime-tools validation suite against cordon-runtime\n  checks                                                the checks that run cargo (fresh builds, layers)");
}

fn usage() -> ExitCode {
    print_usage();
    ExitCode::from(2)
}

/// Builds `build`'s binary, runs it with `sub` (if any) and `rest` (and
/// `env` added to the user's environment), and passes its exit status
/// through (2 when it cannot be built or started).
fn build_and_run(
    build: Build,
    sub: Option<&str>,
    rest: &[String],
    env: &[(&str, std::ffi::OsString)],
) -> ExitCode {
    let exe = match build.executable() {
        Ok(p) => p,
        Err(e) => {
            eprintln!("xtask: {e}");
            return ExitCode::from(2);
        }
    };
    // The binary gets the user's environment too, not cargo's additions.
    let status = cargo::command_with_env(&exe, std::env::vars_os())
        .envs(env.iter().map(|(k, v)| (k, v)))
        .args(sub)
        .args(rest)
        .status();
    match status {
        Ok(s) => ExitCode::from(s.code().unwrap_or(1).clamp(0, 255) as u8),
        Err(e) => {
            eprintln!("xtask: cannot run {}: {e}", exe.display());
            ExitCode::from(2)
        }
    }
}
