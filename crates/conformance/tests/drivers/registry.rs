//! A probe added through the registry only: this file defines P42 (one
//! type implementing `Probe`), adds it to the standard registry, and runs
//! the suite with it. The probe's child side runs in a re-invoked copy of
//! this binary (its `main` dispatches through the same registry); the
//! report carries P42 with its title, its child's check and its declared
//! manifest, which the host enforces: a P42 whose child skips a declared
//! check is `Unreachable`. A plain `main` (harness = false): the probe
//! child is this binary.

/// The test's name, as libtest would print it.
pub const NAME: &str = linux::TEST;

/// In a probe child: dispatches through the registry with P42 (the
/// standard probes dispatch as through the standard one) and exits.
pub fn child_or_return() {
    linux::child_or_return();
}

/// The test.
pub fn run() {
    linux::run();
}

#[cfg(target_os = "linux")]
mod linux {
    use std::sync::Arc;

    use cordon_backend_noop::NoopBackend;
    use cordon_conformance::{
        HostConditions, Manifest, Probe, ProbeArgs, ProbeContext, ProbeExecutable, ProbeRegistry,
        Reporter, StandardSuite,
    };
    use cordon_core::{CheckResult, ConformanceSuite, Evidence, ProbeId, ProbeStatus};

    pub const TEST: &str = "a_probe_added_through_the_registry_runs_and_is_reported";

    fn p42() -> ProbeId {
        ProbeId::new(42).unwrap()
    }

    /// The throwaway probe. With `skip`, its child leaves out one of its
    /// declared checks.
    struct Throwaway {
        skip: bool,
    }

    #[async_trait::async_trait]
    impl Probe for Throwaway {
        fn id(&self) -> ProbeId {
            p42()
        }
        fn title(&self) -> &'static str {
            "Throwaway probe"
        }
        fn checks(&self, _: &HostConditions) -> Manifest {
            Manifest::from([
                ("throwaway-child-ran".to_string(), Evidence::Child),
                ("throwaway-second".to_string(), Evidence::Child),
            ])
        }
        async fn host(&self, ctx: &ProbeContext) -> Vec<CheckResult> {
            let args = [("skip".to_string(), self.skip.to_string())];
            ctx.run_child(self.id(), &args).await.into_checks()
        }
        fn child(&self, r: &mut Reporter, args: &ProbeArgs) {
            r.check(
                "throwaway-child-ran",
                ProbeStatus::Pass,
                format!("pid {}", std::process::id()),
            );
            if args.get("skip").map(String::as_str) != Some("true") {
                r.check("throwaway-second", ProbeStatus::Pass, "made");
            }
        }
    }

    fn registry(skip: bool) -> ProbeRegistry {
        ProbeRegistry::standard().with(Arc::new(Throwaway { skip }))
    }

    pub fn child_or_return() {
        // The child side: the two registries dispatch alike (the child's
        // `skip` comes from its arguments).
        cordon_conformance::dispatch_probe_child_with(&registry(false));
    }

    pub fn run() {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let standard = registry(false);
        assert!(standard.ids().contains(&p42()));
        assert!(
            standard.required_of(&NoopBackend).contains(&p42()),
            "a probe is required of every backend unless it says otherwise"
        );
        let suite = |skip| {
            StandardSuite::new()
                .with_registry(registry(skip))
                .with_probe_executable(ProbeExecutable::CurrentExe)
                .only(vec![p42()])
        };
        let report = rt.block_on(suite(false).run(Arc::new(NoopBackend)));
        let p = report
            .probes
            .iter()
            .find(|p| p.id == p42())
            .unwrap_or_else(|| panic!("P42 is not in the report:\n{}", report.summary()));
        assert_eq!(p.title, "Throwaway probe");
        // Its two checks plus the five positive controls of every child.
        assert_eq!(p.checks_expected, 7, "{}", report.summary());
        let ran = p
            .checks
            .iter()
            .find(|c| c.name == "throwaway-child-ran")
            .unwrap_or_else(|| panic!("the child's check is missing:\n{}", report.summary()));
        assert_eq!(ran.status, ProbeStatus::Pass);
        assert!(
            ran.detail.starts_with("pid ") && ran.detail != format!("pid {}", std::process::id()),
            "the check was not made by a probe child: {}",
            ran.detail
        );
        assert!(report.summary().contains("P42 Throwaway probe"));
        // The manifest is the probe's: a child that skips a declared check
        // leaves the probe Unreachable, naming it.
        let report = rt.block_on(suite(true).run(Arc::new(NoopBackend)));
        let p = &report.probes[0];
        assert_eq!(p.status, ProbeStatus::Unreachable, "{}", report.summary());
        assert!(
            p.detail.contains("missing: throwaway-second"),
            "{}",
            p.detail
        );
    }
}
