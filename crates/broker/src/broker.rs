//! [`Broker`]: the parts put together as the egress proxy's interceptor.
//! A `CONNECT` to a host a secret is bound to, or a request rule is for,
//! is terminated with a leaf of the run's CA; the upstream is verified;
//! then each HTTP/1.1 request is judged, rewritten and sent, its body
//! re-framed, and the answer sent back with the values scrubbed.
//!
//! Blocking I/O on the proxy's connection thread, as the rest of the
//! proxy (the egress crate says why): rustls's `StreamOwned` over the
//! proxy's [`GuardedStream`]s, which end every wait when the proxy stops.

use std::sync::Arc;

use cordon_egress::{HostPattern, Intercept, Intercepted, RefusedRequest, RequestRule, TargetHost};
use rustls::pki_types::ServerName;
use rustls::{ClientConnection, ServerConnection, StreamOwned};

use crate::head::MAX_HEADERS;
use crate::wire::{answer, handshake, Buffered, Next, Session, Stop};
use crate::{BrokerError, RunCa, Scrubber, Secret};

/// The credential broker of one run: its CA, the upstream TLS client, the
/// secrets and the request rules. What the egress proxy is given as its
/// [`Intercept`].
pub struct Broker {
    ca: Arc<RunCa>,
    upstream: Arc<rustls::ClientConfig>,
    pub(crate) secrets: Vec<Secret>,
    pub(crate) rules: Vec<RequestRule>,
    /// Built once; each answer gets a clone.
    scrubber: Scrubber,
}

impl std::fmt::Debug for Broker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Broker")
            .field("secrets", &self.secrets)
            .field("rules", &self.rules)
            .finish_non_exhaustive()
    }
}

impl Broker {
    /// A broker for `secrets` and `rules`, with a fresh CA; the upstream
    /// is verified against the WebPKI roots and `upstream_ca_pem` (an
    /// operator's PEM bundle, for private hosts).
    pub fn new(
        secrets: Vec<Secret>,
        rules: Vec<RequestRule>,
        upstream_ca_pem: Option<&[u8]>,
    ) -> Result<Broker, BrokerError> {
        let mut names: Vec<&str> = secrets.iter().map(Secret::name).collect();
        names.sort_unstable();
        if let Some(w) = names.windows(2).find(|w| w[0] == w[1]) {
            return Err(BrokerError::Secret(format!(
                "secret {:?} is named twice",
                w[0]
            )));
        }
        let scrubber = Scrubber::new(
            secrets
                .iter()
                .map(|s| {
                    (
                        s.value().as_bytes().to_vec(),
                        s.placeholder().as_bytes().to_vec(),
                    )
                })
                .collect(),
        );
        Ok(Broker {
            ca: Arc::new(RunCa::new()?),
            upstream: crate::upstream::client_config(upstream_ca_pem)?,
            secrets,
            rules,
            scrubber,
        })
    }

    /// The run's CA (its certificate goes into the sandbox's trust
    /// bundle).
    pub fn ca(&self) -> &RunCa {
        &self.ca
    }

    /// The secrets (names and placeholders for the program).
    pub fn secrets(&self) -> &[Secret] {
        &self.secrets
    }

    /// The request rules.
    pub fn rules(&self) -> &[RequestRule] {
        &self.rules
    }

    /// The allowlist entries the broker's bindings and rules need: each
    /// secret's hosts and each rule's host, over HTTPS. A binding or a
    /// rule is the operator's word that the host is reached.
    pub fn hosts(&self) -> Vec<HostPattern> {
        let mut out: Vec<HostPattern> = self.rules.iter().map(|r| r.host().clone()).collect();
        for s in &self.secrets {
            for (h, p) in s.hosts() {
                if let Ok(pattern) = format!("https://{h}:{p}").parse() {
                    out.push(pattern);
                }
            }
        }
        out
    }

    /// Whether an `https://` rule is for `host`:`port`.
    pub(crate) fn ruled_tls(&self, host: &TargetHost, port: u16) -> bool {
        self.rules.iter().any(|r| r.covers(host, port, true))
    }

