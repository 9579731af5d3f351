//! Mutual TLS between peers. A node given `tls_ca_file` (with its
//! `tls_cert_file` and `tls_key_file`) speaks only TLS on its peer port and
//! to its peers: each side presents its certificate and checks the other's
//! against the cluster's CA, and then, inside the session, proves the
//! cluster secret as before (`auth.rs`). So a peer needs both a certificate
//! of the cluster's CA and the secret; Raft messages, forwarded requests
//! (with their tokens) and control sessions cross the network encrypted.
//!
//! ```text
//! dial:   TCP ─ TLS (verify the listener's certificate for the host dialed,
//!                    present ours) ─ preamble ─ secret handshake ─ frames
//! accept: TCP ─ TLS (present ours, require a client certificate of the CA)
//!               ─ preamble ─ secret handshake ─ frames
//! ```
//!
//! A listener's certificate must name the host peers dial it by (the host of
//! its advertised peer address: a DNS name, or an IP address). A dialer's
//! certificate is only checked to be the CA's: the node id it claims is
//! proved by the secret handshake, which binds both ids.

use super::stream::PeerStream;
use std::io;
use std::path::Path;
use std::sync::Arc;
use tokio::net::TcpStream;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio_rustls::rustls::server::WebPkiClientVerifier;
use tokio_rustls::rustls::{ClientConfig, RootCertStore, ServerConfig};
use tokio_rustls::{TlsAcceptor, TlsConnector};

/// Why the peer TLS files cannot be used; names the file, never its bytes.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct TlsFilesError(String);

/// This node's side of mutual TLS with its peers.
#[derive(Clone)]
pub struct PeerTls {
    acceptor: TlsAcceptor,
    connector: TlsConnector,
}

impl std::fmt::Debug for PeerTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PeerTls")
    }
}

impl PeerTls {
    /// This node's certificate chain and key (`cert`, `key`) and the CA that
    /// signs every peer's (`ca`), all PEM files.
    pub fn from_files(cert: &Path, key: &Path, ca: &Path) -> Result<PeerTls, TlsFilesError> {
        let bad = |what: &str, path: &Path, e: &dyn std::fmt::Display| {
            TlsFilesError(format!("{what} {}: {e}", path.display()))
        };
        let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
            .map_err(|e| bad("tls_cert_file", cert, &e))?
            .collect::<Result<_, _>>()
            .map_err(|e| bad("tls_cert_file", cert, &e))?;
        if chain.is_empty() {
            return Err(bad("tls_cert_file", cert, &"holds no certificate"));
        }
        let key_der =
            PrivateKeyDer::from_pem_file(key).map_err(|e| bad("tls_key_file", key, &e))?;
        let mut roots = RootCertStore::empty();
        for c in CertificateDer::pem_file_iter(ca).map_err(|e| bad("tls_ca_file", ca, &e))? {
            let c = c.map_err(|e| bad("tls_ca_file", ca, &e))?;
            roots.add(c).map_err(|e| bad("tls_ca_file", ca, &e))?;
        }
        if roots.is_empty() {
            return Err(bad("tls_ca_file", ca, &"holds no certificate"));
        }
        let roots = Arc::new(roots);
        let verifier = WebPkiClientVerifier::builder(roots.clone())
            .build()
            .map_err(|e| bad("tls_ca_file", ca, &e))?;
        let server = ServerConfig::builder()
            .with_client_cert_verifier(verifier)
            .with_single_cert(chain.clone(), key_der.clone_key())
            .map_err(|e| bad("tls_cert_file and tls_key_file", cert, &e))?;
        let client = ClientConfig::builder()
            .with_root_certificates(roots)
            .with_client_auth_cert(chain, key_der)
            .map_err(|e| bad("tls_cert_file and tls_key_file", cert, &e))?;
        Ok(PeerTls {
            acceptor: TlsAcceptor::from(Arc::new(server)),
            connector: TlsConnector::from(Arc::new(client)),
        })
    }

    /// The TLS session of a dialer on `tcp`, the listener verified for the
    /// host of `addr`.
    pub(crate) async fn connect(&self, addr: &str, tcp: TcpStream) -> io::Result<PeerStream> {
        let tls = self.connector.connect(server_name(addr)?, tcp).await?;
        Ok(PeerStream::Tls(Box::new(tls.into())))
    }

    /// The TLS session of the listener on `tcp`: the dialer must present a
    /// certificate of the CA.
    pub(crate) async fn accept(&self, tcp: TcpStream) -> io::Result<PeerStream> {
        let tls = self.acceptor.accept(tcp).await?;
        Ok(PeerStream::Tls(Box::new(tls.into())))
    }
}

/// The name the listener's certificate must carry: the host of `addr`
/// (`host:port`, `[v6]:port`).
fn server_name(addr: &str) -> io::Result<ServerName<'static>> {
    let host = plaudit_proto::addr::host_of(addr);
    ServerName::try_from(host.to_string()).map_err(|e| {
        io::Error::new(io::ErrorKind::InvalidInput, format!("{host:?} is no TLS server name: {e}"))
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::path::PathBuf;

    /// A CA, and a certificate it signed for 127.0.0.1 and localhost, as
    /// PEM files in `dir`: (ca, cert, key).
    pub(crate) fn certificates(dir: &Path, tag: &str) -> (PathBuf, PathBuf, PathBuf) {
        let ca_key = rcgen::KeyPair::generate().unwrap();
        let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let ca = ca_params.self_signed(&ca_key).unwrap();
        let key = rcgen::KeyPair::generate().unwrap();
        let names = vec!["127.0.0.1".to_string(), "localhost".to_string()];
        let cert =
            rcgen::CertificateParams::new(names).unwrap().signed_by(&key, &ca, &ca_key).unwrap();
        let path = |name: &str| dir.join(format!("{tag}-{name}.pem"));
        std::fs::write(path("ca"), ca.pem()).unwrap();
        std::fs::write(path("cert"), cert.pem()).unwrap();
        std::fs::write(path("key"), key.serialize_pem()).unwrap();
        (path("ca"), path("cert"), path("key"))
    }

    #[test]
    fn files_that_make_no_identity_are_named_errors() {
        let dir = tempfile::tempdir().unwrap();
        let (ca, cert, key) = certificates(dir.path(), "a");
        assert!(PeerTls::from_files(&cert, &key, &ca).is_ok());
        let missing = dir.path().join("missing.pem");
        let e = PeerTls::from_files(&cert, &key, &missing).unwrap_err().to_string();
        assert!(e.starts_with("tls_ca_file"), "{e}");
        let (_, _, other_key) = certificates(dir.path(), "b");
        let e = PeerTls::from_files(&cert, &other_key, &ca).unwrap_err().to_string();
        assert!(e.contains("tls_cert_file and tls_key_file"), "{e}");
        assert!(!e.contains("PRIVATE KEY"), "no key bytes in errors: {e}");
    }

    #[test]
    fn the_server_name_is_the_host_dialed() {
        assert!(server_name("127.0.0.1:7403").is_ok());
        assert!(server_name("plaudit-0.plaudit.ns.svc:7403").is_ok());
        assert!(server_name("[::1]:7403").is_ok());
        assert!(server_name("bad name:1").is_err());
    }
}
