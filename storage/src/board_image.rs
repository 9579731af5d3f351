//! A held sub-board's rows, made from the board's state rather than read
//! from its ranking tree.
//!
//! Why: a shard holds its busy boards in memory (`actors::board_host`) and
//! those are the truth while held. Staging every changed member, the
//! board's header and its open event-id record with every batch, and then
//! checkpointing them into a tree of millions of keys, was a fifth of cold
//! scoring's CPU (docs/benchmarks.md), for rows nobody reads while the
//! board is held. So a held board's tree rows may be stale; they are
//! brought up to date when the shard lets the board go (`write_back`), and
//! a snapshot takes a changed held board's rows from its image instead of
//! the tree (`Merged`), so a snapshot holds the same bytes whichever
//! boards a replica happens to hold.
//!
//! An image's rows are a pure function of the board's state: members in
//! item order, the header, and the remembered event ids, run by run (the
//! ids of one second), in records of up to `RECORD_IDS` numbered from 1. A
//! replica that held the board throughout and one that wrote it back and
//! loaded it again export the same rows.

use crate::boards::{
    events_value, key, member_value, meta_value, BoardMeta, KIND_BOARD, KIND_EVENTS, KIND_MEMBER,
};
use crate::state::WriteSet;
use crate::trees::TreeRef;
use std::collections::HashSet;
use std::iter::Peekable;

/// Event ids per stored record.
pub const RECORD_IDS: usize = 64;

/// A sub-board's state as its shard holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BoardImage {
    pub rank: u32,
    pub type_key: Vec<u8>,
    /// `(item, score, tie)`, in item order.
    pub members: Vec<(u64, i64, u64)>,
    /// The header; `next_events` is set from `events` by `new`.
    pub meta: BoardMeta,
    /// The remembered event ids as `(second, ids)` runs, oldest first.
    pub events: Vec<(u64, Vec<u64>)>,
}

/// One stored row: `(key, value)`.
pub type Row = (Vec<u8>, Vec<u8>);

impl BoardImage {
    pub fn new(
        rank: u32,
        type_key: Vec<u8>,
        mut members: Vec<(u64, i64, u64)>,
        mut meta: BoardMeta,
        events: Vec<(u64, Vec<u64>)>,
    ) -> BoardImage {
        members.sort_unstable_by_key(|m| m.0);
        meta.size = members.len() as u64;
        let mut image = BoardImage { rank, type_key, members, meta, events };
        image.meta.next_events = image.records() + 1;
        image
    }

    /// How many event-id records its rows hold (numbered `1..=records`).
    pub fn records(&self) -> u64 {
        self.events.iter().map(|(_, ids)| ids.len().div_ceil(RECORD_IDS) as u64).sum()
    }

    /// The event-id records: `(second, ids)` of up to `RECORD_IDS`, in order.
    fn event_records(&self) -> impl Iterator<Item = (u64, &[u64])> + '_ {
        self.events
            .iter()
            .flat_map(|(second, ids)| ids.chunks(RECORD_IDS).map(move |c| (*second, c)))
    }

    /// Its rows of one kind on `shard`, in key order.
    fn rows(&self, shard: u32, kind: u8) -> Box<dyn Iterator<Item = Row> + '_> {
        let tk = &self.type_key;
        match kind {
            KIND_MEMBER => Box::new(self.members.iter().map(move |&(item, score, tie)| {
                (key(shard, KIND_MEMBER, tk, Some(item)), member_value(score, tie).to_vec())
            })),
            KIND_BOARD => Box::new(std::iter::once((
                key(shard, KIND_BOARD, tk, None),
                meta_value(self.meta).to_vec(),
            ))),
            _ => Box::new(self.event_records().enumerate().map(move |(i, (second, ids))| {
                (key(shard, KIND_EVENTS, tk, Some(i as u64 + 1)), events_value(second, ids))
            })),
        }
    }
}

