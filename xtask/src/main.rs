//! `cargo xtask`: project commands that need more than `cargo` itself.
//!
//! - `cargo xtask conformance [--backend NAME] [--json] [--probe P]...`
//!   builds the `cordon` binary and runs `cordon conformance` (one code
//!   path for both), passing the exit status through: 0 conforms, 1 not,
//!   2 usage error.
//! - `cargo xtask bench [--quick] [--json]`: the benchmarks (see benches/README.md).

use std::path::PathBuf;
use std::process::{Command, ExitCode};

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let Some(task) = args.next() else {
        return usage();
    };
    let rest: Vec<String> = args.collect();
    match task.as_str() {
        "conformance" => run_cordon("conformance", &rest),
        "bench" => run_bench(&rest),
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
    eprintln!("usage: cargo xtask <task> [args]\n\ntasks:\n  conformance [--backend NAME] [--json] [--probe P]...   run probes P1-P7 on this host\n  bench [--quick] [--json]                              run the benchmarks");
}

fn usage() -> ExitCode {
    print_usage();
    ExitCode::from(2)
}

fn cargo() -> String {
    std::env::var("CARGO").unwrap_or_else(|_| "cargo".into())
}

fn workspace_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives in the workspace")
        .to_path_buf()
}

/// Builds a package's binary quietly and returns its path.
fn build_bin(package: &str, bin: &str, release: bool) -> Result<PathBuf, ExitCode> {
    let root = workspace_root();
    let mut cmd = Command::new(cargo());
    cmd.current_dir(&root)
        .args(["build", "--quiet", "--package", package, "--bin", bin]);
    if release {
        cmd.arg("--release");
    }
    match cmd.status() {
        Ok(s) if s.success() => {}
        Ok(_) | Err(_) => {
            eprintln!("xtask: building `{bin}` failed");
            return Err(ExitCode::from(2));
        }
    }
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target"));
    Ok(target
        .join(if release { "release" } else { "debug" })
        .join(bin))
}

fn run_cordon(sub: &str, rest: &[String]) -> ExitCode {
    let exe = match build_bin("cordon", "cordon", false) {
        Ok(p) => p,
        Err(code) => return code,
    };
    match Command::new(&exe).arg(sub).args(rest).status() {
        Ok(s) => ExitCode::from(s.code().unwrap_or(1).clamp(0, 255) as u8),
        Err(e) => {
            eprintln!("xtask: cannot run {}: {e}", exe.display());
            ExitCode::from(2)
        }
    }
}

fn run_bench(rest: &[String]) -> ExitCode {
    // Release mode: debug builds would measure the compiler, not Cordon.
    let exe = match build_bin("xtask", "cordon-bench", true) {
        Ok(p) => p,
        Err(code) => return code,
    };
    match Command::new(&exe).args(rest).status() {
        Ok(s) => ExitCode::from(s.code().unwrap_or(1).clamp(0, 255) as u8),
        Err(e) => {
            eprintln!("xtask: cannot run {}: {e}", exe.display());
            ExitCode::from(2)
        }
    }
}
