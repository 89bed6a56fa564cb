//! Network egress through an allowlist: what a sandbox with
//! [`Network::Allow`](crate::Network::Allow) may reach, and the proxy that
//! decides it, outside the sandbox.
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
//!    of the allowlist ([`match_target`]), and
//! 2. every address the name resolves to is public ([`is_public_ip`]): no
//!    loopback, private, link-local (cloud metadata), CGNAT or reserved
//!    address, unless the pattern names that address literally, or the
//!    pattern is `localhost` itself and the addresses are loopback
//!    ([`check_addresses`]). The proxy connects to exactly the addresses it
//!    checked, so a second DNS answer cannot slip past the check.
//!
//! The same address guard protects the Starlark `http` module.
//!
//! ```
//! use cordon_core::egress::{match_target, HostPattern, TargetHost};
//!
//! let allow: Vec<HostPattern> = ["api.example.com:443", "*.pkg.example.org"]
//!     .iter()
//!     .map(|s| s.parse().unwrap())
//!     .collect();
//! let name = |n: &str| TargetHost::Name(n.into());
//! assert!(match_target(&allow, &name("api.example.com"), 443).is_ok());
//! assert!(match_target(&allow, &name("api.example.com"), 80).is_err());
//! // A pattern without a port allows 443 and 80.
//! assert!(match_target(&allow, &name("eu.pkg.example.org"), 80).is_ok());
//! // `*.domain` matches subdomains, never the domain itself.
//! assert!(match_target(&allow, &name("pkg.example.org"), 443).is_err());
//! // IP literals only when listed as such.
//! assert!(match_target(&allow, &TargetHost::Ip([93, 184, 216, 34].into()), 443).is_err());
//! ```

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::str::FromStr;

use serde::{Deserialize, Serialize};

mod proxy;
mod request;

pub use proxy::{EgressLimits, EgressProxy, EgressStats};

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

/// One allowlist entry: `HOST[:PORT]`, where `HOST` is a name
/// (`api.example.com`), `*.` and a domain (`*.example.com`: every
/// subdomain, not the domain itself) or an IP literal (`10.0.0.5`,
/// `[::1]`). Without a port, the entry allows 443 and 80.
///
/// Names are compared in ASCII lower case without a trailing dot; an
/// international name must be given in its `xn--` form.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct HostPattern {
    host: PatternHost,
    port: Option<u16>,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum PatternHost {
    Exact(String),
    /// `*.example.com`, stored as `.example.com`.
    Suffix(String),
    Ip(IpAddr),
}

/// What a program asked to reach: a name, or an IP literal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TargetHost {
    /// A DNS name, as the program wrote it.
    Name(String),
    /// An IP literal.
    Ip(IpAddr),
}

impl TargetHost {
    /// Parses the host part of a `CONNECT` authority or an `http://` URL:
    /// a name, an IPv4 literal or a bracketed IPv6 literal.
    pub fn parse(host: &str) -> Option<TargetHost> {
        if let Some(v6) = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
            return v6.parse().ok().map(TargetHost::Ip);
        }
        if let Ok(v4) = host.parse::<Ipv4Addr>() {
            return Some(TargetHost::Ip(IpAddr::V4(v4)));
        }
        let name = normalise_name(host)?;
        Some(TargetHost::Name(name))
    }
}

impl fmt::Display for TargetHost {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TargetHost::Name(n) => f.write_str(n),
            TargetHost::Ip(IpAddr::V6(v6)) => write!(f, "[{v6}]"),
            TargetHost::Ip(ip) => write!(f, "{ip}"),
        }
    }
}

/// Lower case, no trailing dot, letters, digits, `-` and `.` only.
fn normalise_name(raw: &str) -> Option<String> {
    let name = raw.strip_suffix('.').unwrap_or(raw).to_ascii_lowercase();
    let ok = !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|l| !l.is_empty() && l.len() <= 63)
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.');
    ok.then_some(name)
}

/// Why an allowlist entry could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "`{entry}` is not an allowlist entry: {why}; use HOST[:PORT], *.DOMAIN[:PORT] or an IP \
     literal such as 10.0.0.5:8080 or [::1]:8080"
)]
pub struct HostPatternError {
    entry: String,
    why: &'static str,
}

