//! Where moved sub-boards live, as this client learned it from redirects:
//! the SDK routes a board query by the board's hash shard, and a node
//! whose placements say otherwise answers `NotLeader` naming the shard
//! that holds it (`cluster/src/board_mover.rs`). Remembering that sends the
//! next query of the board there at once, rather than through one more
//! redirect each time. A board that moves again is learned again the same
//! way (the node at the remembered shard redirects); one that moves home
//! is forgotten.
//!
//! Pure, and bounded: past `MAX_PLACED` boards it starts over.

use crate::route::Target;
use plaudit_proto::rankings::RankId;
use plaudit_proto::routing::board_shard;
use plaudit_proto::scoring::BoardRef;
use plaudit_proto::window::TypeId;
use plaudit_proto::{Request, ShardId};
use std::collections::HashMap;

/// Boards remembered at most.
pub(crate) const MAX_PLACED: usize = 4096;

#[derive(Debug, Clone, Default)]
pub(crate) struct Placed {
    /// By ranking, then type id as queries name it (a lookup builds no key).
    boards: HashMap<RankId, HashMap<String, ShardId>>,
    len: usize,
}

/// The ranking and type id a request reads a board by, if it names one.
fn board_of(req: &Request) -> Option<(RankId, &str)> {
    match req {
        Request::Query(q) => match &q.board {
            BoardRef::TypeId(t) => Some((q.rank, t.as_str())),
            BoardRef::At { .. } => None,
        },
        Request::Stale(inner) | Request::Replica(inner) => board_of(inner),
        _ => None,
    }
}

impl Placed {
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// `routed` (what `route::target` gave `req`), sent where a learned
    /// placement says instead.
    pub(crate) fn target(&self, req: &Request, routed: Target) -> Target {
        if self.len == 0 {
            return routed;
        }
        let Some((rank, type_id)) = board_of(req) else { return routed };
        let Some(&shard) = self.boards.get(&rank).and_then(|b| b.get(type_id)) else {
            return routed;
        };
        match routed {
            Target::Leader(_) => Target::Leader(shard),
            Target::Replica(_) => Target::Replica(shard),
            other => other,
        }
    }

    /// Where a learned placement says the board `rank`/`board` lives.
    pub(crate) fn board(&self, rank: RankId, board: &TypeId) -> Option<ShardId> {
        if self.len == 0 {
            return None;
        }
        self.boards.get(&rank)?.get(board.format().as_str()).copied()
    }

    /// Learns from a `NotLeader` answer to `req` that named `hinted`, in a
    /// cluster of `shards`: a board query redirected to a shard other than
    /// its hash shard lives there; one redirected to its hash shard is home.
    pub(crate) fn learn(&mut self, req: &Request, hinted: ShardId, shards: u32) {
        let Some((rank, type_id)) = board_of(req) else { return };
        let Some(t) = TypeId::parse(type_id) else { return };
        if board_shard(rank, &t.to_key(), shards) == hinted {
            if let Some(b) = self.boards.get_mut(&rank) {
                if b.remove(type_id).is_some() {
                    self.len -= 1;
                }
            }
            return;
        }
        if self.len >= MAX_PLACED {
            self.boards.clear();
            self.len = 0;
        }
        if self.boards.entry(rank).or_default().insert(type_id.to_string(), hinted).is_none() {
            self.len += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use plaudit_proto::scoring::{BoardQuery, QueryRequest};

    fn query(rank: RankId, t: &str) -> Request {
        let board = BoardRef::TypeId(t.into());
        Request::Query(QueryRequest { rank, board, query: BoardQuery::Size })
    }

    fn home(rank: RankId, t: &str) -> ShardId {
        board_shard(rank, &TypeId::parse(t).unwrap().to_key(), 6)
    }

    #[test]
    fn a_redirect_elsewhere_is_learned_and_one_home_forgets_it() {
        let mut p = Placed::default();
        let q = query(3, "total:0");
        let h = home(3, "total:0");
        let away = (h + 1) % 6;
        assert_eq!(p.target(&q, Target::Leader(h)), Target::Leader(h));
        p.learn(&q, h, 6);
        assert_eq!(p.len(), 0, "a redirect to its hash shard teaches nothing");
        p.learn(&q, away, 6);
        assert_eq!(p.target(&q, Target::Leader(h)), Target::Leader(away));
        let stale = Request::Stale(Box::new(q.clone()));
        assert_eq!(p.target(&stale, Target::Replica(h)), Target::Replica(away));
        let board = TypeId::parse("total:0").unwrap();
        assert_eq!(p.board(3, &board), Some(away), "a scoring event's board, by its type id");
        assert_eq!(p.board(4, &board), None, "another ranking");
        let other = query(3, "total:0_1");
        assert_eq!(p.target(&other, Target::Leader(1)), Target::Leader(1), "another board");
        assert_eq!(p.target(&Request::Ping, Target::Any), Target::Any);
        p.learn(&q, h, 6);
        assert_eq!(p.len(), 0, "moved home");
        assert_eq!(p.target(&q, Target::Leader(h)), Target::Leader(h));
    }

    #[test]
    fn it_stays_bounded() {
        let mut p = Placed::default();
        for n in 0..(MAX_PLACED as u64 + 10) {
            let t = format!("total:0_{n}");
            let q = query(1, &t);
            p.learn(&q, (home(1, &t) + 1) % 6, 6);
            assert!(p.len() <= MAX_PLACED);
        }
        assert!(p.len() > 0);
    }
}
