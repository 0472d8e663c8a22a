//! TLS of the gRPC listener: the rustls configuration read from the PEM
//! files of the settings.

use super::TlsSettings;
use anyhow::Context;
use std::path::Path;
use tonic::transport::{Certificate, Identity, ServerTlsConfig};

/// The rustls configuration of the gRPC listener.
pub fn config(tls: &TlsSettings) -> anyhow::Result<ServerTlsConfig> {
    let read =
        |path: &Path| std::fs::read(path).with_context(|| format!("reading {}", path.display()));
    let identity = Identity::from_pem(read(&tls.cert)?, read(&tls.key)?);
    let mut config = ServerTlsConfig::new().identity(identity);
    if let Some(ca) = &tls.client_ca {
        config = config.client_ca_root(Certificate::from_pem(read(ca)?));
    }
    Ok(config)
}
