//! The matching rules of the one network-target grammar: [`Allowlist`]
//! decides whether a request may go to a target ([`Allowlist::match_target`])
//! and whether the addresses its name resolved to may be reached
//! ([`Allowlist::check_addresses`]), for process egress and for the
//! Starlark `http` module alike. Every refusal says what would allow it.

use std::net::{IpAddr, SocketAddr};

use super::address::address_class;
use super::pattern::{Entry, HostPattern, IpRange, PatternHost, Scheme, TargetHost};

/// How a program asks to reach a target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// An opaque TCP tunnel (`CONNECT`): TLS, usually, which the proxy
    /// does not inspect.
    Tunnel,
    /// A plain-HTTP request (`GET http://…`, or an `http://` URL).
    Http,
    /// An HTTPS request (an `https://` URL).
    Https,
}

/// Who wrote a list. An operator's IP literal (or `localhost`) is that
/// operator's word for its address; a package's is only a request, so a
/// package's list reaches loopback, private and link-local addresses only
/// through ranges the operator approved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Author {
    Operator,
    Package,
}

/// What refusals suggest: how the list's owner adds a target or a range.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Advice {
    /// What the list is called in a refusal.
    pub list: String,
    /// How to add a target; `{target}` is replaced by it.
    pub add_target: String,
    /// What comes before the `--allow-private RANGE` flags that would
    /// allow an address (the flag is the same everywhere).
    pub allow_private: String,
}

impl Advice {
    /// The advice for `cordon run`'s own flags.
    pub fn for_process() -> Advice {
        Advice {
            list: "the sandbox's egress allowlist".into(),
            add_target: "add --allow-host {target}".into(),
            allow_private: "add".into(),
        }
    }
}

/// An allowlist: the entries ([`HostPattern`]s) one list holds, who wrote
/// it, and the advice its refusals give.
///
/// One rule decides everywhere, with two documented differences by list:
///
/// | | process egress ([`Allowlist::for_process`]) | a package ([`Allowlist::for_package`]) |
/// |---|---|---|
/// | a target without scheme or port | HTTPS, tunnels and plain HTTP on 443 and 80 | HTTPS (and tunnels) on 443 |
/// | an IP literal or `localhost` that is not public | reached: the operator named it | reached only inside an operator-approved range |
///
/// In both, `https://` never allows plain HTTP, `http://` allows it (and
/// HTTPS) on its port (80 by default), an explicit port is the only port,
/// and a name must resolve only to public addresses or to addresses inside
/// a private range the list names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Allowlist {
    entries: Vec<HostPattern>,
    author: Author,
    advice: Advice,
}

/// A connection the allowlist refuses, with the reason the program and the
/// log are given (which says what would allow it).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Refusal(pub String);

impl Allowlist {
    /// The list an operator wrote for a process (`cordon run --allow-host`,
    /// `--allow-private`; `cordon_core::Network::Allow`).
    pub fn for_process(entries: Vec<HostPattern>) -> Allowlist {
        Allowlist {
            entries,
            author: Author::Operator,
            advice: Advice::for_process(),
        }
    }

    /// A package's list: the targets its manifest asks for (private
    /// ranges there are dropped: a manifest cannot approve one), and the
    /// ranges an operator approved for it.
    pub fn for_package(
        targets: impl IntoIterator<Item = HostPattern>,
        approved: impl IntoIterator<Item = IpRange>,
        advice: Advice,
    ) -> Allowlist {
        let mut entries: Vec<HostPattern> = targets.into_iter().filter(|t| t.is_target()).collect();
        entries.extend(approved.into_iter().map(HostPattern::private_range));
        Allowlist {
            entries,
            author: Author::Package,
            advice,
        }
    }

    /// Replaces the advice refusals give.
    pub fn with_advice(mut self, advice: Advice) -> Allowlist {
        self.advice = advice;
        self
    }

    /// Every entry, targets and ranges.
    pub fn entries(&self) -> &[HostPattern] {
        &self.entries
    }

    /// The private ranges the list names.
    pub fn private_ranges(&self) -> impl Iterator<Item = &IpRange> {
        self.entries
            .iter()
            .filter_map(HostPattern::as_private_range)
    }

    /// Whether `entry` lets `access` through to `host:port`; `Err(true)`
    /// when only plain HTTP stands in the way.
    fn allows(
        &self,
        entry: &HostPattern,
        host: &TargetHost,
        port: u16,
        access: Access,
    ) -> Result<(), bool> {
        let Entry::Target {
            scheme,
            host: pattern,
            port: listed,
        } = &entry.entry
        else {
            return Err(false);
        };
        let host_ok = match (pattern, host) {
            (PatternHost::Exact(h), TargetHost::Name(n)) => h == n,
            (PatternHost::Suffix(s), TargetHost::Name(n)) => {
                n.len() > s.len() && n.ends_with(s.as_str())
            }
            (PatternHost::Ip(a), TargetHost::Ip(b)) => a == b,
            _ => false,
        };
        if !host_ok {
            return Err(false);
        }
        let (port_ok, plain_ok) = match (scheme, self.author) {
            (Some(s @ Scheme::Https), _) => (port == listed.unwrap_or(s.default_port()), false),
            (Some(s @ Scheme::Http), _) => (port == listed.unwrap_or(s.default_port()), true),
            (None, Author::Operator) => (
                listed.map_or(port == 443 || port == 80, |p| p == port),
                true,
            ),
            (None, Author::Package) => (port == listed.unwrap_or(443), false),
        };
        match (port_ok, access == Access::Http && !plain_ok) {
            (true, false) => Ok(()),
            (true, true) => Err(true),
            (false, _) => Err(false),
        }
    }

