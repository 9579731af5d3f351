//! Who a connection is and what it may do: tokens, roles, and the pure rule
//! that decides whether a role may send a request.
//!
//! ```text
//! connect ─> (admin token configured?) ─no──> Role::Admin (open node, loopback only)
//!                                      └yes─> unauthenticated: Ping, Hello, Auth only
//! Auth { token } ─> admin token ─────────────> Role::Admin
//!                   business token (live) ───> Role::Biz { biz, ranks, read_only }
//!                   anything else ───────────> Unauthorized (the connection stays as it was)
//! ```
//!
//! A business token is `plt_<id>_<secret>`: the id finds its record (stored
//! in the replicated registry with the secret's SHA-256, never the secret),
//! the secret proves it. The secret is 32 random bytes, base64url, made by
//! whoever asks for the token (the CLI): a retried create then cannot
//! return a secret other than the one stored. [`TokenSecret`] never prints.

use crate::ids::BizId;
use crate::message::Request;
use crate::rankings::RankId;
use crate::WireError;
use serde::{Deserialize, Serialize};

/// A token's id in the registry.
pub type TokenId = u64;

/// The prefix of every business token.
pub const TOKEN_PREFIX: &str = "plt_";
/// Length of a business token's secret part (32 bytes in base64url, no padding).
pub const SECRET_LEN: usize = 43;
/// Shortest admin token a node accepts.
pub const MIN_ADMIN_TOKEN_LEN: usize = 16;
/// Longest token of any kind read from a client.
pub const MAX_TOKEN_LEN: usize = 256;
/// Most rankings one token may name.
pub const MAX_TOKEN_RANKS: usize = 64;

/// A secret: serialized as is, but never shown by `Debug` (requests are
/// logged at debug level).
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct TokenSecret(pub String);

impl std::fmt::Debug for TokenSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("(redacted)")
    }
}

/// Authenticates the connection it is sent on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuthRequest {
    pub token: TokenSecret,
}

/// What the connection may do from now on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Role {
    /// Everything, including the registry and tokens.
    Admin,
    /// The likes of one business and the scores and queries of some rankings.
    Biz { token: TokenId, biz: BizId, ranks: Vec<RankId>, read_only: bool },
}

/// Asks for a business token (admin only). `secret` is the token's secret
/// part, made by the caller ([`SECRET_LEN`] base64url characters).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CreateToken {
    pub secret: TokenSecret,
    pub biz: BizId,
    pub ranks: Vec<RankId>,
    pub read_only: bool,
}

/// A token as listed: everything but its secret.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenInfo {
    pub id: TokenId,
    pub biz: BizId,
    pub ranks: Vec<RankId>,
    pub read_only: bool,
    pub created_ms: u64,
    /// When it was revoked; a revoked token authenticates nothing.
    pub revoked_ms: Option<u64>,
}

impl CreateToken {
    pub fn validate(&self) -> Result<(), WireError> {
        if !is_secret(&self.secret.0) {
            return Err(WireError::bad_request(format!(
                "a token secret is {SECRET_LEN} base64url characters"
            )));
        }
        if self.ranks.len() > MAX_TOKEN_RANKS {
            return Err(WireError::bad_request(format!(
                "a token names at most {MAX_TOKEN_RANKS} rankings"
            )));
        }
        Ok(())
    }
}

