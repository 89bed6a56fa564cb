//! The run's certificate authority: made fresh for each run, its private
//! key only in this process's memory (no function here writes or returns
//! it), its certificate handed to the sandbox so the program's TLS
//! clients trust the leaves the broker shows them.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DistinguishedName, DnType,
    ExtendedKeyUsagePurpose, IsCa, KeyPair, KeyUsagePurpose,
};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;

use crate::BrokerError;

/// The most server names one run's CA issues leaves for: a program that
/// asks for names without end gets refused handshakes, not a host that
/// keeps signing.
pub const MAX_LEAVES: usize = 256;

/// How long the CA and its leaves are valid: from a day before they are
/// made (clocks disagree) to [`VALID_FOR`] after. A run that outlasts it
/// gets failed handshakes, never an unchecked connection.
pub const VALID_FOR: std::time::Duration = std::time::Duration::from_secs(30 * 24 * 3600);

fn validity() -> (time::OffsetDateTime, time::OffsetDateTime) {
    let now = time::OffsetDateTime::now_utc();
    (now - time::Duration::DAY, now + VALID_FOR)
}

/// A run's CA. Cheap to share (`Arc`); leaves are made on first use per
/// server name and kept for the run.
pub struct RunCa {
    issuer: CertifiedIssuer<'static, KeyPair>,
    leaves: Mutex<HashMap<String, Arc<CertifiedKey>>>,
}

impl std::fmt::Debug for RunCa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the key.
        f.debug_struct("RunCa").finish_non_exhaustive()
    }
}

impl RunCa {
    /// A new CA (ECDSA P-256), valid as [`VALID_FOR`] says.
    pub fn new() -> Result<RunCa, BrokerError> {
        let mut params = CertificateParams::default();
        let mut dn = DistinguishedName::new();
        dn.push(
            DnType::CommonName,
            "Cordon credential broker (this run only)",
        );
        params.distinguished_name = dn;
        params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        (params.not_before, params.not_after) = validity();
        let key = KeyPair::generate().map_err(|e| BrokerError::Certificate(e.to_string()))?;
        let issuer = CertifiedIssuer::self_signed(params, key)
            .map_err(|e| BrokerError::Certificate(e.to_string()))?;
        Ok(RunCa {
            issuer,
            leaves: Mutex::new(HashMap::new()),
        })
    }

    /// The CA's certificate, PEM: what the sandbox's trust bundle adds.
    pub fn certificate_pem(&self) -> String {
        self.issuer.pem()
    }

    /// The CA's certificate, DER.
    pub fn certificate_der(&self) -> CertificateDer<'static> {
        self.issuer.der().clone()
    }

    /// The leaf for `name` (a DNS name, as the program asked for it),
    /// made on first use.
    pub fn leaf(&self, name: &str) -> Result<Arc<CertifiedKey>, BrokerError> {
        // A DNS name only, as the egress grammar reads one: no wildcard
        // (which rcgen would sign as one), and no IP literal (a client
        // sends no server name for one, so no handshake could pick it).
        let Some(cordon_egress::TargetHost::Name(name)) = cordon_egress::TargetHost::parse(name)
        else {
            return Err(BrokerError::Certificate(format!(
                "{name:?} is not a DNS name the broker issues a leaf for"
            )));
        };
        let name = name.as_str();
        let mut leaves = self.leaves.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(k) = leaves.get(name) {
            return Ok(k.clone());
        }
        if leaves.len() >= MAX_LEAVES {
            return Err(BrokerError::TooManyNames(MAX_LEAVES));
        }
        let cert_err = |e: rcgen::Error| BrokerError::Certificate(format!("{name}: {e}"));
        let mut params = CertificateParams::new(vec![name.to_owned()]).map_err(cert_err)?;
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, name);
        params.distinguished_name = dn;
        params.is_ca = IsCa::ExplicitNoCa;
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        (params.not_before, params.not_after) = validity();
        let key = KeyPair::generate().map_err(cert_err)?;
        let cert = params.signed_by(&key, &self.issuer).map_err(cert_err)?;
        let der = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
        let signing = rustls::crypto::ring::sign::any_supported_type(&der)
            .map_err(|e| BrokerError::Certificate(format!("{name}: {e}")))?;
        let certified = Arc::new(CertifiedKey::new(
            vec![cert.der().clone(), self.certificate_der()],
            signing,
        ));
        leaves.insert(name.to_owned(), certified.clone());
        Ok(certified)
    }

    /// The server side of a terminated connection to `host` (the name the
    /// program's `CONNECT` asked for): it shows the leaf for `host` only,
    /// so a client hello that names another server (a fronted domain) or
    /// none fails the handshake; HTTP/1.1 only, so every request is one
    /// the broker reads.
    pub fn server_config(
        self: &Arc<Self>,
        host: &str,
    ) -> Result<Arc<rustls::ServerConfig>, BrokerError> {
        let leaf = self.leaf(host)?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| BrokerError::Tls(e.to_string()))?
            .with_no_client_auth()
            .with_cert_resolver(Arc::new(OneName {
                name: host.to_ascii_lowercase(),
                leaf,
            }));
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Arc::new(config))
    }
}

/// Shows `leaf` to a client hello that names `name`, and nothing to any
/// other.
#[derive(Debug)]
struct OneName {
    name: String,
    leaf: Arc<CertifiedKey>,
}

impl ResolvesServerCert for OneName {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        let asked = hello.server_name()?;
        asked
            .eq_ignore_ascii_case(&self.name)
            .then(|| self.leaf.clone())
    }
}
