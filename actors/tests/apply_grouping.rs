//! Apply must give the same stored state however committed entries are
//! grouped into apply calls: openraft hands a leader its entries one or two
//! at a time, a follower in larger runs, and a node replaying its log after
//! a crash in one big call. A replica whose state depends on the grouping
//! diverges from the others (found by the cluster tests: acknowledgements
//! applied before the records they acknowledge, in one replayed call, left
//! the records behind).
//!
//! The property: a random history (likes, deliveries with derived deltas,
//! acknowledgements of real outbox records, scoring events, board drops) is
//! applied one entry at a time to one store, and in random groups to
//! another; their snapshot exports (every key of the shard, held boards'
//! images included) must be equal. The second shard holds no actor or
//! board between calls (a budget of 0), so the property also says that a
//! board written back after every call stores what a held board's image
//! says.

use plaudit_actors::active::Budget;
use plaudit_actors::command::{Dedup, Delta, EntityDelta, ScoreCmd, ScoreEvent};
use plaudit_actors::{ApplyEntry, Batch, Command, Directory, ShardActor, ShardConfig, ShardHandle};
use plaudit_proto::likes::LikeRequest;
use plaudit_proto::rankings::{Aggregation, TieMode};
use plaudit_proto::LikeAction;
use plaudit_storage::StateStore;
use proptest::prelude::*;
use std::sync::Arc;
use std::time::Duration;

const SHARD: u32 = 0;
const SHARDS: u32 = 3;

/// One generated command, before acknowledgements are filled in.
#[derive(Debug, Clone)]
enum Gen {
    Like {
        user: u64,
        entity: u64,
        action: u8,
        owner: bool,
    },
    Deliver {
        entity: u64,
        user: u64,
        like: bool,
    },
    Score {
        board: u8,
        item: u64,
        event: u64,
    },
    Drop {
        board: u8,
    },
    /// Acknowledge the oldest pending records of one target (filled in
    /// from the reference store's outbox at that point).
    Ack {
        target: u32,
        count: usize,
    },
}

fn gen_cmd() -> impl Strategy<Value = Gen> {
    prop_oneof![
        6 => (0..6u64, 0..8u64, 0..4u8, any::<bool>())
            .prop_map(|(user, entity, action, owner)| Gen::Like { user, entity, action, owner }),
        2 => (0..8u64, 0..6u64, any::<bool>())
            .prop_map(|(entity, user, like)| Gen::Deliver { entity, user, like }),
        3 => (0..2u8, 0..5u64, 0..40u64).prop_map(|(board, item, event)| Gen::Score { board, item, event }),
        1 => (0..2u8).prop_map(|board| Gen::Drop { board }),
        3 => (0..SHARDS, 1..4usize).prop_map(|(target, count)| Gen::Ack { target, count }),
    ]
}

async fn shard(store: &StateStore, budget: usize) -> ShardHandle {
    let actor = ShardActor {
        cfg: ShardConfig {
            shard: SHARD,
            shard_count: SHARDS,
            is_meta: false,
            actor_budget: Budget::new(budget),
            actor_idle: Duration::from_secs(60),
        },
        store: store.clone(),
        directory: Directory::default(),
        outbox: Arc::default(),
        gauges: Arc::default(),
        boards: Default::default(),
    };
    ShardHandle::spawn(actor).await.unwrap()
}

fn open() -> (tempfile::TempDir, sled::Db, StateStore) {
    let dir = tempfile::tempdir().unwrap();
    let db = sled::open(dir.path()).unwrap();
    let store = StateStore::open(&db).unwrap();
    (dir, db, store)
}

/// The shard's snapshot export: every key of its state, in order. It holds
/// at least the applied id, so two of them never agree by being empty.
async fn dump(handle: &ShardHandle, store: &StateStore) -> Vec<u8> {
    let frozen = handle.freeze().await.unwrap();
    let mut out = Vec::new();
    let stats = store.export(&frozen, false, b"", &mut out).unwrap();
    assert!(stats.items > 0, "an export without even the applied id");
    out
}

