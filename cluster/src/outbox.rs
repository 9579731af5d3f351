//! Delivery of a shard's outbox: the derived deltas its applies produced
//! (user shard -> entity shard -> owner shard), one record per target per
//! log entry, numbered by a seq per (source, target).
//!
//! One worker per shard replica, active only while this node leads the shard. For
//! each target with pending records it reads from where it stopped (a cursor
//! per target, so a long backlog is never rescanned), proposes them to the
//! target shard as one `Deliver`, and once that is applied proposes an `Ack`
//! to its own shard, which deletes them. Targets are served concurrently,
//! each one round at a time, so records reach a target in seq order.
//!
//! Exactly-once: a target ignores seqs it has already applied (its inbox is
//! replicated state), so a crash or leader change between `Deliver` and
//! `Ack`, or a retry after a timeout, only resends what the target skips.
//! Cursors are this node's memory only: they are reset whenever it becomes
//! leader again, since another leader may have acknowledged, or left, any
//! record meanwhile.

use crate::group::Group;
use crate::peer::wire::{PeerRequest, PeerResponse};
use crate::router::{Hop, Router};
use futures::stream::{FuturesUnordered, StreamExt};
use plaudit_actors::{Command, Delta, OutboxSignal};
use plaudit_proto::{codec, ShardId};
use plaudit_storage::StateStore;
use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long a worker waits before retrying a target whose delivery failed.
const RETRY_AFTER: Duration = Duration::from_millis(50);
/// A safety net: look for work this often even without a signal.
const IDLE_CHECK: Duration = Duration::from_secs(1);
/// A delivery stops adding records once it carries this many bytes: it is
/// one command in one log entry on the target, and one peer frame (32 MiB)
/// when the target's leader is elsewhere. A record is at most
/// `MAX_RECORD_DELTAS` deltas (`actors/src/shard/delivery.rs`), so the
/// first one always fits.
const MAX_DELIVER_BYTES: usize = 4 << 20;

pub struct Delivery {
    pub shard: ShardId,
    /// The replica it delivers for (it ends with it).
    pub group: std::sync::Weak<Group>,
    pub router: Arc<Router>,
    pub store: StateStore,
    pub signal: Arc<OutboxSignal>,
    pub batch: usize,
}

/// Where the worker is, per target.
#[derive(Default)]
struct Cursors {
    /// The highest seq acknowledged by this leader's own rounds.
    after: BTreeMap<ShardId, u64>,
    /// Targets that may have records beyond their cursor.
    pending: BTreeSet<ShardId>,
    /// Targets with a round in flight.
    busy: BTreeSet<ShardId>,
    /// Targets to retry after a failed round, and from when.
    retry_at: BTreeMap<ShardId, Instant>,
}

type Round<'a> =
    Pin<Box<dyn Future<Output = (ShardId, Result<Option<(u64, bool)>, String>)> + Send + 'a>>;

impl Delivery {
    /// The group this worker delivers for, while this node holds it: a
    /// replica moved away (or moved away and back, a new `Group`) ends it.
    fn own(&self) -> Option<Arc<Group>> {
        let g = self.router.group(self.shard)?;
        let same = self.group.upgrade().is_some_and(|mine| Arc::ptr_eq(&mine, &g));
        same.then_some(g)
    }

    /// Delivers while this node leads the shard. Each target progresses on
    /// its own: a target without a leader (its rounds fail until the
    /// deadline) holds up no other target.
    pub async fn run(self) {
        loop {
            let Some(own) = self.own() else { return };
            // Taken before the look, so a change right after it wakes us.
            let mut leadership = own.leadership_watch();
            if !own.is_leader() {
                // Followers keep the replicated outbox but never deliver it.
                leadership.wait(IDLE_CHECK).await;
                continue;
            }
            drop(own);
            // Newly leading: start over from what storage says is pending.
            let mut cursors = Cursors::default();
            match self.store.outbox_targets(self.shard) {
                Ok(t) => cursors.pending.extend(t),
                Err(e) => {
                    tracing::warn!(shard = self.shard, error = %e, "reading the outbox failed");
                    tokio::time::sleep(RETRY_AFTER).await;
                    continue;
                }
            }
            self.lead(&mut cursors).await;
        }
    }

