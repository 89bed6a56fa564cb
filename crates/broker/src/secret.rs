//! A secret bound to hosts, the per-run placeholder the program sees in
//! its place, and the header a binding may set.

use std::fmt;
use std::str::FromStr;

use cordon_egress::{HostPattern, Scheme};

use crate::BrokerError;

/// The shortest secret value the broker takes. Responses have the value
/// replaced by its placeholder, which tells a program that makes a server
/// echo guesses whether a guess was right: a short or low-entropy value
/// (a word, a PIN) can be found that way. Use keys, not passwords.
pub const MIN_VALUE_LEN: usize = 16;

/// The longest secret value the broker takes (a head carries it in every
/// request).
pub const MAX_VALUE_LEN: usize = 4096;

/// `Name: prefix{}suffix`: the header a binding sets on every request to
/// its hosts, `{}` standing for the value (`Authorization: Bearer {}`).
#[derive(Clone, PartialEq, Eq)]
pub struct HeaderTemplate {
    name: String,
    before: String,
    after: String,
}

impl HeaderTemplate {
    /// The header's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The header's value with `value` in the place of `{}`.
    pub fn render(&self, value: &str) -> String {
        format!("{}{value}{}", self.before, self.after)
    }
}

impl fmt::Debug for HeaderTemplate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "\"{}: {}{{}}{}\"", self.name, self.before, self.after)
    }
}

impl FromStr for HeaderTemplate {
    type Err = BrokerError;

    fn from_str(raw: &str) -> Result<Self, Self::Err> {
        let bad = |why: &str| BrokerError::Secret(format!("header {raw:?}: {why}"));
        let (name, value) = raw
            .split_once(':')
            .ok_or_else(|| bad("write it as `Name: text {} text`"))?;
        let name = name.trim();
        if name.is_empty() || !name.bytes().all(is_token_byte) {
            return Err(bad("the header name is not an HTTP token"));
        }
        let value = value.trim_start();
        if value.bytes().any(|b| b.is_ascii_control()) {
            return Err(bad("a control character (CR, LF, NUL …) in the value"));
        }
        let mut parts = value.split("{}");
        let (Some(before), Some(after), None) = (parts.next(), parts.next(), parts.next()) else {
            return Err(bad(
                "the value must hold `{}`, where the secret goes, exactly once",
            ));
        };
        Ok(HeaderTemplate {
            name: name.to_owned(),
            before: before.to_owned(),
            after: after.to_owned(),
        })
    }
}

/// RFC 9110's `tchar`.
fn is_token_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// A secret for one run: its value (only here, in the host's memory),
/// the placeholder the program sees, the hosts it may go to and how.
pub struct Secret {
    name: String,
    value: String,
    placeholder: String,
    /// Exact names and their ports (443 unless the pattern gives one).
    hosts: Vec<(String, u16)>,
    header: Option<HeaderTemplate>,
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never the value.
        f.debug_struct("Secret")
            .field("name", &self.name)
            .field("placeholder", &self.placeholder)
            .field("header", &self.header)
            .finish_non_exhaustive()
    }
}

impl Secret {
    /// `name` = `value`, bound to `hosts` (the egress allowlist's
    /// grammar, exact names only: a `*.domain` binding would send the key
    /// to any tenant of a shared suffix, and an IP literal gets no TLS
    /// server name; `https://` or no scheme, port 443 unless one is
    /// given), set as `header` on every request to them if given (else
    /// swapped for its placeholder wherever that appears in a request's
    /// headers). Draws a fresh random placeholder.
    pub fn new(
        name: &str,
        value: String,
        hosts: Vec<HostPattern>,
        header: Option<HeaderTemplate>,
    ) -> Result<Secret, BrokerError> {
        let bad = |why: String| BrokerError::Secret(format!("secret {name:?}: {why}"));
        if name.is_empty()
            || !name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
        {
            return Err(bad("a name is letters, digits, `_` and `-`".into()));
        }
        if value.len() < MIN_VALUE_LEN || value.len() > MAX_VALUE_LEN {
            return Err(bad(format!(
                "the value is {} bytes; a secret is {MIN_VALUE_LEN} to {MAX_VALUE_LEN} (a shorter \
                 one could be guessed through the scrubbing of responses)",
                value.len()
            )));
        }
        if value.bytes().any(|b| b.is_ascii_control()) {
            return Err(bad(
                "the value holds a control character (CR, LF, NUL …): it cannot go in a header"
                    .into(),
            ));
        }
        if hosts.is_empty() {
            return Err(bad("it is bound to no host".into()));
        }
        let mut bound = Vec::new();
        for h in &hosts {
            let (Some((host, port)), None | Some(Scheme::Https)) = (h.exact_name(), h.scheme())
            else {
                return Err(bad(format!(
                    "it may be bound to hosts named exactly, over HTTPS, not to {h}"
                )));
            };
            bound.push((host.to_ascii_lowercase(), port.unwrap_or(443)));
        }
        let mut random = [0u8; 16];
        getrandom::getrandom(&mut random)
            .map_err(|e| bad(format!("no randomness for its placeholder: {e}")))?;
        let hex: String = random.iter().map(|b| format!("{b:02x}")).collect();
        Ok(Secret {
            placeholder: format!("cordon-placeholder-{name}-{hex}"),
            name: name.to_owned(),
            value,
            hosts: bound,
            header,
        })
    }

    /// The secret's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// What the program is given in the value's place.
    pub fn placeholder(&self) -> &str {
        &self.placeholder
    }

    /// The header this binding sets, if it names one.
    pub fn header(&self) -> Option<&HeaderTemplate> {
        self.header.as_ref()
    }

    /// Whether the secret may go to `host`:`port`: a name and port its
    /// binding names exactly.
    pub fn bound_to(&self, host: &str, port: u16) -> bool {
        self.hosts
            .iter()
            .any(|(h, p)| *p == port && h.eq_ignore_ascii_case(host))
    }

    /// The names and ports the secret may go to.
    pub fn hosts(&self) -> &[(String, u16)] {
        &self.hosts
    }

    pub(crate) fn value(&self) -> &str {
        &self.value
    }

    pub(crate) fn header_line(&self) -> Option<(String, String)> {
        self.header
            .as_ref()
            .map(|h| (h.name.clone(), h.render(&self.value)))
    }
}
