//! # cordon-broker
//!
//! Credentials a sandboxed program uses but never holds. The program is
//! given a per-run random placeholder where it would use a key; the
//! egress proxy, on the host, terminates TLS toward the hosts the key is
//! bound to and swaps the placeholder for the value in the request
//! heads going there, and nowhere else. What comes back has the value
//! replaced by the placeholder again.
//!
//! This crate holds the parts, each usable and tested alone:
//!
//! * [`RunCa`] (`ca.rs`): the run's CA, its key only in this process's
//!   memory, and a leaf per server name; [`RunCa::server_config`] shows
//!   the leaf for the `CONNECT`'s host only, so a client hello naming
//!   another server fails the handshake.
//! * [`upstream::client_config`]: the TLS client toward the real server,
//!   verified against the WebPKI roots and an operator's CA file.
//! * [`Secret`] and [`HeaderTemplate`] (`secret.rs`): a value, its
//!   placeholder, its hosts (the egress allowlist's grammar) and the
//!   header a binding may set.
//! * [`rewrite`] (`head.rs`): one request head checked and rewritten, or
//!   [`Refused`] with the reason.
//! * [`Scrubber`] (`scrub.rs`): the value replaced by its placeholder in a
//!   stream that arrives in pieces.
//!
//! * [`Broker`] (`broker.rs`): the parts put together as the egress
//!   proxy's [`Intercept`](cordon_egress::Intercept), which `cordon run
//!   --secret`/`--rule` hands the proxy in a `Network::Brokered`.
//!
//! ```
//! use cordon_broker::{rewrite, Secret};
//!
//! let key = Secret::new(
//!     "GITHUB",
//!     "ghp_real_value_0123456789".into(),
//!     vec!["api.github.com".parse().unwrap()],
//!     Some("Authorization: Bearer {}".parse().unwrap()),
//! )
//! .unwrap();
//! let head = b"GET /user HTTP/1.1\r\nHost: api.github.com\r\n\r\n";
//! let sent = rewrite(head, "api.github.com", 443, std::slice::from_ref(&key)).unwrap();
//! assert!(String::from_utf8(sent.head).unwrap().contains("Authorization: Bearer ghp_real_value_0123456789"));
//!
//! // The placeholder toward any other host is refused, and says why.
//! let leak = format!("GET / HTTP/1.1\r\nHost: evil.example\r\nX-Key: {}\r\n\r\n", key.placeholder());
//! let why = rewrite(leak.as_bytes(), "evil.example", 443, &[key]).unwrap_err();
//! assert!(why.0.contains("not bound to"));
//! ```

#![deny(missing_docs)]

mod body;
mod broker;
mod ca;
mod head;
mod scrub;
mod secret;
pub mod upstream;
mod wire;

pub use broker::{overriding, Broker};
pub use ca::{RunCa, MAX_LEAVES, VALID_FOR};
pub use head::{rewrite, Body, Refused, Rewritten, MAX_HEAD, MAX_HEADERS};
pub use scrub::Scrubber;
pub use secret::{HeaderTemplate, Secret, MAX_VALUE_LEN, MIN_VALUE_LEN};

/// What went wrong setting the broker up (never a request: those are
/// [`Refused`]).
#[derive(Debug, thiserror::Error)]
pub enum BrokerError {
    /// A certificate could not be made.
    #[error("the broker could not make a certificate: {0}")]
    Certificate(String),
    /// TLS could not be configured.
    #[error("the broker could not configure TLS: {0}")]
    Tls(String),
    /// The operator's upstream CA file is unusable.
    #[error("the upstream CA file cannot be used: {0} (give a PEM file of CA certificates)")]
    UpstreamCa(String),
    /// The run asked for leaves for more server names than it may.
    #[error("the run's CA issues leaves for at most {0} server names")]
    TooManyNames(usize),
    /// A secret or its binding is unusable.
    #[error("{0}")]
    Secret(String),
}

#[cfg(test)]
mod tests;
