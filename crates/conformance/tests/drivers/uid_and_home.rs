//! The verdicts do not depend on who runs the suite or on `$HOME`, `XDG_*`
//! and the cwd (as uid 65534 with `HOME=/root`, say, P2 still decides).
//!
//! This test binary re-executes a copy of itself (readable by uid 65534) as
//! uid 65534 when run as root, or as the same user otherwise, twice: once
//! with `HOME=/root`, `XDG_*` under it and cwd `/` (none of them usable),
//! once with a writable home as `HOME`, `XDG_*` and cwd. Each inner run
//! runs the suite against the no-op backend, against `Layers::BASE` and
//! against the whole Linux backend; checks the per-check tables for a
//! non-root user for the first two, and for the last that it conforms,
//! with each limit checked at the scope it claims and the ones it holds
//! only per process said so (as uid 65534 here there is no cgroup to
//! make); and prints every verdict and claimed scope. The outer
//! run checks that both inner runs agree check by check, and that each
//! probe's verdict matches the one it gets itself (as root, when it is
//! root).
//!
//! `harness = false`: a plain `main` that tells the outer and inner runs
//! apart by an environment variable.

use crate::common;

/// The test's name, as libtest would print it.
pub const NAME: &str = "verdicts_do_not_depend_on_uid_home_or_cwd";

/// In the re-executed copy: runs the inner side and exits.
pub fn inner_or_return() {
    if std::env::var_os(linux::INNER).is_some() {
        std::process::exit(linux::inner());
    }
}

/// The test.
pub fn run() {
    linux::outer();
}

#[cfg(target_os = "linux")]
mod linux {
    use std::collections::BTreeMap;
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::process::CommandExt;
    use std::path::{Path, PathBuf};
    use std::process::Command;
    use std::sync::Arc;

    use cordon_backend_linux::{Layers, LinuxBackend};
    use cordon_backend_noop::NoopBackend;
    use cordon_conformance::{ProbeExecutable, StandardSuite};
    use cordon_core::{ConformanceReport, SandboxBackend};

    use super::common;

    /// Selects the inner run; its value is unused.
    pub const INNER: &str = "CORDON_CONFORMANCE_INNER_RUN";
    /// The probe binary the inner run uses.
    const PROBE: &str = "CORDON_CONFORMANCE_INNER_PROBE";
    /// The uid the outer run drops to when it is root.
    const NOBODY: u32 = 65534;

    /// One line per verdict: `probe <tab> backend <tab> id <tab> status`
    /// and `check <tab> backend <tab> id <tab> name <tab> status`.
    fn verdicts(backend: &str, report: &ConformanceReport) -> Vec<String> {
        let mut out: Vec<String> = report
            .probes
            .iter()
            .map(|p| format!("probe\t{backend}\t{}\t{:?}", p.id, p.status))
            .collect();
        for ((id, name), status) in common::statuses(report) {
            out.push(format!("check\t{backend}\t{id}\t{name}\t{status:?}"));
        }
        out
    }

    fn backends() -> [(&'static str, Arc<dyn SandboxBackend>); 3] {
        [
            ("noop", Arc::new(NoopBackend)),
            ("base", Arc::new(LinuxBackend::with_layers(Layers::BASE))),
            ("full", Arc::new(LinuxBackend::new())),
        ]
    }

    /// The whole backend conforms, and says at which scope each limit
    /// holds (`scope_problems`). Returns the problems.
    fn full_problems(report: &ConformanceReport) -> Vec<String> {
        let mut out = common::scope_problems(report);
        if !report.conforms() {
            out.push(format!("does not conform:\n{}", report.summary()));
        }
        out
    }

    /// One line per limit: `scope <tab> backend <tab> key <tab> sandbox|per-process`.
    fn scopes(backend: &str, report: &ConformanceReport) -> Vec<String> {
        common::SANDBOX_CHECKS
            .iter()
            .map(|(_, key, _)| {
                let scope = if common::claims_sandbox(report, key) {
                    "sandbox"
                } else {
                    "per-process"
                };
                format!("scope\t{backend}\t{key}\t{scope}")
            })
            .collect()
    }

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("tokio runtime")
    }

