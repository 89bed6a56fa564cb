//! The `http` capability: allowlist, private-address guard, redirects and
//! caps, over reqwest (rustls, no proxy, no automatic redirects).

use std::error::Error as StdError;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use cordon_core::egress::is_public_ip;
use reqwest::dns::{Addrs, Name, Resolve, Resolving};
use reqwest::Url;

use crate::protocol::{HttpRequest, HttpResponse, ModuleError};

/// Caps for the `http` module, per request and per invocation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpLimits {
    /// Largest response body read (bytes); bigger responses are an error.
    pub max_response_bytes: usize,
    /// Largest request body (bytes).
    pub max_request_bytes: usize,
    /// Longest single request, including redirects and body read.
    pub max_request_time: Duration,
    /// Requests (every redirect hop counts) per invocation.
    pub max_requests_per_invocation: u32,
    /// Redirect hops followed per request.
    pub max_redirects: u32,
}

impl Default for HttpLimits {
    fn default() -> Self {
        HttpLimits {
            max_response_bytes: 1024 * 1024,
            max_request_bytes: 256 * 1024,
            max_request_time: Duration::from_secs(10),
            max_requests_per_invocation: 20,
            max_redirects: 5,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum HostPattern {
    Exact(String),
    /// `*.example.com` → stores `.example.com`; matches any subdomain, not the apex.
    Suffix(String),
    Ip(IpAddr),
}

/// One parsed `network_access` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AllowEntry {
    host: HostPattern,
    port: Option<u16>,
    allow_http: bool,
}

/// A package's parsed `network_access` list.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Allowlist {
    entries: Vec<AllowEntry>,
}

impl Allowlist {
    /// Parse entries: `host`, `host:port`, `*.example.com`, `[::1]:8080`,
    /// optionally prefixed with `https://` or `http://` (the latter also
    /// allows plain HTTP). An entry without a port allows only the scheme's
    /// default port. Invalid entries are returned as errors.
    pub fn parse(entries: &[String]) -> Result<Allowlist, String> {
        let mut out = Vec::new();
        for raw in entries {
            out.push(parse_entry(raw).ok_or_else(|| {
                format!(
                    "network_access entry {raw:?} is invalid; use host, host:port, *.domain or http://host:port"
                )
            })?);
        }
        Ok(Allowlist { entries: out })
    }

    /// Find the entry allowing `url`, or say why none does.
    fn check(&self, url: &Url) -> Result<&AllowEntry, ModuleError> {
        let scheme = url.scheme();
        if scheme != "https" && scheme != "http" {
            return Err(ModuleError::NetworkDenied(format!(
                "scheme {scheme:?} is not allowed; use https:// URLs"
            )));
        }
        let host = url
            .host()
            .ok_or_else(|| ModuleError::InvalidArgument(format!("URL {url} has no host")))?;
        let port = url.port_or_known_default().unwrap_or(443);
        let default_port = if scheme == "https" { 443 } else { 80 };
        let (name, ip) = match host {
            url::Host::Domain(d) => (d.trim_end_matches('.').to_ascii_lowercase(), None),
            url::Host::Ipv4(v4) => (v4.to_string(), Some(IpAddr::V4(v4))),
            url::Host::Ipv6(v6) => (v6.to_string(), Some(IpAddr::V6(v6))),
        };
        let mut scheme_mismatch = false;
        for e in &self.entries {
            let host_ok = match (&e.host, ip) {
                (HostPattern::Ip(a), Some(b)) => *a == b,
                (HostPattern::Exact(h), None) => *h == name,
                (HostPattern::Suffix(s), None) => {
                    name.ends_with(s.as_str()) && name.len() > s.len()
                }
                _ => false,
            };
            let port_ok = e.port.unwrap_or(default_port) == port;
            if host_ok && port_ok {
                if scheme == "http" && !e.allow_http {
                    scheme_mismatch = true;
                    continue;
                }
                return Ok(e);
            }
        }
        if scheme_mismatch {
            return Err(ModuleError::NetworkDenied(format!(
                "plain http to {name}:{port} is not allowed; use https or add an http://{name}:{port} entry to network_access"
            )));
        }
        Err(ModuleError::NetworkDenied(format!(
            "{name}:{port} is not in the package's network_access list"
        )))
    }
}

fn parse_entry(raw: &str) -> Option<AllowEntry> {
    let raw = raw.trim();
    let (allow_http, rest) = if let Some(r) = raw.strip_prefix("http://") {
        (true, r)
    } else if let Some(r) = raw.strip_prefix("https://") {
        (false, r)
    } else {
        (false, raw)
    };
    let rest = rest.trim_end_matches('/');
    if rest.is_empty() || rest.contains('/') || rest.contains('@') {
        return None;
    }
    // Bracketed IPv6, optionally with port.
    let (host, port) = if let Some(r) = rest.strip_prefix('[') {
        let (h, after) = r.split_once(']')?;
        let port = match after {
            "" => None,
            p => Some(p.strip_prefix(':')?.parse::<u16>().ok()?),
        };
        (h.to_owned(), port)
    } else if rest.matches(':').count() > 1 {
        // Bare IPv6 without port.
        (rest.to_owned(), None)
    } else if let Some((h, p)) = rest.split_once(':') {
        (h.to_owned(), Some(p.parse::<u16>().ok()?))
    } else {
        (rest.to_owned(), None)
    };
    let host_l = host.to_ascii_lowercase();
    let pattern = if let Ok(ip) = host_l.parse::<IpAddr>() {
        HostPattern::Ip(ip)
    } else if let Some(s) = host_l.strip_prefix("*.") {
        if s.is_empty() || s.contains('*') {
            return None;
        }
        HostPattern::Suffix(format!(".{s}"))
    } else {
        if host_l.is_empty()
            || host_l.contains('*')
            || !host_l
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.')
        {
            return None;
        }
        HostPattern::Exact(host_l.trim_end_matches('.').to_owned())
    };
    Some(AllowEntry {
        host: pattern,
        port,
        allow_http,
    })
}

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

/// DNS resolver that refuses names resolving to any non-public address.
/// reqwest connects to exactly the addresses returned here, so a second,
/// different DNS answer (rebinding) cannot slip past the check.
struct GuardedResolver;

impl Resolve for GuardedResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let host = name.as_str().to_owned();
        Box::pin(async move {
            let addrs: Vec<SocketAddr> =
                tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            if addrs.is_empty() {
                return Err(Box::new(BlockedAddress(format!("{host} did not resolve")))
                    as Box<dyn StdError + Send + Sync>);
            }
            if let Some(bad) = addrs.iter().find(|a| !is_public_ip(a.ip())) {
                return Err(Box::new(BlockedAddress(format!(
                    "{host} resolves to non-public address {}; only a network_access entry naming that IP literally can allow it",
                    bad.ip()
                ))) as Box<dyn StdError + Send + Sync>);
            }
            let it: Addrs = Box::new(addrs.into_iter());
            Ok(it)
        })
    }
}