    /// The entry that lets `access` reach `host:port`, or why none does.
    pub fn match_target(
        &self,
        host: &TargetHost,
        port: u16,
        access: Access,
    ) -> Result<&HostPattern, Refusal> {
        let mut plain_refused = false;
        for e in &self.entries {
            match self.allows(e, host, port, access) {
                Ok(()) => return Ok(e),
                Err(plain) => plain_refused |= plain,
            }
        }
        let add = |target: String| self.advice.add_target.replace("{target}", &target);
        if plain_refused {
            return Err(Refusal(format!(
                "plain HTTP to {host}:{port} is not allowed by {}: use https, or {}",
                self.advice.list,
                add(format!("http://{host}:{port}"))
            )));
        }
        let literal = if matches!(host, TargetHost::Ip(_)) {
            " (an IP address is reached only when the list names it literally)"
        } else {
            ""
        };
        // What to add must allow this very request: plain HTTP only where
        // named.
        let target = match access {
            Access::Http => format!("http://{host}:{port}"),
            Access::Https | Access::Tunnel => format!("{host}:{port}"),
        };
        Err(Refusal(format!(
            "{host}:{port} is not on {}{literal}; {}",
            self.advice.list,
            add(target)
        )))
    }

    /// Whether `ip`, an address `pattern`'s target resolved to (or is),
    /// may be reached.
    fn address_allowed(&self, pattern: Option<&HostPattern>, ip: IpAddr) -> bool {
        if address_class(ip).is_none() || self.private_ranges().any(|r| r.contains(ip)) {
            return true;
        }
        let vouched = pattern
            .is_some_and(|p| p.ip_literal() == Some(ip) || (p.is_localhost() && ip.is_loopback()));
        self.author == Author::Operator && vouched
    }

    /// Checks the addresses `host` (matched by `pattern`, if the caller
    /// knows which entry) resolved to: every one must be public or inside
    /// a private range of the list; an operator's IP literal is its own
    /// range, and an operator's `localhost` may be loopback. A name that
    /// resolves to nothing is refused too.
    pub fn check_addresses(
        &self,
        pattern: Option<&HostPattern>,
        host: &TargetHost,
        addrs: &[SocketAddr],
    ) -> Result<(), Refusal> {
        if addrs.is_empty() {
            return Err(Refusal(format!("{host} resolves to no address")));
        }
        let mut bad: Vec<IpAddr> = addrs
            .iter()
            .map(SocketAddr::ip)
            .filter(|ip| !self.address_allowed(pattern, *ip))
            .collect();
        bad.dedup();
        let Some(first) = bad.first().copied() else {
            return Ok(());
        };
        let class = address_class(first).unwrap_or("non-public");
        let flags: Vec<String> = bad
            .iter()
            .map(|ip| format!("--allow-private {}", IpRange::single(*ip)))
            .collect();
        let wider = wider_range(first)
            .map(|r| format!(" (or a wider range such as {r})"))
            .unwrap_or_default();
        let how = format!("{} {}{wider}", self.advice.allow_private, flags.join(" "));
        let how = how.trim_start();
        Err(Refusal(match host {
            TargetHost::Ip(_) => format!(
                "{host} is a {class} address, which {} reaches only inside a range its \
                 operator allowed: {how}",
                self.advice.list
            ),
            TargetHost::Name(_) => {
                let all: Vec<String> = bad.iter().map(IpAddr::to_string).collect();
                format!(
                    "{host} resolves to {} ({class}); a name may resolve to a loopback, private \
                     or link-local address only when the allowlist also names a range holding \
                     it: {how}",
                    all.join(", ")
                )
            }
        }))
    }
}

/// A usual wider range for a refusal's advice: the private block holding
/// `ip` (never a link-local one: that is where cloud metadata lives).
fn wider_range(ip: IpAddr) -> Option<IpRange> {
    let IpAddr::V4(v4) = ip else {
        return None;
    };
    let o = v4.octets();
    let cidr = match o {
        [10, ..] => "10.0.0.0/8",
        [172, b, ..] if (16..32).contains(&b) => "172.16.0.0/12",
        [192, 168, ..] => "192.168.0.0/16",
        [127, ..] => "127.0.0.0/8",
        _ => return None,
    };
    cidr.parse().ok()
}
