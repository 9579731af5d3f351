//! TLS for the SDK and the CLI: a node whose client listener has a
//! certificate (`tls_cert_file`) speaks only TLS, and a client verifies it
//! against the CA certificates it is given (`ClientOptions::tls`,
//! `plaudit --tls-ca FILE`) under the name it dialled: the host of a seed,
//! or of a member's client address from the cluster map.

use crate::error::ClientError;
use std::io;
use std::path::Path;
use std::sync::Arc;
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, ServerName};
use tokio_rustls::rustls::{ClientConfig, RootCertStore};
use tokio_rustls::TlsConnector;

/// How a client speaks TLS to the nodes.
#[derive(Clone)]
pub struct Tls {
    connector: TlsConnector,
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Tls")
    }
}

impl Tls {
    /// Trusts the CA certificates in the PEM file at `path`, and nothing
    /// else (not the system's store: a cluster's CA is its own).
    pub fn from_ca_file(path: &Path) -> Result<Tls, ClientError> {
        let bad = |why: String| ClientError::Io(io::Error::new(io::ErrorKind::InvalidInput, why));
        let certs = CertificateDer::pem_file_iter(path)
            .map_err(|e| bad(format!("reading CA file {}: {e}", path.display())))?;
        let mut roots = RootCertStore::empty();
        for cert in certs {
            let cert = cert.map_err(|e| bad(format!("CA file {}: {e}", path.display())))?;
            roots.add(cert).map_err(|e| {
                bad(format!("CA file {}: a certificate is unusable: {e}", path.display()))
            })?;
        }
        if roots.is_empty() {
            return Err(bad(format!("CA file {} holds no certificate", path.display())));
        }
        let config = ClientConfig::builder().with_root_certificates(roots).with_no_client_auth();
        Ok(Tls::from_config(Arc::new(config)))
    }

    /// Uses a rustls configuration made by the caller (client
    /// certificates, other roots).
    pub fn from_config(config: Arc<ClientConfig>) -> Tls {
        Tls { connector: TlsConnector::from(config) }
    }

    /// The TLS session over `stream`, verified for the host of `addr`
    /// (`host:port`, `[v6]:port`).
    pub(crate) async fn connect(
        &self,
        addr: &str,
        stream: TcpStream,
    ) -> io::Result<TlsStream<TcpStream>> {
        self.connector.connect(server_name(addr)?, stream).await
    }
}

/// The name a node's certificate must carry: the host of `addr`.
fn server_name(addr: &str) -> io::Result<ServerName<'static>> {
    let host = plaudit_proto::addr::host_of(addr);
    ServerName::try_from(host.to_string()).map_err(|e| {
        io::Error::new(io::ErrorKind::InvalidInput, format!("{host:?} is no TLS server name: {e}"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_server_name_is_the_host_of_the_address() {
        let same = |addr: &str, host: &str| {
            assert_eq!(server_name(addr).unwrap(), ServerName::try_from(host.to_string()).unwrap())
        };
        same("plaudit-0.plaudit.ns.svc:7401", "plaudit-0.plaudit.ns.svc");
        same("127.0.0.1:7401", "127.0.0.1");
        same("[::1]:7401", "::1");
        assert!(server_name("bad name:1").is_err());
    }

    #[test]
    fn a_missing_or_empty_ca_file_is_an_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ca.pem");
        let e = Tls::from_ca_file(&path).unwrap_err().to_string();
        assert!(e.contains("ca.pem"), "{e}");
        std::fs::write(&path, "no certificate here\n").unwrap();
        let e = Tls::from_ca_file(&path).unwrap_err().to_string();
        assert!(e.contains("holds no certificate"), "{e}");
    }
}
