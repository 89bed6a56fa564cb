//! The backend through core's API: unavailable (and fail-closed) off macOS;
//! on macOS, real `sandbox-exec` confinement.

use std::sync::Arc;

use cordon_backend_macos::MacosBackend;
use cordon_core::SandboxBackend;

#[test]
fn name_is_macos() {
    assert_eq!(MacosBackend::default().name(), "macos");
    assert_eq!(cordon_backend_macos::BACKEND_NAME, "macos");
}

#[test]
fn profile_for_uses_the_injected_canonicaliser() {
    let backend = MacosBackend::with_canonicalizer(|p: &std::path::Path| {
        Ok(std::path::Path::new("/private").join(p.strip_prefix("/").unwrap()))
    });
    let policy = cordon_core::SandboxPolicy::new("/tmp/s", cordon_core::Limits::probe());
    let profile = backend.profile_for(&policy).unwrap();
    assert_eq!(
        profile.params[0],
        ("SCRATCH".to_string(), "/private/tmp/s".to_string())
    );
    assert!(format!("{backend:?}").contains("MacosBackend"));
}

#[cfg(not(target_os = "macos"))]
mod elsewhere {
    use std::sync::atomic::{AtomicBool, Ordering};

    use cordon_core::{
        ConformanceReport, ConformanceSuite, Limits, RunnerConfig, SandboxPolicy, SandboxRunner,
    };

    use super::*;

    #[test]
    fn unavailable_with_the_reason() {
        let a = MacosBackend::default().availability();
        assert!(!a.is_available());
        let reason = a.reason().unwrap();
        assert!(reason.contains("Seatbelt exists only on macOS"), "{reason}");
        assert!(reason.contains(std::env::consts::OS), "{reason}");
    }

    #[test]
    fn wrap_fails_closed() {
        let scratch = tempfile::tempdir().unwrap();
        let mut cmd = cordon_core::ChildCommand::for_backend_tests("/bin/true", scratch.path());
        let err = MacosBackend::default()
            .wrap(
                &mut cmd,
                &SandboxPolicy::new(scratch.path(), Limits::probe()),
            )
            .unwrap_err();
        assert_eq!(err.backend, "macos");
        assert!(
            err.message.contains("Seatbelt exists only on macOS"),
            "{err}"
        );
        assert!(err.message.contains("not started"), "{err}");
    }

    #[test]
    fn host_facts_are_empty_off_macos() {
        assert!(MacosBackend::default().host_facts().is_empty());
    }

    /// A suite that records whether it was asked to run.
    struct RecordingSuite(AtomicBool);

    #[async_trait::async_trait]
    impl ConformanceSuite for RecordingSuite {
        async fn run(&self, backend: Arc<dyn SandboxBackend>) -> ConformanceReport {
            self.0.store(true, Ordering::SeqCst);
            ConformanceReport::unavailable(backend.as_ref(), "suite should not have run")
        }
    }

    #[tokio::test]
    async fn sandbox_runner_refuses_with_the_reason_in_the_report() {
        let suite = RecordingSuite(AtomicBool::new(false));
        let err = SandboxRunner::new(
            Arc::new(MacosBackend::default()),
            &suite,
            RunnerConfig::default(),
        )
        .await
        .expect_err("an unavailable backend must not yield a runner");
        assert!(
            !suite.0.load(Ordering::SeqCst),
            "core must check availability first"
        );
        assert_eq!(err.report.backend, "macos");
        assert!(!err.report.conforms());
        assert!(err.report.probes.is_empty());
        let reason = err.report.availability.reason().unwrap();
        assert!(reason.contains("Seatbelt exists only on macOS"), "{reason}");
        assert!(err.to_string().contains("Seatbelt exists only on macOS"));
    }
}

#[cfg(target_os = "macos")]
mod on_macos {
    use cordon_core::{ChildSpec, ExitOutcome, Limits, RunnerConfig, Scratch, Spawner, StdioMode};
    use tokio::io::AsyncReadExt;

    use super::*;

    #[test]
    fn available_and_reports_facts() {
        let backend = MacosBackend::default();
        assert_eq!(backend.availability(), cordon_core::Availability::Available);
        let facts = backend.host_facts();
        assert_eq!(facts["seatbelt_launcher"], "/usr/bin/sandbox-exec");
        for key in ["limit_memory", "limit_processes", "limit_cpu", "limit_disk"] {
            assert!(facts[key].starts_with("per-"), "{key}: {}", facts[key]);
        }
    }

    fn spawner_with(config: RunnerConfig) -> Spawner {
        Spawner::confined(Arc::new(MacosBackend::default()), config)
    }

