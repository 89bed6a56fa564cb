//! Where a [`super::PgStore`] connects, and how: the `postgres://` URL
//! (from the operator's flag or [`STORE_URL_ENV`]), where its password
//! may come from, and the TLS it requires.
//!
//! The password is never taken from a command line (every user of the
//! host reads `/proc/PID/cmdline`): a URL given on argv that carries one
//! is refused, and the password comes from the URL in [`STORE_URL_ENV`]
//! or from `PGPASSWORD`. TLS is rustls, verifying the server's
//! certificate against the WebPKI roots or the CA file named by the URL's
//! `sslrootcert`; a server that is not on this host's loopback (or a unix
//! socket) needs `sslmode=require`, since the rows crossing the network
//! in the clear could be replayed by anyone on the path (an old, still
//! MAC-valid grant for a revoked one).

use std::net::IpAddr;
use std::path::PathBuf;
use std::str::FromStr;

use tokio_postgres::config::{Host, SslMode};

use super::StoreError;

/// The environment variable that may hold the store's `postgres://` URL,
/// password included (it is not on any command line there).
pub const STORE_URL_ENV: &str = "CORDON_STORE_URL";

/// Where the URL came from, which decides whether it may carry a password.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PasswordSource {
    /// From a command line: a password in it is refused.
    Argv,
    /// From the environment or a configuration the embedder read: a
    /// password in it is used.
    Private,
}

/// A parsed, checked store URL.
#[derive(Clone)]
pub struct PgConfig {
    pub(super) pg: tokio_postgres::Config,
    pub(super) root_cert: Option<PathBuf>,
    label: String,
}

impl std::fmt::Debug for PgConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PgConfig({})", self.label)
    }
}

/// Whether `url` names a PostgreSQL store (rather than a SQLite file).
pub fn is_postgres_url(url: &str) -> bool {
    url.starts_with("postgres://") || url.starts_with("postgresql://")
}

impl PgConfig {
    /// Parses `url` (`postgres://USER@HOST:PORT/DB?sslmode=require`, the
    /// libpq form). `source` says whether a password in it is allowed;
    /// without one, `PGPASSWORD` is used if set.
    pub fn from_url(url: &str, source: PasswordSource) -> Result<PgConfig, StoreError> {
        if !is_postgres_url(url) {
            return Err("a store URL starts with postgres:// or postgresql://".into());
        }
        // `sslrootcert` is libpq's, not tokio-postgres's: taken out here.
        let (base, query) = url.split_once('?').unwrap_or((url, ""));
        let mut root_cert = None;
        let mut kept = Vec::new();
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            match pair.split_once('=') {
                Some(("sslrootcert", v)) => root_cert = Some(PathBuf::from(v)),
                _ => kept.push(pair),
            }
        }
        let rebuilt = if kept.is_empty() {
            base.to_owned()
        } else {
            format!("{base}?{}", kept.join("&"))
        };
        // tokio-postgres's parse errors do not echo the URL (nor its
        // password).
        let mut pg = tokio_postgres::Config::from_str(&rebuilt)
            .map_err(|e| format!("the store URL is not a valid postgres:// URL: {e}"))?;
        if pg.get_password().is_some() && source == PasswordSource::Argv {
            return Err(format!(
                "the store URL on the command line carries a password, which every user of \
                 this host can read (in /proc/PID/cmdline): put the URL in {STORE_URL_ENV}, or \
                 the password in PGPASSWORD"
            ));
        }
        if pg.get_password().is_none() {
            if let Some(p) = std::env::var_os("PGPASSWORD") {
                pg.password(p.into_encoded_bytes());
            }
        }
        if pg.get_user().is_none() {
            return Err("the store URL names no user (postgres://USER@HOST/DB)".into());
        }
        if pg.get_dbname().is_none() {
            return Err("the store URL names no database (postgres://USER@HOST/DB)".into());
        }
        if pg.get_hosts().is_empty() {
            return Err("the store URL names no host".into());
        }
        let remote: Vec<String> = pg
            .get_hosts()
            .iter()
            .filter_map(|h| match h {
                Host::Tcp(name) if !is_loopback(name) => Some(name.clone()),
                _ => None,
            })
            .collect();
        if !remote.is_empty() && pg.get_ssl_mode() != SslMode::Require {
            return Err(format!(
                "the store server {} is not on this host: the URL needs sslmode=require (TLS, \
                 the server's certificate verified), or the rows would cross the network \
                 unprotected",
                remote.join(", ")
            ));
        }
        if root_cert.is_some() && pg.get_ssl_mode() == SslMode::Disable {
            return Err("sslrootcert is given but sslmode=disable".into());
        }
        let hosts: Vec<String> = pg
            .get_hosts()
            .iter()
            .map(|h| match h {
                Host::Tcp(n) => n.clone(),
                Host::Unix(p) => p.display().to_string(),
            })
            .collect();
        let ports = pg.get_ports();
        let label = format!(
            "postgres://{}@{}{}/{}",
            pg.get_user().unwrap_or_default(),
            hosts.join(","),
            ports.first().map(|p| format!(":{p}")).unwrap_or_default(),
            pg.get_dbname().unwrap_or_default()
        );
        Ok(PgConfig {
            pg,
            root_cert,
            label,
        })
    }

    /// The URL without its password, for messages.
    pub fn label(&self) -> &str {
        &self.label
    }

    /// Whether TLS is required.
    pub fn requires_tls(&self) -> bool {
        self.pg.get_ssl_mode() == SslMode::Require
    }
}

