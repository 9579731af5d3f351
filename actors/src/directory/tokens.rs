//! Business tokens in the registry: created and revoked by the metadata
//! group, read by every node to authenticate connections.
//!
//! A token's record holds the SHA-256 of its secret, never the secret (the
//! secret is 32 random bytes, so a fast hash is enough: there is nothing to
//! guess). Registry key: `b"tok"` + the 8-byte big-endian id (11 bytes; no
//! other registry key has that length). Ids count up from 1; tokens are
//! revoked, never deleted, so an id is never reused.
//!
//! A connection checks its token is still live on every request, cheaply:
//! [`Tokens::revision`] moves on every revocation, so it looks the token up
//! again only when the revision it last saw has changed.

use super::{decode, encode, Directory};
use crate::command::NewToken;
use plaudit_proto::auth::{parse_token, Role, TokenId, TokenInfo};
use plaudit_proto::{BizId, WireError};
use plaudit_storage::{StateError, WriteSet};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::RwLock;
use subtle::ConstantTimeEq;

const TOKEN_TAG: &[u8; 3] = b"tok";
pub(super) const TOKEN_KEY_LEN: usize = 11;

pub(super) fn token_key(id: TokenId) -> [u8; TOKEN_KEY_LEN] {
    let mut k = [0u8; TOKEN_KEY_LEN];
    k[..3].copy_from_slice(TOKEN_TAG);
    k[3..].copy_from_slice(&id.to_be_bytes());
    k
}

pub(super) fn is_token_key(k: &[u8]) -> bool {
    k.len() == TOKEN_KEY_LEN && k.starts_with(TOKEN_TAG)
}

/// A token as the registry stores it.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenRecord {
    pub id: TokenId,
    pub hash: [u8; 32],
    pub biz: BizId,
    pub ranks: Vec<plaudit_proto::rankings::RankId>,
    pub read_only: bool,
    pub created_ms: u64,
    pub revoked_ms: Option<u64>,
}

impl std::fmt::Debug for TokenRecord {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenRecord").field("info", &self.info()).finish_non_exhaustive()
    }
}

impl TokenRecord {
    pub fn info(&self) -> TokenInfo {
        TokenInfo {
            id: self.id,
            biz: self.biz,
            ranks: self.ranks.clone(),
            read_only: self.read_only,
            created_ms: self.created_ms,
            revoked_ms: self.revoked_ms,
        }
    }

    fn role(&self) -> Role {
        Role::Biz {
            token: self.id,
            biz: self.biz,
            ranks: self.ranks.clone(),
            read_only: self.read_only,
        }
    }
}

/// The SHA-256 of a token secret (or of the admin token).
pub fn hash_secret(secret: &str) -> [u8; 32] {
    Sha256::digest(secret.as_bytes()).into()
}

/// Compares two hashes in time that does not depend on where they differ.
pub fn same_hash(a: &[u8; 32], b: &[u8; 32]) -> bool {
    a.ct_eq(b).into()
}

/// The tokens view: every record, by id.
#[derive(Default)]
pub struct Tokens {
    map: RwLock<BTreeMap<TokenId, TokenRecord>>,
    revision: AtomicU64,
}

