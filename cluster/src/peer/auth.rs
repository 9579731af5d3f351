//! Mutual authentication of two nodes on the cluster secret, without the
//! secret ever crossing the wire: each side sends a fresh random nonce and
//! proves it knows the secret with an HMAC-SHA256 over both nonces, both
//! node ids, the shard count and its role. Proofs are compared in constant
//! time (`Mac::verify_slice`). A replayed proof is useless: the other
//! side's nonce is new each time.
//!
//! ```text
//! dialer   -> Hello { version, from, to, nonce_d, shards }
//! acceptor -> Challenge { nonce_a, proof_a = HMAC(s, "acceptor" | nonce_d | nonce_a | from | to | shards) }
//!             or Refused (another protocol version, another node, another shard count)
//! dialer   -> Proof { proof_d = HMAC(s, "dialer" | nonce_a | nonce_d | from | to | shards) }   (after checking proof_a)
//! acceptor -> Verdict (after checking proof_d)
//! ```
//!
//! The shard count is under both proofs, so nobody on the path can change
//! what a node declares. Control connections go through this handshake too
//! before ractor_cluster's own cookie handshake sees them; that cookie is
//! derived from the secret here, so the secret itself is never compared
//! byte by byte anywhere.

use hmac::{Hmac, Mac};
use sha2::Sha256;
use std::sync::Arc;

type HmacSha256 = Hmac<Sha256>;

pub type Nonce = [u8; 32];
pub type Proof = [u8; 32];

/// What a node brings to a peer handshake: the cluster secret it proves
/// (never sent) and the shard count it declares.
///
/// Why the count: a key's shard is its hash modulo the count, so two nodes
/// with different counts would place the same key in different groups. A
/// data directory keeps its count (`shard_count.rs`), but a node joining
/// a cluster has none yet; the handshake is where it meets the others.
#[derive(Clone)]
pub struct Credentials {
    pub secret: Arc<[u8]>,
    pub shards: u32,
    /// Mutual TLS with every peer, when the node has a peer certificate
    /// (`tls.rs`): every connection, dialed or accepted, speaks it.
    pub tls: Option<super::tls::PeerTls>,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("secret", &"(redacted)")
            .field("shards", &self.shards)
            .field("tls", &self.tls.is_some())
            .finish()
    }
}

/// What a proof binds besides the two nonces: who dialed whom, and the
/// shard count both sides have.
#[derive(Debug, Clone, Copy)]
pub struct Bound {
    pub from: u64,
    pub to: u64,
    pub shards: u32,
}

/// A fresh random nonce.
pub fn nonce() -> Nonce {
    let mut n = [0u8; 32];
    rand::Rng::fill(&mut rand::thread_rng(), &mut n[..]);
    n
}

fn mac(secret: &[u8], role: &[u8], first: &Nonce, second: &Nonce, bound: &Bound) -> HmacSha256 {
    // HMAC takes a key of any length; new_from_slice cannot fail for it.
    let mut m = HmacSha256::new_from_slice(secret).expect("HMAC accepts any key length");
    m.update(role);
    m.update(first);
    m.update(second);
    m.update(&bound.from.to_be_bytes());
    m.update(&bound.to.to_be_bytes());
    m.update(&bound.shards.to_be_bytes());
    m
}

/// The acceptor's proof, over the dialer's nonce then its own.
pub fn acceptor_proof(secret: &[u8], dialer: &Nonce, acceptor: &Nonce, bound: &Bound) -> Proof {
    mac(secret, b"acceptor", dialer, acceptor, bound).finalize().into_bytes().into()
}

/// The dialer's proof, over the acceptor's nonce then its own.
pub fn dialer_proof(secret: &[u8], dialer: &Nonce, acceptor: &Nonce, bound: &Bound) -> Proof {
    mac(secret, b"dialer", acceptor, dialer, bound).finalize().into_bytes().into()
}

/// Checks the acceptor's proof, in constant time.
pub fn check_acceptor(
    secret: &[u8],
    dialer: &Nonce,
    acceptor: &Nonce,
    bound: &Bound,
    proof: &[u8],
) -> bool {
    mac(secret, b"acceptor", dialer, acceptor, bound).verify_slice(proof).is_ok()
}

/// Checks the dialer's proof, in constant time.
pub fn check_dialer(
    secret: &[u8],
    dialer: &Nonce,
    acceptor: &Nonce,
    bound: &Bound,
    proof: &[u8],
) -> bool {
    mac(secret, b"dialer", acceptor, dialer, bound).verify_slice(proof).is_ok()
}

/// The ractor_cluster cookie of a cluster: derived from the secret, so that
/// the cookie handshake (which compares digests with `==`) never handles
/// the secret itself.
pub fn control_cookie(secret: &[u8]) -> String {
    let mut m = HmacSha256::new_from_slice(secret).expect("HMAC accepts any key length");
    m.update(b"plaudit/control-cookie/v1");
    m.finalize().into_bytes().iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_sides_prove_the_secret_and_nothing_else_passes() {
        let s = b"the-cluster-secret-0123";
        let (d, a) = (nonce(), nonce());
        assert_ne!(d, a);
        let b = Bound { from: 1, to: 2, shards: 6 };
        let pa = acceptor_proof(s, &d, &a, &b);
        let pd = dialer_proof(s, &d, &a, &b);
        assert!(check_acceptor(s, &d, &a, &b, &pa));
        assert!(check_dialer(s, &d, &a, &b, &pd));
        // A wrong secret, a swapped role, other ids, another shard count
        // or other nonces all fail.
        assert!(!check_acceptor(b"another-secret-0123456", &d, &a, &b, &pa));
        assert!(!check_dialer(s, &d, &a, &b, &pa), "roles differ");
        assert!(!check_acceptor(s, &d, &a, &Bound { to: 3, ..b }, &pa), "ids are bound");
        assert!(!check_acceptor(s, &d, &a, &Bound { shards: 4, ..b }, &pa), "the count is bound");
        assert!(!check_dialer(s, &d, &a, &Bound { shards: 7, ..b }, &pd), "the count is bound");
        assert!(!check_acceptor(s, &d, &nonce(), &b, &pa), "a replay against a new nonce");
        assert!(!check_dialer(s, &d, &a, &b, &pd[..31]), "a short proof");
    }

    #[test]
    fn the_control_cookie_depends_on_the_secret_and_hides_it() {
        let c = control_cookie(b"secret-number-one-000");
        assert_eq!(c.len(), 64);
        assert_ne!(c, control_cookie(b"secret-number-two-000"));
        assert!(!c.contains("secret"));
    }
}
