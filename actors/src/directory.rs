//! The registry of businesses and ranking definitions: applied by the
//! metadata group, and the shared read view the router consults on every
//! request (is the business known, are dislikes enabled, what are this
//! ranking's windows and filters) without a Raft round trip.
//!
//! Registry keys: a business is its 4-byte big-endian id; a ranking is
//! `b'r'` + its 4-byte id; the cluster map is `b"cluster"`; moved boards
//! are `b"placements"` and moved entities `b"entity-placements"` (both
//! read before the board limits' keys); at-most-once
//! request records (`shard/once.rs`) are 8 or 9 bytes; ranking owners
//! (`directory/owners.rs`) are 6; tokens (`directory/tokens.rs`) are 11;
//! board limits are 10 and board reservations 15 or more
//! (`directory/board_limits.rs`). Lengths differ, so no two kinds collide.

mod board_limits;
mod moved_entities;
mod owners;
mod placements;
mod tokens;

pub use moved_entities::MovedEntities;
use placements::{
    names_any, names_any_entity, EntityPlacementsRecord, PlacementsRecord, ENTITY_PLACEMENTS_KEY,
    PLACEMENTS_KEY,
};
pub use tokens::{hash_secret, same_hash, TokenRecord};

use plaudit_proto::business::{Business, CreateBiz, UpdateBiz};
use plaudit_proto::cluster::ClusterMap;
use plaudit_proto::limits::MAX_BIZ_ID;
use plaudit_proto::membership::ClusterState;
use plaudit_proto::placement::{EntityPlacements, Placements};
use plaudit_proto::rankings::{RankDef, RankId, UpdateRank};
use plaudit_proto::{codec, BizId, WireError};
use plaudit_storage::keys::VALUE_V1;
use plaudit_storage::{StateError, StateStore, WriteSet};
use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, RwLock};
use tokio::sync::watch;

#[derive(Clone)]
pub struct Directory {
    inner: Arc<RwLock<BTreeMap<BizId, Business>>>,
    ranks: Arc<RwLock<BTreeMap<RankId, Arc<RankDef>>>>,
    /// Rankings that belong to a business (`owners.rs`).
    owners: Arc<RwLock<BTreeMap<RankId, BizId>>>,
    tokens: Arc<tokens::Tokens>,
    /// Limits of live sub-boards and the boards reserved under them.
    board_limits: Arc<board_limits::BoardLimits>,
    /// The cluster map, watched by the node (it starts the groups the map
    /// places on it).
    cluster: Arc<watch::Sender<Option<Arc<ClusterMap>>>>,
    /// The map with its members and moves (`cluster` is its map).
    state: Arc<watch::Sender<Option<Arc<ClusterState>>>>,
    /// Moved sub-boards and the moves under way.
    placements: Arc<watch::Sender<Arc<Placements>>>,
    /// Whether `placements` names any board: read on every staged score,
    /// where a plain load costs less than the watch's lock.
    any_placed: Arc<AtomicBool>,
    /// Moved entities and the moves under way.
    entity_placements: Arc<watch::Sender<Arc<EntityPlacements>>>,
    /// Whether `entity_placements` names any entity: read on every
    /// counts read.
    any_entity_placed: Arc<AtomicBool>,
    /// Entities this node's shard replicas gave away (not registry state:
    /// the shards' own, shared here so that reads can see it).
    moved_entities: Arc<MovedEntities>,
}

impl Default for Directory {
    fn default() -> Self {
        Directory {
            inner: Arc::default(),
            ranks: Arc::default(),
            owners: Arc::default(),
            tokens: Arc::default(),
            board_limits: Arc::default(),
            cluster: Arc::new(watch::channel(None).0),
            state: Arc::new(watch::channel(None).0),
            placements: Arc::new(watch::channel(Arc::default()).0),
            any_placed: Arc::default(),
            entity_placements: Arc::new(watch::channel(Arc::default()).0),
            any_entity_placed: Arc::default(),
            moved_entities: Arc::default(),
        }
    }
}

