//! Authenticating a connection's `Auth`: the admin token (configured on
//! the node, held only as its SHA-256) or a business token (in the
//! replicated registry). Which one failed, and why, is never said.

use crate::engine::Engine;
use plaudit_actors::directory::{hash_secret, same_hash};
use plaudit_proto::auth::{parse_token, Role};
use plaudit_proto::WireError;

impl Engine {
    /// The role `token` grants, or `Unauthorized`. `admin` is the SHA-256
    /// of the node's admin token, if it has one.
    pub async fn authenticate(
        &self,
        token: &str,
        admin: Option<&[u8; 32]>,
    ) -> Result<Role, WireError> {
        let denied = || WireError::unauthorized("invalid token");
        if parse_token(token).is_none() {
            // Not a business token: the admin token or nothing. Hashing
            // first makes the comparison's time independent of the input.
            let presented = hash_secret(token);
            return match admin {
                Some(admin) if same_hash(&presented, admin) => Ok(Role::Admin),
                _ => Err(denied()),
            };
        }
        if let Some(role) = self.directory.authenticate_token(token) {
            return Ok(role);
        }
        if self.directory.knows_token(token) {
            return Err(denied());
        }
        // A token created a moment ago may not have reached this node's
        // registry yet: catch up with the metadata group once, then decide.
        self.sync_registry().await?;
        self.directory.authenticate_token(token).ok_or_else(denied)
    }

    /// Whether business token `id` still authenticates (revocation applies
    /// to connections already authenticated with it).
    pub fn token_live(&self, id: plaudit_proto::auth::TokenId) -> bool {
        self.directory.token_live(id)
    }

    /// Moves on whenever a token is revoked: see `Directory::tokens_revision`.
    pub fn tokens_revision(&self) -> u64 {
        self.directory.tokens_revision()
    }
}
