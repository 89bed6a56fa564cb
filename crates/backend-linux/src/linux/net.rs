//! The egress allowlist (`Network::Allow`): the sandbox's own network and
//! its one way out.
//!
//! With an allowlist the launcher also unshares a network namespace (owned
//! by the sandbox's user namespace), so the sandbox has a loopback device
//! and no route anywhere. In that namespace the launcher brings `lo` up,
//! makes a TCP listener on `127.0.0.1:`[`PROXY_PORT`] and sends it to the
//! host over a socketpair made in `wrap` ([`open_way_out`]); it keeps no
//! copy. The host serves what that listener accepts with core's
//! [`EgressProxy`], which connects from the host's own network when the
//! allowlist and the address guard say so ([`EgressSession`]).
//!
//! Nothing else in the sandbox can reach the host's network: other
//! addresses have no route (the namespace is what holds: Landlock's port
//! rule would let [`PROXY_PORT`] through on any address and does not see a
//! TCP Fast Open connect), the seccomp filter allows only TCP sockets (no
//! UDP, so no DNS of its own; no raw, packet or netlink sockets; no Fast
//! Open sends), and Landlock (ABI ≥ 4) allows TCP connects to
//! [`PROXY_PORT`] only and no bind.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::{Arc, Mutex};

use cordon_core::explain::{DenialKind, DenialLog, Remedy};
use cordon_core::{ChildCommand, Network};
use cordon_egress::{
    proxy_url, EgressLimits, EgressProxy, HostPattern, Intercept, RefusalObserver, RefusedRequest,
    PROXY_ENV, PROXY_PORT,
};

use crate::Layers;

/// What the launcher needs to open the way out.
pub(crate) struct EgressPlan {
    /// The sandbox's end of the socketpair the listener is sent over.
    pub send: OwnedFd,
}

/// The host's side: the other end of the socketpair, and the proxy once
/// the listener has arrived. Held by the sandbox's resources, so the proxy
/// lives exactly as long as the sandbox.
#[derive(Debug)]
pub(crate) struct EgressSession {
    receive: OwnedFd,
    allow: Vec<HostPattern>,
    intercept: Option<Arc<dyn Intercept>>,
    proxy: Mutex<Option<EgressProxy>>,
    /// In explain mode: the proxy's refusals (`explain.rs`).
    pub(crate) refusals: Option<Arc<DenialLog>>,
}

/// The way out a network policy asks for: the allowlist, and what
/// terminates some of its connections (the credential broker).
pub(crate) type WayOut = (Vec<HostPattern>, Option<Arc<dyn Intercept>>);

/// The way out of `network`, `None` for `Network::Deny`, or why this
/// backend cannot enforce it with `layers`.
pub(crate) fn allowlist(network: &Network, layers: Layers) -> Result<Option<WayOut>, String> {
    match network {
        Network::Deny | Network::Namespace => Ok(None),
        Network::Allow(_) | Network::Brokered(_) if !layers.seccomp_allowlist => Err(
            "Network::Allow needs the seccomp allowlist layer (the deny-list lets UDP \
             and raw sockets be made): use every layer, or Network::Deny"
                .into(),
        ),
        Network::Allow(hosts) => Ok(Some((hosts.clone(), None))),
        Network::Brokered(b) => Ok(Some((b.hosts.clone(), Some(b.intercept.clone())))),
        other => Err(format!(
            "network policy {other:?} is not supported by the Linux backend (only Deny and \
             Allow, Brokered and Namespace): upgrade cordon-backend-linux or use Network::Deny"
        )),
    }
}

/// Prepares one sandbox's way out: the socketpair (the plan for the
/// launcher, the session for the host), and `cmd`'s proxy variables.
pub(crate) fn prepare(
    cmd: &mut ChildCommand,
    (allow, intercept): WayOut,
) -> io::Result<(EgressPlan, EgressSession)> {
    let url = proxy_url();
    for var in PROXY_ENV {
        cmd.env(var, &url);
    }
    cmd.env_remove("no_proxy").env_remove("NO_PROXY");
    let mut fds = [0; 2];
    // SAFETY: socketpair fills two fds we then own.
    let r = unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr(),
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both fds are new and owned by nothing else.
    let (send, receive) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    Ok((
        EgressPlan { send },
        EgressSession {
            receive,
            allow,
            intercept,
            proxy: Mutex::new(None),
            refusals: None,
        },
    ))
}

