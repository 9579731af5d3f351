//! The boards a shard has active, readable without any actor: a board
//! query reads the board's state under its read lock, on the asker's task,
//! with no mailbox and no reply channel.
//!
//! ```text
//! query ─> ActiveBoards::get ─found──> read the board's view ─> reply
//!                             └missing─> shard actor (activates) ─> board actor ─> reply
//! ```
//!
//! Why a query may read the view and still see what every acknowledged
//! write wrote: a board's actor applies a batch under the view's write
//! lock before it answers `Apply`, and the shard's apply waits for that
//! answer before the Raft apply completes, so a query made after its read
//! barrier finds every write the barrier covers. The shard inserts a board
//! when it activates it (replacing any older actor of the same board, whose
//! view stopped changing when it was passivated) and removes boards
//! synchronously when their state goes away (a dropped board, a snapshot
//! that replaces the shard's state); a passivated actor removes itself when
//! it stops, only if it is still the one listed.
//!
//! Direct reads do not pass through the shard, so they do not mark the
//! board used there; [`Entry::due_touch`] lets a reader tell the shard at
//! most once per second, so a board that is only read is not passivated
//! as idle.

use crate::board_actor::{BoardMsg, BoardView};
use plaudit_proto::rankings::RankId;
use ractor::{ActorId, ActorRef};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Instant;

/// How often a reader tells the shard that a board is in use.
const TOUCH_EVERY_MS: u64 = 1000;

pub struct Entry {
    pub actor: ActorRef<BoardMsg>,
    /// The board's state, for queries answered without its mailbox.
    pub view: BoardView,
    /// Milliseconds since `ActiveBoards::epoch` of the last touch sent.
    touched_ms: AtomicU64,
}

/// One ranking's active boards, by binary type id.
type RankBoards = HashMap<Vec<u8>, Arc<Entry>>;

pub struct ActiveBoards {
    boards: RwLock<HashMap<RankId, RankBoards>>,
    epoch: Instant,
}

impl Default for ActiveBoards {
    fn default() -> Self {
        ActiveBoards { boards: RwLock::default(), epoch: Instant::now() }
    }
}

impl ActiveBoards {
    pub fn get(&self, rank: RankId, type_key: &[u8]) -> Option<Arc<Entry>> {
        let boards = self.boards.read().unwrap_or_else(|e| e.into_inner());
        boards.get(&rank)?.get(type_key).cloned()
    }

    pub fn insert(
        &self,
        rank: RankId,
        type_key: Vec<u8>,
        actor: ActorRef<BoardMsg>,
        view: BoardView,
    ) {
        let now = self.now_ms();
        let entry = Arc::new(Entry { actor, view, touched_ms: AtomicU64::new(now) });
        let mut boards = self.boards.write().unwrap_or_else(|e| e.into_inner());
        boards.entry(rank).or_default().insert(type_key, entry);
    }

    /// Removes the board, whichever actor is listed.
    pub fn remove(&self, rank: RankId, type_key: &[u8]) {
        self.remove_where(rank, type_key, |_| true);
    }

    /// Removes the board if `actor` is the one listed (an actor that
    /// stopped must not remove its successor).
    pub fn remove_actor(&self, rank: RankId, type_key: &[u8], actor: ActorId) {
        self.remove_where(rank, type_key, |e| e.actor.get_id() == actor);
    }

    fn remove_where(&self, rank: RankId, type_key: &[u8], pred: impl Fn(&Entry) -> bool) {
        let mut boards = self.boards.write().unwrap_or_else(|e| e.into_inner());
        let Some(of_rank) = boards.get_mut(&rank) else { return };
        if of_rank.get(type_key).is_some_and(|e| pred(e)) {
            of_rank.remove(type_key);
            if of_rank.is_empty() {
                boards.remove(&rank);
            }
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
        self.epoch.elapsed().as_millis() as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rankings::board::Rules;
    use plaudit_proto::rankings::{Aggregation, TieMode};
    use ractor::{Actor, ActorProcessingErr};

    /// An actor that takes board messages and does nothing.
    struct Sink;

    impl Actor for Sink {
        type Msg = BoardMsg;
        type State = ();
        type Arguments = ();
        async fn pre_start(&self, _: ActorRef<BoardMsg>, _: ()) -> Result<(), ActorProcessingErr> {
            Ok(())
        }
    }

    fn view() -> BoardView {
        crate::board_actor::new_view(Rules {
            aggregation: Aggregation::Incr,
            ties: TieMode::EarlierFirst,
            cap: 10,
        })
    }

    async fn sink() -> ActorRef<BoardMsg> {
        Actor::spawn(None, Sink, ()).await.unwrap().0
    }

    #[tokio::test]
    async fn a_stopped_actor_removes_itself_but_never_its_successor() {
        let boards = ActiveBoards::default();
        let (old, new) = (sink().await, sink().await);
        boards.insert(7, b"day".to_vec(), old.clone(), view());
        assert_eq!(boards.get(7, b"day").unwrap().actor.get_id(), old.get_id());
        assert!(boards.get(7, b"week").is_none() && boards.get(8, b"day").is_none());
        // The board is activated again before the old actor's stop lands.
        boards.insert(7, b"day".to_vec(), new.clone(), view());
        boards.remove_actor(7, b"day", old.get_id());
        assert_eq!(boards.get(7, b"day").unwrap().actor.get_id(), new.get_id());
        boards.remove_actor(7, b"day", new.get_id());
        assert!(boards.is_empty());
        boards.insert(7, b"day".to_vec(), new.clone(), view());
        boards.insert(9, b"total".to_vec(), old.clone(), view());
        boards.remove(7, b"day");
        assert_eq!(boards.len(), 1);
        boards.clear();
        assert!(boards.is_empty());
        old.stop(None);
        new.stop(None);
    }

    #[tokio::test]
    async fn readers_touch_the_shard_at_most_once_a_second() {
        let boards = ActiveBoards::default();
        let a = sink().await;
        boards.insert(1, vec![1], a.clone(), view());
        let e = boards.get(1, &[1]).unwrap();
        assert!(!boards.due_touch(&e), "just inserted counts as used");
        e.touched_ms.store(0, Ordering::Relaxed);
        let later = ActiveBoards {
            epoch: Instant::now() - std::time::Duration::from_secs(5),
            ..Default::default()
        };
        assert!(later.due_touch(&e), "five seconds on, a touch is due");
        assert!(!later.due_touch(&e), "and only one");
        a.stop(None);
    }
}
