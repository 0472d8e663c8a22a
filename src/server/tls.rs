//! TLS of the gRPC listener: the rustls configuration read from the PEM
//! files of the settings, each checked for what its setting names, and the
//! whole checked as the listener will use it, before anything is served.

use super::TlsSettings;
use crate::pem;
use anyhow::Context;
use tonic::transport::{Certificate, Identity, Server, ServerTlsConfig};

/// The rustls configuration of the gRPC listener.
pub fn config(tls: &TlsSettings) -> anyhow::Result<ServerTlsConfig> {
    let cert = pem::certificates("tls_cert", &tls.cert)?;
    let key = pem::private_key("tls_key", &tls.key)?;
    let mut config = ServerTlsConfig::new().identity(Identity::from_pem(cert, key));
    if let Some(ca) = &tls.client_ca {
        let ca = pem::certificates("tls_client_ca", ca)?;
        config = config.client_ca_root(Certificate::from_pem(ca));
    }
    Server::builder()
        .tls_config(config.clone())
        .with_context(|| {
            format!(
                "tls_cert ({}) and tls_key ({}) cannot serve TLS: is the key the certificate's?",
                tls.cert.display(),
                tls.key.display()
            )
        })?;
    Ok(config)
}
