//! The boards that queries named lately, remembered per worker thread: a
//! query for a board named before skips parsing its type id, checking it
//! against the ranking, encoding its key and hashing that key to a shard.
//!
//! Measured on rank-of against one 100,000-member board
//! (`docs/benchmarks.md`): that naming was about 8% of the node, as much
//! as a third of the rank lookup itself.
//!
//! Why a hit is the answer the full check gives: `route::board_of` is a
//! pure function of the ranking's definition and the board reference
//! (a reference by time resolves through the ranking's windows and UTC
//! offset, both in the definition, never through the clock), and the
//! shard is a pure function of the key and the shard count. The
//! definition is compared by pointer: the directory puts a new `Arc` for
//! every change, and an entry holds its `Arc`, so an old one's address
//! cannot be reused while it is remembered.
//!
//! Memory: at most `BOARDS` entries per worker thread (each a reference
//! of at most 256 bytes of type id, or a checked dimension list, its key
//! and its type id's text, again at most 256 bytes); past that the memo starts over, and so it does when a ranking's
//! definition changes (entries hold only current definitions). A thread, not a connection,
//! because a node's connections query the same boards.

use crate::hash_buckets::HashBuckets;
use plaudit_actors::rankings::route;
use plaudit_proto::keyed_hash::KeyedHash;
use plaudit_proto::rankings::RankDef;
use plaudit_proto::routing::board_shard;
use plaudit_proto::scoring::BoardRef;
use plaudit_proto::window::TypeId;
use plaudit_proto::{ShardId, WireError};
use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::Arc;

/// Boards one thread remembers.
pub const BOARDS: usize = 4096;

/// A named board: its type id (and its text, which a list reply carries:
/// formatting it per reply was 1% of the rankings mix), key and shard.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Named {
    pub type_id: TypeId,
    pub type_text: String,
    pub key: Vec<u8>,
    pub shard: ShardId,
}

struct Entry {
    /// Keeps the definition alive, so its address names it.
    def: Arc<RankDef>,
    shards: u32,
    board: BoardRef,
    named: Named,
}

/// Remembered boards, by a hash of (definition address, shard count,
/// reference) (`hash_buckets.rs`).
#[derive(Default)]
pub struct BoardMemo {
    boards: HashBuckets<Entry, BOARDS>,
    /// The definition (address) each ranking's entries were made under: a
    /// changed one starts the memo over, so old definitions are not kept
    /// alive (one can hold filter lists of thousands of values).
    defs: HashMap<u32, usize, KeyedHash>,
}

impl BoardMemo {
    /// Calls `f` with the board `board` names under `def`, or returns the
    /// error the full check gives (errors are not remembered).
    pub fn with<R>(
        &mut self,
        def: &Arc<RankDef>,
        board: &BoardRef,
        shards: u32,
        f: impl FnOnce(&Named) -> R,
    ) -> Result<R, WireError> {
        let addr = Arc::as_ptr(def) as usize;
        let h = self.boards.hash((addr, shards, board));
        let is = |e: &Entry| Arc::ptr_eq(&e.def, def) && e.shards == shards && e.board == *board;
        if let Some((_, e)) = self.boards.find(h, is) {
            return Ok(f(&e.named));
        }
        let named = name(def, board, shards)?;
        let out = f(&named);
        if self.defs.get(&def.id).is_some_and(|&a| a != addr) {
            self.boards.clear();
            self.defs.clear();
        }
        let entry = Entry { def: def.clone(), shards, board: board.clone(), named };
        if self.boards.insert(h, entry) {
            self.defs.clear();
        }
        self.defs.insert(def.id, addr);
        Ok(out)
    }

    /// Boards remembered now.
    pub fn len(&self) -> usize {
        self.boards.len()
    }

    pub fn is_empty(&self) -> bool {
        self.boards.is_empty()
    }
}

/// The full check: what the memo remembers.
pub fn name(def: &RankDef, board: &BoardRef, shards: u32) -> Result<Named, WireError> {
    let type_id = route::board_of(def, board)?;
    let key = type_id.to_key();
    let shard = board_shard(def.id, &key, shards);
    Ok(Named { type_text: type_id.format(), type_id, key, shard })
}

