//! Applying the steps of an entity's move on a shard (the decisions are
//! `crate::residence`'s and `likes/residence.rs`'s), the deltas held while
//! the entity is frozen (or, on its home, during a move from elsewhere),
//! the barriers that drain a source, and what the rest of the node asks of
//! residence: whether the entity's reads are served here, and the frozen
//! entity's copy for the target.
//!
//! ```text
//! MoveEntity(step) ─> Residences::step ─> entry stored (shard meta `e:`), published to the node
//!                                       └─ Import:  the entity's state here replaced by the copy
//!                                                   (deltas held for a move back home stay held)
//!                                       └─ Release: the entity dropped; its held deltas to the outbox for the target
//!                                       └─ Discard: the copy dropped (on its home: the held deltas to the source)
//!                                       └─ Unfreeze: its held deltas applied here
//!                                       └─ Hold:    a barrier to the source in the outbox
//!                                       └─ Pass:    the held deltas to the target, or applied here
//! Deliver ─> per entity delta: applied | held (meta `h:`, numbered) | sent on (outbox)
//!        ─> per barrier: the entity drained (its move may freeze it)
//! likers page ─> readable? else Moved(shard); counts: the node's `MovedEntities`
//! ```

use super::apply::Applied;
use super::likes::LikesPlan;
use super::{ShardActor, ShardState};
use crate::command::{CmdResult, Delta, EntityDelta};
use crate::error::{Fatal, ShardError};
use crate::likes::residence::{EntityCopy, EntityResidences, EntityStep};
use crate::residence::{Effect, MoveCmdOf, Residence, ResidenceRecord, Residences};
use plaudit_proto::placement::{EntityKey, MoveId};
use plaudit_proto::{codec, BizId, EntityId, ShardId, WireError};
use plaudit_storage::{CountsRec, WriteSet};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;

/// How a held delta is stored (variants only appended).
#[derive(Serialize, Deserialize)]
enum HeldRecord {
    V1(EntityDelta),
}

/// The error a reader of an entity gets when it lives elsewhere.
pub fn entity_moved(biz: BizId, entity: EntityId, to: ShardId) -> WireError {
    WireError::moved(to, format!("entity {biz}:{entity} is served by shard {to}"))
}

impl ShardActor {
    /// Reads the shard's entity residence entries from the store and
    /// publishes what it gave away (at start, and after a snapshot replaced
    /// the state: reads of counts consult the published view, not this
    /// actor).
    pub(super) fn load_entity_residences(&self, state: &mut ShardState) -> Result<(), Fatal> {
        let mut entries = Vec::new();
        for (biz, entity, v) in self.store.entity_residences(self.cfg.shard)? {
            let r: ResidenceRecord = codec::from_bytes(&v)?;
            entries.push((EntityKey { biz, entity }, r.entry()));
        }
        let res = Residences::new(self.cfg.shard, self.cfg.shard_count, entries);
        self.publish_moved(&res);
        state.entity_residences = Some(res);
        state.held.clear();
        Ok(())
    }