const RANK_TAG: u8 = b'r';
/// The cluster map's registry key (no business or ranking key has 7 bytes),
/// as maps were stored before members existed.
const CLUSTER_KEY: &[u8] = b"cluster";
/// The cluster state's key (`StateRecord`); wins over `CLUSTER_KEY`.
const STATE_KEY: &[u8] = b"cluster-state";
/// How the cluster state is stored: versioned, variants only appended.
#[derive(serde::Serialize, serde::Deserialize)]
enum StateRecord {
    V1(ClusterState),
}

fn rank_key(id: RankId) -> [u8; 5] {
    let mut k = [RANK_TAG; 5];
    k[1..].copy_from_slice(&id.to_be_bytes());
    k
}

impl Directory {
    /// Loads every registered business from the registry tree.
    pub fn load(store: &StateStore) -> Result<Directory, StateError> {
        let mut map = BTreeMap::new();
        let mut ranks = BTreeMap::new();
        let mut cluster = None;
        let mut state = None;
        let mut tokens = Vec::new();
        let mut owners = BTreeMap::new();
        let mut board_limits = board_limits::BoardLimits::default();
        let mut placements = Placements::default();
        let mut entity_placements = EntityPlacements::default();
        for (k, v) in store.registry_entries()? {
            if k == PLACEMENTS_KEY {
                placements = decode::<PlacementsRecord>(&v)?.into_current();
                continue;
            }
            if k == ENTITY_PLACEMENTS_KEY {
                let EntityPlacementsRecord::V1(p) = decode::<EntityPlacementsRecord>(&v)?;
                entity_placements = p;
                continue;
            }
            if board_limits.load_record(&k, &v)? {
                continue;
            }
            if tokens::is_token_key(&k) {
                tokens.push(tokens::decode_record(&v)?);
            } else if owners::is_owner_key(&k) {
                let (rank, biz) = owners::decode_owner(&k, &v)?;
                owners.insert(rank, biz);
            } else if k == STATE_KEY {
                let StateRecord::V1(s) = decode::<StateRecord>(&v)?;
                state = Some(s);
            } else if k == CLUSTER_KEY {
                cluster = Some(decode::<ClusterMap>(&v)?);
            } else if k.len() == 5 && k[0] == RANK_TAG {
                let def: RankDef = decode(&v)?;
                ranks.insert(def.id, Arc::new(def));
            } else if k.len() == 4 {
                let biz: Business = decode(&v)?;
                map.insert(biz.id, biz);
            }
            // Other keys (at-most-once request records) are not views.
        }
        let state = state.or_else(|| cluster.map(ClusterState::from_map)).map(Arc::new);
        let cluster = state.as_ref().map(|s| Arc::new(s.map.clone()));
        Ok(Directory {
            inner: Arc::new(RwLock::new(map)),
            ranks: Arc::new(RwLock::new(ranks)),
            owners: Arc::new(RwLock::new(owners)),
            tokens: Arc::new(tokens::Tokens::from_records(tokens)),
            board_limits: Arc::new(board_limits),
            cluster: Arc::new(watch::channel(cluster).0),
            state: Arc::new(watch::channel(state).0),
            any_placed: Arc::new(AtomicBool::new(names_any(&placements))),
            placements: Arc::new(watch::channel(Arc::new(placements)).0),
            any_entity_placed: Arc::new(AtomicBool::new(names_any_entity(&entity_placements))),
            entity_placements: Arc::new(watch::channel(Arc::new(entity_placements)).0),
            moved_entities: Arc::default(),
        })
    }