impl WriteSet {
    /// Brings a board's stored rows to `image`: deletes the rows stored
    /// now (`stale_items`, `stale_seqs`: what the tree holds for it) and
    /// puts the image's.
    pub fn write_back_board(
        &mut self,
        image: &BoardImage,
        stale_items: impl IntoIterator<Item = u64>,
        stale_seqs: impl IntoIterator<Item = u64>,
    ) {
        let (rank, shard) = (image.rank, self.owner());
        let tk = &image.type_key;
        for item in stale_items {
            self.del_board_member(rank, shard, tk, item);
        }
        for seq in stale_seqs {
            self.del_board_events(rank, shard, tk, seq);
        }
        for kind in [KIND_MEMBER, KIND_BOARD, KIND_EVENTS] {
            for (k, v) in image.rows(shard, kind) {
                self.put(TreeRef::Rank(rank), k, &v);
            }
        }
    }
}

/// The sub-board a ranking tree's key belongs to (its type key), if it is
/// a board row (`shard, kind, type_key[, tail]`).
fn board_of(k: &[u8]) -> Option<&[u8]> {
    match k.get(4)? {
        &KIND_BOARD => k.get(5..),
        &KIND_MEMBER | &KIND_EVENTS if k.len() >= 13 => k.get(5..k.len() - 8),
        _ => None,
    }
}

/// A ranking tree's rows on one shard with the held boards' rows in place
/// of their stored ones: the stored rows of those boards are skipped and
/// the images' rows are merged in, all in key order. Type keys have one
/// length within a ranking, so a kind's rows of the images, board after
/// board in type-key order, are in key order too.
pub struct Merged<'a, I: Iterator<Item = Row>> {
    stored: Peekable<I>,
    held: HashSet<&'a [u8]>,
    images: Peekable<Box<dyn Iterator<Item = Row> + 'a>>,
}

impl<'a, I: Iterator<Item = Row>> Merged<'a, I> {
    /// `images`: the held boards of this ranking (any order).
    pub fn new(shard: u32, stored: I, images: &[&'a BoardImage]) -> Self {
        let mut sorted: Vec<&'a BoardImage> = images.to_vec();
        sorted.sort_unstable_by(|a, b| a.type_key.cmp(&b.type_key));
        let held = sorted.iter().map(|b| &b.type_key[..]).collect();
        let rows: Box<dyn Iterator<Item = Row> + 'a> =
            Box::new([KIND_MEMBER, KIND_BOARD, KIND_EVENTS].into_iter().flat_map(move |kind| {
                sorted.clone().into_iter().flat_map(move |b| b.rows(shard, kind))
            }));
        Merged { stored: stored.peekable(), held, images: rows.peekable() }
    }
}

impl<I: Iterator<Item = Row>> Iterator for Merged<'_, I> {
    type Item = Row;

