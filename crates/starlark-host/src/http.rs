//! The `http` capability: the package's allowlist (core's one
//! network-target grammar, `cordon_egress::Allowlist`), the address
//! guard, redirects and caps, over reqwest (rustls, no proxy, no automatic
//! redirects).

use std::error::Error as StdError;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use cordon_egress::{Access, Allowlist, RequestRule, TargetHost};
use reqwest::dns::{Addrs, Name, Resolve, Resolving};
use reqwest::Url;

use cordon_starlark_protocol::{HttpLimits, HttpRequest, HttpResponse, ModuleError};

/// Error returned by [`GuardedResolver`] when a name resolves to a
/// non-public address.
#[derive(Debug)]
struct BlockedAddress(String);

impl std::fmt::Display for BlockedAddress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}
impl StdError for BlockedAddress {}

/// DNS resolver that refuses a name unless every address it resolves to
/// is allowed by the invocation's allowlist (public, or inside a private
/// range the operator approved for the package). reqwest connects to
/// exactly the addresses returned here, so a second, different DNS answer
/// (rebinding) cannot slip past the check.
struct GuardedResolver(Arc<Allowlist>);

impl Resolve for GuardedResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let host = name.as_str().to_owned();
        let allow = self.0.clone();
        Box::pin(async move {
            let addrs: Vec<SocketAddr> =
                tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            let target = TargetHost::parse(&host).unwrap_or(TargetHost::Name(host.clone()));
            allow
                .check_addresses(None, &target, &addrs)
                .map_err(|r| Box::new(BlockedAddress(r.0)) as Box<dyn StdError + Send + Sync>)?;
            let it: Addrs = Box::new(addrs.into_iter());
            Ok(it)
        })
    }
}

/// The `http` module's client for one invocation: built for its
/// allowlist (the resolver checks every name against it), with no proxy
/// (a proxy would make the address check meaningless) and no automatic
/// redirects. Its connection pool is its own, so no other invocation's
/// connection (to an address only that one was allowed) is ever reused.
#[derive(Clone)]
pub struct HttpClient {
    client: reqwest::Client,
    allow: Arc<Allowlist>,
    /// The package's request rules: on a host one is for, only what a
    /// rule allows.
    rules: Arc<Vec<RequestRule>>,
}

impl std::fmt::Debug for HttpClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("HttpClient")
    }
}