    /// Replaces this view with the registry as stored (after the metadata
    /// group installed a snapshot). Every clone of the view sees the change.
    pub fn reload(&self, store: &StateStore) -> Result<(), StateError> {
        let fresh = Directory::load(store)?;
        let bizs = std::mem::take(&mut *fresh.inner.write().unwrap_or_else(|e| e.into_inner()));
        let ranks = std::mem::take(&mut *fresh.ranks.write().unwrap_or_else(|e| e.into_inner()));
        *self.inner.write().unwrap_or_else(|e| e.into_inner()) = bizs;
        // Owners before rankings: a reader never sees an owned ranking as shared.
        let owners = std::mem::take(&mut *fresh.owners.write().unwrap_or_else(|e| e.into_inner()));
        *self.owners.write().unwrap_or_else(|e| e.into_inner()) = owners;
        *self.ranks.write().unwrap_or_else(|e| e.into_inner()) = ranks;
        // `fresh` was built just above: its tokens have no other owner.
        let tokens = Arc::into_inner(fresh.tokens).unwrap_or_default();
        self.tokens.replace(tokens);
        let limits = Arc::into_inner(fresh.board_limits).unwrap_or_default();
        self.board_limits.replace(limits);
        let cluster = fresh.cluster.borrow().clone();
        self.cluster.send_replace(cluster);
        let state = fresh.state.borrow().clone();
        self.state.send_replace(state);
        let placements = fresh.placements.borrow().clone();
        self.set_placements(placements);
        let entity_placements = fresh.entity_placements.borrow().clone();
        self.set_entity_placements(entity_placements);
        Ok(())
    }

    /// The cluster map, once the metadata group has one.
    pub fn cluster(&self) -> Option<Arc<ClusterMap>> {
        self.cluster.borrow().clone()
    }

    /// Sees every change of the cluster map.
    pub fn watch_cluster(&self) -> watch::Receiver<Option<Arc<ClusterMap>>> {
        self.cluster.subscribe()
    }

    /// The cluster state as it changes (members and moves change it
    /// without always changing the map's placement).
    pub fn watch_state(&self) -> watch::Receiver<Option<Arc<ClusterState>>> {
        self.state.subscribe()
    }

    /// The cluster state (map, members, moves), once there is a map.
    pub fn cluster_state(&self) -> Option<Arc<ClusterState>> {
        self.state.borrow().clone()
    }

    /// Applies a new cluster map (a command logged before members existed):
    /// the state keeps what it knew of the members still in the map.
    pub fn apply_set_cluster(&self, m: &ClusterMap, ws: &mut WriteSet) -> Result<(), WireError> {
        let mut state = ClusterState::from_map(m.clone());
        if let Some(old) = self.cluster_state() {
            for member in &mut state.members {
                if let Some(known) = old.member(member.id) {
                    *member = known.clone();
                }
            }
        }
        self.apply_set_cluster_state(&state, ws)
    }

    /// Applies a new cluster state; its epoch must be above the current
    /// one, so a state proposed twice (a retry) or from an older view
    /// changes nothing.
    pub fn apply_set_cluster_state(
        &self,
        s: &ClusterState,
        ws: &mut WriteSet,
    ) -> Result<(), WireError> {
        let current = self.cluster().map_or(0, |c| c.epoch);
        if s.map.epoch <= current {
            return Err(WireError::bad_request(format!(
                "cluster map epoch {} is not above the current {current}",
                s.map.epoch
            )));
        }
        ws.put_registry(STATE_KEY, &encode(&StateRecord::V1(s.clone()))?);
        ws.del_registry(CLUSTER_KEY);
        self.cluster.send_replace(Some(Arc::new(s.map.clone())));
        self.state.send_replace(Some(Arc::new(s.clone())));
        Ok(())
    }

