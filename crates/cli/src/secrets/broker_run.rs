//! The credential broker's run set-up (Linux: the broker's TLS stack,
//! `ring`, builds there; elsewhere `cordon run` refuses `--secret`).

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use cordon_broker::{Broker, HeaderTemplate, Secret};
use cordon_core::policy::{PlacedFile, SecretBinding, SecretSource};
use cordon_core::{BrokeredNetwork, ChildSpec, Network, RunnerConfig};
use cordon_egress::RequestRule;

use super::Brokering;

/// The preload that sends an older Node's `fetch` through the proxy.
const NODE_PROXY_JS: &str = include_str!("../node_proxy.js");

/// Where the system's CA bundle is, first found wins.
const SYSTEM_BUNDLES: [&str; 3] = [
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
    "/etc/ssl/cert.pem",
];

/// The variables pointing the usual clients at the bundle (system roots
/// and the run's CA).
pub const BUNDLE_VARS: [&str; 4] = [
    "SSL_CERT_FILE",
    "REQUESTS_CA_BUNDLE",
    "CURL_CA_BUNDLE",
    "GIT_SSL_CAINFO",
];

/// Reads a secret's value from its source. `grants`: every path the
/// sandbox may read; a file source inside one is refused (the program
/// could read the value itself).
async fn read_value(name: &str, from: &SecretSource, grants: &[PathBuf]) -> Result<String, String> {
    match from {
        SecretSource::Env(var) => std::env::var(var).map_err(|_| {
            format!("secret {name}: its source env:{var} is not set (or not UTF-8) in cordon's environment")
        }),
        SecretSource::File(path) => read_secret_file(name, path, grants),
        #[cfg(feature = "starlark")]
        SecretSource::Store { package, name: key } => {
            let bad = |e: String| format!("secret {name}: its source store:{package}/{key}: {e}");
            // The store's database and key open every secret in it: none
            // may be where the sandbox reads.
            for file in crate::star::store_files().map_err(bad)? {
                if let Some(g) = exposed(&file, grants) {
                    return Err(bad(format!(
                        "the store's {} is inside {}, which the sandbox may read",
                        file.display(),
                        g.display()
                    )));
                }
            }
            crate::star::read_secret(package, key).await.map_err(bad)
        }
        #[cfg(not(feature = "starlark"))]
        SecretSource::Store { package, name: key } => Err(format!(
            "secret {name}: source store:{package}/{key}: this cordon was built without the \
             store (the `starlark` feature); use env: or file:"
        )),
    }
}

/// [`super::prepare`] once something asks for the broker.
pub(super) async fn prepare(
    bindings: BTreeMap<String, SecretBinding>,
    rules: Vec<RequestRule>,
    upstream_ca: Option<PathBuf>,
    config: &mut RunnerConfig,
    spec: &mut ChildSpec,
) -> Result<Option<Brokering>, String> {
    let mut grants: Vec<PathBuf> = config.read_only.clone();
    grants.extend(config.read_write.iter().cloned());
    grants.extend(config.executable.iter().cloned());
    if let cordon_core::Scratch::Existing(dir) = &spec.scratch {
        grants.push(dir.clone());
    }
    let mut secrets = Vec::new();
    for (name, b) in &bindings {
        if b.hosts.is_empty() {
            return Err(format!(
                "secret {name} is bound to no host: give --secret-host {name}=HOST (secrets.{name}.hosts)"
            ));
        }
        if let SecretSource::Env(var) = &b.from {
            let passed = spec.pass_env.iter().any(|v| v == var.as_str())
                || spec.env.iter().any(|(k, _)| k == var.as_str());
            if passed {
                return Err(format!(
                    "secret {name}'s source {var} is also passed to the program (--env or \
                     env.pass/env.set): the program would hold the value; drop it from the \
                     environment"
                ));
            }
        }
        if matches!(b.from, SecretSource::Store { .. }) {
            for var in ["CORDON_STORE_KEY", "CORDON_STORE_URL", "PGPASSWORD"] {
                let passed = spec.pass_env.iter().any(|v| v == var)
                    || spec.env.iter().any(|(k, _)| k == var);
                if passed {
                    return Err(format!(
                        "secret {name} comes from the store, and {var}, which opens it, is also \
                         passed to the program: drop it from the environment"
                    ));
                }
            }
        }
        let value = read_value(name, &b.from, &grants).await?;
        let header = b
            .header
            .as_deref()
            .map(|h| h.parse::<HeaderTemplate>())
            .transpose()
            .map_err(|e| format!("secret {name}: {e}"))?;
        secrets.push(Secret::new(name, value, b.hosts.clone(), header).map_err(|e| e.to_string())?);
    }
    let ca_pem = upstream_ca
        .as_ref()
        .map(|p| {
            std::fs::read(p)
                .map_err(|e| format!("--upstream-ca {}: cannot be read: {e}", p.display()))
        })
        .transpose()?;
    let broker = Broker::new(secrets, rules, ca_pem.as_deref()).map_err(|e| e.to_string())?;

    // The trust bundle: a fresh directory of the host's, read-only to
    // the sandbox.
    let dir = tempfile::Builder::new()
        .prefix("cordon-trust-")
        .tempdir()
        .map_err(|e| format!("cannot make the trust bundle's directory: {e}"))?;
    // The system's bundle, by its real path (a symlink on some systems).
    let system_path = SYSTEM_BUNDLES
        .iter()
        .find_map(|p| std::fs::canonicalize(p).ok());
    let system = system_path
        .as_ref()
        .and_then(|p| std::fs::read(p).ok())
        .unwrap_or_default();
    let ca = broker.ca().certificate_pem();
    let mut bundle = system;
    bundle.extend_from_slice(b"\n");
    bundle.extend_from_slice(ca.as_bytes());
    let bundle_path = dir.path().join("ca-bundle.pem");
    let ca_path = dir.path().join("run-ca.pem");
    write_readable(&bundle_path, &bundle)?;
    write_readable(&ca_path, ca.as_bytes())?;
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755))
        .map_err(|e| format!("cannot open the trust bundle's directory to the sandbox: {e}"))?;
    config.read_only.push(dir.path().to_path_buf());
    // Clients that read only the system's bundle (Go without
    // SSL_CERT_FILE, say) find the run's CA there too.
    if let Some(at) = system_path {
        config.placed.push(PlacedFile {
            at,
            from: bundle_path.clone(),
        });
    }
    for var in BUNDLE_VARS {
        spec.env.push((var.into(), bundle_path.clone().into()));
    }
    spec.env
        .push(("NODE_EXTRA_CA_CERTS".into(), ca_path.clone().into()));
    // Node 24 (and 22.21) read the proxy variables only when asked; an
    // older Node's fetch does not at all, and gets a preload that sends
    // it through the proxy (node_proxy.js says how).
    spec.env.push(("NODE_USE_ENV_PROXY".into(), "1".into()));
    let preload = dir.path().join("node-proxy.js");
    write_readable(&preload, NODE_PROXY_JS.as_bytes())?;
    let require = format!("--require {}", preload.display());
    let given = spec
        .env
        .iter()
        .position(|(k, _)| k == "NODE_OPTIONS")
        .map(|i| spec.env.remove(i).1)
        .or_else(|| {
            spec.pass_env
                .iter()
                .any(|k| k == "NODE_OPTIONS")
                .then(|| std::env::var_os("NODE_OPTIONS"))
                .flatten()
        });
    let options = match given {
        Some(v) => format!("{require} {}", v.to_string_lossy()),
        None => require,
    };
    spec.env.push(("NODE_OPTIONS".into(), options.into()));
    for (name, b) in &bindings {
        let s = broker
            .secrets()
            .iter()
            .find(|s| s.name() == name)
            .expect("every binding made a secret");
        spec.env
            .push((OsString::from(&b.env), OsString::from(s.placeholder())));
    }
    let broker = Arc::new(broker);
    let mut hosts = config
        .network
        .allowlist()
        .map(<[_]>::to_vec)
        .unwrap_or_default();
    hosts.extend(broker.hosts());
    config.network = Network::Brokered(BrokeredNetwork {
        hosts,
        intercept: broker,
    });
    Ok(Some(Brokering { _bundle: dir }))
}

