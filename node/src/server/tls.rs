//! TLS on the client listener. A TLS connection is terminated by a task of
//! its own, which feeds the node's end of a Unix socket pair: the
//! connection itself (`conn.rs`) runs on that end exactly as on a TCP
//! socket, with every bound it has, and plaintext connections pay nothing
//! for TLS existing. The price is one copy of every byte through the pair.
//!
//! ```text
//! client ══TLS══ [handshake ≤ auth_timeout] ── proxy task ══ socket pair ══ Conn
//! ```
//!
//! The proxy holds two 8 KiB buffers (`copy_bidirectional`), the pair's
//! socket buffers are asked to be 64 KiB (`PAIR_BUFFER`); it ends when
//! either side closes, and at most `write_timeout` after the connection has
//! ended (a client that never closes its side cannot keep it), holding the
//! connection's seat until then.

use super::admission::Seat;
use super::{conn, Server};
use anyhow::Context;
use std::path::Path;
use std::sync::Arc;
use tokio::net::{TcpStream, UnixStream};
use tokio::sync::watch;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::rustls::ServerConfig;
use tokio_rustls::TlsAcceptor;
use tracing::debug;

/// Socket buffer size asked for on each end of a TLS connection's pair (the
/// kernel doubles it): about `conn::OUT_LIMIT`.
const PAIR_BUFFER: usize = 64 * 1024;

/// The acceptor for the certificate chain and private key in the PEM files
/// `cert` and `key`.
pub fn acceptor(cert: &Path, key: &Path) -> anyhow::Result<TlsAcceptor> {
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .with_context(|| format!("reading tls_cert_file {}", cert.display()))?
        .collect::<Result<_, _>>()
        .with_context(|| format!("tls_cert_file {}", cert.display()))?;
    anyhow::ensure!(!chain.is_empty(), "tls_cert_file {} holds no certificate", cert.display());
    // The error names the file only: a key's bytes are never printed.
    let key = PrivateKeyDer::from_pem_file(key)
        .map_err(|e| anyhow::anyhow!("tls_key_file {}: {e}", key.display()))?;
    let config = ServerConfig::builder()
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .context("tls_cert_file and tls_key_file do not make a certificate and its key")?;
    Ok(TlsAcceptor::from(Arc::new(config)))
}

impl Server {
    /// Serves one client over TLS: the handshake, then the connection on a
    /// socket pair fed by a proxy task.
    pub(super) async fn serve_tls(
        self: Arc<Self>,
        stream: TcpStream,
        acceptor: TlsAcceptor,
        seat: Seat,
        stop: watch::Receiver<bool>,
    ) {
        let handshake = tokio::time::timeout(self.limits.auth_timeout, acceptor.accept(stream));
        let mut tls = match handshake.await {
            Ok(Ok(tls)) => tls,
            Ok(Err(e)) => return debug!(error = %e, "TLS handshake failed"),
            Err(_) => return debug!("TLS handshake timed out"),
        };
        let (inner, mut outer) = match UnixStream::pair() {
            Ok(pair) => pair,
            Err(e) => return debug!(error = %e, "no socket pair for a TLS connection"),
        };
        // The pair holds what one side wrote and the other has not read:
        // bound it near the connection's own reply bound, not the kernel's
        // default (~200 KiB each way).
        for end in [&inner, &outer] {
            let sock = socket2::SockRef::from(end);
            let _ = sock.set_send_buffer_size(PAIR_BUFFER);
            let _ = sock.set_recv_buffer_size(PAIR_BUFFER);
        }
        let proxy = tokio::spawn(async move {
            let _ = tokio::io::copy_bidirectional(&mut tls, &mut outer).await;
        });
        self.metrics.conn_opened();
        let (why, seat) = conn::Conn::new(self.clone(), inner, seat).run_keeping_seat(stop).await;
        self.metrics.conn_closed(why.label());
        // The connection closed its end: the proxy flushes what it wrote and
        // stops once the client closes too, or after `write_timeout`; its
        // seat counts against the cap until then.
        let abort = proxy.abort_handle();
        if tokio::time::timeout(self.limits.write_timeout, proxy).await.is_err() {
            abort.abort();
        }
        drop(seat);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_or_mismatched_files_are_named_errors() {
        let dir = tempfile::tempdir().unwrap();
        let (cert, key) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
        let err = format!("{:#}", acceptor(&cert, &key).err().unwrap());
        assert!(err.contains("tls_cert_file"), "{err}");
        std::fs::write(&cert, "not a certificate").unwrap();
        std::fs::write(&key, "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n")
            .unwrap();
        let err = format!("{:#}", acceptor(&cert, &key).err().unwrap());
        assert!(err.contains("holds no certificate"), "{err}");
    }
}