thread_local! {
    static MEMO: RefCell<BoardMemo> = RefCell::new(BoardMemo::default());
}

/// [`BoardMemo::with`] on this thread's memo.
pub fn with_named<R>(
    def: &Arc<RankDef>,
    board: &BoardRef,
    shards: u32,
    f: impl FnOnce(&Named) -> R,
) -> Result<R, WireError> {
    MEMO.with(|m| m.borrow_mut().with(def, board, shards, f))
}

#[cfg(test)]
mod tests {
    use super::*;
    use plaudit_proto::rankings::{Aggregation, RankSettings, TieMode};
    use plaudit_proto::window::{Granularity, UtcOffset};
    use proptest::prelude::*;

    const TS: i64 = 1713165315; // 2024-04-15 15:15:15 at +08:00

    fn def(id: u32) -> Arc<RankDef> {
        Arc::new(RankDef {
            id,
            name: "gifts".into(),
            dims: vec!["ruid".into()],
            granularities: vec![Granularity::Total, Granularity::Day],
            utc_offset: UtcOffset::parse("+08:00").unwrap(),
            aggregation: Aggregation::Incr,
            ties: TieMode::EarlierFirst,
            settings: RankSettings::default(),
        })
    }

    fn at(ruid: u64, granularity: Granularity, ts: i64) -> BoardRef {
        BoardRef::At { dims: vec![("ruid".into(), ruid)], granularity, ts }
    }

    fn named(memo: &mut BoardMemo, d: &Arc<RankDef>, b: &BoardRef, shards: u32) -> Named {
        memo.with(d, b, shards, Named::clone).expect("a board")
    }

    proptest! {
        /// Asked twice, in any order among others, the memo gives what the
        /// full check gives.
        #[test]
        fn a_hit_is_what_the_full_check_gives(
            asks in prop::collection::vec((0u64..6, any::<bool>(), 0i64..400_000, 1u32..20), 1..40),
        ) {
            let d = def(3);
            let mut memo = BoardMemo::default();
            for (ruid, daily, offset, shards) in asks.iter().chain(asks.iter()) {
                let g = if *daily { Granularity::Day } else { Granularity::Total };
                let b = at(*ruid, g, TS + offset);
                let n = named(&mut memo, &d, &b, *shards);
                prop_assert_eq!(&n.type_text, &n.type_id.format());
                prop_assert_eq!(n, name(&d, &b, *shards).unwrap());
                let by_id = BoardRef::TypeId(name(&d, &b, *shards).unwrap().type_id.format());
                prop_assert_eq!(named(&mut memo, &d, &by_id, *shards), name(&d, &b, *shards).unwrap());
            }
        }
    }

    #[test]
    fn a_changed_definition_is_checked_again() {
        let mut memo = BoardMemo::default();
        let b = at(1, Granularity::Total, TS);
        let old = def(3);
        named(&mut memo, &old, &b, 8);
        // The directory's new `Arc` for a changed ranking: here, fewer
        // granularities, so the same reference is refused now.
        let new = Arc::new(RankDef { granularities: vec![Granularity::Day], ..(*old).clone() });
        assert!(memo.with(&new, &b, 8, |_| ()).is_err());
        assert_eq!(memo.len(), 1, "errors are not remembered");
        assert_eq!(named(&mut memo, &old, &b, 8), name(&old, &b, 8).unwrap());
        // A remembered board under the new definition lets the old go.
        let daily = at(1, Granularity::Day, TS);
        assert_eq!(named(&mut memo, &new, &daily, 8), name(&new, &daily, 8).unwrap());
        assert_eq!((memo.len(), Arc::strong_count(&old)), (1, 1));
    }

    #[test]
    fn the_memo_is_bounded() {
        let d = def(3);
        let mut memo = BoardMemo::default();
        for ruid in 0..(BOARDS as u64 + 10) {
            named(&mut memo, &d, &at(ruid, Granularity::Total, TS), 8);
            assert!(memo.len() <= BOARDS);
        }
        assert_eq!(memo.len(), 10, "it starts over once full");
    }
}
