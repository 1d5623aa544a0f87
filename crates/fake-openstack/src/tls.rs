//! The fake served over TLS that requires a client certificate, as a cloud
//! whose Keystone and APIs sit behind mutual TLS does.
//!
//! The certificates in `testdata/tls/` are test material only (EC P-256,
//! valid for a century): a CA, a server certificate for `127.0.0.1` and
//! `localhost` signed by it, a client certificate signed by it, and a
//! "stranger" client certificate from another CA that the fake refuses.

use axum::serve::Listener;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig};
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;

/// The CA that signed the server and the client certificate (PEM).
pub const CA: &str = include_str!("../testdata/tls/ca.pem");
/// The server's certificate (`127.0.0.1`, `localhost`).
pub const SERVER_CERT: &str = include_str!("../testdata/tls/server.pem");
/// The server's key.
pub const SERVER_KEY: &str = include_str!("../testdata/tls/server-key.pem");
/// A client certificate the fake accepts.
pub const CLIENT_CERT: &str = include_str!("../testdata/tls/client.pem");
/// Its key (PKCS#8).
pub const CLIENT_KEY: &str = include_str!("../testdata/tls/client-key.pem");
/// A client certificate from another CA: refused in the handshake.
pub const STRANGER_CERT: &str = include_str!("../testdata/tls/stranger.pem");
/// Its key.
pub const STRANGER_KEY: &str = include_str!("../testdata/tls/stranger-key.pem");

/// The TLS server configuration: [`SERVER_CERT`], client certificates
/// required and checked against [`CA`].
pub(crate) fn server_config() -> io::Result<Arc<ServerConfig>> {
    let bad = |e: &dyn std::fmt::Display| io::Error::new(io::ErrorKind::InvalidData, e.to_string());
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(CA.as_bytes()) {
        roots.add(cert.map_err(|e| bad(&e))?).map_err(|e| bad(&e))?;
    }
    let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone())
        .build()
        .map_err(|e| bad(&e))?;
    let chain = CertificateDer::pem_slice_iter(SERVER_CERT.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| bad(&e))?;
    let key = PrivateKeyDer::from_pem_slice(SERVER_KEY.as_bytes()).map_err(|e| bad(&e))?;
    let mut cfg = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| bad(&e))?
        .with_client_cert_verifier(verifier)
        .with_single_cert(chain, key)
        .map_err(|e| bad(&e))?;
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(cfg))
}

/// A TCP listener whose connections are TLS: the handshake runs in
/// `accept`, and a connection whose handshake fails (no client certificate,
/// one from another CA) is dropped and counted.
pub(crate) struct TlsListener {
    pub tcp: TcpListener,
    pub acceptor: TlsAcceptor,
    pub refused: Arc<std::sync::atomic::AtomicU64>,
}

impl Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            let Ok((tcp, addr)) = self.tcp.accept().await else {
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                continue;
            };
            match self.acceptor.accept(tcp).await {
                Ok(tls) => return (tls, addr),
                Err(e) => {
                    tracing::debug!(error = %e, "TLS handshake refused");
                    self.refused
                        .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                }
            }
        }
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        self.tcp.local_addr()
    }
}