fn is_loopback(host: &str) -> bool {
    host == "localhost"
        || host
            .trim_matches(|c| c == '[' || c == ']')
            .parse::<IpAddr>()
            .is_ok_and(|a| a.is_loopback())
}

/// The rustls client configuration: the CA file if given, else the WebPKI
/// roots.
pub(super) fn tls_config(cfg: &PgConfig) -> Result<rustls::ClientConfig, StoreError> {
    let mut roots = rustls::RootCertStore::empty();
    match &cfg.root_cert {
        Some(path) => {
            let pem =
                std::fs::read(path).map_err(|e| format!("sslrootcert {}: {e}", path.display()))?;
            let mut any = false;
            use rustls::pki_types::{pem::PemObject, CertificateDer};
            for cert in CertificateDer::pem_slice_iter(&pem) {
                let cert = cert.map_err(|e| format!("sslrootcert {}: {e}", path.display()))?;
                roots
                    .add(cert)
                    .map_err(|e| format!("sslrootcert {}: {e}", path.display()))?;
                any = true;
            }
            if !any {
                return Err(format!(
                    "sslrootcert {} holds no certificate",
                    path.display()
                ));
            }
        }
        None => roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned()),
    }
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    Ok(rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS: {e}"))?
        .with_root_certificates(roots)
        .with_no_client_auth())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_password_on_argv_is_refused_and_one_from_the_environment_is_used() {
        let e = PgConfig::from_url("postgres://u:hunter2@127.0.0.1/db", PasswordSource::Argv)
            .unwrap_err();
        assert!(e.contains(STORE_URL_ENV), "{e}");
        assert!(!e.contains("hunter2"), "{e}");
        let c = PgConfig::from_url("postgres://u:hunter2@127.0.0.1/db", PasswordSource::Private)
            .unwrap();
        assert_eq!(c.pg.get_password(), Some(&b"hunter2"[..]));
        assert!(!c.label().contains("hunter2"));
        assert!(!format!("{c:?}").contains("hunter2"));
    }

    #[test]
    fn a_server_off_this_host_needs_tls() {
        let e = PgConfig::from_url("postgres://u@db.example/x", PasswordSource::Argv).unwrap_err();
        assert!(e.contains("sslmode=require"), "{e}");
        let e = PgConfig::from_url(
            "postgres://u@db.example/x?sslmode=prefer",
            PasswordSource::Argv,
        )
        .unwrap_err();
        assert!(e.contains("sslmode=require"), "{e}");
        let c = PgConfig::from_url(
            "postgres://u@db.example/x?sslmode=require&sslrootcert=/ca.pem",
            PasswordSource::Argv,
        )
        .unwrap();
        assert!(c.requires_tls());
        assert_eq!(
            c.root_cert.as_deref(),
            Some(std::path::Path::new("/ca.pem"))
        );
        for local in ["127.0.0.1", "localhost", "[::1]"] {
            PgConfig::from_url(&format!("postgres://u@{local}/x"), PasswordSource::Argv).unwrap();
        }
    }

    #[test]
    fn a_url_without_user_or_database_is_refused() {
        for url in [
            "postgres://127.0.0.1/db",
            "postgres://u@127.0.0.1",
            "sqlite:x",
        ] {
            assert!(
                PgConfig::from_url(url, PasswordSource::Argv).is_err(),
                "{url}"
            );
        }
    }
}
