//! The one network-target grammar: [`HostPattern`] (an allowlist entry:
//! `[SCHEME://]HOST[:PORT]`, or a range that listed names may resolve
//! into), [`IpRange`] and [`TargetHost`], parsed and printed.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// The scheme an entry names: what kind of request it lets through.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Scheme {
    /// `http://`: plain HTTP (and HTTPS or a tunnel) on its port, 80 by
    /// default.
    Http,
    /// `https://`: HTTPS or a `CONNECT` tunnel on its port, 443 by
    /// default; never plain HTTP.
    Https,
}

impl Scheme {
    /// The scheme's default port.
    pub fn default_port(self) -> u16 {
        match self {
            Scheme::Http => 80,
            Scheme::Https => 443,
        }
    }
}

/// One allowlist entry, in the grammar `cordon run --allow-host`, a
/// Starlark package's `network_access` and its grants share:
///
/// - a **target** `[SCHEME://]HOST[:PORT]`: `HOST` is a name
///   (`api.example.com`), `*.` and a domain (`*.example.com`: every
///   subdomain, not the domain itself) or an IP literal (`10.0.0.5`,
///   `[::1]`, or `::1` without a port); `SCHEME` is `https` or `http`
///   ([`Scheme`]). What a target without a scheme or port allows depends
///   on the list it is in ([`Allowlist`](super::Allowlist)): process
///   egress allows HTTPS and plain HTTP on 443 and 80, the Starlark `http`
///   module HTTPS on 443 only. Parsed by [`FromStr`].
/// - a **private range** (printed as a CIDR, `10.0.0.0/8`): names on the
///   list may resolve to addresses in it, which the address guard refuses
///   otherwise ([`is_public_ip`](super::is_public_ip)). Only an operator
///   adds one ([`HostPattern::private_range`], `--allow-private`); a
///   target can never be read as one.
///
/// Names are compared in ASCII lower case without a trailing dot; an
/// international name must be given in its `xn--` form.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct HostPattern {
    pub(super) entry: Entry,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(super) enum Entry {
    Target {
        scheme: Option<Scheme>,
        host: PatternHost,
        port: Option<u16>,
    },
    Private(IpRange),
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(super) enum PatternHost {
    Exact(String),
    /// `*.example.com`, stored as `.example.com`.
    Suffix(String),
    Ip(IpAddr),
}

/// What a program asked to reach: a name, or an IP literal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TargetHost {
    /// A DNS name, as the program wrote it (normalised).
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
pub(super) fn normalise_name(raw: &str) -> Option<String> {
    let name = raw.strip_suffix('.').unwrap_or(raw).to_ascii_lowercase();
    let ok = !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|l| !l.is_empty() && l.len() <= 63)
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.');
    ok.then_some(name)
}

/// An address range (`10.0.0.0/8`, `fd00::/8`, or one address:
/// `10.1.2.3` is `10.1.2.3/32`). Its address is stored with the host bits
/// cleared.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct IpRange {
    addr: IpAddr,
    prefix: u8,
}

/// Why an [`IpRange`] could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "`{0}` is not an address range: use ADDRESS/PREFIX such as 10.0.0.0/8, 127.0.0.1/32 or \
     fd00::/8 (or one address)"
)]
pub struct IpRangeError(String);

impl IpRange {
    /// The range of the one address `ip`.
    pub fn single(ip: IpAddr) -> IpRange {
        let prefix = if ip.is_ipv4() { 32 } else { 128 };
        IpRange { addr: ip, prefix }
    }

    /// Whether `ip` is in the range. An IPv4-mapped IPv6 address
    /// (`::ffff:10.1.2.3`) is its IPv4 address here, as it is for the
    /// address guard.
    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
            v4 => v4,
        };
        match (self.addr, ip) {
            (IpAddr::V4(net), IpAddr::V4(a)) => {
                mask_v4(u32::from(a), self.prefix) == u32::from(net)
            }
            (IpAddr::V6(net), IpAddr::V6(a)) => {
                mask_v6(u128::from(a), self.prefix) == u128::from(net)
            }
            _ => false,
        }
    }
}