impl Tokens {
    pub(super) fn from_records(records: Vec<TokenRecord>) -> Tokens {
        let map = records.into_iter().map(|r| (r.id, r)).collect();
        Tokens { map: RwLock::new(map), revision: AtomicU64::new(0) }
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, BTreeMap<TokenId, TokenRecord>> {
        self.map.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, BTreeMap<TokenId, TokenRecord>> {
        self.map.write().unwrap_or_else(|e| e.into_inner())
    }

    /// Moves on whenever a token is revoked (or the view is reloaded).
    pub fn revision(&self) -> u64 {
        self.revision.load(Ordering::Acquire)
    }

    pub(super) fn replace(&self, fresh: Tokens) {
        *self.write() = fresh.map.into_inner().unwrap_or_else(|e| e.into_inner());
        self.revision.fetch_add(1, Ordering::AcqRel);
    }
}

impl Directory {
    /// The role a business token grants, if it is one, is known here, is
    /// live and its secret matches; `None` otherwise (never says which).
    pub fn authenticate_token(&self, token: &str) -> Option<Role> {
        let (id, secret) = parse_token(token)?;
        let presented = hash_secret(secret);
        let tokens = self.tokens.read();
        let record = tokens.get(&id)?;
        (same_hash(&presented, &record.hash) && record.revoked_ms.is_none()).then(|| record.role())
    }

    /// Whether token `id` is known here (a miss may be a registry that lags).
    pub fn knows_token(&self, token: &str) -> bool {
        parse_token(token).is_some_and(|(id, _)| self.tokens.read().contains_key(&id))
    }

    /// Whether token `id` still authenticates.
    pub fn token_live(&self, id: TokenId) -> bool {
        self.tokens.read().get(&id).is_some_and(|r| r.revoked_ms.is_none())
    }

    /// See [`Tokens::revision`].
    pub fn tokens_revision(&self) -> u64 {
        self.tokens.revision()
    }

    pub fn list_tokens(&self) -> Vec<TokenInfo> {
        self.tokens.read().values().map(TokenRecord::info).collect()
    }

    /// Registers a token: its business and rankings must exist, and each
    /// ranking must be shared or its business's own. The id is one above the
    /// highest (deterministic on every replica).
    pub fn apply_create_token(
        &self,
        t: &NewToken,
        now: u64,
        ws: &mut WriteSet,
    ) -> Result<TokenInfo, WireError> {
        if self.get(t.biz).is_none() {
            return Err(WireError::not_found(format!("business {} does not exist", t.biz)));
        }
        if let Some(r) = t.ranks.iter().find(|&&r| self.rank(r).is_none()) {
            return Err(WireError::not_found(format!("ranking {r} does not exist")));
        }
        for &r in &t.ranks {
            self.check_rank_for(r, t.biz)?;
        }
        let mut map = self.tokens.write();
        let id = map.keys().next_back().map_or(1, |&h| h + 1);
        let record = TokenRecord {
            id,
            hash: t.hash,
            biz: t.biz,
            ranks: t.ranks.clone(),
            read_only: t.read_only,
            created_ms: now,
            revoked_ms: None,
        };
        ws.put_registry(&token_key(id), &encode(&record)?);
        let info = record.info();
        map.insert(id, record);
        Ok(info)
    }

    /// Revokes a token from `now` on; a revoked token stays revoked as it was.
    pub fn apply_revoke_token(
        &self,
        id: TokenId,
        now: u64,
        ws: &mut WriteSet,
    ) -> Result<TokenInfo, WireError> {
        let mut map = self.tokens.write();
        let Some(record) = map.get_mut(&id) else {
            return Err(WireError::not_found(format!("token {id} does not exist")));
        };
        if record.revoked_ms.is_none() {
            record.revoked_ms = Some(now);
            ws.put_registry(&token_key(id), &encode(&*record)?);
            self.tokens.revision.fetch_add(1, Ordering::AcqRel);
        }
        Ok(record.info())
    }
}

pub(super) fn decode_record(v: &[u8]) -> Result<TokenRecord, StateError> {
    decode(v)
}

#[cfg(test)]
mod tests {
    use super::*;
    use plaudit_proto::auth::format_token;
    use plaudit_proto::business::CreateBiz;
    use plaudit_storage::StateStore;
    use sled::Db;

    const SECRET: &str = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJ0123-_5";

    fn directory_with_biz() -> (tempfile::TempDir, Db, StateStore, Directory) {
        let dir = tempfile::tempdir().unwrap();
        let db = sled::open(dir.path()).unwrap();
        let store = StateStore::open(&db).unwrap();
        let d = Directory::load(&store).unwrap();
        let mut ws = WriteSet::new(16);
        let c = CreateBiz { id: Some(7), name: "v".into(), config: Default::default() };
        d.apply_create(&c, super::super::IdRule::AfterHighestOrLowestFree, &mut ws).unwrap();
        store.stage(ws);
        (dir, db, store, d)
    }

    fn new_token(biz: BizId) -> NewToken {
        NewToken { hash: hash_secret(SECRET), biz, ranks: vec![], read_only: false }
    }

    #[test]
    fn a_token_authenticates_with_its_secret_only_and_not_once_revoked() {
        let (_dir, _db, _store, d) = directory_with_biz();
        let mut ws = WriteSet::new(16);
        let info = d.apply_create_token(&new_token(7), 100, &mut ws).unwrap();
        assert_eq!((info.id, info.created_ms, info.revoked_ms), (1, 100, None));
        let token = format_token(info.id, SECRET);
        assert!(matches!(d.authenticate_token(&token), Some(Role::Biz { biz: 7, .. })));
        let wrong = format_token(info.id, &SECRET.replace('a', "b"));
        assert_eq!(d.authenticate_token(&wrong), None);
        assert_eq!(d.authenticate_token(&format_token(2, SECRET)), None);

        let before = d.tokens_revision();
        let revoked = d.apply_revoke_token(1, 200, &mut ws).unwrap();
        assert_eq!(revoked.revoked_ms, Some(200));
        assert!(d.tokens_revision() > before);
        assert_eq!(d.authenticate_token(&token), None);
        assert!(!d.token_live(1));
        // Revoking again keeps the first revocation.
        assert_eq!(d.apply_revoke_token(1, 300, &mut ws).unwrap().revoked_ms, Some(200));
    }

    #[test]
    fn a_token_needs_an_existing_business_and_rankings_and_ids_count_up() {
        let (_dir, _db, _store, d) = directory_with_biz();
        let mut ws = WriteSet::new(16);
        assert!(d.apply_create_token(&new_token(8), 1, &mut ws).is_err());
        let mut t = new_token(7);
        t.ranks = vec![99];
        assert!(d.apply_create_token(&t, 1, &mut ws).is_err());
        assert_eq!(d.apply_create_token(&new_token(7), 1, &mut ws).unwrap().id, 1);
        assert_eq!(d.apply_create_token(&new_token(7), 1, &mut ws).unwrap().id, 2);
    }

    fn ranking(id: plaudit_proto::rankings::RankId) -> plaudit_proto::rankings::RankDef {
        use plaudit_proto::rankings::{Aggregation, RankDef, TieMode};
        use plaudit_proto::window::{Granularity, UtcOffset};
        RankDef {
            id,
            name: format!("r{id}"),
            dims: vec![],
            granularities: vec![Granularity::Total],
            utc_offset: UtcOffset::UTC,
            aggregation: Aggregation::Incr,
            ties: TieMode::EarlierFirst,
            settings: Default::default(),
        }
    }

    #[test]
    fn a_token_names_only_its_own_business_rankings_or_shared_ones() {
        use plaudit_proto::rankings::RankInfo;
        let (_dir, _db, store, d) = directory_with_biz();
        let mut ws = WriteSet::new(16);
        let c = CreateBiz { id: Some(8), name: "w".into(), config: Default::default() };
        d.apply_create(&c, super::super::IdRule::AfterHighestOrLowestFree, &mut ws).unwrap();
        let owned = RankInfo { def: ranking(1), owner: Some(7) };
        d.apply_create_rank_info(&owned, &mut ws).unwrap();
        d.apply_create_rank_info(&RankInfo { def: ranking(2), owner: None }, &mut ws).unwrap();
        let unknown = RankInfo { def: ranking(3), owner: Some(99) };
        let e = d.apply_create_rank_info(&unknown, &mut ws).unwrap_err();
        assert_eq!(e.code, plaudit_proto::ErrorCode::NotFound, "{e}");
        assert!(d.rank(3).is_none(), "nothing created for an unknown owner");
        store.stage(ws);

        let token = |biz, ranks: Vec<u32>| NewToken { ranks, ..new_token(biz) };
        let mut ws = WriteSet::new(16);
        let e = d.apply_create_token(&token(8, vec![2, 1]), 1, &mut ws).unwrap_err();
        assert_eq!(e.code, plaudit_proto::ErrorCode::Refused, "{e}");
        assert!(e.message.contains("belongs to business 7"), "{e}");
        assert!(d.apply_create_token(&token(8, vec![2]), 1, &mut ws).is_ok(), "shared");
        assert!(d.apply_create_token(&token(7, vec![1, 2]), 1, &mut ws).is_ok(), "its own");

        // The owner is stored: a reload (a restart, a snapshot) keeps it.
        let loaded = Directory::load(&store).unwrap();
        assert_eq!((loaded.rank_owner(1), loaded.rank_owner(2)), (Some(7), None));
        assert_eq!(loaded.rank_info(1).unwrap().owner, Some(7));
        assert!(loaded.apply_create_token(&token(8, vec![1]), 1, &mut ws).is_err());
        d.reload(&store).unwrap();
        assert_eq!(d.rank_owner(1), Some(7));
    }

    #[test]
    fn tokens_survive_a_reload_and_no_secret_is_stored() {
        let (_dir, _db, store, d) = directory_with_biz();
        let mut ws = WriteSet::new(16);
        d.apply_create_token(&new_token(7), 5, &mut ws).unwrap();
        store.stage(ws);
        let stored: Vec<u8> = store
            .registry_entries()
            .unwrap()
            .into_iter()
            .flat_map(|(k, v)| [k, v])
            .flatten()
            .collect();
        assert!(!stored.windows(SECRET.len()).any(|w| w == SECRET.as_bytes()));
        let loaded = Directory::load(&store).unwrap();
        assert!(loaded.authenticate_token(&format_token(1, SECRET)).is_some());
        assert_eq!(loaded.list_tokens(), d.list_tokens());
    }
}
