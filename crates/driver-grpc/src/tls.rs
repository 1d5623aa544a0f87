//! TLS with client certificates for drivers reached over TCP (design:
//! docs/design/driver.md, "Out-of-process drivers", Security).
//!
//! Both sides authenticate: the driver accepts only clients whose
//! certificate chains to its client CA (nobody else can have it create or
//! delete VMs), the controller accepts only a driver whose certificate
//! chains to its server CA and names the endpoint's host (nobody can pose as
//! the driver and collect Secrets). PEM files are read and checked when the
//! options are built, so a wrong file is a start-up error naming the file.
//! Key material is never logged nor shown by `Debug`.

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use std::path::{Path, PathBuf};

/// A TLS file that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// The file cannot be read.
    #[error("cannot read the TLS {what} {path}: {source}")]
    Read {
        /// What the file should hold.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The file holds no usable PEM of the expected kind.
    #[error("the TLS {what} {path} holds no PEM {expected}")]
    NoPem {
        /// What the file should hold.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// The PEM kind looked for.
        expected: &'static str,
    },
    /// Some TLS flags are given, not all.
    #[error("incomplete TLS settings: {0}")]
    Incomplete(String),
}

/// A PEM file's bytes, checked to hold certificates.
fn read_certs(what: &'static str, path: &Path) -> Result<Vec<u8>, TlsError> {
    let pem = std::fs::read(path).map_err(|source| TlsError::Read {
        what,
        path: path.to_path_buf(),
        source,
    })?;
    let certs = CertificateDer::pem_slice_iter(&pem)
        .filter_map(Result::ok)
        .count();
    if certs == 0 {
        return Err(TlsError::NoPem {
            what,
            path: path.to_path_buf(),
            expected: "CERTIFICATE",
        });
    }
    Ok(pem)
}

/// A PEM file's bytes, checked to hold a private key (never shown).
fn read_key(path: &Path) -> Result<Vec<u8>, TlsError> {
    let what = "private key";
    let pem = std::fs::read(path).map_err(|source| TlsError::Read {
        what,
        path: path.to_path_buf(),
        source,
    })?;
    if PrivateKeyDer::from_pem_slice(&pem).is_err() {
        return Err(TlsError::NoPem {
            what,
            path: path.to_path_buf(),
            expected: "PRIVATE KEY (PKCS#8, SEC1 or PKCS#1)",
        });
    }
    Ok(pem)
}

/// The server's side: its certificate and key, and the CA its clients'
/// certificates must chain to (client certificates are required).
#[derive(Clone)]
pub struct ServerTls {
    /// The server's certificate chain (PEM).
    pub cert_pem: Vec<u8>,
    /// The server's private key (PEM). Never logged.
    pub key_pem: Vec<u8>,
    /// The CA(s) a client certificate must chain to (PEM).
    pub client_ca_pem: Vec<u8>,
}

impl std::fmt::Debug for ServerTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerTls").finish_non_exhaustive()
    }
}

impl ServerTls {
    /// Reads and checks the three PEM files.
    pub fn from_files(cert: &Path, key: &Path, client_ca: &Path) -> Result<ServerTls, TlsError> {
        Ok(ServerTls {
            cert_pem: read_certs("certificate", cert)?,
            key_pem: read_key(key)?,
            client_ca_pem: read_certs("client CA", client_ca)?,
        })
    }

    /// From flags that come together: all three or none.
    pub fn from_flags(
        cert: Option<&Path>,
        key: Option<&Path>,
        client_ca: Option<&Path>,
    ) -> Result<Option<ServerTls>, TlsError> {
        match (cert, key, client_ca) {
            (None, None, None) => Ok(None),
            (Some(c), Some(k), Some(ca)) => Ok(Some(ServerTls::from_files(c, k, ca)?)),
            _ => Err(TlsError::Incomplete(
                "--tls-cert, --tls-key and --tls-client-ca go together (the driver requires client certificates)".into(),
            )),
        }
    }

    pub(crate) fn tonic_config(&self) -> tonic::transport::ServerTlsConfig {
        tonic::transport::ServerTlsConfig::new()
            .identity(tonic::transport::Identity::from_pem(
                &self.cert_pem,
                &self.key_pem,
            ))
            .client_ca_root(tonic::transport::Certificate::from_pem(&self.client_ca_pem))
            .client_auth_optional(false)
            .timeout(std::time::Duration::from_secs(10))
    }
}

/// The client's side: the CA the driver's certificate must chain to, and
/// the client's own certificate and key.
#[derive(Clone)]
pub struct ClientTls {
    /// The CA(s) the server's certificate must chain to (PEM).
    pub server_ca_pem: Vec<u8>,
    /// The client's certificate chain (PEM).
    pub cert_pem: Vec<u8>,
    /// The client's private key (PEM). Never logged.
    pub key_pem: Vec<u8>,
    /// The name the server's certificate must carry; default: the
    /// endpoint's host.
    pub server_name: Option<String>,
}

