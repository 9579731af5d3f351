//! Staged writes, checkpoints and snapshots against a model: every read
//! sees what was staged, in the right order, whether or not a checkpoint
//! has moved it into the trees yet; a store restarted from the last
//! snapshot (what a crash leaves, before the log is replayed) holds exactly
//! what that snapshot held, applied id included, whatever was staged or
//! checkpointed after it.

use plaudit_storage::snapshot::read_header;
use plaudit_storage::{CheckpointPolicy, StateStore, WriteSet};
use proptest::prelude::*;
use std::collections::{BTreeMap, BTreeSet};

const SHARD: u32 = 3;
const BIZ: u32 = 9;

#[derive(Debug, Clone)]
enum Step {
    Received {
        owner: u64,
        total: u64,
    },
    AddItem {
        user: u64,
        mtime: u64,
        entity: u64,
    },
    DelItem {
        user: u64,
        mtime: u64,
        entity: u64,
    },
    Checkpoint,
    Snapshot,
    Restart,
    /// An export holds the trees still (writes go to the overlay)...
    Freeze,
    /// ... until it ends.
    Thaw,
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        4 => (0..6u64, 0..1000u64).prop_map(|(owner, total)| Step::Received { owner, total }),
        4 => (0..3u64, 0..12u64, 0..4u64)
            .prop_map(|(user, mtime, entity)| Step::AddItem { user, mtime, entity }),
        3 => (0..3u64, 0..12u64, 0..4u64)
            .prop_map(|(user, mtime, entity)| Step::DelItem { user, mtime, entity }),
        1 => Just(Step::Checkpoint),
        1 => Just(Step::Snapshot),
        1 => Just(Step::Restart),
        1 => Just(Step::Freeze),
        1 => Just(Step::Thaw),
    ]
}

#[derive(Debug, Clone, Default, PartialEq)]
struct Model {
    received: BTreeMap<u64, u64>,
    items: BTreeMap<u64, BTreeSet<(u64, u64)>>,
    applied: u64,
}

fn check(s: &StateStore, m: &Model) {
    for owner in 0..6 {
        let want = m.received.get(&owner).copied().unwrap_or(0);
        assert_eq!(s.get_received(BIZ, SHARD, owner).unwrap(), want, "received of {owner}");
    }
    for user in 0..3 {
        let want: Vec<(u64, u64)> =
            m.items.get(&user).map(|set| set.iter().rev().copied().collect()).unwrap_or_default();
        // Whole list, then pages of 2 walked by cursor: both newest first.
        let all = s.user_list(BIZ, SHARD, user, None, 100).unwrap();
        assert_eq!(all.iter().map(|i| (i.mtime, i.id)).collect::<Vec<_>>(), want, "user {user}");
        let mut paged = Vec::new();
        let mut cursor = None;
        loop {
            let page = s.user_list(BIZ, SHARD, user, cursor, 2).unwrap();
            paged.extend(page.iter().map(|i| (i.mtime, i.id)));
            match page.last() {
                Some(last) if page.len() == 2 => {
                    cursor =
                        Some(plaudit_proto::likes::PageCursor { mtime: last.mtime, id: last.id })
                }
                _ => break,
            }
        }
        assert_eq!(paged, want, "pages of user {user}");
    }
    let applied = s.applied(SHARD).unwrap().map(|v| u64::from_be_bytes(v[..8].try_into().unwrap()));
    assert_eq!(applied.unwrap_or(0), m.applied);
}

/// A snapshot of `SHARD` as a file holds it.
fn snapshot(s: &StateStore) -> Vec<u8> {
    let frozen = s.freeze(SHARD).unwrap();
    let mut file = Vec::new();
    s.export(&frozen, false, b"", &mut file).unwrap();
    file
}