    pub(super) fn entity_residences<'s>(
        &self,
        state: &'s mut ShardState,
    ) -> Result<&'s mut EntityResidences, Fatal> {
        if state.entity_residences.is_none() {
            self.load_entity_residences(state)?;
        }
        state
            .entity_residences
            .as_mut()
            .ok_or_else(|| Fatal::Invariant("entity residences vanished on load".into()))
    }

    /// Publishes the shard's moved entities, after a batch that changed a
    /// residence was staged.
    pub(super) fn publish_moved_entities(&self, state: &ShardState) {
        if let Some(res) = &state.entity_residences {
            self.publish_moved(res);
        }
    }

    fn publish_moved(&self, res: &EntityResidences) {
        let entries = res.entries().map(|(k, r)| match r {
            Residence::Away { to } | Residence::Held { to } => (k.biz, k.entity, Some(to)),
            Residence::Frozen { .. }
            | Residence::Incoming
            | Residence::IncomingHeld
            | Residence::Here
            | Residence::Drained => (k.biz, k.entity, None),
        });
        self.directory.moved_entities().set_shard(self.cfg.shard, entries);
    }

    /// Applies one step of an entity's move (an entry that carries one is
    /// applied in a call of its own, `apply.rs`). A step that does not fit
    /// the entity's residence is a rejected command: nothing changes.
    pub(super) fn apply_entity_move(
        &self,
        state: &mut ShardState,
        step: &EntityStep,
        likes: &mut LikesPlan,
        out: &mut Applied,
        (entry, delivered): (usize, &mut usize),
    ) -> Result<CmdResult, Fatal> {
        let shard = self.cfg.shard;
        let cmd = &step.cmd;
        let key = *cmd.key();
        let was = self.entity_residences(state)?.get(&key);
        let (effect, next) = match self.entity_residences(state)?.step(step.mv, cmd) {
            Ok(done) => done,
            Err(e) => return Ok(CmdResult::Failed(e)),
        };
        let value = next.map(|(r, mv)| codec::to_bytes(&ResidenceRecord::V2(r, mv))).transpose()?;
        out.ws.put_entity_residence(shard, key.biz, key.entity, value.as_deref());
        // Sends what is held for the entity on to `to`, in order.
        let mut pass = |state: &mut ShardState, out: &mut Applied, to: ShardId| {
            for d in self.take_held(state, &mut out.ws, key)? {
                out.outbox.forwarded(entry, *delivered, to, Delta::Entity(d));
                *delivered += 1;
            }
            Ok::<_, Fatal>(())
        };
        match (effect, cmd) {
            (Effect::Install, MoveCmdOf::Import(copy)) => {
                // Whatever this shard had for the entity goes first: the
                // copy is the whole truth. (What it holds for a move back
                // home stays held, for the pass.)
                self.drop_entity(state, &mut out.ws, key)?;
                install(&mut out.ws, shard, copy);
            }
            (Effect::Drop, MoveCmdOf::Release { to, .. }) => {
                self.drop_entity(state, &mut out.ws, key)?;
                pass(state, out, *to)?;
            }
            (Effect::Drop, _) => self.drop_entity(state, &mut out.ws, key)?,
            (Effect::DropAndPass(to), _) => {
                self.drop_entity(state, &mut out.ws, key)?;
                pass(state, out, to)?;
            }
            (Effect::PassHeld(to), _) => pass(state, out, to)?,
            (Effect::Barrier(to), _) => {
                let d = Delta::Barrier { biz: key.biz, entity: key.entity, mv: step.mv };
                out.outbox.forwarded(entry, *delivered, to, d);
                *delivered += 1;
            }
            (Effect::ApplyHeld, _) => {
                for d in self.take_held(state, &mut out.ws, key)? {
                    likes.entity_delta(d, entry, delivered);
                }
            }
            (Effect::None, MoveCmdOf::Unfreeze { .. })
                if matches!(was, Some(Residence::Frozen { .. })) =>
            {
                for d in self.take_held(state, &mut out.ws, key)? {
                    likes.entity_delta(d, entry, delivered);
                }
            }
            _ => {}
        }
        out.moved_entities = true;
        tracing::info!(
            shard,
            biz = key.biz,
            entity = key.entity,
            step = cmd.name(),
            "entity move step applied"
        );
        Ok(CmdResult::Done)
    }

    /// Marks the entities of delivered move barriers drained (their home
    /// sent everything before holding their deltas), so those moves may
    /// freeze them. At once, as each `Deliver` is planned: a freeze later
    /// in the same entry must find it.
    pub(super) fn drain_barriers(
        &self,
        state: &mut ShardState,
        out: &mut Applied,
        barriers: Vec<(EntityKey, MoveId)>,
    ) -> Result<(), Fatal> {
        let shard = self.cfg.shard;
        for (key, mv) in barriers {
            match self.entity_residences(state)?.drained(&key, mv) {
                Some((r, mv)) => {
                    let v = codec::to_bytes(&ResidenceRecord::V2(r, mv))?;
                    out.ws.put_entity_residence(shard, key.biz, key.entity, Some(&v));
                    out.moved_entities = true;
                    tracing::info!(
                        shard,
                        biz = key.biz,
                        entity = key.entity,
                        mv,
                        "entity drained for its move"
                    );
                }
                // A move given up before its barrier arrived leaves one
                // behind: nothing to do.
                None => tracing::debug!(
                    shard,
                    biz = key.biz,
                    entity = key.entity,
                    mv,
                    "a move's barrier for an entity not taking deltas here, or late: ignored"
                ),
            }
        }
        Ok(())
    }

    /// Stores the deltas delivered for entities that hold them (frozen, or
    /// on their home during a move from elsewhere), numbered per entity
    /// in arrival order. Called as each `Deliver` is planned, so that a
    /// `Release` or `Unfreeze` later in the same entry finds them.
    pub(super) fn hold_deltas(
        &self,
        state: &mut ShardState,
        ws: &mut WriteSet,
        held: Vec<EntityDelta>,
    ) -> Result<(), Fatal> {
        let shard = self.cfg.shard;
        for d in held {
            let key = EntityKey { biz: d.biz, entity: d.entity };
            let kept = self.held_of(state, key)?;
            let seq = kept.last().map_or(1, |(seq, _)| seq + 1);
            let v = codec::to_bytes(&HeldRecord::V1(d))?;
            ws.put_held_delta(shard, key.biz, key.entity, seq, Some(&v));
            kept.push((seq, d));
        }
        Ok(())
    }

    /// The deltas held for `key`, as stored (read at the first use after a
    /// start or a snapshot) and since.
    fn held_of<'s>(
        &self,
        state: &'s mut ShardState,
        key: EntityKey,
    ) -> Result<&'s mut Vec<(u64, EntityDelta)>, Fatal> {
        match state.held.entry(key) {
            std::collections::hash_map::Entry::Occupied(e) => Ok(e.into_mut()),
            std::collections::hash_map::Entry::Vacant(e) => {
                let mut kept = Vec::new();
                for (seq, v) in self.store.held_deltas(self.cfg.shard, key.biz, key.entity)? {
                    let HeldRecord::V1(d) = codec::from_bytes(&v)?;
                    kept.push((seq, d));
                }
                Ok(e.insert(kept))
            }
        }
    }

    /// The deltas held for `key`, oldest first, forgotten here.
    fn take_held(
        &self,
        state: &mut ShardState,
        ws: &mut WriteSet,
        key: EntityKey,
    ) -> Result<Vec<EntityDelta>, Fatal> {
        let kept = std::mem::take(self.held_of(state, key)?);
        state.held.remove(&key);
        let mut out = Vec::with_capacity(kept.len());
        for (seq, d) in kept {
            ws.put_held_delta(self.cfg.shard, key.biz, key.entity, seq, None);
            out.push(d);
        }
        Ok(out)
    }

    /// Drops the entity's derived state here: its actor, counts and likers.
    fn drop_entity(
        &self,
        state: &mut ShardState,
        ws: &mut WriteSet,
        key: EntityKey,
    ) -> Result<(), Fatal> {
        let shard = self.cfg.shard;
        if let Some(a) = state.entities.remove(&(key.biz, key.entity)) {
            a.stop(None);
        }
        for item in self.store.all_likers(key.biz, shard, key.entity)? {
            ws.del_liker(key.biz, shard, key.entity, item.mtime, item.id);
        }
        ws.del_counts(key.biz, shard, key.entity);
        Ok(())
    }

    /// Whether this shard serves reads of the entity, as a wire error if not.
    pub(super) fn entity_readable(
        &self,
        state: &mut ShardState,
        biz: BizId,
        entity: EntityId,
    ) -> Result<(), ShardError> {
        self.entity_residences(state)?
            .entity_readable(biz, entity)
            .map_err(|to| ShardError::Rejected(entity_moved(biz, entity, to)))
    }

    /// The copy of an entity this shard froze for a move.
    pub(super) fn export_entity(
        &self,
        state: &mut ShardState,
        key: EntityKey,
    ) -> Result<EntityCopy, ShardError> {
        match self.entity_residences(state)?.get(&key) {
            Some(Residence::Frozen { .. }) => {}
            other => {
                return Err(ShardError::Rejected(WireError::refused(format!(
                    "shard {}: entity {}:{} is not frozen here ({other:?})",
                    self.cfg.shard, key.biz, key.entity
                ))))
            }
        }
        let shard = self.cfg.shard;
        // Applies write through to the store before they answer, so the
        // store holds everything the frozen entity applied.
        let c = self.store.get_counts(key.biz, shard, key.entity)?;
        let likers = self.store.all_likers(key.biz, shard, key.entity)?;
        Ok(EntityCopy {
            key,
            likes: c.likes,
            dislikes: c.dislikes,
            owner: c.owner,
            likers: likers.into_iter().map(|i| (i.mtime, i.id)).collect(),
        })
    }
}

fn install(ws: &mut WriteSet, shard: ShardId, c: &EntityCopy) {
    let (biz, entity) = (c.key.biz, c.key.entity);
    let counts = CountsRec { likes: c.likes, dislikes: c.dislikes, owner: c.owner };
    ws.put_counts(biz, shard, entity, counts);
    for &(mtime, user) in &c.likers {
        ws.add_liker(biz, shard, entity, mtime, user);
    }
}

/// The deltas held per frozen entity, with their seqs, loaded lazily
/// (`ShardState::held`): bounded by what arrives during a move.
pub(super) type Held = HashMap<EntityKey, Vec<(u64, EntityDelta)>>;
