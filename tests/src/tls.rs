//! Certificates for the tests that speak TLS: a fresh CA per call and a
//! certificate it signs for the names a test dials, usable by a server and
//! as a client identity (peers present it both ways).

use std::path::{Path, PathBuf};

/// A CA and a certificate it signed, as PEM text.
pub struct Issued {
    pub ca: String,
    pub cert: String,
    pub key: String,
}

/// A new CA and a certificate it signed for `names` (DNS names, IP
/// addresses or `*.` wildcards).
pub fn issue(names: &[String]) -> Issued {
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::new(names.to_vec()).unwrap();
    params.extended_key_usages = vec![
        rcgen::ExtendedKeyUsagePurpose::ServerAuth,
        rcgen::ExtendedKeyUsagePurpose::ClientAuth,
    ];
    let cert = params.signed_by(&key, &ca, &ca_key).unwrap();
    Issued { ca: ca.pem(), cert: cert.pem(), key: key.serialize_pem() }
}

/// `issue` for 127.0.0.1 and localhost, written as `{tag}-ca.pem`,
/// `{tag}-cert.pem` and `{tag}-key.pem` in `dir`: (ca, cert, key).
pub fn certificates(dir: &Path, tag: &str) -> (PathBuf, PathBuf, PathBuf) {
    let issued = issue(&["127.0.0.1".to_string(), "localhost".to_string()]);
    let path = |name: &str| dir.join(format!("{tag}-{name}.pem"));
    std::fs::write(path("ca"), issued.ca).unwrap();
    std::fs::write(path("cert"), issued.cert).unwrap();
    std::fs::write(path("key"), issued.key).unwrap();
    (path("ca"), path("cert"), path("key"))
}
