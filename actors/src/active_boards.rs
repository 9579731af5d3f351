//! The boards a shard has active, readable without any actor: a board
//! query reads the board's state under its read lock, on the asker's task,
//! with no mailbox and no reply channel.
//!
//! ```text
//! query ─> ActiveBoards::get ─found──> read the board's view ─> reply
//!                             └missing─> shard actor (loads the board) ─> reply
//! ```
//!
//! Why a query may read the view and still see what every acknowledged
//! write wrote: the shard's apply runs a batch on a board under the view's
//! write lock before the Raft apply completes, so a query made after its
//! read barrier finds every write the barrier covers. The shard inserts a
//! board when it loads it and removes it, on its own task, whenever it lets
//! the board go (passivated, dropped, or replaced by a snapshot), so the
//! list always names exactly the boards the shard holds.
//!
//! Direct reads do not pass through the shard, so they do not mark the
//! board used there; [`Entry::due_touch`] lets a reader tell the shard at
//! most once per second, so a board that is only read is not passivated
//! as idle.

use crate::board_host::BoardView;
use plaudit_proto::keyed_hash::KeyedHash;
use plaudit_proto::rankings::RankId;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

/// How often a reader tells the shard that a board is in use.
const TOUCH_EVERY_MS: u64 = 1000;

pub struct Entry {
    /// The board's state, for queries answered without the shard.
    pub view: BoardView,
    /// Milliseconds since `ActiveBoards::epoch` of the last touch sent.
    touched_ms: AtomicU64,
}

/// One ranking's active boards, by binary type id. Keyed-hashed
/// (`keyed_hash.rs`): clients choose the dimension values in a type id.
type RankBoards = HashMap<Vec<u8>, Arc<Entry>, KeyedHash>;

pub struct ActiveBoards {
    boards: RwLock<HashMap<RankId, RankBoards, KeyedHash>>,
    /// The coarse clock when these boards began (`coarse_now`).
    epoch: Duration,
}

impl Default for ActiveBoards {
    fn default() -> Self {
        ActiveBoards { boards: RwLock::default(), epoch: coarse_now() }
    }
}

/// The monotonic clock at the kernel's last tick (a few ms of resolution):
/// enough for a once-a-second touch, and read without the timestamp
/// counter. `Instant::now` per board query was 2.6% of the node on rank-of.
fn coarse_now() -> Duration {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid, writable timespec; CLOCK_MONOTONIC_COARSE
    // exists on every Linux this runs on. On failure `ts` stays zero, and
    // a touch is merely not sent until the clock reads again.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC_COARSE, &mut ts) };
    Duration::new(ts.tv_sec.max(0) as u64, ts.tv_nsec.clamp(0, 999_999_999) as u32)
}

impl ActiveBoards {
    pub fn get(&self, rank: RankId, type_key: &[u8]) -> Option<Arc<Entry>> {
        let boards = self.boards.read().unwrap_or_else(|e| e.into_inner());
        boards.get(&rank)?.get(type_key).cloned()
    }

    pub fn insert(&self, rank: RankId, type_key: Vec<u8>, view: BoardView) {
        let now = self.now_ms();
        let entry = Arc::new(Entry { view, touched_ms: AtomicU64::new(now) });
        let mut boards = self.boards.write().unwrap_or_else(|e| e.into_inner());
        boards.entry(rank).or_default().insert(type_key, entry);
    }

    pub fn remove(&self, rank: RankId, type_key: &[u8]) {
        let mut boards = self.boards.write().unwrap_or_else(|e| e.into_inner());
        let Some(of_rank) = boards.get_mut(&rank) else { return };
        of_rank.remove(type_key);
        if of_rank.is_empty() {
            boards.remove(&rank);
        }
    }

    pub fn clear(&self) {
        self.boards.write().unwrap_or_else(|e| e.into_inner()).clear();
    }

    pub fn len(&self) -> usize {
        let boards = self.boards.read().unwrap_or_else(|e| e.into_inner());
        boards.values().map(HashMap::len).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether a reader of `e` should tell the shard the board is in use
    /// (at most once per [`TOUCH_EVERY_MS`]; the first caller to see it
    /// due wins).
    pub fn due_touch(&self, e: &Entry) -> bool {
        let now = self.now_ms();
        let last = e.touched_ms.load(Ordering::Relaxed);
        now.saturating_sub(last) >= TOUCH_EVERY_MS
            && e.touched_ms
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
    }

    fn now_ms(&self) -> u64 {
        coarse_now().saturating_sub(self.epoch).as_millis() as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rankings::board::Rules;
    use plaudit_proto::rankings::{Aggregation, TieMode};

    fn view() -> BoardView {
        crate::board_host::new_view(Rules {
            aggregation: Aggregation::Incr,
            ties: TieMode::EarlierFirst,
            cap: 10,
        })
    }

    #[test]
    fn a_board_loaded_again_replaces_its_old_view() {
        let boards = ActiveBoards::default();
        let (old, new) = (view(), view());
        boards.insert(7, b"day".to_vec(), old.clone());
        assert!(Arc::ptr_eq(&boards.get(7, b"day").unwrap().view, &old));
        assert!(boards.get(7, b"week").is_none() && boards.get(8, b"day").is_none());
        boards.insert(7, b"day".to_vec(), new.clone());
        assert!(Arc::ptr_eq(&boards.get(7, b"day").unwrap().view, &new));
        assert_eq!(boards.len(), 1);
        boards.remove(7, b"day");
        assert!(boards.is_empty());
        boards.remove(7, b"day");
        boards.insert(7, b"day".to_vec(), new);
        boards.insert(9, b"total".to_vec(), old);
        boards.remove(7, b"day");
        assert_eq!(boards.len(), 1);
        boards.clear();
        assert!(boards.is_empty());
    }

    #[test]
    fn the_coarse_clock_moves_with_the_monotonic_one() {
        let (c0, i0) = (coarse_now(), std::time::Instant::now());
        std::thread::sleep(Duration::from_millis(50));
        let moved = coarse_now() - c0;
        let took = i0.elapsed();
        // It lags by at most a tick (4 ms at HZ=250, 10 ms at HZ=100).
        assert!(moved >= Duration::from_millis(30), "{moved:?}");
        assert!(moved <= took + Duration::from_millis(20), "{moved:?} vs {took:?}");
    }

    #[test]
    fn readers_touch_the_shard_at_most_once_a_second() {
        let boards = ActiveBoards::default();
        boards.insert(1, vec![1], view());
        let e = boards.get(1, &[1]).unwrap();
        assert!(!boards.due_touch(&e), "just inserted counts as used");
        e.touched_ms.store(0, Ordering::Relaxed);
        let later = ActiveBoards {
            epoch: coarse_now().saturating_sub(Duration::from_secs(5)),
            ..Default::default()
        };
        assert!(later.due_touch(&e), "five seconds on, a touch is due");
        assert!(!later.due_touch(&e), "and only one");
    }
}