impl HttpClient {
    /// The client for an invocation whose package may reach `allow`,
    /// with the request `rules` of its `network_access`, trusting the
    /// WebPKI roots and the CAs of `roots_pem` (a PEM bundle; one that
    /// holds no certificate is refused, never ignored).
    pub fn new(
        allow: Allowlist,
        rules: Vec<RequestRule>,
        roots_pem: Option<&[u8]>,
    ) -> Result<HttpClient, String> {
        let allow = Arc::new(allow);
        let mut builder = reqwest::Client::builder();
        if let Some(pem) = roots_pem {
            let certs = reqwest::Certificate::from_pem_bundle(pem)
                .map_err(|e| format!("the http module's extra CA file: {e}"))?;
            if certs.is_empty() {
                return Err("the http module's extra CA file holds no PEM certificate".into());
            }
            for c in certs {
                builder = builder.add_root_certificate(c);
            }
        }
        let client = builder
            .dns_resolver(Arc::new(GuardedResolver(allow.clone())))
            .no_proxy()
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(Duration::from_secs(10))
            .pool_max_idle_per_host(4)
            .user_agent(concat!("cordon-starlark/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| format!("cannot build HTTP client: {e}"))?;
        Ok(HttpClient {
            client,
            allow,
            rules: Arc::new(rules),
        })
    }

    /// Perform a request with every check. `budget` counts requests left in
    /// this invocation and is decremented per hop.
    pub(crate) async fn execute(
        &self,
        limits: &HttpLimits,
        req: HttpRequest,
        budget: &std::sync::atomic::AtomicU32,
        creds: &[crate::credentials::Credential],
    ) -> Result<HttpResponse, ModuleError> {
        let timeout = req
            .timeout_ms
            .map(Duration::from_millis)
            .unwrap_or(limits.max_request_time)
            .min(limits.max_request_time);
        match tokio::time::timeout(timeout, self.execute_inner(limits, req, budget, creds)).await {
            // An error may quote a URL or a header the server sent.
            Ok(r) => r.map_err(|e| crate::credentials::scrub_error(creds, e)),
            Err(_) => Err(ModuleError::Timeout(format!(
                "HTTP request took longer than {} ms",
                timeout.as_millis()
            ))),
        }
    }

    async fn execute_inner(
        &self,
        limits: &HttpLimits,
        req: HttpRequest,
        budget: &std::sync::atomic::AtomicU32,
        creds: &[crate::credentials::Credential],
    ) -> Result<HttpResponse, ModuleError> {
        let mut method = reqwest::Method::from_bytes(req.method.to_ascii_uppercase().as_bytes())
            .map_err(|_| {
                ModuleError::InvalidArgument(format!("bad HTTP method {:?}", req.method))
            })?;
        let mut url = Url::parse(&req.url)
            .map_err(|e| ModuleError::InvalidArgument(format!("bad URL {:?}: {e}", req.url)))?;
        let mut body = req.body;
        if body
            .as_ref()
            .is_some_and(|b| b.len() > limits.max_request_bytes)
        {
            return Err(ModuleError::LimitExceeded(format!(
                "request body is larger than {} bytes (EvalLimits::http.max_request_bytes)",
                limits.max_request_bytes
            )));
        }
        let mut headers = reqwest::header::HeaderMap::new();
        for (k, v) in &req.headers {
            let name = reqwest::header::HeaderName::from_bytes(k.as_bytes())
                .map_err(|_| ModuleError::InvalidArgument(format!("bad header name {k:?}")))?;
            if name == reqwest::header::HOST
                || name == reqwest::header::CONNECTION
                || name == reqwest::header::TRANSFER_ENCODING
                || name == reqwest::header::CONTENT_LENGTH
            {
                return Err(ModuleError::InvalidArgument(format!(
                    "header {k:?} is set by the host and cannot be overridden"
                )));
            }
            let value = reqwest::header::HeaderValue::from_str(v)
                .map_err(|_| ModuleError::InvalidArgument(format!("bad value for header {k:?}")))?;
            headers.append(name, value);
        }
        let mut hops = 0u32;
        loop {
            check_target(&self.allow, &url)?;
            check_rules(&self.rules, method.as_str(), &url)?;
            take_budget(budget, limits)?;
            tracing::debug!(method = %method, url = %url, hop = hops, "http request");
            // The package's credentials for this hop's host only: a
            // redirect elsewhere goes without them.
            let mut hop = headers.clone();
            let carries = crate::credentials::apply(creds, &url, &mut hop)?;
            let ruled = rules_for(&self.rules, &url);
            if carries || ruled {
                // What a rule could not see, or the scrubber could not
                // read, does not go toward a judged or bound host.
                for name in hop.keys() {
                    if let Some(why) = cordon_broker::overriding(name.as_str()) {
                        return Err(ModuleError::NetworkDenied(why));
                    }
                }
            }
            if carries {
                hop.remove(reqwest::header::RANGE);
                hop.remove(reqwest::header::IF_RANGE);
                hop.insert(
                    reqwest::header::ACCEPT_ENCODING,
                    reqwest::header::HeaderValue::from_static("identity"),
                );
            }
            let mut rb = self
                .client
                .request(method.clone(), url.clone())
                .headers(hop);
            if let Some(b) = &body {
                rb = rb.body(b.clone());
            }
            let resp = rb.send().await.map_err(|e| map_send_error(&e, &url))?;
            let status = resp.status();
            if carries {
                let encoded = resp
                    .headers()
                    .get(reqwest::header::CONTENT_ENCODING)
                    .is_some_and(|e| !e.as_bytes().eq_ignore_ascii_case(b"identity"));
                if encoded || status == reqwest::StatusCode::PARTIAL_CONTENT {
                    return Err(ModuleError::Upstream(
                        "the answer to a request carrying a credential is encoded or partial; \
                         the host scrubs only whole, unencoded answers"
                            .into(),
                    ));
                }
            }
            if status.is_redirection() && status != reqwest::StatusCode::NOT_MODIFIED {
                if let Some(loc) = resp.headers().get(reqwest::header::LOCATION) {
                    hops += 1;
                    if hops > limits.max_redirects {
                        return Err(ModuleError::LimitExceeded(format!(
                            "more than {} redirects (EvalLimits::http.max_redirects)",
                            limits.max_redirects
                        )));
                    }
                    let loc = loc.to_str().map_err(|_| {
                        ModuleError::Upstream("redirect Location header is not valid text".into())
                    })?;
                    if crate::credentials::holds_value(creds, loc) {
                        // A redirect would carry it to the next host in
                        // the URL, and hand it to the script as `url`.
                        return Err(ModuleError::Upstream(
                            "the server put a credential into a redirect's Location; not \
                             followed"
                                .into(),
                        ));
                    }
                    let next = url.join(loc).map_err(|e| {
                        ModuleError::Upstream(format!("bad redirect Location {loc:?}: {e}"))
                    })?;
                    if next.origin() != url.origin() {
                        headers.remove(reqwest::header::AUTHORIZATION);
                        headers.remove(reqwest::header::COOKIE);
                        headers.remove(reqwest::header::PROXY_AUTHORIZATION);
                    }
                    let code = status.as_u16();
                    if code == 303
                        || ((code == 301 || code == 302) && method == reqwest::Method::POST)
                    {
                        method = reqwest::Method::GET;
                        body = None;
                        headers.remove(reqwest::header::CONTENT_TYPE);
                    }
                    url = next;
                    continue;
                }
            }
            let mut r = read_response(resp, url, limits.max_response_bytes).await?;
            if !creds.is_empty() {
                // An echo of the request must not hand the script the key.
                r.body = crate::credentials::scrub(creds, &r.body);
                r.url = crate::credentials::scrub(creds, &r.url);
                for (k, v) in &mut r.headers {
                    *k = crate::credentials::scrub(creds, k);
                    *v = crate::credentials::scrub(creds, v);
                }
            }
            return Ok(r);
        }
    }
}

fn take_budget(
    budget: &std::sync::atomic::AtomicU32,
    limits: &HttpLimits,
) -> Result<(), ModuleError> {
    use std::sync::atomic::Ordering;
    budget
        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |b| b.checked_sub(1))
        .map(|_| ())
        .map_err(|_| {
            ModuleError::LimitExceeded(format!(
                "more than {} HTTP requests in one invocation \
                 (EvalLimits::http.max_requests_per_invocation)",
                limits.max_requests_per_invocation
            ))
        })
}

/// Whether the allowlist lets `url` through: its scheme, host and port
/// match an entry, and an IP literal (which never reaches the resolver)
/// is an allowed address.
fn check_target(allow: &Allowlist, url: &Url) -> Result<(), ModuleError> {
    let (host, port, access) = target_of(url)?;
    let denied = |r: cordon_egress::Refusal| ModuleError::NetworkDenied(r.0);
    let entry = allow.match_target(&host, port, access).map_err(denied)?;
    if let TargetHost::Ip(ip) = host {
        allow
            .check_addresses(Some(entry), &host, &[SocketAddr::new(ip, port)])
            .map_err(denied)?;
    }
    Ok(())
}

/// Whether a request rule of the package is for `url`'s host and port.
fn rules_for(rules: &[RequestRule], url: &Url) -> bool {
    target_of(url).is_ok_and(|(host, port, access)| {
        rules
            .iter()
            .any(|r| r.covers(&host, port, access != Access::Http))
    })
}

/// Whether the package's request rules let `method` on `url` through: on
/// a host no rule is for, anything the allowlist allows; on one a rule is
/// for, only what a rule allows (each redirect hop too).
fn check_rules(rules: &[RequestRule], method: &str, url: &Url) -> Result<(), ModuleError> {
    let (host, port, access) = target_of(url)?;
    let tls = access != Access::Http;
    if !rules.iter().any(|r| r.covers(&host, port, tls)) {
        return Ok(());
    }
    let path = url.path();
    let target = match url.query() {
        Some(q) => format!("{path}?{q}"),
        None => path.to_owned(),
    };
    if rules
        .iter()
        .any(|r| r.allows(method, &host, port, tls, &target))
    {
        return Ok(());
    }
    let authority = match url.port() {
        Some(p) => format!("{host}:{p}"),
        None => host.to_string(),
    };
    // No suggestion for a path with `*`: the rule would read it as a
    // wildcard and allow far more than was asked.
    let add = if path.contains('*') {
        String::new()
    } else {
        format!(
            " (add \"{method} {}://{authority}{path}\" to network_access)",
            url.scheme()
        )
    };
    Err(ModuleError::NetworkDenied(format!(
        "no request rule of the package allows {method} {path} on {host}{add}"
    )))
}

/// The host, port and access of `url`, as the allowlist sees them.
pub(crate) fn target_of(url: &Url) -> Result<(TargetHost, u16, Access), ModuleError> {
    let access = match url.scheme() {
        "https" => Access::Https,
        "http" => Access::Http,
        other => {
            return Err(ModuleError::NetworkDenied(format!(
                "scheme {other:?} is not allowed; use https:// URLs"
            )))
        }
    };
    let host = match url.host() {
        Some(url::Host::Domain(d)) => TargetHost::parse(d),
        Some(url::Host::Ipv4(v4)) => Some(TargetHost::Ip(IpAddr::V4(v4))),
        Some(url::Host::Ipv6(v6)) => Some(TargetHost::Ip(IpAddr::V6(v6))),
        None => None,
    }
    .ok_or_else(|| ModuleError::InvalidArgument(format!("URL {url} has no usable host")))?;
    let port = url.port_or_known_default().unwrap_or(443);
    Ok((host, port, access))
}

fn map_send_error(e: &reqwest::Error, url: &Url) -> ModuleError {
    let mut src: Option<&(dyn StdError + 'static)> = Some(e);
    while let Some(s) = src {
        if let Some(b) = s.downcast_ref::<BlockedAddress>() {
            return ModuleError::NetworkDenied(b.0.clone());
        }
        src = s.source();
    }
    if e.is_timeout() {
        return ModuleError::Timeout(format!("request to {url} timed out"));
    }
    let mut msg = e.to_string();
    let mut src = e.source();
    while let Some(s) = src {
        msg.push_str(": ");
        msg.push_str(&s.to_string());
        src = s.source();
    }
    ModuleError::Upstream(format!("request to {url} failed: {msg}"))
}

async fn read_response(
    mut resp: reqwest::Response,
    url: Url,
    max: usize,
) -> Result<HttpResponse, ModuleError> {
    if resp.content_length().is_some_and(|l| l > max as u64) {
        return Err(ModuleError::LimitExceeded(format!(
            "response from {url} is larger than {max} bytes (EvalLimits::http.max_response_bytes)"
        )));
    }
    let status = resp.status().as_u16();
    let headers = resp
        .headers()
        .iter()
        .map(|(k, v)| {
            (
                k.as_str().to_owned(),
                String::from_utf8_lossy(v.as_bytes()).into_owned(),
            )
        })
        .collect();
    let mut buf = Vec::new();
    while let Some(chunk) = resp
        .chunk()
        .await
        .map_err(|e| ModuleError::Upstream(format!("reading response from {url} failed: {e}")))?
    {
        if buf.len() + chunk.len() > max {
            return Err(ModuleError::LimitExceeded(format!(
                "response from {url} is larger than {max} bytes (EvalLimits::http.max_response_bytes)"
            )));
        }
        buf.extend_from_slice(&chunk);
    }
    Ok(HttpResponse {
        status,
        url: url.to_string(),
        headers,
        body: String::from_utf8_lossy(&buf).into_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn al(e: &[&str]) -> Allowlist {
        crate::broker::package_allowlist(
            "p",
            &e.iter().map(|s| s.to_string()).collect::<Vec<_>>(),
            &[],
        )
        .unwrap()
    }

    #[test]
    fn allowlist_matching() {
        let a = al(&[
            "api.example.com",
            "*.svc.example.org",
            "http://127.0.0.1:8080",
            "h.io:8443",
        ]);
        let check = |u: &str| check_target(&a, &Url::parse(u).unwrap());
        let ok = |u: &str| match check(u) {
            Ok(()) => true,
            // The loopback literal matches but is not approved.
            Err(ModuleError::NetworkDenied(m)) if m.contains("--allow-private") => true,
            Err(_) => false,
        };
        assert!(ok("https://api.example.com/x"));
        assert!(ok("https://API.example.com./x"));
        assert!(
            !ok("http://api.example.com/x"),
            "http needs an http:// entry"
        );
        assert!(
            !ok("https://api.example.com:8443/x"),
            "non-default port needs a port entry"
        );
        assert!(ok("https://a.b.svc.example.org/"));
        assert!(
            !ok("https://svc.example.org/"),
            "wildcard does not match apex"
        );
        assert!(!ok("https://evilsvc.example.org/"));
        assert!(ok("http://127.0.0.1:8080/"));
        assert!(!ok("http://127.0.0.1:8081/"));
        assert!(ok("https://h.io:8443/"));
        assert!(!ok("http://h.io:8443/"), "plain http only where named");
        assert!(!ok("ftp://api.example.com/"));
        assert!(!ok("https://example.com/"));
        // A package's loopback literal is refused until the operator
        // approves its range, and the refusal says how.
        let e = check("http://127.0.0.1:8080/").unwrap_err().to_string();
        assert!(
            e.contains("cordon star grant p api.http --allow-private 127.0.0.1/32"),
            "{e}"
        );
        let approved = crate::broker::package_allowlist(
            "p",
            &["http://127.0.0.1:8080".to_string()],
            &["127.0.0.1/32".parse().unwrap()],
        )
        .unwrap();
        assert!(check_target(&approved, &Url::parse("http://127.0.0.1:8080/").unwrap()).is_ok());
        for bad in ["a/b", "*", "10.0.0.0/8", "ftp://x"] {
            assert!(
                crate::broker::package_allowlist("p", &[bad.to_string()], &[]).is_err(),
                "{bad}"
            );
        }
    }
}