impl FromStr for HostPattern {
    type Err = HostPatternError;

    fn from_str(raw: &str) -> Result<Self, Self::Err> {
        let err = |why| HostPatternError {
            entry: raw.to_owned(),
            why,
        };
        if raw.contains("://") || raw.contains('/') || raw.contains('@') {
            return Err(err("give a host and port, not a URL"));
        }
        let parse_port = |p: &str| match p.parse::<u16>() {
            Ok(0) | Err(_) => Err(err("the port must be a number from 1 to 65535")),
            Ok(n) => Ok(n),
        };
        let (host, port) = if let Some(rest) = raw.strip_prefix('[') {
            let (v6, after) = rest.split_once(']').ok_or(err("unclosed `[`"))?;
            let ip: IpAddr = v6.parse().map_err(|_| err("not an IPv6 address in `[]`"))?;
            let port = match after {
                "" => None,
                p => Some(parse_port(
                    p.strip_prefix(':').ok_or(err("junk after `]`"))?,
                )?),
            };
            (PatternHost::Ip(ip), port)
        } else {
            let (h, port) = match raw.split_once(':') {
                Some((h, p)) => (h, Some(parse_port(p)?)),
                None => (raw, None),
            };
            let host = if let Ok(v4) = h.parse::<Ipv4Addr>() {
                PatternHost::Ip(IpAddr::V4(v4))
            } else if let Some(domain) = h.strip_prefix("*.") {
                let d = normalise_name(domain).ok_or(err("not a domain after `*.`"))?;
                PatternHost::Suffix(format!(".{d}"))
            } else {
                if h.contains('*') {
                    return Err(err("`*` is allowed only as a leading `*.`"));
                }
                PatternHost::Exact(normalise_name(h).ok_or(err("not a host name"))?)
            };
            (host, port)
        };
        Ok(HostPattern { host, port })
    }
}

impl fmt::Display for HostPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.host {
            PatternHost::Exact(h) => f.write_str(h)?,
            PatternHost::Suffix(s) => write!(f, "*{s}")?,
            PatternHost::Ip(IpAddr::V6(v6)) => write!(f, "[{v6}]")?,
            PatternHost::Ip(ip) => write!(f, "{ip}")?,
        }
        match self.port {
            Some(p) => write!(f, ":{p}"),
            None => Ok(()),
        }
    }
}

impl TryFrom<String> for HostPattern {
    type Error = HostPatternError;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        s.parse()
    }
}

impl From<HostPattern> for String {
    fn from(p: HostPattern) -> String {
        p.to_string()
    }
}

impl HostPattern {
    /// Whether this entry matches `host` on `port`.
    pub fn matches(&self, host: &TargetHost, port: u16) -> bool {
        let port_ok = match self.port {
            Some(p) => p == port,
            None => port == 443 || port == 80,
        };
        port_ok
            && match (&self.host, host) {
                (PatternHost::Exact(h), TargetHost::Name(n)) => h == n,
                (PatternHost::Suffix(s), TargetHost::Name(n)) => {
                    n.len() > s.len() && n.ends_with(s.as_str())
                }
                (PatternHost::Ip(a), TargetHost::Ip(b)) => a == b,
                _ => false,
            }
    }

    /// True for the entry `localhost` (any port): the one name that may
    /// resolve to loopback addresses.
    fn is_localhost(&self) -> bool {
        matches!(&self.host, PatternHost::Exact(h) if h == "localhost")
    }
}

/// A connection the allowlist refuses, with the reason the program and the
/// log are given.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Refusal(pub String);

/// The allowlist entry that lets a program reach `host:port`, or why none
/// does.
pub fn match_target<'a>(
    allow: &'a [HostPattern],
    host: &TargetHost,
    port: u16,
) -> Result<&'a HostPattern, Refusal> {
    allow.iter().find(|p| p.matches(host, port)).ok_or_else(|| {
        Refusal(match host {
            TargetHost::Ip(_) => format!(
                "{host}:{port} is not on the sandbox's egress allowlist (an IP address is \
                 reached only when the allowlist names it literally)"
            ),
            TargetHost::Name(_) => {
                format!("{host}:{port} is not on the sandbox's egress allowlist")
            }
        })
    })
}