    /// Why `host` is reached only through the broker, if it is: a secret
    /// is bound to it, or a request rule is for it (on any port).
    fn claimed_host(&self, host: &TargetHost) -> Option<String> {
        if let TargetHost::Name(name) = host {
            if let Some(s) = self
                .secrets
                .iter()
                .find(|s| s.hosts().iter().any(|(h, _)| h == name))
            {
                return Some(format!("secret {} is bound to {host}", s.name()));
            }
        }
        self.rules
            .iter()
            .find(|r| r.names(host))
            .map(|r| format!("request rule `{r}` is for {host}"))
    }

    pub(crate) fn scrubber(&self) -> Scrubber {
        self.scrubber.clone()
    }

    pub(crate) fn scrub(&self, bytes: &[u8]) -> Vec<u8> {
        let mut s = self.scrubber();
        let mut out = s.push(bytes);
        out.extend(s.finish());
        out
    }
}

impl Intercept for Broker {
    fn terminates(&self, host: &TargetHost, port: u16) -> bool {
        let TargetHost::Name(name) = host else {
            return false;
        };
        self.secrets.iter().any(|s| s.bound_to(name, port)) || self.ruled_tls(host, port)
    }

    fn check_tunnel(&self, host: &TargetHost, port: u16) -> Result<(), RefusedRequest> {
        if let Some(why) = self.claimed_host(host) {
            return Err(RefusedRequest {
                target: Some(format!("{host}:{port}")),
                allow_with: None,
                reason: format!(
                    "a tunnel to {host}:{port}: {why}, so it is reached only as that says, \
                     through the broker"
                ),
                allow_rule: None,
            });
        }
        Ok(())
    }