impl EgressSession {
    /// Takes the listener the launcher sent and starts the proxy on it.
    /// Called once the program runs (the launcher sent it before). Without
    /// a listener the sandbox simply has no way out: its connects to the
    /// proxy port are refused.
    pub(crate) fn start(&self) {
        let observer = self.refusals.clone().map(|log| {
            Arc::new(move |r: &RefusedRequest| {
                let object = match (&r.target, &r.allow_with) {
                    (Some(t), Some(_)) => format!("{t} (not in the allowlist)"),
                    (Some(t), None) => format!("{t} ({})", r.reason),
                    (None, _) => r.reason.clone(),
                };
                let remedy = match (&r.allow_with, &r.allow_rule) {
                    (Some(entry), _) => Remedy::AllowHost(entry.clone()),
                    (None, Some(rule)) => Remedy::AllowRequest(rule.clone()),
                    (None, None) => Remedy::None,
                };
                log.record(DenialKind::Network, &object, "connect", remedy);
            }) as RefusalObserver
        });
        let started = super::fd_pass::receive_fd(&self.receive).and_then(|l| {
            EgressProxy::serve_intercepted(
                l,
                self.allow.clone(),
                EgressLimits::default(),
                observer,
                self.intercept.clone(),
            )
        });
        match started {
            Ok(p) => {
                tracing::debug!(allow = ?self.allow, "egress proxy serving the sandbox");
                *self.proxy.lock().unwrap_or_else(|e| e.into_inner()) = Some(p);
            }
            Err(e) => tracing::warn!(
                error = %e,
                "the sandbox's egress listener did not arrive: it has no way out"
            ),
        }
    }
}

fn check(r: libc::c_int) -> io::Result<libc::c_int> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

/// In the launcher, inside the new user and network namespaces (with the
/// user namespace's capabilities): brings `lo` up, listens on
/// `127.0.0.1:PROXY_PORT`, sends the listener to the host and closes its
/// own copies. Async-signal-safe: raw syscalls on stack buffers.
///
/// # Safety
/// Runs between clone and exec; `plan.send` must be open.
pub(crate) unsafe fn open_way_out(plan: &EgressPlan) -> io::Result<()> {
    // SAFETY: raw syscalls on fds this function opens, and on `plan.send`,
    // which the caller keeps open.
    unsafe {
        let probe = check(libc::socket(
            libc::AF_INET,
            libc::SOCK_DGRAM | libc::SOCK_CLOEXEC,
            0,
        ))?;
        let lo = bring_up_lo(probe);
        libc::close(probe);
        lo?;
        let l = check(libc::socket(
            libc::AF_INET,
            libc::SOCK_STREAM | libc::SOCK_CLOEXEC,
            0,
        ))?;
        let sent = listen_and_send(l, plan.send.as_raw_fd());
        libc::close(l);
        // The launcher's copy of the sending end goes too: the init (made
        // later, with a copy of this fd table) and the program need none.
        libc::close(plan.send.as_raw_fd());
        sent
    }
}

fn bring_up_lo(sock: libc::c_int) -> io::Result<()> {
    // SAFETY: raw syscalls on the caller's open sockets and on stack
    // buffers that outlive each call.
    unsafe {
        let mut ifr: libc::ifreq = std::mem::zeroed();
        for (i, b) in b"lo".iter().enumerate() {
            ifr.ifr_name[i] = *b as libc::c_char;
        }
        check(libc::ioctl(sock, libc::SIOCGIFFLAGS, &mut ifr))?;
        ifr.ifr_ifru.ifru_flags |= libc::IFF_UP as libc::c_short;
        check(libc::ioctl(sock, libc::SIOCSIFFLAGS, &mut ifr))?;
        Ok(())
    }
}

fn listen_and_send(l: libc::c_int, send: libc::c_int) -> io::Result<()> {
    // SAFETY: raw syscalls on the caller's open sockets and on stack
    // buffers that outlive each call.
    unsafe {
        let addr = libc::sockaddr_in {
            sin_family: libc::AF_INET as libc::sa_family_t,
            sin_port: PROXY_PORT.to_be(),
            sin_addr: libc::in_addr {
                s_addr: u32::from(std::net::Ipv4Addr::LOCALHOST).to_be(),
            },
            sin_zero: [0; 8],
        };
        check(libc::bind(
            l,
            (&addr as *const libc::sockaddr_in).cast(),
            std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
        ))?;
        check(libc::listen(l, 128))?;
    }
    super::fd_pass::send_fd(send, l)
}
