//! Token calls of `Client` (create, list, revoke), and the secret a new
//! token is made with.
//!
//! The secret is made here, by the caller, not by the node: a create is a
//! registry change the SDK may send more than once (inside a `Once`), and a
//! repeat must return the token whose secret was stored, which only works
//! if the request carries it. The node keeps only the secret's SHA-256, so
//! the full token (`plt_<id>_<secret>`) exists once, in `create_token`'s
//! answer.

use crate::api::{unexpected, Client};
use crate::error::ClientError;
use plaudit_proto::auth::{format_token, CreateToken, TokenId, TokenInfo, TokenSecret};
use plaudit_proto::rankings::RankId;
use plaudit_proto::{BizId, Request, Response};
use std::io;

/// Random bytes in a secret: 256 bits, beyond guessing.
const SECRET_BYTES: usize = 32;

impl Client {
    /// Creates a business token for `biz` that may also score and query the
    /// rankings `ranks` (at most `auth::MAX_TOKEN_RANKS`); a `read_only`
    /// one may read but not like or score. Returns the full token, to give
    /// to the business (it cannot be shown again), and its record. Needs
    /// the admin token. Applied at most once, however often the SDK has to
    /// send it.
    pub async fn create_token(
        &self,
        biz: BizId,
        ranks: &[RankId],
        read_only: bool,
    ) -> Result<(String, TokenInfo), ClientError> {
        let secret = new_secret().map_err(|e| {
            ClientError::Io(io::Error::other(format!(
                "cannot make a token secret: the OS random source failed: {e}"
            )))
        })?;
        let req = Request::CreateToken(CreateToken {
            secret: secret.clone(),
            biz,
            ranks: ranks.to_vec(),
            read_only,
        });
        let info = self.expect_token("token_create", req).await?;
        Ok((format_token(info.id, &secret.0), info))
    }

    /// Every token, revoked ones included, without secrets. Needs the
    /// admin token.
    pub async fn list_tokens(&self) -> Result<Vec<TokenInfo>, ClientError> {
        match self.request(Request::ListTokens).await? {
            Response::Tokens(list) => Ok(list),
            other => Err(unexpected("token_list", &other)),
        }
    }

    /// Revokes a token: from then on it authenticates nothing, and the
    /// connections it authenticated are refused. Returns its record, with
    /// `revoked_ms` set. Needs the admin token. Applied at most once,
    /// however often the SDK has to send it.
    pub async fn revoke_token(&self, id: TokenId) -> Result<TokenInfo, ClientError> {
        self.expect_token("token_revoke", Request::RevokeToken(id)).await
    }

    async fn expect_token(&self, op: &str, req: Request) -> Result<TokenInfo, ClientError> {
        match self.request(req).await? {
            Response::Token(t) => Ok(t),
            other => Err(unexpected(op, &other)),
        }
    }
}

/// A fresh secret: `SECRET_BYTES` from the OS, base64url without padding
/// (`auth::SECRET_LEN` characters).
pub(crate) fn new_secret() -> Result<TokenSecret, getrandom::Error> {
    let mut bytes = [0u8; SECRET_BYTES];
    getrandom::getrandom(&mut bytes)?;
    Ok(TokenSecret(base64url(&bytes)))
}

/// RFC 4648 §5 base64url, without padding. Written out rather than taken
/// from a crate: it is one call site, a dozen lines, and the RFC's vectors
/// test it.
fn base64url(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [chunk[0], chunk.get(1).copied().unwrap_or(0), chunk.get(2).copied().unwrap_or(0)];
        let n = u32::from(b[0]) << 16 | u32::from(b[1]) << 8 | u32::from(b[2]);
        // A chunk of k bytes carries k + 1 six-bit digits; the rest would be padding.
        for i in 0..=chunk.len() {
            out.push(char::from(ALPHABET[(n >> (18 - 6 * i) & 63) as usize]));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use plaudit_proto::auth::{parse_token, SECRET_LEN};

    #[test]
    fn base64url_matches_the_rfc_4648_vectors_without_padding() {
        let vectors = [
            ("", ""),
            ("f", "Zg"),
            ("fo", "Zm8"),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg"),
            ("fooba", "Zm9vYmE"),
            ("foobar", "Zm9vYmFy"),
        ];
        for (plain, encoded) in vectors {
            assert_eq!(base64url(plain.as_bytes()), encoded, "{plain:?}");
        }
        // The URL-safe digits, where standard base64 has `+` and `/`.
        assert_eq!(base64url(&[0xfb, 0xff, 0xbf]), "-_-_");
        assert_eq!(base64url(&[0xff; 32]).len(), SECRET_LEN);
    }

    #[test]
    fn a_new_secret_makes_a_token_the_node_accepts() {
        let secret = new_secret().unwrap();
        assert_eq!(secret.0.len(), SECRET_LEN);
        let create = CreateToken { secret: secret.clone(), biz: 1, ranks: vec![], read_only: true };
        assert!(create.validate().is_ok());
        let token = format_token(12, &secret.0);
        assert!(token.starts_with("plt_12_"), "{token}");
        assert_eq!(parse_token(&token), Some((12, secret.0.as_str())));
    }

    #[test]
    fn secrets_differ_every_time() {
        let secrets: std::collections::HashSet<String> =
            (0..1000).map(|_| new_secret().unwrap().0).collect();
        assert_eq!(secrets.len(), 1000);
    }
}
