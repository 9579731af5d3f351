//! Delivery of a shard's outbox: the derived deltas its applies produced
//! (user shard -> entity shard -> owner shard), one record per target per
//! applied batch. One worker per shard leader
//! reads pending entries in seq order, proposes them to the target shard as a
//! `Deliver` command, and once that is applied proposes an `Ack` to its own
//! shard, which deletes them.
//!
//! Exactly-once: a target ignores seqs it has already applied (its inbox is
//! replicated state), so a crash between `Deliver` and `Ack`, or a retry
//! after a timeout, only resends what the target will skip.

use crate::group::Group;
use plaudit_actors::{Command, Delta};
use plaudit_proto::codec;
use plaudit_storage::StateStore;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Notify;

pub struct Delivery {
    pub shard: u32,
    pub groups: Arc<Vec<Arc<Group>>>,
    pub store: StateStore,
    pub ready: Arc<Notify>,
    pub batch: usize,
}

impl Delivery {
    pub async fn run(self) {
        // Start with a pass: entries may be left from before a restart.
        loop {
            match self.drain().await {
                Ok(()) => {
                    // Sleep until an apply adds entries; the timeout is a
                    // safety net, not the delivery mechanism.
                    let _ =
                        tokio::time::timeout(Duration::from_secs(1), self.ready.notified()).await;
                }
                Err(e) => {
                    tracing::warn!(shard = self.shard, error = %e, "outbox delivery failed; retrying");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
    }

    async fn drain(&self) -> Result<(), String> {
        loop {
            let pending =
                self.store.outbox_pending(self.shard, self.batch).map_err(|e| e.to_string())?;
            if pending.is_empty() {
                return Ok(());
            }
            // Targets are independent: deliver to all of them at once, so one
            // round costs one commit wait, not one per target. The Acks of
            // the round coalesce into one entry on this shard.
            let rounds = pending.into_iter().map(|(target, items)| self.deliver(target, items));
            for res in futures::future::join_all(rounds).await {
                res?;
            }
        }
    }

    async fn deliver(&self, target: u32, items: Vec<(u64, Vec<u8>)>) -> Result<(), String> {
        let target_group = self
            .groups
            .get(target as usize)
            .ok_or_else(|| format!("outbox names shard {target}, which does not exist"))?;
        let mut seqs = Vec::with_capacity(items.len());
        let mut records = Vec::with_capacity(items.len());
        for (seq, bytes) in items {
            let ds: Vec<Delta> = codec::from_bytes(&bytes).map_err(|e| e.to_string())?;
            seqs.push(seq);
            records.push((seq, ds));
        }
        target_group
            .propose(Command::Deliver { source: self.shard, records })
            .await
            .map_err(|e| e.to_string())?;
        let source = &self.groups[self.shard as usize];
        source.propose(Command::Ack { target, seqs }).await.map_err(|e| e.to_string())?;
        Ok(())
    }
}
