//! Reads answered on the asker's own task, at once: no future, no timer,
//! no mailbox, no reply channel. A connection asks `answer_now` before it
//! starts a request as a future (`node/server/conn.rs`), and serves the
//! request the usual way (`handle_as`) when the answer is `None`.
//!
//! ```text
//! Query  ─> ranking known? ─> its shard: read here now? ─> board active? ─> read its view
//! Counts ─> business known? ─> every entity's shard: read here now? ─> counters in place
//! Status ─> business known? ─> the user's shard: read here now? ─> states in place
//!                 any "no" ─> None: the future path (which loads, catches up, barriers or forwards)
//! ```
//!
//! "Read here now" (`Group::reads_now`): this node is the group's only
//! voter (a single node), or leads it on its read lease with no follower
//! reading through it lately. Why this is the same answer the future path
//! gives: there the read barrier would return at once and do nothing, and
//! what is read here is what the future path would read a moment later:
//! the store's staged-and-stored state, or a board's view, which holds
//! every batch its shard has applied (`actors/src/active_boards.rs`). A
//! leader without its lease (a read-index round to wait for), a follower,
//! or a node without a replica takes the future path.
//!
//! Measured on one node, server on one core: a request served here costs
//! no task wake-up, timer entry or boxed future, and a board query no
//! mailbox and oneshot either (`docs/benchmarks.md`, "Per core").

use crate::board_memo;
use crate::engine::{internal, Engine};
use crate::group::Group;
use plaudit_actors::board_host::QueryOut;
use plaudit_proto::likes::{CountsRequest, EntityCounts, EntityState, StatusRequest};
use plaudit_proto::routing::shard_of;
use plaudit_proto::scoring::{BoardQuery, QueryReply, QueryRequest};
use plaudit_proto::{BizId, EntityId, Request, Response, WireError};
use std::sync::Arc;

impl Engine {
    /// The answer to `req` if this node can give it right now without
    /// waiting for anything; `None` when it must be served by `handle_as`.
    /// An answer here is the answer `handle_as` would give.
    pub fn answer_now(&self, req: &Request) -> Option<Response> {
        if !matches!(req, Request::Query(_) | Request::Counts(_) | Request::Status(_)) {
            return None;
        }
        if let Err(e) = req.validate() {
            return Some(Response::Error(e));
        }
        let answer = match req {
            Request::Query(q) => self.query_now(q),
            Request::Counts(r) => self.counts_now(r),
            Request::Status(r) => self.status_now(r),
            _ => None,
        };
        answer.map(|r| r.unwrap_or_else(Response::Error))
    }

    /// The group of `shard` if a read of this node's replica now is
    /// linearizable (`Group::reads_now`).
    fn now_group(&self, shard: u32) -> Option<Arc<Group>> {
        self.router.group(shard).filter(|g| g.reads_now())
    }

    fn known_business(&self, biz: BizId) -> Option<()> {
        self.directory.with(biz, |_| ())
    }

    fn query_now(&self, q: &QueryRequest) -> Option<Result<Response, WireError>> {
        let def = self.directory.rank(q.rank)?;
        // A bad board reference is reported by the future path.
        board_memo::with_named(&def, &q.board, self.cfg.shards, |b| {
            let g = self.now_group(b.shard)?;
            let out = g.handle(b.shard)?.board_query_now(q.rank, &b.key, &q.query)?;
            Some(Ok(Response::Query(query_reply(|| b.type_text.clone(), &q.query, out))))
        })
        .ok()
        .flatten()
    }

    fn counts_now(&self, r: &CountsRequest) -> Option<Result<Response, WireError>> {
        self.known_business(r.biz)?;
        let shards = self.now_shards(r.biz, &r.entities)?;
        match self.counts_in_place(r.biz, &r.entities, &shards) {
            // An entity not held where this node's placements say: the
            // future path waits for the placements (`dispatch.rs`).
            Err(e) if e.moved_to().is_some() => None,
            done => Some(done.map(Response::Counts)),
        }
    }

    /// The shard of each of `entities` if every one can be read here now. Each shard is looked up once: a batch of 20 entities
    /// spans most shards (about 12 of 16 at the old default), and each
    /// lookup locks the router.
    pub(crate) fn now_shards(&self, biz: BizId, entities: &[EntityId]) -> Option<Vec<u32>> {
        let mut shards = Vec::with_capacity(entities.len());
        let mut checked = 0u128;
        for &e in entities {
            let shard = self.directory.entity_shard(biz, e, self.cfg.shards);
            let bit = 1u128.checked_shl(shard).unwrap_or(0);
            if checked & bit == 0 {
                self.now_group(shard)?;
                checked |= bit;
            }
            shards.push(shard);
        }
        Some(shards)
    }

    /// The counts of `entities` (on `shards`, as `now_shards` gave them),
    /// read in place: all prefetched first, so their cache misses overlap.
    pub(crate) fn counts_in_place(
        &self,
        biz: BizId,
        entities: &[EntityId],
        shards: &[u32],
    ) -> Result<Vec<EntityCounts>, WireError> {
        for (&e, &shard) in entities.iter().zip(shards) {
            self.store.prefetch_counts(biz, shard, e);
        }
        entities.iter().zip(shards).map(|(&e, &shard)| self.count_of(biz, shard, e)).collect()
    }

    fn status_now(&self, r: &StatusRequest) -> Option<Result<Response, WireError>> {
        self.known_business(r.biz)?;
        let shard = shard_of(r.biz, r.user, self.cfg.shards);
        self.now_group(shard)?;
        Some(self.states_here(shard, r).map(Response::Status))
    }

    /// The like state of each of `r`'s entities, read in place on this
    /// node's replica of the user's shard.
    pub(crate) fn states_here(
        &self,
        shard: u32,
        r: &StatusRequest,
    ) -> Result<Vec<EntityState>, WireError> {
        let states = self.store.get_states(r.biz, shard, r.user, &r.entities).map_err(internal)?;
        let each = r.entities.iter().zip(states);
        Ok(each
            .map(|(&entity, s)| {
                let (state, mtime) = s.unwrap_or_default();
                EntityState { entity, state, mtime }
            })
            .collect())
    }
}

/// A board query's answer as the wire carries it.
/// `type_text` gives the board's `TypeId::format`, asked for only by a list.
pub(crate) fn query_reply(
    type_text: impl FnOnce() -> String,
    q: &BoardQuery,
    out: QueryOut,
) -> QueryReply {
    match out {
        // Only a list names its board (formatting it was 4.6% of rank-of).
        QueryOut::Items(items) => QueryReply::Items { type_id: type_text(), items },
        QueryOut::RankOf(row) => {
            let item = match q {
                BoardQuery::RankOf { item } => *item,
                _ => 0,
            };
            QueryReply::RankOf { item, row }
        }
        QueryOut::Scores(s) => QueryReply::Scores(s),
        QueryOut::Size(n) => QueryReply::Size(n),
    }
}
