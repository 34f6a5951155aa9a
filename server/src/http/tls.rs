//! TLS on the public port (`http.tls_cert_file`, `http.tls_key_file`): rustls with the ring
//! provider, the one the internal client already links, so TLS adds no second crypto library.
//!
//! Handshakes run on tasks of their own, so a client that connects and stalls never holds up
//! the next one; at most [`MAX_HANDSHAKES`] run at once (beyond it a new connection waits in
//! the kernel's backlog) and each gets [`HANDSHAKE_TIMEOUT`]. A finished handshake hands its
//! stream to `axum::serve` through [`TlsListener`], so plain and TLS ports share one server
//! loop and one graceful shutdown.

use std::io;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;

use crate::error::ServerError;

/// Handshakes in progress at most.
const MAX_HANDSHAKES: usize = 1024;
/// Longest a client may take to finish its handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// The server's TLS settings from a PEM certificate chain and a PEM private key.
pub fn server_config(
    cert_file: &Path,
    key_file: &Path,
) -> Result<Arc<rustls::ServerConfig>, ServerError> {
    let invalid = |what: &Path, e: &dyn std::fmt::Display| {
        ServerError::InvalidRequest(format!("{}: {e}", what.display()))
    };
    let certs = CertificateDer::pem_file_iter(cert_file)
        .map_err(|e| invalid(cert_file, &e))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| invalid(cert_file, &e))?;
    if certs.is_empty() {
        return Err(invalid(cert_file, &"holds no certificate"));
    }
    let key = PrivateKeyDer::from_pem_file(key_file).map_err(|e| invalid(key_file, &e))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| ServerError::Internal(e.to_string()))?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| invalid(cert_file, &e))?;
    // The API speaks HTTP/1.1 only.
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// A listener whose connections have finished their TLS handshake.
pub struct TlsListener {
    ready: tokio::sync::mpsc::Receiver<(TlsStream<TcpStream>, SocketAddr)>,
    local: SocketAddr,
}

impl TlsListener {
    /// Accepts on `listener` and shakes hands with `config` in the background.
    pub fn new(listener: TcpListener, config: Arc<rustls::ServerConfig>) -> io::Result<Self> {
        let local = listener.local_addr()?;
        let (done, ready) = tokio::sync::mpsc::channel(64);
        let acceptor = TlsAcceptor::from(config);
        let slots = Arc::new(tokio::sync::Semaphore::new(MAX_HANDSHAKES));
        tokio::spawn(async move {
            while !done.is_closed() {
                let Ok(slot) = slots.clone().acquire_owned().await else {
                    return;
                };
                let (stream, peer) = match listener.accept().await {
                    Ok(accepted) => accepted,
                    Err(error) => {
                        // Out of file descriptors, say: wait a moment rather than spin.
                        tracing::warn!(%error, "cannot accept a connection");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                let (acceptor, done) = (acceptor.clone(), done.clone());
                tokio::spawn(async move {
                    let _slot = slot;
                    match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
                        Ok(Ok(tls)) => {
                            let _ = done.send((tls, peer)).await;
                        }
                        Ok(Err(error)) => {
                            tracing::debug!(%peer, %error, "TLS handshake failed");
                        }
                        Err(_) => tracing::debug!(%peer, "TLS handshake timed out"),
                    }
                });
            }
        });
        Ok(Self { ready, local })
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.ready.recv().await {
            Some(connection) => connection,
            // The acceptor stopped: no connection will come again.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        Ok(self.local)
    }
}