    /// Runs rounds until this node stops leading (rounds in flight are
    /// dropped then: the next leader starts from storage).
    async fn lead(&self, cursors: &mut Cursors) {
        let mut rounds: FuturesUnordered<Round<'_>> = FuturesUnordered::new();
        loop {
            if !self.own().is_some_and(|g| g.is_leader()) {
                return;
            }
            cursors.pending.extend(self.signal.take());
            let now = Instant::now();
            let ready: Vec<ShardId> = cursors
                .pending
                .iter()
                .copied()
                .filter(|t| !cursors.busy.contains(t))
                .filter(|t| cursors.retry_at.get(t).is_none_or(|at| *at <= now))
                .collect();
            for t in ready {
                cursors.pending.remove(&t);
                cursors.busy.insert(t);
                let after = cursors.after.get(&t).copied().unwrap_or(0);
                rounds.push(Box::pin(async move { (t, self.deliver(t, after).await) }));
            }
            let wake = cursors.retry_at.values().min().copied().unwrap_or(now + IDLE_CHECK);
            tokio::select! {
                Some((t, res)) = rounds.next(), if !rounds.is_empty() => {
                    cursors.busy.remove(&t);
                    match res {
                        Ok(Some((last, full))) => {
                            cursors.after.insert(t, last);
                            cursors.retry_at.remove(&t);
                            if full {
                                cursors.pending.insert(t);
                            }
                        }
                        Ok(None) => {
                            cursors.retry_at.remove(&t);
                        }
                        Err(e) => {
                            tracing::debug!(shard = self.shard, target = t, error = %e, "delivery failed; retrying");
                            cursors.pending.insert(t);
                            cursors.retry_at.insert(t, Instant::now() + RETRY_AFTER);
                        }
                    }
                }
                _ = self.signal.wait() => {}
                _ = tokio::time::sleep_until(wake.into()) => {}
            }
        }
    }

    /// Delivers the records after `after` to `target` and acknowledges them:
    /// `Some((last seq, whether the batch was full))`, `None` if there were none.
    async fn deliver(&self, target: ShardId, after: u64) -> Result<Option<(u64, bool)>, String> {
        let items = self
            .store
            .outbox_after(self.shard, target, after, (self.batch, MAX_DELIVER_BYTES))
            .map_err(|e| e.to_string())?;
        let Some(&(last, _)) = items.last() else { return Ok(None) };
        let full = items.len() >= self.batch;
        let mut seqs = Vec::with_capacity(items.len());
        let mut records = Vec::with_capacity(items.len());
        for (seq, bytes) in items {
            let ds: Vec<Delta> = codec::from_bytes(&bytes).map_err(|e| e.to_string())?;
            seqs.push(seq);
            records.push((seq, ds));
        }
        self.deliver_to(target, Command::Deliver { source: self.shard, records })
            .await
            .map_err(|e| e.to_string())?;
        let own = self.own().ok_or("this node no longer holds the shard")?;
        own.propose(self.shard, Command::Ack { target, seqs }).await.map_err(|e| e.to_string())?;
        Ok(Some((last, full)))
    }

    /// Proposes a `Deliver` on the target shard's leader, here or elsewhere.
    async fn deliver_to(
        &self,
        target: ShardId,
        cmd: Command,
    ) -> Result<(), plaudit_proto::WireError> {
        let cmd = &cmd;
        self.router
            .on_leader(
                target,
                false,
                |g| async move { g.propose(target, cmd.clone()).await.map(|_| ()) },
                |n| async move {
                    let req = PeerRequest::Propose { group: target, cmd: cmd.clone(), shed: None };
                    self.router
                        .call(n, req, |r| match r {
                            PeerResponse::Propose(Ok(_)) => Ok(()),
                            PeerResponse::Propose(Err(e)) => Err(Hop::Answer(e)),
                            other => Err(Hop::unexpected(other)),
                        })
                        .await
                },
            )
            .await
    }
}