/// Directories every sandbox may read whatever its grants (the Linux
/// backend's system set, and `/etc`, parts of which it reads): a secret
/// source there could be read by a sandbox of the caller's own uid.
const SYSTEM_DIRS: [&str; 9] = [
    "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/opt",
];

/// The grant (or system directory) `path` lies in, by the path given and
/// by its real path (a symlinked directory in a grant is not a way out),
/// if any.
fn exposed(path: &Path, grants: &[PathBuf]) -> Option<PathBuf> {
    let real = std::fs::canonicalize(path).ok();
    let system = SYSTEM_DIRS.iter().map(PathBuf::from);
    grants.iter().cloned().chain(system).find(|g| {
        let g_real = std::fs::canonicalize(g).unwrap_or_else(|_| g.clone());
        std::iter::once(path)
            .chain(real.as_deref())
            .any(|p| p.starts_with(g) || p.starts_with(&g_real))
    })
}

/// Reads a secret file: outside everything the sandbox may read or write
/// (by the path given and by its real path: a symlinked directory in a
/// grant is not a way out), then through `hostfs::read_private`: no link
/// in any component, a regular file of the caller's own, readable by no
/// one else, with one name, read to at most a secret's length (a FIFO or
/// a device put in its place is refused, not waited on or read without
/// end).
fn read_secret_file(name: &str, path: &Path, grants: &[PathBuf]) -> Result<String, String> {
    let bad = |why: String| format!("secret {name}: its source file {}: {why}", path.display());
    std::fs::canonicalize(path).map_err(|e| bad(format!("cannot be read: {e}")))?;
    if let Some(g) = exposed(path, grants) {
        return Err(bad(format!(
            "it is inside {}, which the sandbox may read or write: keep the file out of every \
             grant, the scratch dir and the system directories",
            g.display()
        )));
    }
    // No link in any component, the caller's own private file, read to a
    // secret's length (hostfs's rules for a path another user could shape).
    let v = cordon_core::hostfs::read_private(path, cordon_broker::MAX_VALUE_LEN + 2)
        .map_err(|e| bad(format!("cannot be used: {e}")))?;
    let mut v = String::from_utf8(v).map_err(|_| bad("not UTF-8".into()))?;
    if v.ends_with('\n') {
        v.pop();
        if v.ends_with('\r') {
            v.pop();
        }
    }
    Ok(v)
}

fn write_readable(path: &Path, bytes: &[u8]) -> Result<(), String> {
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
        .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    f.write_all(bytes)
        .and_then(|()| f.set_permissions(std::fs::Permissions::from_mode(0o644)))
        .map_err(|e| format!("cannot write {}: {e}", path.display()))
}
