//! `cargo xtask oci-validation SUITE_DIR [NAME]...`: runs the OCI
//! runtime-tools validation suite against `cordon-runtime`.
//!
//! The suite is not ours to copy into the repository: the operator gives
//! a checkout of opencontainers/runtime-tools (one whose `go.mod` the
//! host's Go can build: with Debian 12's Go 1.19, commit 260e151 or
//! older). This builds `cordon-runtime` and the suite's executables
//! (`make runtimetest validation-executables`, vendored modules), runs
//! each `validation/*/*.t` (or the NAMEs given) with `RUNTIME` set to the
//! runtime, and prints per test how many TAP checks passed, failed and
//! were skipped, with the first failure or the runtime's refusal. Needs
//! root, as the suite does. It reports; it asserts nothing (exit 0 once
//! every test ran, 2 on a usage or build error).

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use crate::cargo::Build;

/// The runtime under test, built as the tests build it.
const RUNTIME: Build = Build {
    package: "cordon-oci",
    bin: "cordon-runtime",
    release: false,
    default_features: true,
    features: "",
};

/// How long one validation executable may run.
const PER_TEST: Duration = Duration::from_secs(180);

/// One test's TAP counts, and what to say of it.
struct Outcome {
    name: String,
    passed: usize,
    failed: usize,
    skipped: usize,
    note: String,
}

pub fn run(args: &[String]) -> ExitCode {
    let Some((suite, only)) = args.split_first() else {
        eprintln!("usage: cargo xtask oci-validation SUITE_DIR [NAME]...");
        return ExitCode::from(2);
    };
    let suite = PathBuf::from(suite);
    if !suite.join("validation").is_dir() {
        eprintln!(
            "xtask: {} is not a runtime-tools checkout (no validation/ dir)",
            suite.display()
        );
        return ExitCode::from(2);
    }
    let runtime = match RUNTIME.executable() {
        Ok(p) => p,
        Err(e) => {
            eprintln!("xtask: {e}");
            return ExitCode::from(2);
        }
    };
    let made = Command::new("make")
        .args(["runtimetest", "validation-executables"])
        .current_dir(&suite)
        .env("GOFLAGS", "-mod=vendor")
        .status();
    if !made.is_ok_and(|s| s.success()) {
        eprintln!(
            "xtask: building the suite failed (`make runtimetest validation-executables` in {}; \
             it needs Go, and a checkout whose go.mod that Go can build)",
            suite.display()
        );
        return ExitCode::from(2);
    }
    let mut tests = match executables(&suite.join("validation")) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("xtask: {e}");
            return ExitCode::from(2);
        }
    };
    if !only.is_empty() {
        tests.retain(|t| {
            only.iter()
                .any(|o| t.file_stem().is_some_and(|s| s == o.as_str()))
        });
    }
    let mut outcomes = Vec::new();
    for t in &tests {
        let o = run_one(&suite, t, &runtime);
        eprintln!(
            "{:<40} {:>4} passed {:>4} failed {:>4} skipped  {}",
            o.name, o.passed, o.failed, o.skipped, o.note
        );
        outcomes.push(o);
    }
    let sum = |f: fn(&Outcome) -> usize| outcomes.iter().map(f).sum::<usize>();
    let clean = outcomes
        .iter()
        .filter(|o| o.failed == 0 && o.note.is_empty())
        .count();
    println!("\n| test | passed | failed | skipped | first failure or refusal |");
    println!("|---|---|---|---|---|");
    for o in &outcomes {
        println!(
            "| {} | {} | {} | {} | {} |",
            o.name,
            o.passed,
            o.failed,
            o.skipped,
            o.note.replace('|', "\\|")
        );
    }
    println!(
        "\n{} tests: {clean} without a failure; {} checks passed, {} failed, {} skipped",
        outcomes.len(),
        sum(|o| o.passed),
        sum(|o| o.failed),
        sum(|o| o.skipped)
    );
    ExitCode::SUCCESS
}

/// `validation/*/*.t`, sorted.
fn executables(dir: &Path) -> Result<Vec<PathBuf>, String> {
    let mut out = Vec::new();
    let entries = std::fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    for e in entries.flatten() {
        if let Ok(inner) = std::fs::read_dir(e.path()) {
            for f in inner.flatten() {
                if f.path().extension().is_some_and(|x| x == "t") {
                    out.push(f.path());
                }
            }
        }
    }
    out.sort();
    Ok(out)
}

/// Runs one validation executable (in the suite's root, where it finds
/// `runtimetest` and the rootfs tarball) and reads its TAP output.
fn run_one(suite: &Path, test: &Path, runtime: &Path) -> Outcome {
    let name = test
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut o = Outcome {
        name,
        passed: 0,
        failed: 0,
        skipped: 0,
        note: String::new(),
    };
    let dir = match tempfile_dir() {
        Ok(d) => d,
        Err(e) => {
            o.note = e;
            return o;
        }
    };
    let (out, err) = (dir.join("out"), dir.join("err"));
    let child = std::fs::File::create(&out).and_then(|fo| {
        let fe = std::fs::File::create(&err)?;
        Command::new(test)
            .current_dir(suite)
            .env("RUNTIME", runtime)
            .stdin(Stdio::null())
            .stdout(fo)
            .stderr(fe)
            .spawn()
    });
    let mut child = match child {
        Ok(c) => c,
        Err(e) => {
            o.note = format!("cannot run: {e}");
            return o;
        }
    };
    let deadline = Instant::now() + PER_TEST;
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break Some(s),
            Ok(None) if Instant::now() > deadline => {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(50)),
            Err(_) => break None,
        }
    };
    let stdout = std::fs::read_to_string(&out).unwrap_or_default();
    let stderr = std::fs::read_to_string(&err).unwrap_or_default();
    let _ = std::fs::remove_dir_all(&dir);
    for line in stdout.lines() {
        if line.starts_with("not ok") {
            o.failed += 1;
            if o.note.is_empty() {
                o.note = line.to_string();
            }
        } else if line.starts_with("ok") && line.contains("# SKIP") {
            o.skipped += 1;
        } else if line.starts_with("ok") {
            o.passed += 1;
        }
    }
    // What to say of a test that ended without a TAP failure: the
    // runtime's refusal, else the suite's own error line.
    let refusal = stderr
        .lines()
        .chain(stdout.lines())
        .find(|l| l.contains("cordon-runtime:"))
        .or_else(|| {
            stderr.lines().chain(stdout.lines()).find(|l| {
                !l.trim().is_empty() && !l.starts_with("TAP version") && !l.starts_with("1..")
            })
        })
        .map(str::to_string);
    match status {
        None => o.note = format!("timed out after {} s", PER_TEST.as_secs()),
        Some(s) if !s.success() && o.failed == 0 => {
            o.note = refusal.unwrap_or_else(|| {
                stderr
                    .lines()
                    .chain(stdout.lines())
                    .last()
                    .unwrap_or("exited without a TAP failure")
                    .to_string()
            });
        }
        _ => {}
    }
    o
}

/// A fresh private directory for one test's output.
fn tempfile_dir() -> Result<PathBuf, String> {
    let base = std::env::temp_dir();
    for i in 0..1000u32 {
        let d = base.join(format!("cordon-oci-validation-{}-{i}", std::process::id()));
        match std::fs::create_dir(&d) {
            Ok(()) => return Ok(d),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e.to_string()),
        }
    }
    Err("no temp dir".into())
}