    fn ranks_read(&self) -> std::sync::RwLockReadGuard<'_, BTreeMap<RankId, Arc<RankDef>>> {
        self.ranks.read().unwrap_or_else(|e| e.into_inner())
    }

    /// A ranking definition; shared, since every scoring event consults it.
    pub fn rank(&self, id: RankId) -> Option<Arc<RankDef>> {
        self.ranks_read().get(&id).cloned()
    }

    pub fn ranks(&self) -> Vec<RankDef> {
        self.ranks_read().values().map(|d| (**d).clone()).collect()
    }

    /// Up to `n` rankings with ids above `after`, in id order (a page).
    pub fn ranks_after(&self, after: Option<RankId>, n: usize) -> Vec<(RankId, Arc<RankDef>)> {
        page_after(&self.ranks_read(), after, n)
    }

    /// Applies a ranking create. The id is the creator's: it is what scoring
    /// calls name, so it is never reassigned.
    pub fn apply_create_rank(
        &self,
        def: &RankDef,
        ws: &mut WriteSet,
    ) -> Result<RankDef, WireError> {
        self.create_rank(def, None, ws)
    }

    /// A ranking create, with the business it belongs to (`owners.rs`).
    /// The owner is published before the ranking, so no reader sees an
    /// owned ranking as shared.
    fn create_rank(
        &self,
        def: &RankDef,
        owner: Option<BizId>,
        ws: &mut WriteSet,
    ) -> Result<RankDef, WireError> {
        def.validate()?;
        let mut map = self.ranks.write().unwrap_or_else(|e| e.into_inner());
        if map.contains_key(&def.id) {
            return Err(WireError::bad_request(format!("ranking {} already exists", def.id)));
        }
        let value = encode(def)?;
        if let Some(biz) = owner {
            self.record_owner(def.id, biz, ws)?;
        }
        ws.put_registry(&rank_key(def.id), &value);
        map.insert(def.id, Arc::new(def.clone()));
        Ok(def.clone())
    }

    /// Replaces a ranking's mutable settings; structure stays as created.
    pub fn apply_update_rank(
        &self,
        u: &UpdateRank,
        ws: &mut WriteSet,
    ) -> Result<RankDef, WireError> {
        let mut map = self.ranks.write().unwrap_or_else(|e| e.into_inner());
        let Some(old) = map.get(&u.id) else {
            return Err(WireError::not_found(format!("ranking {} does not exist", u.id)));
        };
        u.settings.validate(&old.dims)?;
        let def = RankDef { settings: u.settings.clone(), ..(**old).clone() };
        ws.put_registry(&rank_key(def.id), &encode(&def)?);
        map.insert(def.id, Arc::new(def.clone()));
        Ok(def)
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, BTreeMap<BizId, Business>> {
        // No code panics while holding this lock; recover rather than cascade.
        self.inner.read().unwrap_or_else(|e| e.into_inner())
    }

    /// Reads one business in place: the router checks a business on every
    /// request and needs a flag at most, not a copy of its name.
    pub fn with<T>(&self, id: BizId, f: impl FnOnce(&Business) -> T) -> Option<T> {
        self.read().get(&id).map(f)
    }

    pub fn get(&self, id: BizId) -> Option<Business> {
        self.read().get(&id).cloned()
    }

    pub fn list(&self) -> Vec<Business> {
        self.read().values().cloned().collect()
    }

    /// Up to `n` businesses with ids above `after`, in id order (a page).
    pub fn list_after(&self, after: Option<BizId>, n: usize) -> Vec<(BizId, Business)> {
        page_after(&self.read(), after, n)
    }

    /// Applies a create: deterministic, so every replica assigns the same
    /// id (`rule` comes from the command, see [`IdRule`]).
    pub fn apply_create(
        &self,
        c: &CreateBiz,
        rule: IdRule,
        ws: &mut WriteSet,
    ) -> Result<Business, WireError> {
        c.validate()?;
        let mut map = self.inner.write().unwrap_or_else(|e| e.into_inner());
        let id = match c.id {
            Some(id) if map.contains_key(&id) => {
                return Err(WireError::bad_request(format!("business {id} already exists")))
            }
            Some(id) => id,
            None => assigned_id(&map, rule, MAX_BIZ_ID).ok_or_else(|| {
                WireError::bad_request(format!("no business ids left (all of 1..={MAX_BIZ_ID})"))
            })?,
        };
        let biz = Business { id, name: c.name.clone(), config: c.config.clone() };
        ws.put_registry(&id.to_be_bytes(), &encode(&biz)?);
        map.insert(id, biz.clone());
        Ok(biz)
    }

    pub fn apply_update(&self, u: &UpdateBiz, ws: &mut WriteSet) -> Result<Business, WireError> {
        u.validate()?;
        let mut map = self.inner.write().unwrap_or_else(|e| e.into_inner());
        let Some(biz) = map.get_mut(&u.id) else {
            return Err(WireError::not_found(format!("business {} does not exist", u.id)));
        };
        biz.config = u.config.clone();
        ws.put_registry(&u.id.to_be_bytes(), &encode(biz)?);
        Ok(biz.clone())
    }
}