fn mask_v4(a: u32, prefix: u8) -> u32 {
    if prefix == 0 {
        0
    } else {
        a & (u32::MAX << (32 - u32::from(prefix)))
    }
}

fn mask_v6(a: u128, prefix: u8) -> u128 {
    if prefix == 0 {
        0
    } else {
        a & (u128::MAX << (128 - u32::from(prefix)))
    }
}

impl FromStr for IpRange {
    type Err = IpRangeError;

    fn from_str(raw: &str) -> Result<Self, Self::Err> {
        let err = || IpRangeError(raw.to_owned());
        let (addr, prefix) = match raw.split_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (raw, None),
        };
        let addr = addr
            .strip_prefix('[')
            .and_then(|a| a.strip_suffix(']'))
            .unwrap_or(addr);
        let addr: IpAddr = addr.parse().map_err(|_| err())?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            None => max,
            Some(p) if !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()) => {
                p.parse::<u8>().ok().filter(|p| *p <= max).ok_or_else(err)?
            }
            Some(_) => return Err(err()),
        };
        let addr = match addr {
            IpAddr::V4(v4) => IpAddr::V4(Ipv4Addr::from(mask_v4(u32::from(v4), prefix))),
            IpAddr::V6(v6) => IpAddr::V6(Ipv6Addr::from(mask_v6(u128::from(v6), prefix))),
        };
        Ok(IpRange { addr, prefix })
    }
}

impl fmt::Display for IpRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

/// Why an allowlist entry could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "`{entry}` is not an allowlist entry: {why}; use [https://|http://]HOST[:PORT], \
     *.DOMAIN[:PORT] or an IP literal such as 10.0.0.5:8080 or [::1]:8080"
)]
pub struct HostPatternError {
    entry: String,
    why: &'static str,
}

impl FromStr for HostPattern {
    type Err = HostPatternError;

    /// A target (never a private range: a list an untrusted party wrote
    /// is parsed with this, and it must not approve addresses).
    fn from_str(raw: &str) -> Result<Self, Self::Err> {
        let err = |why| HostPatternError {
            entry: raw.to_owned(),
            why,
        };
        let (scheme, rest) = if let Some(r) = strip_prefix_ci(raw, "https://") {
            (Some(Scheme::Https), r)
        } else if let Some(r) = strip_prefix_ci(raw, "http://") {
            (Some(Scheme::Http), r)
        } else if raw.contains("://") {
            return Err(err("only the https:// and http:// schemes can be named"));
        } else {
            (None, raw)
        };
        // `https://host/` as a URL is written often: one trailing `/`.
        let rest = rest.strip_suffix('/').unwrap_or(rest);
        if rest.contains('/') {
            return Err(err(if IpRange::from_str(rest).is_ok() {
                "an address range is not a target (an operator allows one with --allow-private)"
            } else {
                "give a host and port, not a URL with a path"
            }));
        }
        if rest.contains('@') {
            return Err(err("a target has no user name"));
        }
        let parse_port = |p: &str| match p.parse::<u16>() {
            Ok(0) | Err(_) => Err(err("the port must be a number from 1 to 65535")),
            Ok(n) => Ok(n),
        };
        let (host, port) = if let Some(after) = rest.strip_prefix('[') {
            let (v6, after) = after.split_once(']').ok_or(err("unclosed `[`"))?;
            let ip: IpAddr = v6.parse().map_err(|_| err("not an IPv6 address in `[]`"))?;
            let port = match after {
                "" => None,
                p => Some(parse_port(
                    p.strip_prefix(':').ok_or(err("junk after `]`"))?,
                )?),
            };
            (PatternHost::Ip(ip), port)
        } else if let Ok(v6) = rest.parse::<Ipv6Addr>() {
            // A bare IPv6 literal has no port (`[::1]:8080` has one).
            (PatternHost::Ip(IpAddr::V6(v6)), None)
        } else {
            let (h, port) = match rest.split_once(':') {
                Some((h, p)) => (h, Some(parse_port(p)?)),
                None => (rest, None),
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
        Ok(HostPattern {
            entry: Entry::Target { scheme, host, port },
        })
    }
}

fn strip_prefix_ci<'a>(s: &'a str, prefix: &str) -> Option<&'a str> {
    (s.len() >= prefix.len() && s[..prefix.len()].eq_ignore_ascii_case(prefix))
        .then(|| &s[prefix.len()..])
}

