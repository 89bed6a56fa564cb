//! Network access: none, an allowlist through the host's proxy, or that
//! allowlist with the credential broker.

use serde::{Deserialize, Serialize};

/// Network access for a sandboxed child.
///
/// The enum is `#[non_exhaustive]`: a backend must refuse (with a
/// `WrapError`) any variant it does not enforce, so a policy is never run
/// with less than it asks for. Which backends enforce
/// [`Network::Allow`] is in their docs (Linux: yes; macOS: no).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[non_exhaustive]
pub enum Network {
    /// No socket to anything outside the sandbox: no TCP, UDP, raw, packet
    /// or netlink socket, no UNIX-socket connect to a host socket (pathname
    /// or abstract), no datagram sent to a host socket's path, no io_uring
    /// (which could do the same without the syscalls). `socketpair(AF_UNIX)`
    /// of stream or seqpacket type inside the sandbox stays possible (a
    /// datagram pair could address a path, so it is refused).
    ///
    /// How each backend enforces it, and on which kernel, is in its docs
    /// (Linux: seccomp refuses `socket`, datagram `socketpair` and
    /// io_uring; Landlock refuses TCP bind/connect and abstract sockets
    /// created outside the sandbox). The host's network namespace is not
    /// replaced, so what the host exposes through files the sandbox can
    /// read is not hidden by this setting.
    #[default]
    Deny,
    /// Outgoing TCP to the listed hosts only, through a proxy the host
    /// runs (the `cordon-egress` crate): the sandbox gets a network of its own
    /// with no route out, and one way to the host, an HTTP proxy at
    /// `127.0.0.1:`[`PROXY_PORT`](cordon_egress::PROXY_PORT) that the
    /// program is pointed at with `http_proxy`, `https_proxy` and
    /// `all_proxy` (upper case too). The proxy checks each `CONNECT` or
    /// plain-HTTP request's host and port against the list and every
    /// address the name resolves to against the private-address guard.
    /// No UDP (so no DNS of its own), no raw socket, no listening socket
    /// reachable from outside. TLS is not inspected.
    ///
    /// An empty list is allowed and means "the proxy, which refuses
    /// everything".
    Allow(Vec<cordon_egress::HostPattern>),
    /// [`Network::Allow`], with the `CONNECT`s to some hosts terminated
    /// and served by an interceptor instead of tunnelled: the credential
    /// broker (`cordon-broker`), for the hosts its secrets are bound to
    /// and its request rules are for. Everything else is as `Allow`.
    ///
    /// It holds a live object (the broker, with secret values in its
    /// memory), so it neither serializes nor deserializes: a policy that
    /// carries one cannot be written out and read back as something less.
    Brokered(BrokeredNetwork),
    /// TCP clients and servers in the network namespace a container joins
    /// ([`ContainerRoot::network`](crate::policy::ContainerRoot::network):
    /// a pod's, made by root, with what its network plugin gave it), never
    /// the host's. The socket rules are [`Network::Allow`]'s (TCP only: no
    /// UDP and so no DNS of its own, no raw, packet or netlink socket), and
    /// `bind`, `listen` and `accept` too, without the proxy: every port of
    /// that namespace may be bound and connected to. A backend refuses it
    /// for a sandbox that joins no network namespace, and where it cannot
    /// bound the sandbox's TCP buffers (Linux: a cgroup that counts them);
    /// a runner admits it only with P8 proven (its socket filter is the
    /// allowlist's).
    Namespace,
}

/// [`Network::Brokered`]'s allowlist and interceptor.
#[derive(Clone)]
pub struct BrokeredNetwork {
    /// The allowlist, as for [`Network::Allow`]; it must hold the
    /// interceptor's hosts for it to see them.
    pub hosts: Vec<cordon_egress::HostPattern>,
    /// What terminates the connections it wants.
    pub intercept: std::sync::Arc<dyn cordon_egress::Intercept>,
}

impl std::fmt::Debug for BrokeredNetwork {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BrokeredNetwork")
            .field("hosts", &self.hosts)
            .field("intercept", &self.intercept)
            .finish()
    }
}

impl PartialEq for BrokeredNetwork {
    /// The same hosts and the very same interceptor.
    fn eq(&self, other: &Self) -> bool {
        self.hosts == other.hosts && std::sync::Arc::ptr_eq(&self.intercept, &other.intercept)
    }
}

impl Eq for BrokeredNetwork {}

impl Serialize for BrokeredNetwork {
    fn serialize<S: serde::Serializer>(&self, _: S) -> Result<S::Ok, S::Error> {
        Err(serde::ser::Error::custom(
            "a brokered network holds the run's broker and cannot be serialized",
        ))
    }
}

impl<'de> Deserialize<'de> for BrokeredNetwork {
    fn deserialize<D: serde::Deserializer<'de>>(_: D) -> Result<Self, D::Error> {
        Err(serde::de::Error::custom(
            "a brokered network cannot be read from data: build one with a broker",
        ))
    }
}

impl Network {
    /// The allowlist, for `Allow` and `Brokered`.
    pub fn allowlist(&self) -> Option<&[cordon_egress::HostPattern]> {
        match self {
            Network::Deny | Network::Namespace => None,
            Network::Allow(h) => Some(h),
            Network::Brokered(b) => Some(&b.hosts),
        }
    }

    /// The allowlist with `more` added: a `Deny` becomes an `Allow`, a
    /// `Brokered` keeps its interceptor.
    pub fn with_hosts(
        &self,
        more: impl IntoIterator<Item = cordon_egress::HostPattern>,
    ) -> Network {
        match self {
            Network::Brokered(b) => {
                let mut b = b.clone();
                b.hosts.extend(more);
                Network::Brokered(b)
            }
            other => {
                let mut hosts = other.allowlist().map(<[_]>::to_vec).unwrap_or_default();
                hosts.extend(more);
                Network::Allow(hosts)
            }
        }
    }
}
