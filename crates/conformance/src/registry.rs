//! The probe registry: each probe is one type implementing [`Probe`] (its
//! id, title, who must pass it, its declared checks, its host side and its
//! child side), and [`ProbeRegistry`] is the list the suite, the probe
//! child's dispatch, the report's titles and the generated docs all take.
//!
//! The standard probes are listed once, in `probes/mod.rs`; adding one is
//! a file there and a line in that list. A registry can also take a probe
//! from outside the crate ([`ProbeRegistry::with`]): the binary that runs
//! the suite must then dispatch its probe children through the same
//! registry ([`dispatch_probe_child_with`](crate::dispatch_probe_child_with)),
//! since the child side runs in a re-invoked copy of that binary.
//!
//! ```no_run
//! use std::sync::Arc;
//! use cordon_conformance::{Manifest, Probe, ProbeArgs, ProbeContext, ProbeRegistry, Reporter};
//! use cordon_core::{CheckResult, Evidence, ProbeId, ProbeStatus};
//!
//! struct NoSecretFile;
//!
//! #[async_trait::async_trait]
//! impl Probe for NoSecretFile {
//!     fn id(&self) -> ProbeId { ProbeId::new(20).unwrap() }
//!     fn title(&self) -> &'static str { "No /etc/shadow" }
//!     fn checks(&self, _: &cordon_conformance::HostConditions) -> Manifest {
//!         Manifest::from([("read-shadow".to_string(), Evidence::Child)])
//!     }
//!     async fn host(&self, ctx: &ProbeContext) -> Vec<CheckResult> {
//!         ctx.run_child(self.id(), &[]).await.into_checks()
//!     }
//!     fn child(&self, r: &mut Reporter, _: &ProbeArgs) {
//!         let denied = std::fs::read("/etc/shadow").is_err();
//!         let status = if denied { ProbeStatus::Pass } else { ProbeStatus::Fail };
//!         r.check("read-shadow", status, "");
//!     }
//! }
//!
//! fn main() {
//!     let registry = ProbeRegistry::standard().with(Arc::new(NoSecretFile));
//!     cordon_conformance::dispatch_probe_child_with(&registry);
//!     // ... StandardSuite::new().with_registry(registry).run(backend)
//! }
//! ```

use std::collections::BTreeMap;
use std::sync::Arc;

use cordon_core::{CheckResult, Evidence, ProbeId, SandboxBackend};

pub use crate::child::Reporter;
pub use crate::expected::{HostConditions, POSITIVE_CONTROLS};
pub use crate::harness::{ChildRun, ProbeContext};

/// The checks a probe declares for one host, by name, with the evidence
/// each is observed by. The host holds every run to it: a check missing,
/// repeated, undeclared or with stronger evidence than declared makes the
/// probe `Unreachable`. The positive controls every probe child runs
/// first are added by the harness; a probe does not list them.
pub type Manifest = BTreeMap<String, Evidence>;

/// The `key=value` arguments a probe child was started with.
pub type ProbeArgs = BTreeMap<String, String>;

/// One conformance probe: both its sides and what it must show.
///
/// The host side runs in the suite's process, twice and concurrently:
/// against the backend and with no sandbox at all (the baseline that marks
/// a check that passes without confinement). It starts its child with
/// [`ProbeContext::run_child`], which re-invokes the probe executable in
/// the sandbox; that process calls [`child`](Probe::child) after the
/// positive controls, and the host folds the child's lines and its own
/// observations into checks.
#[async_trait::async_trait]
pub trait Probe: Send + Sync {
    /// Its id, unique in a registry.
    fn id(&self) -> ProbeId;

    /// Short title, for reports.
    fn title(&self) -> &'static str;

    /// Whether `backend` must pass it (what the suite runs by default).
    /// Every backend, unless the probe tests something only some claim.
    fn required_of(&self, backend: &dyn SandboxBackend) -> bool {
        let _ = backend;
        true
    }

    /// The checks it makes on a host with `host`, each exactly once.
    fn checks(&self, host: &HostConditions) -> Manifest;

    /// The host side: plants, starts the child, inspects from outside,
    /// returns every check (the child's included).
    async fn host(&self, ctx: &ProbeContext) -> Vec<CheckResult>;

    /// The child side, inside the sandbox: tries what it must not be able
    /// to do and reports one check per try on `r`.
    fn child(&self, r: &mut Reporter, args: &ProbeArgs);

    /// A helper process of this probe, started as mode `<id>-<name>`
    /// (without the positive controls): its exit status, or `None` if the
    /// probe has no helper `name`.
    fn helper(&self, name: &str, args: &ProbeArgs) -> Option<i32> {
        let _ = (name, args);
        None
    }
}

/// The probes a suite runs and a probe child dispatches to, in order.
#[derive(Clone)]
pub struct ProbeRegistry {
    probes: Vec<Arc<dyn Probe>>,
}

impl std::fmt::Debug for ProbeRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.ids()).finish()
    }
}

impl Default for ProbeRegistry {
    fn default() -> Self {
        ProbeRegistry::standard()
    }
}

impl ProbeRegistry {
    /// P1–P8, the probes of `probes/mod.rs`.
    pub fn standard() -> Self {
        ProbeRegistry {
            probes: crate::probes::standard(),
        }
    }

    /// The same registry with `probe` added after the others.
    ///
    /// # Panics
    /// If the registry already has a probe with its id.
    pub fn with(mut self, probe: Arc<dyn Probe>) -> Self {
        assert!(
            self.get(probe.id()).is_none(),
            "the registry already has a probe {}",
            probe.id()
        );
        self.probes.push(probe);
        self
    }

    /// The probe with `id`.
    pub fn get(&self, id: ProbeId) -> Option<&Arc<dyn Probe>> {
        self.probes.iter().find(|p| p.id() == id)
    }

    /// Every probe, in order.
    pub fn iter(&self) -> impl Iterator<Item = &Arc<dyn Probe>> {
        self.probes.iter()
    }

    /// Every probe's id, in order.
    pub fn ids(&self) -> Vec<ProbeId> {
        self.probes.iter().map(|p| p.id()).collect()
    }

    /// The probes `backend` must pass, in order: what the suite runs by
    /// default.
    pub fn required_of(&self, backend: &dyn SandboxBackend) -> Vec<ProbeId> {
        self.probes
            .iter()
            .filter(|p| p.required_of(backend))
            .map(|p| p.id())
            .collect()
    }

    /// The title of probe `id`, or a placeholder naming it as unknown.
    pub fn title(&self, id: ProbeId) -> &'static str {
        self.get(id)
            .map(|p| p.title())
            .unwrap_or("(not in this suite's registry)")
    }
}

/// Builds a [`Manifest`] from a table of names and evidence kinds.
pub(crate) fn manifest(table: &[(&str, Evidence)]) -> Manifest {
    table.iter().map(|(n, e)| (n.to_string(), *e)).collect()
}
