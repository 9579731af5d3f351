//! The shard's side of delivery between shards: the inbox (the highest seq
//! applied from each source shard, which makes delivery exactly-once) and
//! the outbox (derived deltas waiting to be delivered, numbered by a seq per
//! target shard).
//!
//! Outbox records are one per *(log entry, target)* (or several in a row,
//! of at most `MAX_RECORD_DELTAS` each, for a long one), with deltas in command
//! order: like deltas first, in the order of their commands, then owner
//! deltas, in the order of the delivered deltas that caused them, then
//! deltas sent on for entities that moved away (`likes/residence.rs`), in
//! the order they arrived or were held. A record
//! is then a function of its log entry alone. This matters after a crash:
//! openraft may replay the entries since the last checkpoint grouped into
//! apply calls differently, and a target may already have applied some of
//! the records; replay rebuilds the same records under the same seqs, and
//! the target skips what it has seen. (Records per apply call would reuse a
//! seq for different deltas, and counts would drift.)

use super::{ShardActor, ShardState};
use crate::command::Delta;
use crate::error::Fatal;
use plaudit_proto::{codec, ShardId};
use plaudit_storage::WriteSet;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;
use tokio::sync::Notify;

/// How apply tells the shard's delivery worker that records are waiting,
/// and for which targets, so that the worker reads only those.
#[derive(Default)]
pub struct OutboxSignal {
    targets: Mutex<BTreeSet<ShardId>>,
    notify: Notify,
}

impl OutboxSignal {
    fn mark(&self, targets: impl IntoIterator<Item = ShardId>) {
        // Only a set insert runs under the lock.
        self.targets.lock().unwrap_or_else(|e| e.into_inner()).extend(targets);
        self.notify.notify_one();
    }

    /// The targets marked since the last call.
    pub fn take(&self) -> BTreeSet<ShardId> {
        std::mem::take(&mut *self.targets.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// Resolves once something is marked (at once if marked since the last wait).
    pub async fn wait(&self) {
        self.notify.notified().await
    }
}

/// The most deltas one outbox record carries. A `Release` or a `Pass`
/// puts every delta held for an entity during its move into its entry's
/// record for the target, which for a hot entity held for seconds is
/// hundreds of thousands; a record is delivered whole, in one log entry
/// and one peer frame (32 MiB), so an entry's deltas for a target are
/// split into records of at most this many (~50 bytes each: ~400 KiB),
/// numbered in order.
pub const MAX_RECORD_DELTAS: usize = 8192;

/// Where a derived delta sits in its outbox record.
type OutboxOrder = (u8, usize);
const LIKE_DELTA: u8 = 0;
const OWNER_DELTA: u8 = 1;
const FORWARDED_DELTA: u8 = 2;

/// The derived deltas of one apply call, per (entry, target), not yet numbered.
#[derive(Default)]
pub(super) struct OutboxDraft {
    records: BTreeMap<(usize, ShardId), Vec<(OutboxOrder, Delta)>>,
}

impl OutboxDraft {
    /// A delta caused by the like at `(entry, cmd)`.
    pub fn like_delta(&mut self, entry: usize, cmd: usize, target: ShardId, d: Delta) {
        self.records.entry((entry, target)).or_default().push(((LIKE_DELTA, cmd), d));
    }

    /// The `k`th delivered delta of `entry`, or the `k`th held one a
    /// `Release` at `entry` lets go, sent on to where its entity moved.
    pub fn forwarded(&mut self, entry: usize, k: usize, target: ShardId, d: Delta) {
        self.records.entry((entry, target)).or_default().push(((FORWARDED_DELTA, k), d));
    }

    /// A delta caused by the `k`th delivered delta of `entry`.
    pub fn owner_delta(&mut self, entry: usize, k: usize, target: ShardId, d: Delta) {
        self.records.entry((entry, target)).or_default().push(((OWNER_DELTA, k), d));
    }
}

impl ShardActor {
    /// The highest seq applied from `source`.
    pub(super) fn inbox_seq(&self, state: &mut ShardState, source: ShardId) -> Result<u64, Fatal> {
        if let Some(s) = state.inbox.get(&source) {
            return Ok(*s);
        }
        let s = self.store.inbox_seq(self.cfg.shard, source)?;
        state.inbox.insert(source, s);
        Ok(s)
    }

    /// Numbers the draft's records per target, in entry order, writes
    /// them, and returns the targets that got records.
    pub(super) fn push_outbox(
        &self,
        state: &mut ShardState,
        ws: &mut WriteSet,
        draft: OutboxDraft,
    ) -> Result<BTreeSet<ShardId>, Fatal> {
        let mut targets = BTreeSet::new();
        for ((_, target), mut deltas) in draft.records {
            targets.insert(target);
            deltas.sort_by_key(|(order, _)| *order);
            let deltas: Vec<Delta> = deltas.into_iter().map(|(_, d)| d).collect();
            let mut next = match state.outbox_next.get(&target) {
                Some(n) => *n,
                None => self.store.outbox_next(self.cfg.shard, target)?,
            };
            for record in deltas.chunks(MAX_RECORD_DELTAS) {
                ws.push_outbox(self.cfg.shard, target, next, &codec::to_bytes(record)?);
                next += 1;
            }
            state.outbox_next.insert(target, next);
        }
        Ok(targets)
    }

    /// Tells the delivery worker which targets have new records.
    pub(super) fn signal_outbox(&self, targets: BTreeSet<ShardId>) {
        if !targets.is_empty() {
            self.outbox.mark(targets);
        }
    }
}