impl std::fmt::Debug for ClientTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientTls")
            .field("server_name", &self.server_name)
            .finish_non_exhaustive()
    }
}

impl ClientTls {
    /// Reads and checks the three PEM files.
    pub fn from_files(server_ca: &Path, cert: &Path, key: &Path) -> Result<ClientTls, TlsError> {
        Ok(ClientTls {
            server_ca_pem: read_certs("server CA", server_ca)?,
            cert_pem: read_certs("client certificate", cert)?,
            key_pem: read_key(key)?,
            server_name: None,
        })
    }

    /// From flags that come together: all three or none.
    pub fn from_flags(
        server_ca: Option<&Path>,
        cert: Option<&Path>,
        key: Option<&Path>,
    ) -> Result<Option<ClientTls>, TlsError> {
        match (server_ca, cert, key) {
            (None, None, None) => Ok(None),
            (Some(ca), Some(c), Some(k)) => Ok(Some(ClientTls::from_files(ca, c, k)?)),
            _ => Err(TlsError::Incomplete(
                "--driver-tls-ca, --driver-tls-cert and --driver-tls-key go together (drivers require a client certificate)".into(),
            )),
        }
    }

    pub(crate) fn tonic_config(&self, host: &str) -> tonic::transport::ClientTlsConfig {
        let name = self.server_name.clone().unwrap_or_else(|| {
            host.trim_start_matches('[')
                .trim_end_matches(']')
                .to_string()
        });
        tonic::transport::ClientTlsConfig::new()
            .ca_certificate(tonic::transport::Certificate::from_pem(&self.server_ca_pem))
            .identity(tonic::transport::Identity::from_pem(
                &self.cert_pem,
                &self.key_pem,
            ))
            .domain_name(name)
    }
}

/// Makes sure rustls has a process-wide crypto provider before a server
/// configuration is built (tonic's server side asks for the process
/// default): ring, the workspace's provider, unless one is installed
/// already. A binary that compiles in a second provider would otherwise
/// make rustls refuse to choose.
pub(crate) fn ensure_crypto_provider() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        // Losing a race to another installer is fine: one is installed.
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(name: &str) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/data/tls")
            .join(name)
    }

    #[test]
    fn the_three_files_are_read_and_a_partial_set_is_refused() {
        let full = ServerTls::from_flags(
            Some(&data("server.pem")),
            Some(&data("server-key.pem")),
            Some(&data("ca.pem")),
        )
        .expect("valid");
        assert!(full.is_some());
        assert!(ServerTls::from_flags(None, None, None)
            .expect("none")
            .is_none());
        let partial = ServerTls::from_flags(Some(&data("server.pem")), None, None)
            .expect_err("partial set refused");
        assert!(partial.to_string().contains("--tls-client-ca"), "{partial}");
        let partial = ClientTls::from_flags(Some(&data("ca.pem")), None, Some(&data("x")))
            .expect_err("partial set refused");
        assert!(
            partial.to_string().contains("--driver-tls-cert"),
            "{partial}"
        );
    }

    #[test]
    fn a_key_file_given_as_certificate_and_the_reverse_name_the_file() {
        let e = ClientTls::from_files(
            &data("client-key.pem"),
            &data("client.pem"),
            &data("client-key.pem"),
        )
        .expect_err("a key is no CA");
        assert!(
            e.to_string().contains("client-key.pem") && e.to_string().contains("CERTIFICATE"),
            "{e}"
        );
        let e = ServerTls::from_files(&data("server.pem"), &data("server.pem"), &data("ca.pem"))
            .expect_err("a certificate is no key");
        assert!(e.to_string().contains("PRIVATE KEY"), "{e}");
        let e = ServerTls::from_files(
            &data("absent.pem"),
            &data("server-key.pem"),
            &data("ca.pem"),
        )
        .expect_err("absent");
        assert!(e.to_string().contains("absent.pem"), "{e}");
    }

    #[test]
    fn debug_never_shows_the_key() {
        let s = ServerTls::from_files(
            &data("server.pem"),
            &data("server-key.pem"),
            &data("ca.pem"),
        )
        .expect("valid");
        let c = ClientTls::from_files(
            &data("ca.pem"),
            &data("client.pem"),
            &data("client-key.pem"),
        )
        .expect("valid");
        for shown in [format!("{s:?}"), format!("{c:?}")] {
            assert!(!shown.contains("PRIVATE"), "{shown}");
            assert!(!shown.contains("key_pem"), "{shown}");
        }
    }
}
