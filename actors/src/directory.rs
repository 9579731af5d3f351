//! The business registry: a pure core applied by the metadata group, and the
//! shared read view the router consults on every request (is the business
//! known, are dislikes enabled) without a Raft round trip.

use plaudit_proto::business::{Business, CreateBiz, UpdateBiz};
use plaudit_proto::limits::MAX_BIZ_ID;
use plaudit_proto::{codec, BizId, WireError};
use plaudit_storage::keys::VALUE_V1;
use plaudit_storage::{StateError, StateStore, WriteSet};
use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

#[derive(Clone, Default)]
pub struct Directory {
    inner: Arc<RwLock<BTreeMap<BizId, Business>>>,
}

impl Directory {
    /// Loads every registered business from the registry tree.
    pub fn load(store: &StateStore) -> Result<Directory, StateError> {
        let mut map = BTreeMap::new();
        for kv in store.registry().iter() {
            let (_, v) = kv?;
            let biz = decode(&v)?;
            map.insert(biz.id, biz);
        }
        Ok(Directory { inner: Arc::new(RwLock::new(map)) })
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

fn encode(biz: &Business) -> Result<Vec<u8>, WireError> {
    let mut v = vec![VALUE_V1];
    codec::encode_into(biz, &mut v).map_err(|e| WireError::internal(e.to_string()))?;
    Ok(v)
}

fn decode(v: &[u8]) -> Result<Business, StateError> {
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
        let mut ws = WriteSet::default();
        let c = |id, name: &str| CreateBiz { id, name: name.into(), config: BizConfig::default() };
        assert_eq!(d.apply_create(&c(Some(5), "video"), &mut ws).unwrap().id, 5);
        assert_eq!(d.apply_create(&c(None, "comment"), &mut ws).unwrap().id, 6);
        assert!(d.apply_create(&c(Some(5), "dup"), &mut ws).is_err());
        store.commit(ws).unwrap();
        let again = Directory::load(&store).unwrap();
        assert_eq!(again.list().len(), 2);
        assert_eq!(again.get(6).unwrap().name, "comment");
    }
}
