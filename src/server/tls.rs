//! TLS of the gRPC listener: the gRPC server, configured with the PEM files
//! of the settings, each checked for what its setting names, before
//! anything is served.

use super::TlsSettings;
use crate::pem;
use anyhow::Context;
use tonic::transport::{Certificate, Identity, Server, ServerTlsConfig};

/// The gRPC server, over TLS when `tls` is set.
pub fn server(tls: Option<&TlsSettings>) -> anyhow::Result<Server> {
    let Some(tls) = tls else {
        return Ok(Server::builder());
    };
    let cert = pem::certificates("tls_cert", &tls.cert)?;
    let key = pem::private_key("tls_key", &tls.key)?;
    let mut config = ServerTlsConfig::new().identity(Identity::from_pem(cert, key));
    if let Some(ca) = &tls.client_ca {
        let ca = pem::certificates("tls_client_ca", ca)?;
        config = config.client_ca_root(Certificate::from_pem(ca));
    }
    Server::builder().tls_config(config).with_context(|| {
        format!(
            "tls_cert ({}) and tls_key ({}) cannot serve TLS: is the key the certificate's?",
            tls.cert.display(),
            tls.key.display()
        )
    })
}
