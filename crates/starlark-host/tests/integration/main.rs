//! Integration tests: real HTTP servers on 127.0.0.1, real interpreter.
#![allow(clippy::field_reassign_with_default)]

#[path = "../common/attacks.rs"]
mod attacks;
mod denials;
mod examples;
mod gating;
mod hostile;
mod http;
mod limits;
mod provider;
mod server;
mod store;
mod store_integrity;
mod store_suite;
#[path = "../common/tiered.rs"]
mod tiered;

use std::collections::BTreeMap;
use std::sync::Arc;

use cordon_starlark::*;
use tiered::TieredHost;

pub struct Harness {
    /// Calls as [`TrustTier::Trusted`], so in process: the interpreter's
    /// limits are what stands between a script and this test process.
    pub runner: TieredHost,
    pub perms: Arc<InMemoryPermissionStore>,
    pub secrets: Arc<InMemorySecretStore>,
    pub notifier: RecordingNotifier,
    pub providers: Arc<InMemoryProviderResolver>,
    pub packages: Arc<InMemoryPackageStore>,
}

pub fn harness(limits: EvalLimits) -> Harness {
    let perms = Arc::new(InMemoryPermissionStore::new());
    let secrets = Arc::new(InMemorySecretStore::new());
    let notifier = RecordingNotifier::new();
    let providers = Arc::new(InMemoryProviderResolver::new());
    let packages = Arc::new(InMemoryPackageStore::new());
    let mut services = Services::new(packages.clone(), perms.clone());
    services.secrets = Some(secrets.clone());
    services.notifier = Some(Arc::new(notifier.clone()));
    services.providers = Some(providers.clone());
    let runner = TieredHost {
        host: StarlarkHost::builder(services)
            .limits(limits)
            .trusted_isolation(Isolation::InProcess)
            .build()
            .unwrap(),
        tier: TrustTier::Trusted,
    };
    Harness {
        runner,
        perms,
        secrets,
        notifier,
        providers,
        packages,
    }
}

/// A package with the given manifest fields and one `main.star`.
pub fn package(id: &str, perms: &[Permission], network: &[String], src: &str) -> Package {
    let mut m = Manifest::minimal(id, "main.star");
    m.permissions = perms.to_vec();
    m.network_access = network.to_vec();
    let mut sources = BTreeMap::new();
    sources.insert("main.star".to_owned(), src.to_owned());
    Package::new(m, sources)
}

impl Harness {
    /// Grants everything the package requests, as an operator who also
    /// approves the IP literals its `network_access` names (the tests'
    /// servers are on 127.0.0.1): `--allow-private` for each.
    pub fn grant_all(&self, pkg: &Package) {
        for p in &pkg.manifest.permissions {
            self.perms.grant(&pkg.id, *p);
        }
        for t in &pkg.manifest.network_access {
            let t: cordon_egress::HostPattern = match t.split_once(' ') {
                // A request rule allows its host.
                Some(_) => t
                    .parse::<cordon_egress::RequestRule>()
                    .unwrap()
                    .host()
                    .clone(),
                None => t.parse().unwrap(),
            };
            if let Some(ip) = t.ip_literal() {
                self.perms
                    .allow_private(&pkg.id, cordon_egress::IpRange::single(ip));
            }
        }
    }

    pub async fn call(
        &self,
        pkg: &Package,
        name: &str,
        ctx: Option<&RunContext>,
    ) -> Result<CallOutcome, StarlarkHostError> {
        self.runner
            .call_entry_point(pkg, name, vec![], Default::default(), ctx)
            .await
    }
}

/// Assert an error's text contains `needle`.
#[track_caller]
pub fn assert_err_contains<T: std::fmt::Debug>(
    r: Result<T, StarlarkHostError>,
    needle: &str,
) -> StarlarkHostError {
    match r {
        Ok(v) => panic!("expected an error containing {needle:?}, got Ok({v:?})"),
        Err(e) => {
            assert!(
                e.to_string().contains(needle),
                "error {e} does not contain {needle:?}"
            );
            e
        }
    }
}
