//! Request rules: which methods and paths a host allows, in the one
//! grammar policy files, `cordon run --rule` and a Starlark package's
//! `network_access` share.
//!
//! A rule is `METHODS SCHEME://HOST[:PORT]/PATH`:
//!
//! - `METHODS`: `*` (any method) or upper-case methods joined by `,`
//!   (`GET`, `GET,HEAD`);
//! - `SCHEME`: `https` (the process plane's proxy terminates TLS to that
//!   host to enforce it; plain HTTP to the host is then refused unless an
//!   `http://` rule is for it too) or `http` (judged on the plain request);
//! - `HOST`: an exact name or `*.domain`, as in a [`HostPattern`]; the
//!   port is the scheme's unless given;
//! - `PATH`: starts with `/`; `*` matches any characters but `/` (one
//!   segment or part of one), `**` any characters, `/` included. The
//!   query string is not matched.
//!
//! A request is judged on its raw path, so a path a server could read as
//! another (a `.` or `..` segment, an empty segment, an encoded `/`, `\`,
//! `.` or `%`, a `%u` escape, a `;` path parameter, a backslash) is
//! refused on a host with rules whatever the rules say:
//! `/repos/acme/../other` must not pass as `/repos/acme/*`. Headers some
//! servers route by instead of the request line (`X-Original-URL`,
//! `X-HTTP-Method-Override`, `Forwarded`, …) are refused by the broker.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use super::{HostPattern, Scheme, TargetHost};

/// One request rule, `METHODS SCHEME://HOST[:PORT]/PATH`: `METHODS` is
/// `*` or upper-case methods joined by `,`; `SCHEME` `https` or `http`;
/// `HOST` an exact name or `*.domain` (an IP literal for `http://` only);
/// in `PATH`, `*` matches within one segment and `**` anything. A path a
/// server could read as another ([`path_is_plain`]) is never allowed.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct RequestRule {
    /// Empty: any method.
    methods: Vec<String>,
    host: HostPattern,
    /// The port the rule is for (its own, or its scheme's).
    port: u16,
    /// `https://` (else `http://`).
    tls: bool,
    path: String,
}

/// Why a [`RequestRule`] could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "`{rule}` is not a request rule: {why} (write METHODS SCHEME://HOST/PATH, such as \
     `GET https://api.github.com/repos/acme/*` or `GET,HEAD https://*.example.com/**`)"
)]
pub struct RequestRuleError {
    rule: String,
    why: String,
}

impl FromStr for RequestRule {
    type Err = RequestRuleError;

    fn from_str(raw: &str) -> Result<Self, Self::Err> {
        let err = |why: &str| RequestRuleError {
            rule: raw.to_owned(),
            why: why.to_owned(),
        };
        let (methods, url) = raw
            .trim()
            .split_once(' ')
            .ok_or_else(|| err("a rule is methods, a space and a URL"))?;
        let methods: Vec<String> = if methods == "*" {
            Vec::new()
        } else {
            methods.split(',').map(str::to_owned).collect()
        };
        if methods
            .iter()
            .any(|m| m.is_empty() || !m.bytes().all(|b| b.is_ascii_uppercase()))
        {
            return Err(err("methods are `*` or upper-case names joined by `,`"));
        }
        let url = url.trim();
        let (scheme, rest) = url
            .split_once("://")
            .filter(|(s, _)| *s == "https" || *s == "http")
            .ok_or_else(|| err("a rule's URL starts with https:// or http://"))?;
        let (authority, path) = match rest.find('/') {
            Some(i) => rest.split_at(i),
            None => return Err(err("a rule's URL has a path (`/**` for any)")),
        };
        if path.contains('?') || path.contains('#') {
            return Err(err("a rule's path has no query or fragment"));
        }
        if !path_is_plain(path.replace('*', "x").as_str()) {
            return Err(err(
                "a rule's path has no `.`/`..`/empty segment, `\\` or percent-encoded `/`, `\\` or `.`",
            ));
        }
        let host: HostPattern = format!("{scheme}://{authority}")
            .parse()
            .map_err(|e: super::HostPatternError| err(&e.to_string()))?;
        if host.ip_literal().is_some() && scheme == "https" {
            return Err(err(
                "an https:// rule names its host by name (TLS is terminated by name)",
            ));
        }
        let tls = scheme == "https";
        let port = match host.exact_name() {
            Some((_, Some(p))) => p,
            _ => authority
                .rsplit_once(':')
                .and_then(|(_, p)| p.parse().ok())
                .unwrap_or(if tls { 443 } else { 80 }),
        };
        Ok(RequestRule {
            methods,
            host,
            port,
            tls,
            path: path.to_owned(),
        })
    }
}