/// Checks the addresses a name matched by `pattern` resolved to: all must
/// be public, but for an IP literal the pattern names and `localhost`'s
/// loopback addresses. A name that resolves to nothing is refused too.
pub fn check_addresses(
    pattern: &HostPattern,
    host: &TargetHost,
    addrs: &[SocketAddr],
) -> Result<(), Refusal> {
    if addrs.is_empty() {
        return Err(Refusal(format!("{host} resolves to no address")));
    }
    for a in addrs {
        let ip = a.ip();
        let allowed = is_public_ip(ip)
            || pattern.host == PatternHost::Ip(ip)
            || (pattern.is_localhost() && ip.is_loopback());
        if !allowed {
            return Err(Refusal(format!(
                "{host} resolves to {ip}, a loopback, private, link-local or reserved address; \
                 only an allowlist entry naming {ip} literally can allow it"
            )));
        }
    }
    Ok(())
}

/// True for addresses reachable without being named literally: not
/// loopback, private, link-local (incl. cloud metadata), CGNAT,
/// unspecified, multicast, broadcast, documentation or reserved ranges,
/// nor an IPv6 form that embeds one of those IPv4 addresses.
pub fn is_public_ip(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => is_public_v4(v4),
        IpAddr::V6(v6) => {
            if let Some(v4) = v6.to_ipv4_mapped() {
                return is_public_v4(v4);
            }
            let seg = v6.segments();
            // NAT64 well-known prefix 64:ff9b::/96 embeds an IPv4 address.
            if seg[0] == 0x64 && seg[1] == 0xff9b && seg[2..6] == [0, 0, 0, 0] {
                let v4 = Ipv4Addr::new(
                    (seg[6] >> 8) as u8,
                    seg[6] as u8,
                    (seg[7] >> 8) as u8,
                    seg[7] as u8,
                );
                return is_public_v4(v4);
            }
            !(v6.is_loopback()
                || v6.is_unspecified()
                || v6.is_multicast()
                || (seg[0] == 0x64 && seg[1] == 0xff9b && seg[2] == 1) // local NAT64 64:ff9b:1::/48
                || (seg[..4] == [0, 0, 0, 0] && seg[4] == 0xffff && seg[5] == 0) // SIIT ::ffff:0:0:0/96
                || (seg[0] == 0x2001 && seg[1] == 0) // Teredo 2001::/32 embeds a v4 address
                || (seg[0] == 0x2001 && seg[1] == 2 && seg[2] == 0) // benchmarking 2001:2::/48
                || (seg[0] == 0x100 && seg[1..4] == [0, 0, 0]) // discard 100::/64
                || (seg[0] & 0xfe00) == 0xfc00 // unique local (incl. fd00:ec2::254)
                || (seg[0] & 0xffc0) == 0xfe80 // link-local
                || (seg[0] & 0xffc0) == 0xfec0 // site-local (deprecated)
                || (seg[0] == 0x2001 && seg[1] == 0x0db8) // documentation
                || seg[0] == 0x2002 // 6to4 may embed private v4
                || seg[..6] == [0, 0, 0, 0, 0, 0]) // IPv4-compatible
        }
    }
}

fn is_public_v4(v4: Ipv4Addr) -> bool {
    let o = v4.octets();
    !(v4.is_loopback()
        || v4.is_private()
        || v4.is_link_local()
        || v4.is_unspecified()
        || v4.is_broadcast()
        || v4.is_multicast()
        || v4.is_documentation()
        || o[0] == 0
        || (o[0] == 100 && (o[1] & 0xc0) == 64) // 100.64/10 CGNAT (Alibaba metadata 100.100.100.200)
        || (o[0] == 192 && o[1] == 0 && o[2] == 0) // 192.0.0/24 IETF
        || (o[0] == 198 && (o[1] & 0xfe) == 18) // 198.18/15 benchmarking
        || o[0] >= 240) // reserved
}

#[cfg(test)]
mod tests;
