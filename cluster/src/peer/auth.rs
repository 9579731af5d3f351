//! Mutual authentication of two nodes on the cluster secret, without the
//! secret ever crossing the wire: each side sends a fresh random nonce and
//! proves it knows the secret with an HMAC-SHA256 over both nonces, both
//! node ids and its role. Proofs are compared in constant time
//! (`Mac::verify_slice`). A replayed proof is useless: the other side's
//! nonce is new each time.
//!
//! ```text
//! dialer   -> Hello { from, to, nonce_d, shards }
//! acceptor -> Challenge { nonce_a, proof_a = HMAC(s, "acceptor" | nonce_d | nonce_a | from | to) }
//!             or Refused (another protocol version, another node, another shard count)
//! dialer   -> Proof { proof_d = HMAC(s, "dialer" | nonce_a | nonce_d | from | to) }   (after checking proof_a)
//! acceptor -> Verdict (after checking proof_d)
//! ```
//!
//! The control plane (ractor_cluster) authenticates with its own cookie
//! handshake; its cookie is derived from the secret here, so the secret
//! itself is never compared byte by byte anywhere.

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
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("secret", &"(redacted)")
            .field("shards", &self.shards)
            .finish()
    }
}

/// A fresh random nonce.
pub fn nonce() -> Nonce {
    let mut n = [0u8; 32];
    rand::Rng::fill(&mut rand::thread_rng(), &mut n[..]);
    n
}

fn mac(
    secret: &[u8],
    role: &[u8],
    first: &Nonce,
    second: &Nonce,
    from: u64,
    to: u64,
) -> HmacSha256 {
    // HMAC takes a key of any length; new_from_slice cannot fail for it.
    let mut m = HmacSha256::new_from_slice(secret).expect("HMAC accepts any key length");
    m.update(role);
    m.update(first);
    m.update(second);
    m.update(&from.to_be_bytes());
    m.update(&to.to_be_bytes());
    m
}

/// The acceptor's proof, over the dialer's nonce then its own.
pub fn acceptor_proof(
    secret: &[u8],
    dialer: &Nonce,
    acceptor: &Nonce,
    from: u64,
    to: u64,
) -> Proof {
    mac(secret, b"acceptor", dialer, acceptor, from, to).finalize().into_bytes().into()
}

/// The dialer's proof, over the acceptor's nonce then its own.
pub fn dialer_proof(secret: &[u8], dialer: &Nonce, acceptor: &Nonce, from: u64, to: u64) -> Proof {
    mac(secret, b"dialer", acceptor, dialer, from, to).finalize().into_bytes().into()
}

/// Checks the acceptor's proof, in constant time.
pub fn check_acceptor(
    secret: &[u8],
    dialer: &Nonce,
    acceptor: &Nonce,
    from: u64,
    to: u64,
    proof: &[u8],
) -> bool {
    mac(secret, b"acceptor", dialer, acceptor, from, to).verify_slice(proof).is_ok()
}

/// Checks the dialer's proof, in constant time.
pub fn check_dialer(
    secret: &[u8],
    dialer: &Nonce,
    acceptor: &Nonce,
    from: u64,
    to: u64,
    proof: &[u8],
) -> bool {
    mac(secret, b"dialer", acceptor, dialer, from, to).verify_slice(proof).is_ok()
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
        let pa = acceptor_proof(s, &d, &a, 1, 2);
        let pd = dialer_proof(s, &d, &a, 1, 2);
        assert!(check_acceptor(s, &d, &a, 1, 2, &pa));
        assert!(check_dialer(s, &d, &a, 1, 2, &pd));
        // A wrong secret, a swapped role, other ids or other nonces all fail.
        assert!(!check_acceptor(b"another-secret-0123456", &d, &a, 1, 2, &pa));
        assert!(!check_dialer(s, &d, &a, 1, 2, &pa), "roles differ");
        assert!(!check_acceptor(s, &d, &a, 1, 3, &pa), "ids are bound");
        assert!(!check_acceptor(s, &d, &nonce(), 1, 2, &pa), "a replay against a new nonce");
        assert!(!check_dialer(s, &d, &a, 1, 2, &pd[..31]), "a short proof");
    }

    #[test]
    fn the_control_cookie_depends_on_the_secret_and_hides_it() {
        let c = control_cookie(b"secret-number-one-000");
        assert_eq!(c.len(), 64);
        assert_ne!(c, control_cookie(b"secret-number-two-000"));
        assert!(!c.contains("secret"));
    }
}
