//! # cordon-egress
//!
//! Network egress through an allowlist: what a sandbox with
//! `cordon_core::Network::Allow` may reach, the proxy that decides it
//! outside the sandbox, and the one network-target grammar the Starlark
//! `http` module shares. It depends on no other Cordon crate: core's
//! policy type holds its [`HostPattern`]s, the Linux backend runs its
//! [`EgressProxy`] for a sandbox, and the Starlark host checks a
//! package's requests with the same [`Allowlist`].
//!
//! A backend that supports the allowlist gives the sandbox a network of its
//! own with no route out, and one way to the host: a listening TCP socket
//! on `127.0.0.1:`[`PROXY_PORT`] inside that network, whose accepted
//! connections the host serves with an [`EgressProxy`]. The proxy speaks
//! HTTP `CONNECT` (any TCP protocol, TLS included, which it does not
//! inspect) and plain HTTP proxy requests (`GET http://host/…`), and lets
//! a connection through only when
//!
//! 1. the target's name (or IP literal) and port match a [`HostPattern`]
//!    of the [`Allowlist`] ([`Allowlist::match_target`]), and
//! 2. every address the name resolves to is public ([`is_public_ip`]): no
//!    loopback, private, link-local (cloud metadata), CGNAT or reserved
//!    address, unless the list also names a private range holding it
//!    (`--allow-private 10.0.0.0/8`), the target is an IP literal the
//!    operator listed, or it is the operator's `localhost` and the
//!    addresses are loopback ([`Allowlist::check_addresses`]). The proxy
//!    connects to exactly the addresses it checked, so a second DNS answer
//!    cannot slip past the check.
//!
//! The grammar (`pattern.rs`), the matching rules (`allowlist.rs`) and the
//! address guard (`address.rs`) are the same for the Starlark `http`
//! module; what differs between a process's list and a package's is in
//! [`Allowlist`]'s table.
//!
//! ```
//! use cordon_egress::{Access, Allowlist, HostPattern, IpRange, TargetHost};
//! use std::net::SocketAddr;
//!
//! let mut entries: Vec<HostPattern> = ["api.example.com:443", "*.pkg.example.org", "git.corp"]
//!     .iter()
//!     .map(|s| s.parse().unwrap())
//!     .collect();
//! entries.push(HostPattern::private_range("10.0.0.0/8".parse().unwrap()));
//! let allow = Allowlist::for_process(entries);
//! let name = |n: &str| TargetHost::Name(n.into());
//! assert!(allow.match_target(&name("api.example.com"), 443, Access::Tunnel).is_ok());
//! assert!(allow.match_target(&name("api.example.com"), 80, Access::Http).is_err());
//! // A pattern without a port allows 443 and 80 here.
//! assert!(allow.match_target(&name("eu.pkg.example.org"), 80, Access::Http).is_ok());
//! // `*.domain` matches subdomains, never the domain itself.
//! assert!(allow.match_target(&name("pkg.example.org"), 443, Access::Tunnel).is_err());
//! // IP literals only when listed as such.
//! let ip = TargetHost::Ip([93, 184, 216, 34].into());
//! assert!(allow.match_target(&ip, 443, Access::Tunnel).is_err());
//! // git.corp may resolve into 10.0.0.0/8, the range the list names...
//! let corp = name("git.corp");
//! let pattern = allow.match_target(&corp, 443, Access::Tunnel).unwrap();
//! let at = |a: &str| vec![a.parse::<SocketAddr>().unwrap()];
//! assert!(allow.check_addresses(Some(pattern), &corp, &at("10.2.3.4:443")).is_ok());
//! // ...and nowhere else that is not public.
//! let e = allow.check_addresses(Some(pattern), &corp, &at("192.168.1.1:443")).unwrap_err();
//! assert!(e.0.contains("--allow-private 192.168.1.1/32"), "{e}");
//! ```

mod address;
mod allowlist;
mod buffers;
mod intercept;
mod pattern;
mod proxy;
mod relay;
mod request;
mod rule;

pub use address::{address_class, is_public_ip};
pub use allowlist::{Access, Advice, Allowlist, Refusal};
pub use buffers::{SOCKET_BUFFER, STALL_TIMEOUT_MS};
pub use intercept::{GuardedStream, Intercept, Intercepted, Refusals};
pub use pattern::{HostPattern, HostPatternError, IpRange, IpRangeError, Scheme, TargetHost};
pub use proxy::{EgressLimits, EgressProxy, EgressStats, RefusalObserver, RefusedRequest};
pub use rule::{path_is_plain, RequestRule, RequestRuleError};

/// The port of the proxy inside the sandbox's own network
/// (`http_proxy=http://127.0.0.1:3128`): fixed, since nothing else listens
/// in that network.
pub const PROXY_PORT: u16 = 3128;

/// The environment variables that point programs at the proxy, with the
/// value each gets. `no_proxy`/`NO_PROXY` are removed: a bypass would only
/// fail, later and less clearly.
pub const PROXY_ENV: [&str; 6] = [
    "http_proxy",
    "https_proxy",
    "all_proxy",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "ALL_PROXY",
];

/// The proxy's URL inside the sandbox, the value of each [`PROXY_ENV`]
/// variable.
pub fn proxy_url() -> String {
    format!("http://127.0.0.1:{PROXY_PORT}")
}

#[cfg(test)]
mod tests;