    /// The inner run: both suites, the non-root tables, every verdict on
    /// stdout. Exit status 1 (with the reason on stderr) on a mismatch.
    pub fn inner() -> i32 {
        let probe = std::env::var_os(PROBE).expect("the outer run names the probe binary");
        let suite = StandardSuite::new().with_probe_executable(ProbeExecutable::Path(probe.into()));
        let rt = runtime();
        let as_root = common::is_root();
        let mut failed = false;
        for (name, backend) in backends() {
            let report = rt.block_on(common::run(suite.clone(), backend));
            if name == "full" {
                let problems = full_problems(&report);
                if !problems.is_empty() {
                    eprintln!(
                        "full as uid {}: {}\n\n{}",
                        // SAFETY: geteuid has no preconditions.
                        unsafe { libc::geteuid() },
                        problems.join("\n"),
                        common::dump(&report)
                    );
                    failed = true;
                }
                for line in verdicts(name, &report)
                    .into_iter()
                    .chain(scopes(name, &report))
                {
                    println!("{line}");
                }
                continue;
            }
            let all = common::all_checks(as_root);
            let fails = if name == "noop" {
                all.difference(&common::noop_passes(as_root))
                    .cloned()
                    .collect()
            } else {
                common::base_fails(as_root)
            };
            let diff = common::differences(&report, &all, &fails);
            if !diff.is_empty() {
                eprintln!(
                    "{name} as uid {} with HOME={:?}: table differs:\n{}\n\n{}",
                    // SAFETY: geteuid has no preconditions.
                    unsafe { libc::geteuid() },
                    std::env::var_os("HOME"),
                    diff.join("\n"),
                    common::dump(&report)
                );
                failed = true;
            }
            for line in verdicts(name, &report) {
                println!("{line}");
            }
        }
        if let Some(line) = rt.block_on(tree_sum_claim(&suite)) {
            if !line.ends_with("\tFail") {
                eprintln!("{line}");
                failed = true;
            }
            println!("{line}");
        }
        i32::from(failed)
    }

    /// The whole Linux backend with `limit_cpu` claimed `sandbox:` where it
    /// only sums the CPU time of the sandbox's process tree (no cgroup):
    /// P6's CPU chain, whose links the kernel reaps without adding their
    /// time to anyone's, must make `sandbox-cpu-limit` fail. `None` where
    /// this process has a cgroup (the tree sum is not what holds then).
    async fn tree_sum_claim(suite: &StandardSuite) -> Option<String> {
        #[derive(Debug)]
        struct ClaimsCpu(LinuxBackend);
        impl SandboxBackend for ClaimsCpu {
            fn name(&self) -> &str {
                "claims-cpu"
            }
            fn availability(&self) -> cordon_core::Availability {
                self.0.availability()
            }
            fn host_facts(&self) -> BTreeMap<String, String> {
                let mut facts = self.0.host_facts();
                facts.insert(
                    "limit_cpu".into(),
                    "sandbox: claimed by a test double that only sums the process tree".into(),
                );
                facts
            }
            fn wrap(
                &self,
                cmd: &mut cordon_core::ChildCommand,
                policy: &cordon_core::SandboxPolicy,
            ) -> Result<cordon_core::WrapResources, cordon_core::WrapError> {
                self.0.wrap(cmd, policy)
            }
        }
        let full = LinuxBackend::new();
        let cpu = full
            .host_facts()
            .get("limit_cpu")
            .cloned()
            .unwrap_or_default();
        if !cpu.contains("SIGCHLD ignored") {
            return None;
        }
        let report = common::run(
            suite.clone().only(vec![cordon_core::ProbeId::P6]),
            Arc::new(ClaimsCpu(full)),
        )
        .await;
        let check = common::p6_check(&report, "sandbox-cpu-limit");
        Some(match check {
            Some(c) => {
                eprintln!("tree-sum claim: {}", c.detail);
                format!("tree-sum-claim\tsandbox-cpu-limit\t{:?}", c.status)
            }
            None => "tree-sum-claim\tsandbox-cpu-limit\tMissing".into(),
        })
    }