    fn check_plain(
        &self,
        host: &TargetHost,
        port: u16,
        head: &[u8],
    ) -> Result<Option<u64>, RefusedRequest> {
        let refused = |reason: String, allow_rule: Option<String>| RefusedRequest {
            target: Some(format!("{host}:{port}")),
            allow_with: None,
            reason,
            allow_rule,
        };
        for s in &self.secrets {
            if contains(head, s.placeholder().as_bytes()) {
                return Err(refused(
                    format!(
                        "secret {}'s placeholder was sent to {host}:{port} over plain HTTP; it \
                         goes to its bound hosts over HTTPS only",
                        s.name()
                    ),
                    None,
                ));
            }
        }
        let plain_rules = self.rules.iter().any(|r| r.covers(host, port, false));
        if !plain_rules {
            return match self.claimed_host(host) {
                Some(why) => Err(refused(
                    format!("plain HTTP to {host}:{port}: {why}, which plain HTTP there is not"),
                    None,
                )),
                None => Ok(None),
            };
        }
        // The head the proxy sends: origin form, as the server reads it.
        let mut fields = [httparse::EMPTY_HEADER; MAX_HEADERS];
        let mut req = httparse::Request::new(&mut fields);
        let (Ok(httparse::Status::Complete(_)), Some(method), Some(target)) =
            (req.parse(head), req.method, req.path)
        else {
            return Err(refused("the request head does not parse".into(), None));
        };
        let mut length = None;
        for f in req.headers.iter() {
            if f.name.eq_ignore_ascii_case("transfer-encoding")
                || length.is_some() && f.name.eq_ignore_ascii_case("content-length")
            {
                return Err(refused(
                    "a chunked or doubly framed body to a host with request rules: send one \
                     Content-Length"
                        .into(),
                    None,
                ));
            }
            if f.name.eq_ignore_ascii_case("content-length") {
                let n = std::str::from_utf8(f.value)
                    .ok()
                    .filter(|v| !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()))
                    .and_then(|v| v.parse::<u64>().ok())
                    .ok_or_else(|| refused("Content-Length is not a number".into(), None))?;
                length = Some(n);
            }
            if let Some(why) = overriding(f.name) {
                return Err(refused(why, None));
            }
        }
        if self
            .rules
            .iter()
            .any(|r| r.allows(method, host, port, false, target))
        {
            return Ok(Some(length.unwrap_or(0)));
        }
        let path = target.split_once('?').map_or(target, |(p, _)| p);
        let shown = if port == 80 {
            host.to_string()
        } else {
            format!("{host}:{port}")
        };
        Err(refused(
            format!("no request rule allows {method} {target} on {host}"),
            suggestion(method, &format!("http://{shown}"), path),
        ))
    }

    fn serve(&self, conn: Intercepted) {
        let Intercepted {
            client,
            upstream,
            host,
            port,
            refusals,
        } = conn;
        let TargetHost::Name(name) = &host else {
            return;
        };
        let target = format!("{host}:{port}");
        let refuse = |reason: String, allow_rule: Option<String>| {
            refusals.refused(RefusedRequest {
                target: Some(target.clone()),
                allow_with: None,
                reason,
                allow_rule,
            })
        };
        // The program's side: a leaf for the CONNECT's name only.
        let server = self
            .ca
            .server_config(name)
            .map_err(|e| e.to_string())
            .and_then(|c| ServerConnection::new(c).map_err(|e| e.to_string()));
        let mut program = match server {
            Ok(s) => StreamOwned::new(s, client),
            Err(e) => return refuse(format!("no TLS toward the program: {e}"), None),
        };
        if let Err(e) = handshake(&mut program.conn, &mut program.sock) {
            return refuse(
                format!(
                    "the program's TLS handshake with the broker failed ({e}): a client that \
                     pins its certificate, names another server, or does not trust the run's CA \
                     cannot reach {host} through it"
                ),
                None,
            );
        }
        let mut program = Buffered::new(program);
        // The server's side, verified.
        let client = ServerName::try_from(name.clone())
            .map_err(|e| e.to_string())
            .and_then(|n| {
                ClientConnection::new(self.upstream.clone(), n).map_err(|e| e.to_string())
            });
        let mut server = match client {
            Ok(c) => StreamOwned::new(c, upstream),
            Err(e) => {
                let why = format!("no TLS toward {host}: {e}");
                answer(&mut program, 502, "Bad Gateway", &why);
                return refuse(why, None);
            }
        };
        if let Err(e) = handshake(&mut server.conn, &mut server.sock) {
            let why = format!(
                "{host}'s certificate or TLS was not accepted ({e}); for a private CA give it \
                 with --upstream-ca FILE (network.upstream_ca)"
            );
            answer(&mut program, 502, "Bad Gateway", &why);
            return refuse(why, None);
        }
        let mut server = Buffered::new(server);
        let session = Session {
            broker: self,
            host: &host,
            name,
            port,
        };
        loop {
            match session.exchange(&mut program, &mut server) {
                Ok(Next::Again) => {}
                Ok(Next::Close) => break,
                Err(Stop::Refused(reason, allow_with)) => {
                    answer(&mut program, 403, "Forbidden", &reason);
                    refuse(reason, allow_with);
                    break;
                }
                Err(Stop::BadAnswer(reason)) => {
                    answer(&mut program, 502, "Bad Gateway", &reason);
                    refuse(reason, None);
                    break;
                }
                Err(Stop::Io) => return,
            }
        }
        program.close();
        server.close();
    }
}

/// The rule that would allow `method` on `path` at `origin`, as
/// `--explain` suggests it: none for a path with `*` (the rule would read
/// it as a wildcard and allow far more than was asked).
pub(crate) fn suggestion(method: &str, origin: &str, path: &str) -> Option<String> {
    (!path.contains('*')).then(|| format!("{method} {origin}{path}"))
}

/// Headers some servers and frameworks route or dispatch by instead of
/// the request line or `Host`: a request rule could not see what they
/// ask for.
const OVERRIDING: [&str; 10] = [
    "x-original-url",
    "x-rewrite-url",
    "x-http-method-override",
    "x-http-method",
    "x-method-override",
    "x-forwarded-host",
    "x-forwarded-prefix",
    "x-forwarded-path",
    "x-forwarded-uri",
    "forwarded",
];

/// Why a header named `name` is refused toward a host the broker judges
/// (a bound host, or one a request rule is for): `None` for any other.
pub fn overriding(name: &str) -> Option<String> {
    OVERRIDING
        .iter()
        .any(|o| name.eq_ignore_ascii_case(o))
        .then(|| {
            format!(
                "header {name}: some servers route or dispatch by it instead of the request \
                 line, which is what the broker judges"
            )
        })
}

/// Whether `needle` is in `hay`.
pub(crate) fn contains(hay: &[u8], needle: &[u8]) -> bool {
    !needle.is_empty() && hay.windows(needle.len()).any(|w| w == needle)
}
