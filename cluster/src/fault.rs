//! What tests look into a running node with: cutting its links to other
//! nodes (fault injection), a digest of every group's state to compare
//! replicas, and the outbox records still pending. Served by the admin
//! endpoint only when fault injection is on.

use crate::engine::Engine;
use crate::types::NodeId;

impl Engine {
    /// Cuts this node's links to `nodes` (and heals all others): the fault
    /// injection seam for tests.
    pub fn cut_links(&self, nodes: std::collections::BTreeSet<NodeId>) {
        let newly = self.links.set(nodes);
        for n in &newly {
            self.peers.disconnect(*n);
        }
        if let Some(c) = self.control.lock().unwrap_or_else(|e| e.into_inner()).clone() {
            c.cut(&newly);
        }
    }

    /// `(shard, applied index, state hash)` of every shard held here, for
    /// tests that compare replicas (`GET /debug/digest`). A shard's applied
    /// index is the last entry of its group that changed it
    /// (`group_apply.rs`), the same on every replica at the same state.
    pub async fn digests(&self) -> Vec<(u32, u64, u64)> {
        let mut out = Vec::new();
        for g in self.router.local() {
            let meta = g.gid == self.router.meta_id;
            for (shard, handle) in g.handles() {
                // Frozen by the shard, with the boards it holds; hashed on
                // the blocking pool (a walk of the whole state).
                let digest = match handle.freeze().await {
                    Ok(frozen) => {
                        let store = self.store.clone();
                        tokio::task::spawn_blocking(move || store.digest_frozen(&frozen, meta))
                            .await
                            .map_err(|e| e.to_string())
                            .and_then(|r| r.map_err(|e| e.to_string()))
                    }
                    Err(e) => Err(e.to_string()),
                };
                out.push(match digest {
                    Ok((applied, hash)) => {
                        let applied: Option<crate::types::LogId> =
                            applied.and_then(|a| plaudit_proto::codec::from_bytes(&a).ok());
                        (shard, applied.map_or(0, |l| l.index), hash)
                    }
                    // A snapshot export holds the shard: no comparable answer
                    // now (an index no replica reports makes the caller retry).
                    Err(_) => (shard, u64::MAX, 0),
                });
            }
        }
        out
    }

    /// Pending outbox records of every shard held here: `(shard, target,
    /// seqs)`, for tests that look into a stuck delivery.
    pub fn outbox_dump(&self) -> Vec<(u32, u32, Vec<u64>)> {
        let mut out = Vec::new();
        for g in self.router.local() {
            for shard in g.shard_ids() {
                for t in self.store.outbox_targets(shard).unwrap_or_default() {
                    let seqs = self
                        .store
                        .outbox_after(shard, t, 0, (10_000, usize::MAX))
                        .unwrap_or_default()
                        .into_iter()
                        .map(|(s, _)| s)
                        .collect();
                    out.push((shard, t, seqs));
                }
            }
        }
        out
    }
}