fn board_cmd(board: u8, item: u64, event: u64) -> Command {
    Command::ScoreV2(ScoreCmd {
        rank: 1,
        type_key: vec![board],
        item,
        aggregation: Aggregation::Incr,
        ties: TieMode::LaterFirst,
        cap: 3,
        events: vec![ScoreEvent { score: 1 + (event % 5) as i64, sub: None, event_id: event }],
        dedup: Dedup::DEFAULT,
    })
}

/// Turns generated entries into real ones, applying them one at a time to
/// the reference shard (acknowledgements name records it really holds).
async fn build_history(
    entries: Vec<Vec<Gen>>,
    reference: &ShardHandle,
    store: &StateStore,
) -> Vec<(u64, Batch)> {
    let mut out = Vec::new();
    let mut deliver_seq = 0;
    for (i, gens) in entries.into_iter().enumerate() {
        let mut cmds = Vec::new();
        for g in gens {
            match g {
                Gen::Like { user, entity, action, owner } => {
                    cmds.push(Command::Like(LikeRequest {
                        biz: 1,
                        entity,
                        user,
                        owner: owner.then_some(100 + entity % 2),
                        action: LikeAction::ALL[action as usize],
                    }))
                }
                Gen::Deliver { entity, user, like } => {
                    deliver_seq += 1;
                    let d = EntityDelta {
                        biz: 1,
                        entity,
                        owner: Some(200 + entity % 3),
                        user,
                        d_likes: if like { 1 } else { 0 },
                        d_dislikes: if like { 0 } else { 1 },
                        liker_added: like.then_some(1000 + i as u64),
                        liker_removed: None,
                    };
                    let received = Delta::Received { biz: 1, owner: 300 + user, d_likes: 1 };
                    cmds.push(Command::Deliver {
                        source: 2,
                        records: vec![(deliver_seq, vec![Delta::Entity(d), received])],
                    });
                }
                Gen::Score { board, item, event } => cmds.push(board_cmd(board, item, event)),
                Gen::Drop { board } => {
                    cmds.push(Command::DropBoard { rank: 1, type_key: vec![board] })
                }
                Gen::Ack { target, count } => {
                    let pending =
                        store.outbox_after(SHARD, target, 0, (count, usize::MAX)).unwrap();
                    if !pending.is_empty() {
                        let seqs = pending.into_iter().map(|(s, _)| s).collect();
                        cmds.push(Command::Ack { target, seqs });
                    }
                }
            }
        }
        let batch = Batch::new(1000 + i as u64 * 7, cmds);
        reference.apply(vec![entry(i as u64, &batch)]).await.unwrap();
        out.push((i as u64, batch));
    }
    out
}

fn entry(index: u64, batch: &Batch) -> ApplyEntry {
    ApplyEntry {
        log_id: index.to_be_bytes().to_vec(),
        membership: None,
        batch: Some(batch.clone()),
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn stored_state_does_not_depend_on_how_entries_are_grouped(
        entries in prop::collection::vec(prop::collection::vec(gen_cmd(), 1..5), 1..40),
        groups in prop::collection::vec(1..12usize, 1..40),
    ) {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
        rt.block_on(async {
            let (_a, _db_a, store_a) = open();
            let reference = shard(&store_a, 3).await;
            let history = build_history(entries, &reference, &store_a).await;

            let (_b, _db_b, store_b) = open();
            let grouped = shard(&store_b, 0).await;
            let mut rest = history.as_slice();
            let mut sizes = groups.iter().cycle();
            while !rest.is_empty() {
                let n = (*sizes.next().unwrap()).min(rest.len());
                let call = rest[..n].iter().map(|(i, b)| entry(*i, b)).collect();
                grouped.apply(call).await.unwrap();
                rest = &rest[n..];
            }
            let (a, b) = (dump(&reference, &store_a).await, dump(&grouped, &store_b).await);
            reference.stop().await;
            grouped.stop().await;
            prop_assert_eq!(a, b);
            Ok(())
        })?;
    }
}