    /// A 0755 dir with copies of this test binary and the probe binary.
    fn stage() -> (tempfile::TempDir, PathBuf, PathBuf) {
        let dir = tempfile::Builder::new()
            .prefix("cordon-uid-home-")
            .tempdir()
            .expect("temp dir");
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let copy = |from: &Path, name: &str| {
            let to = dir.path().join(name);
            std::fs::copy(from, &to).expect("copy a binary");
            std::fs::set_permissions(&to, std::fs::Permissions::from_mode(0o755)).unwrap();
            to
        };
        let me = copy(&std::env::current_exe().unwrap(), "uid_and_home");
        let probe = copy(
            Path::new(env!("CARGO_BIN_EXE_cordon-probe")),
            "cordon-probe",
        );
        (dir, me, probe)
    }

    /// Runs the inner case with `home` as HOME and XDG_* base, in `cwd`.
    fn run_inner(me: &Path, probe: &Path, home: &Path, cwd: &Path) -> BTreeMap<String, String> {
        let mut cmd = Command::new(me);
        cmd.env(INNER, "1")
            .env(PROBE, probe)
            .env("HOME", home)
            .env("XDG_CACHE_HOME", home.join(".cache"))
            .env("XDG_CONFIG_HOME", home.join(".config"))
            .env("XDG_DATA_HOME", home.join(".local/share"))
            .env("XDG_STATE_HOME", home.join(".local/state"))
            .env("XDG_RUNTIME_DIR", home.join("run"))
            // A host-only variable for P2 to look for.
            .env("CORDON_CONFORMANCE_CANARY", "inner-run-secret")
            .env_remove("TMPDIR")
            .current_dir(cwd);
        if common::is_root() {
            cmd.uid(NOBODY).gid(NOBODY);
        }
        let out = cmd.output().expect("start the inner run");
        assert!(
            out.status.success(),
            "inner run with HOME={} in {} failed ({}):\n{}",
            home.display(),
            cwd.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| l.rsplit_once('\t'))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    pub fn outer() {
        let (_dir, me, probe) = stage();
        // A usable home: owned by the inner run's uid, 0700.
        let home = tempfile::Builder::new()
            .prefix("cordon-uid-home-writable-")
            .tempdir()
            .expect("temp dir");
        if common::is_root() {
            std::os::unix::fs::chown(home.path(), Some(NOBODY), Some(NOBODY)).unwrap();
        }
        std::fs::set_permissions(home.path(), std::fs::Permissions::from_mode(0o700)).unwrap();

        let unusable = run_inner(&me, &probe, Path::new("/root"), Path::new("/"));
        let usable = run_inner(&me, &probe, home.path(), home.path());
        assert!(
            unusable.len() > 200,
            "too few verdicts from the inner run: {unusable:?}"
        );
        let differ: Vec<String> = unusable
            .iter()
            .filter(|(k, v)| usable.get(*k) != Some(v))
            .map(|(k, v)| {
                format!(
                    "{k}: {v} with HOME=/root, {:?} with a usable HOME",
                    usable.get(k)
                )
            })
            .collect();
        assert!(
            differ.is_empty(),
            "verdicts depend on HOME/XDG/cwd:\n{}",
            differ.join("\n")
        );
        for (k, v) in unusable.iter().filter(|(k, _)| k.starts_with("scope\t")) {
            println!("inner run: {} {v}", k.replace('\t', " "));
        }
        // As uid 65534 on a root host the backend has no cgroup: its tree
        // sum must be shown escapable (the inner run fails otherwise).
        if common::is_root() {
            let claim = unusable
                .iter()
                .find(|(k, _)| k.starts_with("tree-sum-claim\t"));
            assert!(
                matches!(claim, Some((_, v)) if v == "Fail"),
                "the inner run as uid 65534 did not show a tree-sum CPU claim failing: {claim:?}"
            );
        }

        // Each probe's verdict is the same as this (root) process gets.
        let rt = runtime();
        for (name, backend) in backends() {
            let report = rt.block_on(common::run(common::suite(), backend));
            for p in &report.probes {
                let key = format!("probe\t{name}\t{}", p.id);
                assert_eq!(
                    unusable.get(&key).map(String::as_str),
                    Some(format!("{:?}", p.status).as_str()),
                    "{key}: the inner run's verdict differs from this process's ({:?})",
                    p.status
                );
            }
        }
    }
}
