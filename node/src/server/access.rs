//! What one connection may do: nothing but `Ping`, `Hello` and `Auth`
//! until it authenticates (on a node with an admin token), then what its
//! role allows (`plaudit_proto::auth::authorize`).
//!
//! ```text
//! open node (no admin token) ──────────────> Granted(Admin) from the start
//! node with an admin token ──> Anonymous ─Auth ok─> Granted(role)
//!                                   ^                 │ its token revoked
//!                                   └─────────────────┘ (checked per request)
//! ```
//!
//! A business token can be revoked while connections use it: every request
//! compares the registry's token revision with the one its role was
//! checked at, and looks the token up again only when it moved, so the
//! check costs an atomic load.

use plaudit_cluster::Engine;
use plaudit_proto::auth::{allowed_before_auth, authorize, Role};
use plaudit_proto::{BizId, Request, WireError};

#[derive(Debug)]
pub(super) enum Access {
    /// Has not authenticated: only `Ping`, `Hello` and `Auth`.
    Anonymous,
    /// Authenticated (or the node is open): `revision` is the registry's
    /// token revision when `role` was last known live.
    Granted { role: Role, revision: u64 },
}

impl Access {
    /// How a connection starts: open nodes grant everything.
    pub(super) fn initial(open: bool) -> Access {
        if open {
            Access::Granted { role: Role::Admin, revision: 0 }
        } else {
            Access::Anonymous
        }
    }

    pub(super) fn is_granted(&self) -> bool {
        matches!(self, Access::Granted { .. })
    }

    /// The business this connection's token is for (`None`: the admin's,
    /// or not granted).
    pub(super) fn biz(&self) -> Option<BizId> {
        match self {
            Access::Granted { role: Role::Biz { biz, .. }, .. } => Some(*biz),
            _ => None,
        }
    }

    /// Whether `req` may run on this connection now. A revoked token makes
    /// the connection anonymous again.
    pub(super) fn check(&mut self, engine: &Engine, req: &Request) -> Result<(), WireError> {
        match self {
            Access::Anonymous if allowed_before_auth(req) => Ok(()),
            Access::Anonymous => Err(WireError::unauthorized(format!(
                "authenticate first: send Auth with a token before {}",
                req.op()
            ))),
            Access::Granted { role, revision } => {
                let token = match role {
                    Role::Admin => return Ok(()),
                    Role::Biz { token, .. } => *token,
                };
                let now = engine.tokens_revision();
                if now != *revision {
                    if !engine.token_live(token) {
                        *self = Access::Anonymous;
                        // What an anonymous connection may send still goes
                        // through: the error below tells it to authenticate.
                        if allowed_before_auth(req) {
                            return Ok(());
                        }
                        return Err(WireError::unauthorized(
                            "this connection's token was revoked; authenticate again",
                        ));
                    }
                    *revision = now;
                }
                authorize(role, req)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use plaudit_proto::auth::AuthRequest;
    use plaudit_proto::auth::TokenSecret;

    // `check` against an engine is covered by tests/t71_auth.rs on real
    // nodes; here, what needs no engine.
    #[test]
    fn open_nodes_grant_admin_and_others_start_anonymous() {
        assert!(Access::initial(true).is_granted());
        assert!(matches!(
            Access::initial(true),
            Access::Granted { role: Role::Admin, revision: 0 }
        ));
        assert!(!Access::initial(false).is_granted());
        let auth = Request::Auth(AuthRequest { token: TokenSecret("x".into()) });
        assert!(allowed_before_auth(&auth) && allowed_before_auth(&Request::Ping));
        assert!(!allowed_before_auth(&Request::ListBiz));
    }
}