    async fn run_sh(
        script: &str,
        scratch: &std::path::Path,
        env: &[(&str, &str)],
    ) -> (ExitOutcome, String, String) {
        run_sh_with(RunnerConfig::default(), script, scratch, env).await
    }

    async fn run_sh_with(
        config: RunnerConfig,
        script: &str,
        scratch: &std::path::Path,
        env: &[(&str, &str)],
    ) -> (ExitOutcome, String, String) {
        let mut spec = ChildSpec::new("/bin/sh")
            .args(["-c", script])
            .stdio(StdioMode::Piped)
            .scratch(Scratch::Existing(scratch.to_path_buf()))
            .limits(Limits::probe());
        for (k, v) in env {
            spec = spec.env(*k, *v);
        }
        let mut child = spawner_with(config)
            .spawn(&spec)
            .expect("spawn under sandbox-exec");
        let mut out = String::new();
        child
            .stdout
            .take()
            .unwrap()
            .read_to_string(&mut out)
            .await
            .unwrap();
        let outcome = child.wait().await.unwrap();
        let err = String::from_utf8_lossy(&child.stderr_tail()).into_owned();
        (outcome, out, err)
    }

    #[tokio::test]
    async fn writes_inside_scratch_and_not_outside() {
        let scratch = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let target = outside.path().join("escaped");
        let (outcome, _out, err) = run_sh(
            "echo ok > inside && echo bad > \"$TARGET\"",
            scratch.path(),
            &[("TARGET", target.to_str().unwrap())],
        )
        .await;
        assert_eq!(
            std::fs::read_to_string(scratch.path().join("inside")).unwrap(),
            "ok\n"
        );
        assert!(!target.exists(), "write outside the grants succeeded");
        assert!(!outcome.success(), "{outcome:?} {err}");
        assert!(err.contains("Operation not permitted"), "{err}");
    }

    #[tokio::test]
    async fn reads_outside_grants_fail_and_limits_apply() {
        let scratch = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let canary = outside.path().join("canary");
        std::fs::write(&canary, "SECRET-CANARY").unwrap();
        let (outcome, out, err) = run_sh(
            "ulimit -n; /bin/cat \"$CANARY\"",
            scratch.path(),
            &[("CANARY", canary.to_str().unwrap())],
        )
        .await;
        assert!(!out.contains("SECRET-CANARY"), "canary read: {out}");
        assert!(out.starts_with("64\n"), "{out}");
        assert!(!outcome.success(), "{outcome:?} {err}");
    }

    #[tokio::test]
    async fn hard_link_of_an_outside_file_is_refused() {
        let scratch = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let canary = outside.path().join("canary");
        std::fs::write(&canary, "SECRET-CANARY").unwrap();
        let (outcome, out, err) = run_sh(
            "/bin/ln \"$CANARY\" alias; /bin/cat alias",
            scratch.path(),
            &[("CANARY", canary.to_str().unwrap())],
        )
        .await;
        assert!(
            !out.contains("SECRET-CANARY"),
            "read through a hard link: {out}"
        );
        assert!(!scratch.path().join("alias").exists(), "{err}");
        assert!(!outcome.success());
    }

    #[tokio::test]
    async fn read_only_inside_read_write_stays_read_only_and_cannot_be_moved() {
        let scratch = tempfile::tempdir().unwrap();
        let rw = tempfile::tempdir().unwrap();
        let rw_path = rw.path().canonicalize().unwrap();
        std::fs::create_dir(rw_path.join("sub")).unwrap();
        std::fs::write(rw_path.join("sub/file"), "original").unwrap();
        let config = RunnerConfig {
            read_write: vec![rw_path.clone()],
            read_only: vec![rw_path.join("sub/file")],
            ..RunnerConfig::default()
        };
        let (_outcome, out, err) = run_sh_with(
            config,
            "echo new > \"$RW/other\" && echo wrote-other; \
             echo bad > \"$RW/sub/file\" && echo wrote-file; \
             /bin/mv \"$RW/sub\" \"$RW/moved\" && echo moved",
            scratch.path(),
            &[("RW", rw_path.to_str().unwrap())],
        )
        .await;
        assert!(out.contains("wrote-other"), "{out} {err}");
        assert!(!out.contains("wrote-file"), "{out} {err}");
        assert!(!out.contains("moved"), "{out} {err}");
        assert_eq!(
            std::fs::read_to_string(rw_path.join("sub/file")).unwrap(),
            "original"
        );
        assert!(!rw_path.join("moved").exists());
    }
}
