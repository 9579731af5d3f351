//! The retention sweep: a background worker that finds sub-boards whose
//! window is older than their ranking keeps and proposes their deletion on
//! the board's own shard, so every replica deletes the same boards at the
//! same log position.
//!
//! Only the shard's leader proposes (a follower's proposal would fail with
//! `NotLeader` anyway); `total` boards never expire. New events for an
//! expired window are refused at the edge, so a dropped board stays dropped.

use crate::router::Router;
use plaudit_actors::rankings::route::is_kept;
use plaudit_actors::{Command, Directory};
use plaudit_proto::window::{Granularity, TypeId};
use plaudit_storage::StateStore;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Boards read per shard and ranking per page of a sweep.
const PAGE: usize = 1000;

pub async fn run(router: Arc<Router>, store: StateStore, directory: Directory, every: Duration) {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let now = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs() as i64);
        let groups: Vec<_> =
            router.local().into_iter().filter(|g| g.gid != router.meta_id).collect();
        match sweep(&groups, &store, &directory, now).await {
            Ok(0) => {}
            Ok(n) => tracing::info!(dropped = n, "retention sweep deleted expired sub-boards"),
            Err(e) => tracing::warn!(error = %e, "retention sweep failed; retrying next period"),
        }
    }
}

/// One pass over every ranking and shard this node leads; returns how many
/// boards it deleted.
pub async fn sweep(
    groups: &[Arc<crate::group::Group>],
    store: &StateStore,
    directory: &Directory,
    now: i64,
) -> Result<usize, String> {
    let mut dropped = 0;
    for def in directory.ranks() {
        if def.granularities.iter().all(|g| *g == Granularity::Total) {
            continue;
        }
        for (g, shard) in groups.iter().flat_map(|g| g.shard_ids().map(move |s| (g, s))) {
            if !g.is_leader() {
                continue;
            }
            let mut after: Option<Vec<u8>> = None;
            loop {
                let page = store
                    .boards_on_shard(def.id, shard, after.as_deref(), PAGE)
                    .map_err(|e| e.to_string())?;
                let Some((last, _)) = page.last() else { break };
                after = Some(last.clone());
                for (type_key, _) in &page {
                    let expired = TypeId::from_key(type_key).is_some_and(|t| {
                        t.gran != Granularity::Total && !is_kept(&def, t.gran, t.start, now)
                    });
                    if expired {
                        let cmd = Command::DropBoard { rank: def.id, type_key: type_key.clone() };
                        g.propose(shard, cmd).await.map_err(|e| e.to_string())?;
                        dropped += 1;
                    }
                }
                if page.len() < PAGE {
                    break;
                }
            }
        }
    }
    Ok(dropped)
}
