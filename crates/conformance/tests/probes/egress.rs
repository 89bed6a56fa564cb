//! P8, the egress allowlist: the Linux backend proves it, and the probe
//! fails for backends that claim it without holding it — one with no
//! confinement at all, and one that runs the same proxy on the host but
//! gives the program no network of its own (so the program can go around
//! it).

use crate::common;

use std::collections::BTreeMap;
use std::net::TcpListener;
use std::os::fd::OwnedFd;
use std::sync::Arc;

use cordon_backend_linux::LinuxBackend;
use cordon_backend_noop::NoopBackend;
use cordon_core::{
    Availability, ChildCommand, Network, ProbeId, ProbeStatus, SandboxBackend, SandboxPolicy,
    SandboxResources, WrapError, WrapResources,
};
use cordon_egress::{EgressLimits, EgressProxy};

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
        "host-broker-injected",
        "host-broker-unbound-clean",
        "broker-control",
        "broker-unbound",
    ] {
        assert_eq!(
            p8_status(&report, check),
            Some(ProbeStatus::Pass),
            "{check}"
        );
    }
}

/// The Linux backend, but its proxy ignores the credential broker: a
/// brokered network runs as the plain allowlist (the interceptor
/// dropped), as a backend that kept using `EgressProxy::serve_observed`
/// would.
struct IgnoresTheBroker(LinuxBackend);

impl SandboxBackend for IgnoresTheBroker {
    fn name(&self) -> &str {
        "linux-ignoring-the-broker"
    }
    fn availability(&self) -> Availability {
        self.0.availability()
    }
    fn host_facts(&self) -> BTreeMap<String, String> {
        self.0.host_facts()
    }
    fn wrap(
        &self,
        cmd: &mut ChildCommand,
        policy: &SandboxPolicy,
    ) -> Result<WrapResources, WrapError> {
        let network = match &policy.network {
            Network::Brokered(b) => Network::Allow(b.hosts.clone()),
            other => other.clone(),
        };
        self.0.wrap(
            cmd,
            &SandboxPolicy {
                network,
                ..policy.clone()
            },
        )
    }
    fn claims_egress_allowlist(&self) -> bool {
        true
    }
}