/// A new store with `file` installed (or nothing, as a new node starts).
fn restart(policy: CheckpointPolicy, file: Option<&[u8]>) -> (tempfile::TempDir, StateStore) {
    let dir = tempfile::tempdir().unwrap();
    let db = sled::open(dir.path()).unwrap();
    let s = StateStore::open_with(&db, policy).unwrap();
    if let Some(mut input) = file {
        read_header(&mut input).unwrap();
        s.install(SHARD, false, &mut input).unwrap();
    }
    (dir, s)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn reads_follow_staged_writes_and_restarts_go_back_to_the_last_snapshot(
        steps in proptest::collection::vec(step(), 1..60),
        max_keys in 1usize..8,
    ) {
        // A tiny key limit makes `checkpoint_due` fire often, as under load.
        let policy = CheckpointPolicy { max_keys, max_age: std::time::Duration::from_secs(3600) };
        let (mut _dir, mut store) = restart(policy, None);
        let mut model = Model::default();
        let mut durable = Model::default();
        let mut file: Option<Vec<u8>> = None;
        // A held export and the state it holds.
        let mut frozen: Option<(plaudit_storage::snapshot::Frozen, Model)> = None;
        for (i, st) in steps.into_iter().enumerate() {
            let mut ws = WriteSet::new(SHARD);
            match st {
                Step::Received { owner, total } => {
                    ws.put_received(BIZ, SHARD, owner, total);
                    model.received.insert(owner, total);
                }
                Step::AddItem { user, mtime, entity } => {
                    ws.add_user_item(BIZ, SHARD, user, mtime, entity);
                    model.items.entry(user).or_default().insert((mtime, entity));
                }
                Step::DelItem { user, mtime, entity } => {
                    ws.del_user_item(BIZ, SHARD, user, mtime, entity);
                    model.items.entry(user).or_default().remove(&(mtime, entity));
                }
                Step::Checkpoint => store.checkpoint(SHARD).unwrap(),
                Step::Snapshot => match &frozen {
                    // The held export's view: the state when it froze.
                    Some((f, at)) => {
                        let mut bytes = Vec::new();
                        store.export(f, false, b"", &mut bytes).unwrap();
                        file = Some(bytes);
                        durable = at.clone();
                    }
                    None => {
                        file = Some(snapshot(&store));
                        durable = model.clone();
                    }
                },
                Step::Restart => {
                    frozen = None;
                    (_dir, store) = restart(policy, file.as_deref());
                    model = durable.clone();
                }
                Step::Freeze => {
                    if frozen.is_none() {
                        frozen = Some((store.freeze(SHARD).unwrap(), model.clone()));
                    }
                }
                Step::Thaw => frozen = None,
            }
            if !ws.is_empty() {
                // Every applied batch carries its log position, as the shard's do.
                let n = i as u64 + 1;
                ws.put_applied(SHARD, &n.to_be_bytes());
                model.applied = n;
                store.stage(ws);
                if store.checkpoint_due(SHARD) {
                    store.checkpoint(SHARD).unwrap();
                }
            }
            check(&store, &model);
        }
    }
}

#[test]
fn a_restart_holds_what_the_snapshot_held_and_nothing_after_it() {
    let policy = CheckpointPolicy::default();
    let (_d, s) = restart(policy, None);
    let mut ws = WriteSet::new(SHARD);
    ws.put_received(BIZ, SHARD, 1, 10);
    ws.put_applied(SHARD, &1u64.to_be_bytes());
    s.stage(ws);
    assert!(!s.checkpoint_due(SHARD), "one key, just staged: not due under the default policy");
    let file = snapshot(&s);
    let mut ws = WriteSet::new(SHARD);
    ws.put_received(BIZ, SHARD, 1, 11);
    ws.put_applied(SHARD, &2u64.to_be_bytes());
    s.stage(ws);
    s.checkpoint(SHARD).unwrap();
    assert_eq!(s.get_received(BIZ, SHARD, 1).unwrap(), 11);
    let (_e, again) = restart(policy, Some(&file));
    assert_eq!(again.get_received(BIZ, SHARD, 1).unwrap(), 10);
    assert_eq!(again.applied(SHARD).unwrap().as_deref(), Some(&1u64.to_be_bytes()[..]));
}

#[test]
fn a_checkpoint_is_due_by_age_once_no_export_holds_it_back() {
    let dir = tempfile::tempdir().unwrap();
    let db = sled::open(dir.path()).unwrap();
    let policy =
        CheckpointPolicy { max_keys: 1_000_000, max_age: std::time::Duration::from_millis(20) };
    let s = StateStore::open_with(&db, policy).unwrap();
    assert!(!s.checkpoint_due(SHARD), "nothing staged");
    let frozen = s.freeze(SHARD).unwrap();
    let mut ws = WriteSet::new(SHARD);
    ws.put_received(BIZ, SHARD, 1, 10);
    s.stage(ws);
    assert_eq!(s.get_received(BIZ, SHARD, 1).unwrap(), 10, "read from the overlay");
    std::thread::sleep(std::time::Duration::from_millis(30));
    assert!(!s.checkpoint_due(SHARD), "never due while frozen");
    drop(frozen);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while !s.checkpoint_due(SHARD) {
        assert!(std::time::Instant::now() < deadline, "never became due");
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    s.checkpoint(SHARD).unwrap();
    assert!(!s.checkpoint_due(SHARD), "a checkpoint empties the overlay");
}