impl fmt::Display for HostPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (scheme, host, port) = match &self.entry {
            Entry::Private(range) => return write!(f, "{range}"),
            Entry::Target { scheme, host, port } => (scheme, host, port),
        };
        match scheme {
            Some(Scheme::Https) => f.write_str("https://")?,
            Some(Scheme::Http) => f.write_str("http://")?,
            None => {}
        }
        match host {
            PatternHost::Exact(h) => f.write_str(h)?,
            PatternHost::Suffix(s) => write!(f, "*{s}")?,
            PatternHost::Ip(IpAddr::V6(v6)) => write!(f, "[{v6}]")?,
            PatternHost::Ip(ip) => write!(f, "{ip}")?,
        }
        match port {
            Some(p) => write!(f, ":{p}"),
            None => Ok(()),
        }
    }
}

impl TryFrom<String> for HostPattern {
    type Error = HostPatternError;
    /// Reads back what [`Display`](fmt::Display) printed: a target, or a
    /// private range (a CIDR), so that a policy round-trips through JSON.
    fn try_from(s: String) -> Result<Self, Self::Error> {
        if s.contains('/') && !s.contains("://") {
            if let Ok(range) = s.parse::<IpRange>() {
                return Ok(HostPattern::private_range(range));
            }
        }
        s.parse()
    }
}

impl From<HostPattern> for String {
    fn from(p: HostPattern) -> String {
        p.to_string()
    }
}

impl HostPattern {
    /// An entry that lets the list's names resolve into `range` (which
    /// the address guard refuses otherwise): what `--allow-private`
    /// adds. Only an operator's word makes one.
    pub fn private_range(range: IpRange) -> HostPattern {
        HostPattern {
            entry: Entry::Private(range),
        }
    }

    /// The range, for a private-range entry.
    pub fn as_private_range(&self) -> Option<&IpRange> {
        match &self.entry {
            Entry::Private(r) => Some(r),
            Entry::Target { .. } => None,
        }
    }

    /// Whether this entry is a target (not a private range).
    pub fn is_target(&self) -> bool {
        matches!(self.entry, Entry::Target { .. })
    }

    /// The scheme a target names, if any.
    pub fn scheme(&self) -> Option<Scheme> {
        match &self.entry {
            Entry::Target { scheme, .. } => *scheme,
            Entry::Private(_) => None,
        }
    }

    /// The IP literal a target names, if it is one.
    pub fn ip_literal(&self) -> Option<IpAddr> {
        match &self.entry {
            Entry::Target {
                host: PatternHost::Ip(ip),
                ..
            } => Some(*ip),
            _ => None,
        }
    }

    /// The name and port of a target that names one host exactly (not a
    /// `*.domain` suffix, an IP literal or a private range).
    pub fn exact_name(&self) -> Option<(&str, Option<u16>)> {
        match &self.entry {
            Entry::Target {
                host: PatternHost::Exact(h),
                port,
                ..
            } => Some((h, *port)),
            _ => None,
        }
    }

    /// True for the target `localhost` (any scheme and port): a name that
    /// resolves to loopback addresses.
    pub fn is_localhost(&self) -> bool {
        matches!(&self.entry, Entry::Target { host: PatternHost::Exact(h), .. } if h == "localhost")
    }
}