/// Shared HTTP client for the `http` module.
#[derive(Clone)]
pub struct HttpClient {
    client: reqwest::Client,
}

impl std::fmt::Debug for HttpClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("HttpClient")
    }
}

impl HttpClient {
    /// Build the guarded client: custom resolver, no proxy (a proxy would
    /// bypass the address check), no automatic redirects.
    pub fn new() -> Result<HttpClient, String> {
        let client = reqwest::Client::builder()
            .dns_resolver(Arc::new(GuardedResolver))
            .no_proxy()
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(Duration::from_secs(10))
            .pool_max_idle_per_host(4)
            .user_agent(concat!("cordon-starlark/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| format!("cannot build HTTP client: {e}"))?;
        Ok(HttpClient { client })
    }

    /// Perform a request with every check. `budget` counts requests left in
    /// this invocation and is decremented per hop.
    pub async fn execute(
        &self,
        allowlist: &Allowlist,
        limits: &HttpLimits,
        req: HttpRequest,
        budget: &std::sync::atomic::AtomicU32,
    ) -> Result<HttpResponse, ModuleError> {
        let timeout = req
            .timeout_ms
            .map(Duration::from_millis)
            .unwrap_or(limits.max_request_time)
            .min(limits.max_request_time);
        match tokio::time::timeout(timeout, self.execute_inner(allowlist, limits, req, budget))
            .await
        {
            Ok(r) => r,
            Err(_) => Err(ModuleError::Timeout(format!(
                "HTTP request took longer than {} ms",
                timeout.as_millis()
            ))),
        }
    }

    async fn execute_inner(
        &self,
        allowlist: &Allowlist,
        limits: &HttpLimits,
        req: HttpRequest,
        budget: &std::sync::atomic::AtomicU32,
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
                "request body is larger than {} bytes",
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
            let entry = allowlist.check(&url)?;
            // IP literals are never passed to the resolver: check them here.
            match url.host() {
                Some(url::Host::Ipv4(v4)) => check_literal(IpAddr::V4(v4), entry)?,
                Some(url::Host::Ipv6(v6)) => check_literal(IpAddr::V6(v6), entry)?,
                _ => {}
            }
            take_budget(budget, limits)?;
            tracing::debug!(method = %method, url = %url, hop = hops, "http request");
            let mut rb = self
                .client
                .request(method.clone(), url.clone())
                .headers(headers.clone());
            if let Some(b) = &body {
                rb = rb.body(b.clone());
            }
            let resp = rb.send().await.map_err(|e| map_send_error(&e, &url))?;
            let status = resp.status();
            if status.is_redirection() && status != reqwest::StatusCode::NOT_MODIFIED {
                if let Some(loc) = resp.headers().get(reqwest::header::LOCATION) {
                    hops += 1;
                    if hops > limits.max_redirects {
                        return Err(ModuleError::LimitExceeded(format!(
                            "more than {} redirects",
                            limits.max_redirects
                        )));
                    }
                    let loc = loc.to_str().map_err(|_| {
                        ModuleError::Upstream("redirect Location header is not valid text".into())
                    })?;
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
            return read_response(resp, url, limits.max_response_bytes).await;
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
                "more than {} HTTP requests in one invocation",
                limits.max_requests_per_invocation
            ))
        })
}

fn check_literal(ip: IpAddr, entry: &AllowEntry) -> Result<(), ModuleError> {
    if is_public_ip(ip) || entry.host == HostPattern::Ip(ip) {
        Ok(())
    } else {
        Err(ModuleError::NetworkDenied(format!(
            "address {ip} is private/loopback/link-local; only a network_access entry naming {ip} literally can allow it"
        )))
    }
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
            "response from {url} is larger than {max} bytes"
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
                "response from {url} is larger than {max} bytes"
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
        Allowlist::parse(&e.iter().map(|s| s.to_string()).collect::<Vec<_>>()).unwrap()
    }

    #[test]
    fn allowlist_matching() {
        let a = al(&[
            "api.example.com",
            "*.svc.example.org",
            "http://127.0.0.1:8080",
            "h.io:8443",
        ]);
        let ok = |u: &str| a.check(&Url::parse(u).unwrap()).is_ok();
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
        assert!(!ok("ftp://api.example.com/"));
        assert!(!ok("https://example.com/"));
        assert!(Allowlist::parse(&["a/b".to_string()]).is_err());
        assert!(Allowlist::parse(&["*".to_string()]).is_err());
    }
}