fn is_secret(s: &str) -> bool {
    s.len() == SECRET_LEN && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// The token a client presents for `id` and `secret`.
pub fn format_token(id: TokenId, secret: &str) -> String {
    format!("{TOKEN_PREFIX}{id}_{secret}")
}

/// Splits a business token into its id and secret; `None` if it is not one
/// (it may still be the admin token).
pub fn parse_token(token: &str) -> Option<(TokenId, &str)> {
    let rest = token.strip_prefix(TOKEN_PREFIX)?;
    let (id, secret) = rest.split_once('_')?;
    let id: TokenId = id.parse().ok().filter(|&id| id > 0)?;
    is_secret(secret).then_some((id, secret))
}

/// Whether `role` may send `req`; the error is `Unauthorized` and says why.
/// Pure: it reads only the role and the request (a token's liveness is
/// checked by the caller).
pub fn authorize(role: &Role, req: &Request) -> Result<(), WireError> {
    let Role::Biz { biz, ranks, read_only, .. } = role else { return Ok(()) };
    let own_biz = |b: BizId| b == *biz;
    let own_rank = |r: RankId| ranks.contains(&r);
    let allowed = match req {
        // Anyone may talk to a node and learn its routing.
        Request::Ping | Request::Hello(_) | Request::Auth(_) | Request::Routing => true,
        // Which entities moved where (ids and shards, not their state):
        // the SDK routes reads by it, as by the map. A business is told its
        // own only (the node's server filters the answer by the role).
        Request::EntityRoutes | Request::EntityRoutesPage(_) => true,
        Request::Like(r) => own_biz(r.biz) && !read_only,
        Request::Status(r) => own_biz(r.biz),
        Request::Counts(r) => own_biz(r.biz),
        Request::UserLikes(r) => own_biz(r.biz),
        Request::Likers(r) => own_biz(r.biz),
        Request::Received(r) => own_biz(r.biz),
        Request::GetBiz(b) => own_biz(*b),
        Request::HotSet(h) => {
            h.bizs.iter().all(|b| own_biz(*b)) && h.ranks.iter().all(|r| own_rank(*r))
        }
        Request::Score(r) => own_rank(r.rank) && !read_only,
        Request::Query(q) => own_rank(q.rank),
        Request::Boards(b) => own_rank(b.rank),
        Request::GetRank(r) | Request::GetRankInfo(r) | Request::BoardUsage(r) => own_rank(*r),
        Request::Stale(inner) | Request::Replica(inner) => return authorize(role, inner),
        Request::Once { req, .. } => return authorize(role, req),
        // The registry, tokens and the cluster's inner workings are the
        // admin's.
        Request::CreateBiz(_)
        | Request::UpdateBiz(_)
        | Request::ListBiz
        | Request::ListBizPage(_)
        | Request::CreateRank(_)
        | Request::CreateRankInfo(_)
        | Request::SetBoardLimit(_)
        | Request::UpdateRank(_)
        | Request::ListRanks
        | Request::ListRanksPage(_)
        | Request::ClusterStatus
        | Request::CreateToken(_)
        | Request::ListTokens
        | Request::RevokeToken(_)
        | Request::DrainNode(_)
        | Request::Nodes
        | Request::HotKeys(_)
        | Request::MoveBoard(_)
        | Request::Placements
        | Request::MoveEntity(_)
        | Request::EntityPlacements
        | Request::Members(_) => false,
    };
    if allowed {
        Ok(())
    } else if matches!(req, Request::Like(_) | Request::Score(_)) && *read_only {
        Err(WireError::unauthorized(format!("a read-only token cannot {}", req.op())))
    } else {
        Err(WireError::unauthorized(format!("this token may not {}", req.op())))
    }
}

/// What an unauthenticated connection may send before `Auth`.
pub fn allowed_before_auth(req: &Request) -> bool {
    matches!(req, Request::Ping | Request::Hello(_) | Request::Auth(_))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::likes::{LikeAction, LikeRequest, StatusRequest};

    const SECRET: &str = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJ0123-_5";

    fn biz_role(read_only: bool) -> Role {
        Role::Biz { token: 1, biz: 7, ranks: vec![3], read_only }
    }

    fn like(biz: BizId) -> Request {
        Request::Like(LikeRequest {
            biz,
            entity: 1,
            user: 2,
            owner: None,
            action: LikeAction::Like,
        })
    }

    #[test]
    fn tokens_round_trip_and_malformed_ones_are_not_business_tokens() {
        assert_eq!(SECRET.len(), SECRET_LEN);
        let t = format_token(42, SECRET);
        assert_eq!(parse_token(&t), Some((42, SECRET)));
        for bad in [
            "plt_0_".to_string() + SECRET,
            "plt_x_".to_string() + SECRET,
            "plt_42_short".into(),
            "plt_42_".to_string() + &SECRET.replace('a', "!"),
            "an-admin-token-of-some-length".into(),
            "plt_42".into(),
        ] {
            assert_eq!(parse_token(&bad), None, "{bad}");
        }
    }

    #[test]
    fn secrets_never_print() {
        let req = AuthRequest { token: TokenSecret(SECRET.into()) };
        assert!(!format!("{req:?}").contains(SECRET));
        let c = CreateToken {
            secret: TokenSecret(SECRET.into()),
            biz: 1,
            ranks: vec![],
            read_only: true,
        };
        assert!(!format!("{c:?}").contains(SECRET));
    }

    #[test]
    fn a_business_token_reaches_its_business_and_rankings_only() {
        let rw = biz_role(false);
        assert!(authorize(&rw, &like(7)).is_ok());
        assert!(authorize(&rw, &like(8)).is_err());
        let status = Request::Status(StatusRequest { biz: 7, user: 1, entities: vec![1] });
        assert!(authorize(&rw, &status).is_ok());
        assert!(authorize(&rw, &Request::Stale(Box::new(status))).is_ok());
        assert!(authorize(&rw, &Request::GetRank(3)).is_ok());
        assert!(authorize(&rw, &Request::GetRank(4)).is_err());
        assert!(authorize(&rw, &Request::ListBiz).is_err());
        assert!(authorize(&rw, &Request::ListTokens).is_err());
        let e = authorize(&rw, &Request::RevokeToken(1)).unwrap_err();
        assert_eq!(e.code, crate::ErrorCode::Unauthorized);
    }

    #[test]
    fn a_read_only_token_reads_and_does_not_write() {
        let ro = biz_role(true);
        assert!(authorize(&ro, &like(7)).unwrap_err().message.contains("read-only"));
        let status = Request::Status(StatusRequest { biz: 7, user: 1, entities: vec![1] });
        assert!(authorize(&ro, &status).is_ok());
    }

    #[test]
    fn the_admin_may_do_anything_and_strangers_only_say_hello() {
        assert!(authorize(&Role::Admin, &Request::ListTokens).is_ok());
        assert!(allowed_before_auth(&Request::Ping));
        assert!(!allowed_before_auth(&like(7)));
        assert!(!allowed_before_auth(&Request::Routing));
    }
}