    fn next(&mut self) -> Option<Row> {
        while let Some((k, _)) = self.stored.peek() {
            if board_of(k).is_some_and(|b| self.held.contains(b)) {
                self.stored.next();
            } else {
                break;
            }
        }
        match (self.stored.peek(), self.images.peek()) {
            (Some((s, _)), Some((i, _))) if i < s => self.images.next(),
            (Some(_), _) => self.stored.next(),
            (None, _) => self.images.next(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::test_store as store;

    const A: &[u8] = &[1, 0, 0, 0, 1];
    const B: &[u8] = &[1, 0, 0, 0, 2];
    const C: &[u8] = &[1, 0, 0, 0, 3];

    fn image(tk: &[u8], members: Vec<(u64, i64, u64)>, events: Vec<u64>) -> BoardImage {
        let meta = BoardMeta { next_stamp: 9, cap: 100, ..Default::default() };
        // Ids of one second, unless there are many: then a second per 100.
        let runs = if events.len() > 100 {
            events.chunks(100).enumerate().map(|(i, c)| (50 + i as u64, c.to_vec())).collect()
        } else if events.is_empty() {
            vec![]
        } else {
            vec![(40, events)]
        };
        BoardImage::new(7, tk.to_vec(), members, meta, runs)
    }

    /// Every row of ranking 7 on shard 3, as the store holds them.
    fn stored(s: &crate::StateStore) -> Vec<Row> {
        s.checkpoint(3).unwrap();
        let t = s.find_tree(TreeRef::Rank(7)).unwrap();
        t.scan(crate::pending::prefix_range(&3u32.to_be_bytes()), false)
            .map(|(k, v)| (k.to_vec(), v.to_vec()))
            .collect()
    }

    #[test]
    fn a_written_back_board_stores_exactly_its_image_rows() {
        let (_d, s) = store();
        // What the tree held: two members (one since removed), 130 ids
        // over two seconds.
        let old = image(A, vec![(5, 1, 1), (6, 2, 2)], (0..130).collect());
        let mut ws = WriteSet::new(3);
        ws.write_back_board(&old, [], []);
        s.stage(ws);
        let lens: Vec<(u64, usize)> =
            s.board_events(7, 3, A).unwrap().iter().map(|r| (r.1, r.2.len())).collect();
        assert_eq!(lens, vec![(50, 64), (50, 36), (51, 30)], "records hold one second each");
        // Now: member 6 gone, 7 new, fewer ids (the memory bound).
        let new = image(A, vec![(7, 3, 3), (5, 4, 1)], (100..140).collect());
        let mut ws = WriteSet::new(3);
        let items: Vec<u64> = s.board_members(7, 3, A).unwrap().iter().map(|m| m.0).collect();
        let seqs: Vec<u64> = s.board_events(7, 3, A).unwrap().iter().map(|e| e.0).collect();
        ws.write_back_board(&new, items, seqs);
        s.stage(ws);
        assert_eq!(s.board_members(7, 3, A).unwrap(), vec![(5, 4, 1), (7, 3, 3)]);
        assert_eq!(s.board_events(7, 3, A).unwrap(), vec![(1, 40, (100..140).collect())]);
        let meta = s.board_meta(7, 3, A).unwrap().unwrap();
        assert_eq!((meta.size, meta.next_stamp, meta.next_events, meta.cap), (2, 9, 2, 100));
        let rows: Vec<Row> =
            [KIND_MEMBER, KIND_BOARD, KIND_EVENTS].iter().flat_map(|&k| new.rows(3, k)).collect();
        assert_eq!(stored(&s), rows);
    }

    #[test]
    fn merged_rows_equal_the_rows_stored_after_a_write_back() {
        let (_d, s) = store();
        // B is stored stale; A and C are stored and not held.
        let a = image(A, vec![(1, 10, 1), (2, 20, 2)], vec![1, 2]);
        let b_old = image(B, vec![(1, 5, 1), (9, 5, 2)], (0..70).collect());
        let c = image(C, vec![(3, 1, 1)], vec![]);
        let mut ws = WriteSet::new(3);
        for i in [&a, &b_old, &c] {
            ws.write_back_board(i, [], []);
        }
        s.stage(ws);
        let b_new = image(B, vec![(4, 8, 3), (1, 6, 1)], vec![70, 71]);
        let merged: Vec<Row> = Merged::new(3, stored(&s).into_iter(), &[&b_new]).collect();

        let mut ws = WriteSet::new(3);
        let items: Vec<u64> = s.board_members(7, 3, B).unwrap().iter().map(|m| m.0).collect();
        let seqs: Vec<u64> = s.board_events(7, 3, B).unwrap().iter().map(|e| e.0).collect();
        ws.write_back_board(&b_new, items, seqs);
        s.stage(ws);
        assert_eq!(merged, stored(&s));
        // A board held but never stored merges in too.
        let d = image(&[1, 0, 0, 0, 4], vec![(1, 1, 1)], vec![5]);
        let merged: Vec<Row> = Merged::new(3, stored(&s).into_iter(), &[&d]).collect();
        let mut ws = WriteSet::new(3);
        ws.write_back_board(&d, [], []);
        s.stage(ws);
        assert_eq!(merged, stored(&s));
    }

    #[test]
    fn rows_of_other_kinds_and_short_keys_are_not_board_rows() {
        assert_eq!(board_of(&[0, 0, 0, 3, KIND_BOARD, 1, 2]), Some(&[1u8, 2][..]));
        assert_eq!(board_of(&[0, 0, 0, 3, KIND_MEMBER, 1, 2]), None, "no item");
        assert_eq!(board_of(&[0, 0, 0, 3, 9, 1, 2, 3, 4, 5, 6, 7, 8, 9]), None);
        assert_eq!(board_of(&[0, 0, 0]), None);
    }
}
