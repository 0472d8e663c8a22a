//! The PEM files of the TLS settings, read and checked before anything is
//! served or sent: each within [`MAX_PEM_BYTES`], and holding what its
//! setting names (a certificate, or a private key). A mistake is thus told
//! at start with the setting's name, not as a handshake error later or as
//! a parse error that names neither the setting nor the file.

use crate::files::read_at_most;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use std::path::{Path, PathBuf};

/// The longest PEM file read: a bundle of every public CA is a few hundred
/// kilobytes.
pub const MAX_PEM_BYTES: u64 = 4 << 20;

/// A TLS file that cannot be used, with the setting that names it.
#[derive(Debug, thiserror::Error)]
pub enum PemError {
    /// The file could not be read, or is too long.
    #[error("{setting} ({}): {source}", path.display())]
    Read {
        /// The setting or flag.
        setting: &'static str,
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file holds no PEM certificate.
    #[error("{setting} ({}): no PEM certificate in it (a block of -----BEGIN CERTIFICATE-----)", path.display())]
    NoCertificate {
        /// The setting or flag.
        setting: &'static str,
        /// The file.
        path: PathBuf,
    },
    /// The file holds no PEM private key.
    #[error("{setting} ({}): no PEM private key in it (a block of -----BEGIN PRIVATE KEY-----, or of an RSA or EC private key)", path.display())]
    NoPrivateKey {
        /// The setting or flag.
        setting: &'static str,
        /// The file.
        path: PathBuf,
    },
}

/// The bytes of `path`, the value of `setting`, holding at least one
/// certificate.
pub fn certificates(setting: &'static str, path: &Path) -> Result<Vec<u8>, PemError> {
    let bytes = read(setting, path)?;
    match CertificateDer::pem_slice_iter(&bytes).next() {
        Some(Ok(_)) => Ok(bytes),
        _ => Err(PemError::NoCertificate {
            setting,
            path: path.to_owned(),
        }),
    }
}

/// The bytes of `path`, the value of `setting`, holding a private key.
pub fn private_key(setting: &'static str, path: &Path) -> Result<Vec<u8>, PemError> {
    let bytes = read(setting, path)?;
    match PrivateKeyDer::from_pem_slice(&bytes) {
        Ok(_) => Ok(bytes),
        Err(_) => Err(PemError::NoPrivateKey {
            setting,
            path: path.to_owned(),
        }),
    }
}

fn read(setting: &'static str, path: &Path) -> Result<Vec<u8>, PemError> {
    read_at_most(path, MAX_PEM_BYTES, "PEM file").map_err(|source| PemError::Read {
        setting,
        path: path.to_owned(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_without_the_block_its_setting_needs_is_named_with_the_setting() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("key.pem");
        std::fs::write(
            &path,
            "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n",
        )
        .unwrap();
        let error = certificates("tls_cert", &path).unwrap_err().to_string();
        assert!(error.starts_with("tls_cert ("), "{error}");
        assert!(error.contains("no PEM certificate"), "{error}");
        assert!(private_key("tls_key", &path).is_ok());
        let error = private_key("tls_key", dir.path()).unwrap_err().to_string();
        assert!(error.starts_with("tls_key ("), "{error}");
    }
}
