//! The broker's side toward the real server: TLS verified against the
//! WebPKI roots, plus the CA an operator names for private hosts
//! (`network.upstream_ca`).

use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;

use crate::BrokerError;

/// The client configuration for upstream connections: the WebPKI roots
/// and every certificate in `extra_ca_pem` (a PEM bundle the operator
/// gave; one that holds no certificate is refused, never ignored).
/// HTTP/1.1 only, as toward the program.
pub fn client_config(
    extra_ca_pem: Option<&[u8]>,
) -> Result<Arc<rustls::ClientConfig>, BrokerError> {
    let mut roots = rustls::RootCertStore::empty();
    roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    if let Some(pem) = extra_ca_pem {
        let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(pem)
            .collect::<Result<_, _>>()
            .map_err(|e| BrokerError::UpstreamCa(e.to_string()))?;
        if certs.is_empty() {
            return Err(BrokerError::UpstreamCa(
                "it holds no PEM certificate".into(),
            ));
        }
        for c in certs {
            roots
                .add(c)
                .map_err(|e| BrokerError::UpstreamCa(e.to_string()))?;
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| BrokerError::Tls(e.to_string()))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}
