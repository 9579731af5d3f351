//! Where moved boards and entities live, as the metadata group records
//! them (`Command::SetPlacementsV2`, `SetEntityPlacements`): each under its
//! registry key, versioned, and applied only above the current epoch (a
//! change proposed twice, or from an older view, changes nothing).

use super::{encode, Directory, MovedEntities};
use plaudit_proto::placement::v1::PlacementsV1;
use plaudit_proto::placement::{EntityPlacements, Placements};
use plaudit_proto::{BizId, WireError};
use plaudit_storage::WriteSet;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use tokio::sync::watch;

/// The placements' key (`PlacementsRecord`).
pub(super) const PLACEMENTS_KEY: &[u8] = b"placements";
/// The entity placements' key (`EntityPlacementsRecord`).
pub(super) const ENTITY_PLACEMENTS_KEY: &[u8] = b"entity-placements";

/// How the placements are stored: versioned, variants only appended.
#[derive(serde::Serialize, serde::Deserialize)]
pub(super) enum PlacementsRecord {
    /// Before moves had ids: read with every move's id 0.
    V1(PlacementsV1),
    V2(Placements),
}

impl PlacementsRecord {
    pub(super) fn into_current(self) -> Placements {
        match self {
            PlacementsRecord::V1(p) => p.into(),
            PlacementsRecord::V2(p) => p,
        }
    }
}

/// How the entity placements are stored: versioned, variants only appended.
#[derive(serde::Serialize, serde::Deserialize)]
pub(super) enum EntityPlacementsRecord {
    V1(EntityPlacements),
}

pub(super) fn names_any(p: &Placements) -> bool {
    !p.placed.is_empty() || !p.moves.is_empty()
}

pub(super) fn names_any_entity(p: &EntityPlacements) -> bool {
    !p.placed.is_empty()
}

/// Refuses an epoch not above the current one.
fn above(what: &str, epoch: u64, current: u64) -> Result<(), WireError> {
    if epoch <= current {
        return Err(WireError::bad_request(format!(
            "{what} epoch {epoch} is not above the current {current}"
        )));
    }
    Ok(())
}

impl Directory {
    pub(super) fn set_entity_placements(&self, p: Arc<EntityPlacements>) {
        self.any_entity_placed.store(names_any_entity(&p), Ordering::Release);
        self.entity_placements.send_replace(p);
    }

    /// Moved entities and the moves under way.
    pub fn entity_placements(&self) -> Arc<EntityPlacements> {
        self.entity_placements.borrow().clone()
    }

    /// The shard an entity lives on: its hash shard unless it was moved
    /// (a load while no entity ever was).
    pub fn entity_shard(&self, biz: BizId, entity: u64, shards: u32) -> u32 {
        if !self.any_entity_placed.load(Ordering::Acquire) {
            return plaudit_proto::routing::shard_of(biz, entity, shards);
        }
        self.entity_placements.borrow().entity_shard(biz, entity, shards)
    }

    /// Applies new entity placements, only above the current epoch.
    pub fn apply_set_entity_placements(
        &self,
        p: &EntityPlacements,
        ws: &mut WriteSet,
    ) -> Result<(), WireError> {
        above("entity placements", p.epoch, self.entity_placements().epoch)?;
        ws.put_registry(ENTITY_PLACEMENTS_KEY, &encode(&EntityPlacementsRecord::V1(p.clone()))?);
        self.set_entity_placements(Arc::new(p.clone()));
        Ok(())
    }

    /// Entities this node's shard replicas gave away.
    pub fn moved_entities(&self) -> &MovedEntities {
        &self.moved_entities
    }

    pub(super) fn set_placements(&self, p: Arc<Placements>) {
        self.any_placed.store(names_any(&p), Ordering::Release);
        self.placements.send_replace(p);
    }

    /// Whether any board was moved or is moving (a load: no lock).
    pub fn any_placed(&self) -> bool {
        self.any_placed.load(Ordering::Acquire)
    }

    /// Moved sub-boards and the moves under way.
    pub fn placements(&self) -> Arc<Placements> {
        self.placements.borrow().clone()
    }

    /// Sees every change of the placements.
    pub fn watch_placements(&self) -> watch::Receiver<Arc<Placements>> {
        self.placements.subscribe()
    }

    /// Applies new placements; like the cluster state, only above the
    /// current epoch (a change proposed twice, or from an older view,
    /// changes nothing).
    pub fn apply_set_placements(&self, p: &Placements, ws: &mut WriteSet) -> Result<(), WireError> {
        above("placements", p.epoch, self.placements().epoch)?;
        ws.put_registry(PLACEMENTS_KEY, &encode(&PlacementsRecord::V2(p.clone()))?);
        self.set_placements(Arc::new(p.clone()));
        Ok(())
    }
}
