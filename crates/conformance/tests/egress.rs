//! P8, the egress allowlist: the Linux backend proves it, and the probe
//! fails for backends that claim it without holding it — one with no
//! confinement at all, and one that runs the same proxy on the host but
//! gives the program no network of its own (so the program can go around
//! it).
#![cfg(target_os = "linux")]

mod common;

use std::collections::BTreeMap;
use std::net::TcpListener;
use std::os::fd::OwnedFd;
use std::sync::Arc;

use cordon_backend_linux::LinuxBackend;
use cordon_backend_noop::NoopBackend;
use cordon_core::egress::{EgressLimits, EgressProxy};
use cordon_core::{
    Availability, ChildCommand, Network, ProbeId, ProbeStatus, SandboxBackend, SandboxPolicy,
    SandboxResources, WrapError, WrapResources,
};

fn p8_status(report: &cordon_core::ConformanceReport, check: &str) -> Option<ProbeStatus> {
    let p8 = report.probes.iter().find(|p| p.id == ProbeId::P8)?;
    p8.checks.iter().find(|c| c.name == check).map(|c| c.status)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_linux_backend_proves_its_allowlist() {
    let backend = Arc::new(LinuxBackend::new());
    assert!(backend.claims_egress_allowlist());
    let report = common::run(common::suite().only(vec![ProbeId::P8]), backend).await;
    let p8 = &report.probes[0];
    assert_eq!(p8.status, ProbeStatus::Pass, "{}", common::dump(&report));
    for check in [
        "host-listed-target-reached",
        "host-bystander-tcp",
        "control-proxy",
        "proxy-private-name",
        "direct-tcp4",
        "udp-send",
    ] {
        assert_eq!(
            p8_status(&report, check),
            Some(ProbeStatus::Pass),
            "{check}"
        );
    }
}

/// No confinement, but claims the allowlist.
struct NoopClaims;

impl SandboxBackend for NoopClaims {
    fn name(&self) -> &str {
        "noop-claims-egress"
    }
    fn availability(&self) -> Availability {
        Availability::Available
    }
    fn host_facts(&self) -> BTreeMap<String, String> {
        BTreeMap::new()
    }
    fn wrap(
        &self,
        cmd: &mut ChildCommand,
        policy: &SandboxPolicy,
    ) -> Result<WrapResources, WrapError> {
        NoopBackend.wrap(
            cmd,
            &SandboxPolicy {
                network: Network::Deny,
                ..policy.clone()
            },
        )
    }
    fn claims_egress_allowlist(&self) -> bool {
        true
    }
}

/// The proxy a backend would run, on the host's own loopback, with the
/// program pointed at it, and no network namespace: the proxy decides
/// right, and the program simply goes around it.
struct ProxyOnly;

/// Keeps the proxy for the child's life.
#[derive(Debug)]
struct Held {
    _proxy: EgressProxy,
}

impl SandboxResources for Held {}

impl SandboxBackend for ProxyOnly {
    fn name(&self) -> &str {
        "proxy-only"
    }
    fn availability(&self) -> Availability {
        Availability::Available
    }
    fn host_facts(&self) -> BTreeMap<String, String> {
        BTreeMap::new()
    }
    fn wrap(
        &self,
        cmd: &mut ChildCommand,
        policy: &SandboxPolicy,
    ) -> Result<WrapResources, WrapError> {
        let Network::Allow(allow) = &policy.network else {
            return Ok(None);
        };
        let err = |e: std::io::Error| WrapError::new("proxy-only", e.to_string());
        let l = TcpListener::bind("127.0.0.1:0").map_err(err)?;
        let port = l.local_addr().map_err(err)?.port();
        let proxy = EgressProxy::serve(OwnedFd::from(l), allow.clone(), EgressLimits::default())
            .map_err(err)?;
        cmd.env("http_proxy", format!("http://127.0.0.1:{port}"));
        Ok(Some(Box::new(Held { _proxy: proxy })))
    }
    fn claims_egress_allowlist(&self) -> bool {
        true
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn p8_fails_for_backends_that_claim_the_allowlist_without_holding_it() {
    let report = common::run(
        common::suite().only(vec![ProbeId::P8]),
        Arc::new(NoopClaims),
    )
    .await;
    let dump = common::dump(&report);
    assert_ne!(report.probes[0].status, ProbeStatus::Pass, "{dump}");
    for check in [
        "direct-tcp4",
        "host-bystander-tcp",
        "udp-send",
        "host-udp-socket",
        "dns-udp",
    ] {
        assert_eq!(
            p8_status(&report, check),
            Some(ProbeStatus::Fail),
            "noop {check}: {dump}"
        );
    }
    assert_eq!(
        p8_status(&report, "control-proxy"),
        Some(ProbeStatus::Unreachable),
        "{dump}"
    );

    let report = common::run(common::suite().only(vec![ProbeId::P8]), Arc::new(ProxyOnly)).await;
    let dump = common::dump(&report);
    assert_eq!(report.probes[0].status, ProbeStatus::Fail, "{dump}");
    // The proxy itself decides right: the listed target is reached and the
    // others refused.
    for check in [
        "control-proxy",
        "host-listed-target-reached",
        "proxy-unlisted-port",
        "proxy-ip-literal",
        "proxy-private-name",
    ] {
        assert_eq!(
            p8_status(&report, check),
            Some(ProbeStatus::Pass),
            "proxy-only {check}: {dump}"
        );
    }
    // But nothing keeps the program from going around it.
    for check in [
        "direct-tcp4",
        "host-bystander-tcp",
        "udp-send",
        "host-udp-socket",
    ] {
        assert_eq!(
            p8_status(&report, check),
            Some(ProbeStatus::Fail),
            "proxy-only {check}: {dump}"
        );
    }
}