/// How a create without an id picks one. The rule rides in the command
/// (`Command::CreateBiz` vs `CreateBizV2`), so a log entry is replayed under
/// the rule it was first applied with and every build computes the same id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IdRule {
    /// One above the highest id in use; none once the highest is the
    /// largest id. An explicit id at the top of the range (`biz create --id
    /// 4294967294`) thus used up assignment for good: the rule of entries
    /// logged before step 4.
    AfterHighest,
    /// One above the highest id in use, as before, so assigned ids keep
    /// counting up past explicit ones and never land in a gap someone may
    /// mean to fill; when nothing is free above the highest, the lowest free
    /// id. Assignment fails only when every id is taken. Businesses are
    /// never deleted, so an id is never handed out twice.
    AfterHighestOrLowestFree,
}

/// The id a create without one gets among the ids `taken` in `1..=max`.
/// Pure, and over any map so the rule is tested on a small range.
pub fn assigned_id<V>(taken: &BTreeMap<BizId, V>, rule: IdRule, max: BizId) -> Option<BizId> {
    let after_highest = match taken.keys().next_back() {
        None => Some(1),
        Some(&highest) => highest.checked_add(1).filter(|&id| id <= max),
    };
    match (after_highest, rule) {
        (Some(id), _) => Some(id),
        (None, IdRule::AfterHighest) => None,
        // The first gap in the sorted keys. Only reached once an id at the
        // very top is taken, so the walk is rare; it stops at the first gap.
        (None, IdRule::AfterHighestOrLowestFree) => {
            let mut want: BizId = 1;
            for &id in taken.keys() {
                if id != want {
                    break;
                }
                want = want.checked_add(1)?;
            }
            (want <= max).then_some(want)
        }
    }
}

pub(super) fn encode<T: serde::Serialize>(x: &T) -> Result<Vec<u8>, WireError> {
    let mut v = vec![VALUE_V1];
    codec::encode_into(x, &mut v).map_err(|e| WireError::internal(e.to_string()))?;
    Ok(v)
}

fn decode<T: serde::de::DeserializeOwned>(v: &[u8]) -> Result<T, StateError> {
    let corrupt = |detail: String| StateError::Corrupt { what: "registry", detail };
    match v.split_first() {
        Some((&VALUE_V1, rest)) => codec::from_bytes(rest).map_err(|e| corrupt(e.to_string())),
        _ => Err(corrupt(format!("unknown format {:?}", v.first()))),
    }
}