impl fmt::Display for RequestRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let methods = if self.methods.is_empty() {
            "*".to_owned()
        } else {
            self.methods.join(",")
        };
        // The host pattern prints with its `https://`.
        write!(f, "{methods} {}{}", self.host, self.path)
    }
}

impl TryFrom<String> for RequestRule {
    type Error = RequestRuleError;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        s.parse()
    }
}

impl From<RequestRule> for String {
    fn from(r: RequestRule) -> String {
        r.to_string()
    }
}

impl RequestRule {
    /// The host pattern the rule is for, with its scheme (the scheme's
    /// port unless it names one).
    pub fn host(&self) -> &HostPattern {
        &self.host
    }

    /// Whether the rule is for `host` at all, whatever the port or the
    /// scheme asked for: a host a rule is for is reached only as the rule
    /// says (no tunnel to another of its ports, no plain HTTP beside an
    /// `https://` rule).
    pub fn names(&self, host: &TargetHost) -> bool {
        self.covers(host, self.port, self.tls)
    }

    /// Whether the rule is for HTTPS (`tls`) or plain HTTP to
    /// `host`:`port`.
    pub fn covers(&self, host: &TargetHost, port: u16, tls: bool) -> bool {
        let (scheme, access) = if tls {
            (Scheme::Https, super::Access::Https)
        } else {
            (Scheme::Http, super::Access::Http)
        };
        self.host.scheme() == Some(scheme)
            && super::Allowlist::for_process(vec![self.host.clone()])
                .match_target(host, port, access)
                .is_ok()
    }

    /// Whether the rule allows `method` on `target` (a request target in
    /// origin form, `/path?query`) to `host`:`port` over HTTPS (`tls`) or
    /// plain HTTP. A path a server could read as another is never
    /// allowed ([`path_is_plain`]).
    pub fn allows(
        &self,
        method: &str,
        host: &TargetHost,
        port: u16,
        tls: bool,
        target: &str,
    ) -> bool {
        let path = target.split_once('?').map_or(target, |(p, _)| p);
        self.covers(host, port, tls)
            && (self.methods.is_empty() || self.methods.iter().any(|m| m == method))
            && path_is_plain(path)
            && glob(self.path.as_bytes(), path.as_bytes())
    }
}

/// Whether a path means what it says: starts with `/`, no `.`, `..` or
/// empty segment (but a trailing `/`), no `\`, no `;` (a path parameter:
/// some servers read `..;` as `..`), no percent-encoded `/`, `\`, `.` or
/// `%` (a server that decodes twice), no `%u` (IIS's escapes).
pub fn path_is_plain(path: &str) -> bool {
    let Some(rest) = path.strip_prefix('/') else {
        return false;
    };
    let lower = path.to_ascii_lowercase();
    let segments: Vec<&str> = rest.split('/').collect();
    let last = segments.len() - 1;
    !path.contains('\\')
        && !path.contains(';')
        && !["%2f", "%5c", "%2e", "%25", "%u"]
            .iter()
            .any(|e| lower.contains(e))
        && segments
            .iter()
            .enumerate()
            .all(|(i, s)| !matches!(*s, "." | "..") && (!s.is_empty() || i == last))
}

/// `*` any run without `/`, `**` any run. Dynamic programming over
/// (pattern token, text position): linear in the text for each token, so
/// a hostile path cannot make a rule with several `**` take exponential
/// time.
fn glob(pattern: &[u8], text: &[u8]) -> bool {
    enum Token {
        Byte(u8),
        Star,
        DoubleStar,
    }
    let mut tokens = Vec::new();
    let mut i = 0;
    while i < pattern.len() {
        if pattern[i] == b'*' {
            if pattern.get(i + 1) == Some(&b'*') {
                tokens.push(Token::DoubleStar);
                i += 2;
            } else {
                tokens.push(Token::Star);
                i += 1;
            }
        } else {
            tokens.push(Token::Byte(pattern[i]));
            i += 1;
        }
    }
    // reach[j]: the tokens so far can match text[..j].
    let mut reach = vec![false; text.len() + 1];
    reach[0] = true;
    for t in &tokens {
        let mut next = vec![false; text.len() + 1];
        match t {
            Token::Byte(b) => {
                for j in 0..text.len() {
                    next[j + 1] = reach[j] && text[j] == *b;
                }
            }
            Token::Star | Token::DoubleStar => {
                let any = matches!(t, Token::DoubleStar);
                let mut on = false;
                for j in 0..=text.len() {
                    on = reach[j] || (on && j > 0 && (any || text[j - 1] != b'/'));
                    next[j] = on;
                }
            }
        }
        reach = next;
    }
    reach[text.len()]
}
