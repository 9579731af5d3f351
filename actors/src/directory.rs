//! The registry of businesses and ranking definitions: applied by the
//! metadata group, and the shared read view the router consults on every
//! request (is the business known, are dislikes enabled, what are this
//! ranking's windows and filters) without a Raft round trip.
//!
//! Registry keys: a business is its 4-byte big-endian id; a ranking is
//! `b'r'` + its 4-byte id; the cluster map is `b"cluster"`; at-most-once
//! request records (`shard/once.rs`) are 8 or 9 bytes. Lengths differ, so
//! no two kinds collide.

use plaudit_proto::business::{Business, CreateBiz, UpdateBiz};
use plaudit_proto::cluster::ClusterMap;
use plaudit_proto::limits::MAX_BIZ_ID;
use plaudit_proto::rankings::{RankDef, RankId, UpdateRank};
use plaudit_proto::{codec, BizId, WireError};
use plaudit_storage::keys::VALUE_V1;
use plaudit_storage::{StateError, StateStore, WriteSet};
use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};
use tokio::sync::watch;

#[derive(Clone)]
pub struct Directory {
    inner: Arc<RwLock<BTreeMap<BizId, Business>>>,
    ranks: Arc<RwLock<BTreeMap<RankId, Arc<RankDef>>>>,
    /// The cluster map, watched by the node (it starts the groups the map
    /// places on it).
    cluster: Arc<watch::Sender<Option<Arc<ClusterMap>>>>,
}

impl Default for Directory {
    fn default() -> Self {
        Directory {
            inner: Arc::default(),
            ranks: Arc::default(),
            cluster: Arc::new(watch::channel(None).0),
        }
    }
}

const RANK_TAG: u8 = b'r';
/// The cluster map's registry key (no business or ranking key has 7 bytes).
const CLUSTER_KEY: &[u8] = b"cluster";

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
        for (k, v) in store.registry_entries()? {
            if k == CLUSTER_KEY {
                cluster = Some(Arc::new(decode::<ClusterMap>(&v)?));
            } else if k.len() == 5 && k[0] == RANK_TAG {
                let def: RankDef = decode(&v)?;
                ranks.insert(def.id, Arc::new(def));
            } else if k.len() == 4 {
                let biz: Business = decode(&v)?;
                map.insert(biz.id, biz);
            }
            // Other keys (at-most-once request records) are not views.
        }
        Ok(Directory {
            inner: Arc::new(RwLock::new(map)),
            ranks: Arc::new(RwLock::new(ranks)),
            cluster: Arc::new(watch::channel(cluster).0),
        })
    }

    /// Replaces this view with the registry as stored (after the metadata
    /// group installed a snapshot). Every clone of the view sees the change.
    pub fn reload(&self, store: &StateStore) -> Result<(), StateError> {
        let fresh = Directory::load(store)?;
        let bizs = std::mem::take(&mut *fresh.inner.write().unwrap_or_else(|e| e.into_inner()));
        let ranks = std::mem::take(&mut *fresh.ranks.write().unwrap_or_else(|e| e.into_inner()));
        *self.inner.write().unwrap_or_else(|e| e.into_inner()) = bizs;
        *self.ranks.write().unwrap_or_else(|e| e.into_inner()) = ranks;
        let cluster = fresh.cluster.borrow().clone();
        self.cluster.send_replace(cluster);
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

    /// Applies a new cluster map; its epoch must be above the current one,
    /// so a map proposed twice (a retry) or from an older view changes
    /// nothing.
    pub fn apply_set_cluster(&self, m: &ClusterMap, ws: &mut WriteSet) -> Result<(), WireError> {
        let current = self.cluster().map_or(0, |c| c.epoch);
        if m.epoch <= current {
            return Err(WireError::bad_request(format!(
                "cluster map epoch {} is not above the current {current}",
                m.epoch
            )));
        }
        ws.put_registry(CLUSTER_KEY, &encode(m)?);
        self.cluster.send_replace(Some(Arc::new(m.clone())));
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

    /// Applies a ranking create. The id is the creator's: it is what scoring
    /// calls name, so it is never reassigned.
    pub fn apply_create_rank(
        &self,
        def: &RankDef,
        ws: &mut WriteSet,
    ) -> Result<RankDef, WireError> {
        def.validate()?;
        let mut map = self.ranks.write().unwrap_or_else(|e| e.into_inner());
        if map.contains_key(&def.id) {
            return Err(WireError::bad_request(format!("ranking {} already exists", def.id)));
        }
        ws.put_registry(&rank_key(def.id), &encode(def)?);
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

    /// Applies a create: deterministic, so every replica assigns the same id.
    pub fn apply_create(&self, c: &CreateBiz, ws: &mut WriteSet) -> Result<Business, WireError> {
        c.validate()?;
        let mut map = self.inner.write().unwrap_or_else(|e| e.into_inner());
        let id = match c.id {
            Some(id) if map.contains_key(&id) => {
                return Err(WireError::bad_request(format!("business {id} already exists")))
            }
            Some(id) => id,
            None => {
                let next = map.keys().next_back().map_or(1, |k| k + 1);
                if next > MAX_BIZ_ID {
                    return Err(WireError::bad_request("no business ids left"));
                }
                next
            }
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

fn encode<T: serde::Serialize>(x: &T) -> Result<Vec<u8>, WireError> {
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
        assert_eq!(d.apply_create(&c(Some(5), "video"), &mut ws).unwrap().id, 5);
        assert_eq!(d.apply_create(&c(None, "comment"), &mut ws).unwrap().id, 6);
        assert!(d.apply_create(&c(Some(5), "dup"), &mut ws).is_err());
        store.stage(ws);
        let again = Directory::load(&store).unwrap();
        assert_eq!(again.list().len(), 2);
        assert_eq!(again.get(6).unwrap().name, "comment");
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
        d.apply_create(&biz, &mut ws).unwrap();
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