/// Up to `n` entries of `map` with keys above `after`, in key order.
fn page_after<K: Ord + Copy, V: Clone>(
    map: &BTreeMap<K, V>,
    after: Option<K>,
    n: usize,
) -> Vec<(K, V)> {
    let from = after.map_or(Bound::Unbounded, Bound::Excluded);
    map.range((from, Bound::Unbounded)).take(n).map(|(&k, v)| (k, v.clone())).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use plaudit_proto::BizConfig;

    #[test]
    fn assigned_ids_count_up_and_survive_reload() {
        let dir = tempfile::tempdir().unwrap();
        let db = sled::open(dir.path()).unwrap();
        let store = StateStore::open(&db).unwrap();
        let d = Directory::load(&store).unwrap();
        let mut ws = WriteSet::new(16);
        let c = |id, name: &str| CreateBiz { id, name: name.into(), config: BizConfig::default() };
        let rule = IdRule::AfterHighestOrLowestFree;
        assert_eq!(d.apply_create(&c(Some(5), "video"), rule, &mut ws).unwrap().id, 5);
        assert_eq!(d.apply_create(&c(None, "comment"), rule, &mut ws).unwrap().id, 6);
        assert!(d.apply_create(&c(Some(5), "dup"), rule, &mut ws).is_err());
        store.stage(ws);
        let again = Directory::load(&store).unwrap();
        assert_eq!(again.list().len(), 2);
        assert_eq!(again.get(6).unwrap().name, "comment");
    }

    #[test]
    fn an_explicit_id_at_the_top_leaves_assigned_ids_available() {
        let dir = tempfile::tempdir().unwrap();
        let db = sled::open(dir.path()).unwrap();
        let store = StateStore::open(&db).unwrap();
        let d = Directory::load(&store).unwrap();
        let mut ws = WriteSet::new(16);
        let c = |id, name: &str| CreateBiz { id, name: name.into(), config: BizConfig::default() };
        let rule = IdRule::AfterHighestOrLowestFree;
        d.apply_create(&c(Some(MAX_BIZ_ID), "top"), rule, &mut ws).unwrap();
        d.apply_create(&c(Some(2), "two"), rule, &mut ws).unwrap();
        let ids: Vec<BizId> = ["a", "b", "c"]
            .iter()
            .map(|n| d.apply_create(&c(None, n), rule, &mut ws).unwrap().id)
            .collect();
        assert_eq!(ids, vec![1, 3, 4], "the lowest free ids, around the explicit 2");
        // Entries logged under the old rule replay as they were applied.
        let old = d.apply_create(&c(None, "old"), IdRule::AfterHighest, &mut ws).unwrap_err();
        assert_eq!(old.code, plaudit_proto::ErrorCode::BadRequest);
    }

    /// The rule against a model that tries every id in order.
    fn model(taken: &std::collections::BTreeSet<BizId>, max: BizId) -> Option<BizId> {
        let highest = taken.iter().next_back().copied().unwrap_or(0);
        let free = |id: &BizId| !taken.contains(id);
        (highest + 1..=max).find(free).or_else(|| (1..=max).find(free))
    }

    proptest::proptest! {
        #[test]
        fn assigned_ids_are_free_and_follow_the_rule(
            taken in proptest::collection::btree_set(1u32..=12, 0..=12),
        ) {
            let max = 12;
            let map: BTreeMap<BizId, ()> = taken.iter().map(|&id| (id, ())).collect();
            let got = assigned_id(&map, IdRule::AfterHighestOrLowestFree, max);
            proptest::prop_assert_eq!(got, model(&taken, max));
            if let Some(id) = got {
                proptest::prop_assert!(!taken.contains(&id) && (1..=max).contains(&id));
            }
            // None only when every id is taken.
            proptest::prop_assert_eq!(got.is_none(), taken.len() == max as usize);
            let legacy = assigned_id(&map, IdRule::AfterHighest, max);
            let highest = taken.iter().next_back().copied().unwrap_or(0);
            proptest::prop_assert_eq!(legacy, (highest < max).then_some(highest + 1));
        }
    }

    #[test]
    fn rankings_sit_beside_businesses_and_only_settings_change() {
        use plaudit_proto::rankings::{Aggregation, RankDef, RankSettings, TieMode, UpdateRank};
        use plaudit_proto::window::{Granularity, UtcOffset};
        let dir = tempfile::tempdir().unwrap();
        let db = sled::open(dir.path()).unwrap();
        let store = StateStore::open(&db).unwrap();
        let d = Directory::load(&store).unwrap();
        let mut ws = WriteSet::new(16);
        let biz =
            CreateBiz { id: Some(0x7200_0000 | 7), name: "b".into(), config: BizConfig::default() };
        d.apply_create(&biz, IdRule::AfterHighestOrLowestFree, &mut ws).unwrap();
        let def = RankDef {
            id: 7,
            name: "gifts".into(),
            dims: vec!["ruid".into()],
            granularities: vec![Granularity::Day],
            utc_offset: UtcOffset::UTC,
            aggregation: Aggregation::Incr,
            ties: TieMode::LaterFirst,
            settings: RankSettings::default(),
        };
        d.apply_create_rank(&def, &mut ws).unwrap();
        assert!(d.apply_create_rank(&def, &mut ws).is_err(), "ids are never reused");
        let settings = RankSettings { cap: 5, ..RankSettings::default() };
        let u = UpdateRank { id: 7, settings: settings.clone() };
        assert_eq!(d.apply_update_rank(&u, &mut ws).unwrap().settings, settings);
        store.stage(ws);
        let again = Directory::load(&store).unwrap();
        assert_eq!(again.ranks(), vec![RankDef { settings, ..def }]);
        assert_eq!(again.list().len(), 1, "a business whose id starts with 'r' stays a business");
    }
}
