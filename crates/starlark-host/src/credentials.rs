//! A package's credentials (`[credentials.NAME]` in `package.toml`): the
//! host sets a header from the package's secret NAME on its `http`
//! requests to the hosts the binding names, so the script calls an API
//! with a key it never reads (it needs no `secrets.read`), and the value
//! is scrubbed from what the requests bring back. The header grammar and
//! the scrubbing are the credential broker's (`cordon-broker`), as for a
//! process.

use std::sync::Arc;

use cordon_broker::{HeaderTemplate, Scrubber};
use cordon_egress::{HostPattern, Scheme};
use cordon_starlark_protocol::Manifest;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use reqwest::Url;

use cordon_starlark_protocol::ModuleError;

use crate::SecretStore;

/// One credential with its value, for one invocation.
pub(crate) struct Credential {
    name: String,
    /// Exact names and ports (443 unless given), HTTPS only.
    hosts: Vec<(String, u16)>,
    header: HeaderName,
    rendered: HeaderValue,
    value: String,
}

impl std::fmt::Debug for Credential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the value.
        f.debug_struct("Credential")
            .field("name", &self.name)
            .field("hosts", &self.hosts)
            .finish_non_exhaustive()
    }
}

/// One binding of a manifest, checked: its name, its hosts (exact names
/// and ports) and its header.
pub(crate) type Binding = (String, Vec<(String, u16)>, HeaderTemplate);

/// The manifest's bindings, checked: exact names over HTTPS (as a
/// process's secrets), a header template with one `{}`.
pub(crate) fn bindings(manifest: &Manifest) -> Result<Vec<Binding>, String> {
    let mut out = Vec::new();
    for (name, b) in &manifest.credentials {
        let bad = |why: String| format!("credentials.{name}: {why}");
        if b.hosts.is_empty() {
            return Err(bad("it names no host".into()));
        }
        let mut hosts = Vec::new();
        for h in &b.hosts {
            let p: HostPattern = h
                .parse()
                .map_err(|e: cordon_egress::HostPatternError| bad(e.to_string()))?;
            let (Some((host, port)), None | Some(Scheme::Https)) = (p.exact_name(), p.scheme())
            else {
                return Err(bad(format!(
                    "a credential goes to hosts named exactly, over HTTPS, not to {h}"
                )));
            };
            hosts.push((host.to_owned(), port.unwrap_or(443)));
        }
        let header: HeaderTemplate = b.header.parse().map_err(|e| bad(format!("{e}")))?;
        out.push((name.clone(), hosts, header));
    }
    Ok(out)
}

/// The credentials of `package`, their values from `store`. A binding
/// whose secret is not set is an error (the call fails; it is not made
/// without its key).
pub(crate) async fn resolve(
    package: &str,
    manifest: &Manifest,
    store: Option<&Arc<dyn SecretStore>>,
) -> Result<Vec<Credential>, String> {
    let bindings = bindings(manifest)?;
    if bindings.is_empty() {
        return Ok(Vec::new());
    }
    let store = store.ok_or("the package has credentials and the host has no secret store")?;
    let mut out = Vec::new();
    for (name, hosts, template) in bindings {
        let value = store.get(package, &name).await?.ok_or_else(|| {
            format!(
                "credential {name} of package {package:?} has no secret set (cordon star secret \
                 set {package} {name})"
            )
        })?;
        let bad = |why: &str| format!("credential {name}: {why}");
        if value.len() < cordon_broker::MIN_VALUE_LEN || value.len() > cordon_broker::MAX_VALUE_LEN
        {
            return Err(bad(&format!(
                "its secret is {} bytes; a credential is {} to {} (a shorter one could be \
                 guessed through the scrubbing of answers)",
                value.len(),
                cordon_broker::MIN_VALUE_LEN,
                cordon_broker::MAX_VALUE_LEN
            )));
        }
        let header = HeaderName::from_bytes(template.name().as_bytes())
            .map_err(|_| bad("the header name is not valid"))?;
        let mut rendered = HeaderValue::from_str(&template.render(&value))
            .map_err(|_| bad("the secret cannot go in a header (a control character?)"))?;
        rendered.set_sensitive(true);
        out.push(Credential {
            name,
            hosts,
            header,
            rendered,
            value,
        });
    }
    Ok(out)
}

/// Sets, on `headers` for a request to `url`, each credential bound to its
/// host (over any header of that name the script set); whether any was.
/// A script's header holding a value is refused (it could have come only
/// from an echo the scrubber missed).
pub(crate) fn apply(
    creds: &[Credential],
    url: &Url,
    headers: &mut HeaderMap,
) -> Result<bool, ModuleError> {
    if headers
        .values()
        .any(|v| holds_value(creds, &String::from_utf8_lossy(v.as_bytes())))
        || holds_value(creds, url.as_str())
    {
        return Err(ModuleError::InvalidArgument(
            "a request holds a credential's value".into(),
        ));
    }
    let (true, Some(host), Some(port)) = (
        url.scheme() == "https",
        url.host_str(),
        url.port_or_known_default(),
    ) else {
        return Ok(false);
    };
    let mut any = false;
    for c in creds {
        if c.hosts
            .iter()
            .any(|(h, p)| *p == port && h.eq_ignore_ascii_case(host))
        {
            headers.insert(c.header.clone(), c.rendered.clone());
            any = true;
        }
    }
    Ok(any)
}

/// Whether `text` holds a credential's value.
pub(crate) fn holds_value(creds: &[Credential], text: &str) -> bool {
    creds.iter().any(|c| text.contains(&c.value))
}

/// `e` with the values in its text replaced.
pub(crate) fn scrub_error(creds: &[Credential], e: ModuleError) -> ModuleError {
    if creds.is_empty() {
        return e;
    }
    let s = |t: String| scrub(creds, &t);
    match e {
        ModuleError::Upstream(t) => ModuleError::Upstream(s(t)),
        ModuleError::NetworkDenied(t) => ModuleError::NetworkDenied(s(t)),
        ModuleError::InvalidArgument(t) => ModuleError::InvalidArgument(s(t)),
        ModuleError::LimitExceeded(t) => ModuleError::LimitExceeded(s(t)),
        ModuleError::Timeout(t) => ModuleError::Timeout(s(t)),
        ModuleError::Unavailable(t) => ModuleError::Unavailable(s(t)),
        other => other,
    }
}

/// What replaces the values in what comes back (`None` without any).
pub(crate) fn scrubber(creds: &[Credential]) -> Option<Scrubber> {
    (!creds.is_empty()).then(|| {
        Scrubber::new(
            creds
                .iter()
                .map(|c| {
                    (
                        c.value.as_bytes().to_vec(),
                        format!("cordon-credential-{}", c.name).into_bytes(),
                    )
                })
                .collect(),
        )
    })
}

/// `text` with the values replaced.
pub(crate) fn scrub(creds: &[Credential], text: &str) -> String {
    match scrubber(creds) {
        None => text.to_owned(),
        Some(mut s) => {
            let mut out = s.push(text.as_bytes());
            out.extend(s.finish());
            String::from_utf8_lossy(&out).into_owned()
        }
    }
}