/// P8's broker run fails for a backend whose proxy tunnels the hosts the
/// broker was to terminate: the program's call to the bound host fails
/// (the host's own certificate, not one of the run's CA) and the value
/// never reaches the target.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn p8_fails_for_a_backend_that_ignores_the_broker() {
    let backend = Arc::new(IgnoresTheBroker(LinuxBackend::new()));
    let report = common::run(common::suite().only(vec![ProbeId::P8]), backend).await;
    let p8 = &report.probes[0];
    assert_ne!(p8.status, ProbeStatus::Pass, "{}", common::dump(&report));
    // The allowlist itself still holds: only the broker's checks fail.
    assert_eq!(p8_status(&report, "control-proxy"), Some(ProbeStatus::Pass));
    for check in ["host-broker-injected", "broker-control"] {
        assert_ne!(
            p8_status(&report, check),
            Some(ProbeStatus::Pass),
            "{check}: {}",
            common::dump(&report)
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

/// Runs a proxy on every host address that lets every `CONNECT` through,
/// and no network namespace: the proxy's own checks can fail too.
struct PermissiveProxy;

/// Stops the permissive proxy's accept loop when the sandbox is gone.
#[derive(Debug)]
struct Stops(Arc<std::sync::atomic::AtomicBool>);

impl SandboxResources for Stops {}

impl Drop for Stops {
    fn drop(&mut self) {
        self.0.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

/// One `CONNECT` served: read the head byte by byte (the client pipelines
/// its request right after it), connect, say 200, relay both ways.
fn permit(mut client: std::net::TcpStream) {
    use std::io::{Read, Write};
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") && head.len() < 4096 {
        match client.read(&mut b) {
            Ok(1) => head.push(b[0]),
            _ => return,
        }
    }
    let line = String::from_utf8_lossy(&head)
        .lines()
        .next()
        .unwrap_or("")
        .to_string();
    let Some(target) = line
        .strip_prefix("CONNECT ")
        .and_then(|r| r.split(' ').next())
    else {
        return;
    };
    let Ok(upstream) = std::net::TcpStream::connect(target) else {
        let _ = client.write_all(b"HTTP/1.1 502 Bad Gateway\r\n\r\n");
        return;
    };
    let _ = client.write_all(b"HTTP/1.1 200 OK\r\n\r\n");
    let (mut c2, mut u2) = (client.try_clone().unwrap(), upstream.try_clone().unwrap());
    let (mut c, mut u) = (client, upstream);
    let t = std::thread::spawn(move || {
        let _ = std::io::copy(&mut c2, &mut u2);
        let _ = u2.shutdown(std::net::Shutdown::Write);
    });
    let _ = std::io::copy(&mut u, &mut c);
    let _ = c.shutdown(std::net::Shutdown::Both);
    let _ = t.join();
}

impl SandboxBackend for PermissiveProxy {
    fn name(&self) -> &str {
        "permissive-proxy"
    }
    fn availability(&self) -> Availability {
        Availability::Available
    }
    fn wrap(
        &self,
        cmd: &mut ChildCommand,
        _policy: &SandboxPolicy,
    ) -> Result<WrapResources, WrapError> {
        let err = |e: std::io::Error| WrapError::new("permissive-proxy", e.to_string());
        // Every address, IPv4 (mapped) and IPv6.
        let l = TcpListener::bind("[::]:0").map_err(err)?;
        l.set_nonblocking(true).map_err(err)?;
        let port = l.local_addr().map_err(err)?.port();
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let stopped = Arc::clone(&stop);
        std::thread::spawn(move || {
            while !stopped.load(std::sync::atomic::Ordering::Relaxed) {
                match l.accept() {
                    Ok((c, _)) => {
                        let _ = c.set_nonblocking(false);
                        std::thread::spawn(move || permit(c));
                    }
                    Err(_) => std::thread::sleep(std::time::Duration::from_millis(2)),
                }
            }
        });
        cmd.env("http_proxy", format!("http://127.0.0.1:{port}"));
        Ok(Some(Box::new(Stops(stop))))
    }
    fn claims_egress_allowlist(&self) -> bool {
        true
    }
}

/// Every P8 check can fail: each fails under the no-op backend that
/// claims the allowlist, under a permissive proxy with no network
/// namespace, or (the broker's) under the Linux backend with a proxy that
/// ignores the broker, except what the kernel itself refuses to this uid
/// (listed).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_p8_check_fails_under_a_backend_that_does_not_hold_it() {
    let noop = common::run(
        common::suite().only(vec![ProbeId::P8]),
        Arc::new(NoopClaims),
    )
    .await;
    let open = common::run(
        common::suite().only(vec![ProbeId::P8]),
        Arc::new(PermissiveProxy),
    )
    .await;
    let unbrokered = common::run(
        common::suite().only(vec![ProbeId::P8]),
        Arc::new(IgnoresTheBroker(LinuxBackend::new())),
    )
    .await;
    let dump = format!(
        "{}\n\n{}\n\n{}",
        common::dump(&noop),
        common::dump(&open),
        common::dump(&unbrokered)
    );
    // The permissive proxy works: its positive control passes.
    assert_eq!(
        p8_status(&open, "control-proxy"),
        Some(ProbeStatus::Pass),
        "{dump}"
    );
    // Refused by the kernel to a user without privileges, sandbox or not.
    let kernel_refuses: &[&str] = if common::is_root() {
        &[]
    } else {
        &["raw-socket", "packet-socket"]
    };
    let names: std::collections::BTreeSet<String> = noop
        .probes
        .iter()
        .chain(&open.probes)
        .chain(&unbrokered.probes)
        .flat_map(|p| p.checks.iter().map(|c| c.name.clone()))
        .filter(|n| !n.starts_with("control-") && n != "manifest" && n != "child-exit")
        .collect();
    assert!(names.len() > 20, "{dump}");
    let mut never = Vec::new();
    for name in &names {
        let failed = [&noop, &open, &unbrokered]
            .iter()
            .any(|r| p8_status(r, name) == Some(ProbeStatus::Fail));
        if failed == kernel_refuses.contains(&name.as_str()) {
            never.push(name.clone());
        }
    }
    assert!(
        never.is_empty(),
        "P8 checks that never fail (or fail though listed as refused by the kernel): \
         {never:?}\n{dump}"
    );
}
