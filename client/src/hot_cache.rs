//! The SDK's cache of hot keys (pure: the caller brings the clock and the
//! answers). Nodes say which entities and boards are hot (`HotSet`, polled
//! by `cluster/hot_poll.rs`); for those only, a counts read or a board
//! query is answered from here while the answer is younger than the TTL.
//!
//! ```text
//! plan(read)  ─ every key hot and fresh ─► Hit(answer, age)
//!             ─ some entities fresh      ─► Part(the rest to send, what is here)
//!             ─ otherwise                ─► Send
//! wrote(req)  once a like or score is answered (or failed)
//! filled(read, its epoch, when sent, answer) ─► kept if hot and no write of
//!             the key was answered since the read was sent
//! listed(keys from the nodes); tick() once a poll: keys the nodes no
//!             longer list stay hot while this client still reads them
//! ```
//!
//! Read-your-writes: every write bumps `epoch`, stamps its keys and drops
//! their entries when it is answered; a read's answer fills the cache only
//! if it was sent at or after its keys' last stamp. So once a write is
//! acknowledged, nothing cached before can be served, and no answer of a
//! read sent before (which may not show it) can enter the cache. A write
//! in flight stamps nothing: until it is acknowledged a read may or may
//! not show it, from the nodes as from here, and stamping it at its send
//! kept a key written more often than a round trip from ever being cached.
//! A key newly hot is stamped too: a read in flight while it was not
//! tracked may predate a write that was not stamped.
//!
//! An age is counted from when the read that filled the entry was sent: the
//! answer held at some moment after that, so the age is an upper bound.

use crate::spread::to_any_replica;
use plaudit_proto::hotkeys::{HotKey, HotSetRequest, MAX_HOT_SCOPE};
use plaudit_proto::likes::{CountsRequest, EntityCounts};
use plaudit_proto::scoring::{BoardRef, QueryReply, QueryRequest};
use plaudit_proto::{BizId, Request, Response};
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// Hot keys a client tracks at most (the nodes list at most 256 each).
const MAX_MARKS: usize = 1024;
/// Cached answers at most: an entity's counts take one, a board one per
/// distinct query (page, member) asked of it.
const MAX_ENTRIES: usize = 8192;
/// A key the nodes stopped listing stays hot while this client reads it at
/// least this often a second: once cached, a key's load on the nodes drops
/// to a read per TTL, and they would stop listing it.
const KEEP_READS_PER_S: f64 = 20.0;

pub(crate) type RankId = plaudit_proto::rankings::RankId;

/// What to do with one read.
#[derive(Debug)]
pub(crate) enum Plan {
    /// Not cached: send it as it is.
    Send(Request),
    /// Answered here; the answer is at most this old.
    Hit(Response, Duration),
    /// Some entities of a counts read are here (`have`, by position); the
    /// others go in `send`, in order.
    Part { send: Request, have: Vec<Option<EntityCounts>>, age: Duration },
}

struct Mark {
    /// When a node last listed it.
    listed: Instant,
    /// Reads of it since the last tick.
    reads: u32,
}

struct Entry<V> {
    value: V,
    /// When the read that filled it was sent.
    sent: Instant,
}

/// A board query's answer, and the board it names when it names one by
/// its type id (what a scoring event's answer names); `None` for a board
/// named by dimensions and a time, which any event of the ranking drops.
struct Page {
    entry: Entry<QueryReply>,
    board: Option<String>,
}

pub(crate) struct HotCache {
    ttl: Duration,
    /// Send hot keys' reads to any replica (`ClientOptions::spread_hot_reads`).
    spread: bool,
    marks: HashMap<HotKey, Mark>,
    counts: HashMap<(BizId, plaudit_proto::EntityId), Entry<EntityCounts>>,
    /// A board query's answer, by ranking and the query's encoding.
    pages: HashMap<(RankId, Vec<u8>), Page>,
    epoch: u64,
    /// The epoch of the last write stamp of each hot entity.
    written: HashMap<HotKey, u64>,
    /// Of each ranking, stamps that cover every board of it: an event whose
    /// answer did not say which boards it scored (a failure, which may
    /// still have applied), a board newly hot.
    written_rank: HashMap<RankId, u64>,
    /// Of each board an answered event scored, by the type id its answer
    /// names.
    written_board: HashMap<(RankId, String), u64>,
    /// Of each ranking, its latest stamp of either kind: what a page of a
    /// board named otherwise than by type id is held to.
    written_any: HashMap<RankId, u64>,
    /// The businesses and rankings this client has read: what it asks the
    /// nodes about.
    bizs: Vec<BizId>,
    ranks: Vec<RankId>,
    last_tick: Option<Instant>,
}

impl HotCache {
    pub(crate) fn new(ttl: Duration) -> HotCache {
        HotCache {
            ttl,
            spread: false,
            marks: HashMap::new(),
            counts: HashMap::new(),
            pages: HashMap::new(),
            epoch: 0,
            written: HashMap::new(),
            written_rank: HashMap::new(),
            written_board: HashMap::new(),
            written_any: HashMap::new(),
            bizs: Vec::new(),
            ranks: Vec::new(),
            last_tick: None,
        }
    }

    /// Sends the reads of hot keys it does not hold to any replica.
    pub(crate) fn spreading(mut self, on: bool) -> HotCache {
        self.spread = on;
        self
    }

    pub(crate) fn ttl(&self) -> Duration {
        self.ttl
    }

    /// The epoch a read sent now carries to `filled`.
    pub(crate) fn epoch(&self) -> u64 {
        self.epoch
    }

    /// What to ask the nodes about; `None` before this client read anything.
    pub(crate) fn scope(&self) -> Option<HotSetRequest> {
        if self.bizs.is_empty() && self.ranks.is_empty() {
            return None;
        }
        Some(HotSetRequest { bizs: self.bizs.clone(), ranks: self.ranks.clone() })
    }

    /// Stamps the keys `req` writes (a like's entity; the boards a score's
    /// `answer` says it scored, or its whole ranking without one). Called
    /// when it is answered, whatever the answer: a write that failed may
    /// still have applied.
    pub(crate) fn wrote(&mut self, req: &Request, answer: Option<&Response>) {
        match req {
            Request::Like(l) => {
                let key = HotKey::Entity { biz: l.biz, entity: l.entity };
                if self.marks.contains_key(&key) {
                    self.epoch += 1;
                    self.counts.remove(&(l.biz, l.entity));
                    self.written.insert(key, self.epoch);
                }
            }
            Request::Score(s) if self.ranks.contains(&s.rank) => {
                self.epoch += 1;
                let epoch = self.epoch;
                self.written_any.insert(s.rank, epoch);
                match answer {
                    Some(Response::Score(reply)) if !reply.boards.is_empty() => {
                        let scored = |b: &Option<String>| {
                            b.as_ref().is_none_or(|b| reply.boards.iter().any(|o| &o.type_id == b))
                        };
                        self.pages.retain(|(rank, _), p| *rank != s.rank || !scored(&p.board));
                        for o in &reply.boards {
                            self.written_board.insert((s.rank, o.type_id.clone()), epoch);
                        }
                    }
                    _ => {
                        self.pages.retain(|(rank, _), _| *rank != s.rank);
                        self.written_rank.insert(s.rank, epoch);
                    }
                }
            }
            Request::Once { req, .. } => self.wrote(req, answer),
            _ => {}
        }
    }

    /// How to serve `req` at `now`.
    pub(crate) fn plan(&mut self, req: Request, now: Instant) -> Plan {
        match req {
            Request::Counts(c) => self.plan_counts(c, now),
            // Naming a board allocates: only when some key is hot.
            Request::Query(q) if !self.marks.is_empty() => {
                let key = HotKey::board(q.rank, &q.board);
                let Some(mark) = self.marks.get_mut(&key) else {
                    return Plan::Send(Request::Query(q));
                };
                mark.reads += 1;
                let fresh = encode(&q)
                    .and_then(|k| self.pages.get(&(q.rank, k)))
                    .map(|p| &p.entry)
                    .filter(|e| now.saturating_duration_since(e.sent) < self.ttl);
                match fresh {
                    Some(e) => Plan::Hit(
                        Response::Query(e.value.clone()),
                        now.saturating_duration_since(e.sent),
                    ),
                    None if self.spread => Plan::Send(to_any_replica(Request::Query(q))),
                    None => Plan::Send(Request::Query(q)),
                }
            }
            other => Plan::Send(other),
        }
    }

    fn plan_counts(&mut self, c: CountsRequest, now: Instant) -> Plan {
        if self.marks.is_empty() {
            return Plan::Send(Request::Counts(c));
        }
        let mut have = Vec::with_capacity(c.entities.len());
        let mut age = Duration::ZERO;
        let mut missing = Vec::new();
        for &entity in &c.entities {
            let key = HotKey::Entity { biz: c.biz, entity };
            let fresh = self.marks.get_mut(&key).and_then(|m| {
                m.reads += 1;
                self.counts
                    .get(&(c.biz, entity))
                    .filter(|e| now.saturating_duration_since(e.sent) < self.ttl)
            });
            match fresh {
                Some(e) => {
                    age = age.max(now.saturating_duration_since(e.sent));
                    have.push(Some(e.value));
                }
                None => {
                    missing.push(entity);
                    have.push(None);
                }
            }
        }
        if missing.is_empty() {
            let all = have.into_iter().flatten().collect();
            return Plan::Hit(Response::Counts(all), age);
        }
        let all_hot = missing
            .iter()
            .all(|&entity| self.marks.contains_key(&HotKey::Entity { biz: c.biz, entity }));
        let send = if missing.len() == c.entities.len() {
            Request::Counts(c)
        } else {
            Request::Counts(CountsRequest { biz: c.biz, entities: missing })
        };
        let send = if all_hot && self.spread { to_any_replica(send) } else { send };
        if have.iter().all(Option::is_none) {
            return Plan::Send(send);
        }
        Plan::Part { send, have, age }
    }

    /// Takes the answer to `sent` (a read sent at `sent_at`, in `epoch`)
    /// into the cache where its keys are hot and unwritten since, and
    /// remembers the business or ranking it read.
    pub(crate) fn filled(
        &mut self,
        sent: &Request,
        epoch: u64,
        sent_at: Instant,
        answer: &Response,
    ) {
        match (sent, answer) {
            (Request::Replica(inner), _) => self.filled(inner, epoch, sent_at, answer),
            (Request::Counts(c), Response::Counts(got)) => {
                remember(&mut self.bizs, c.biz);
                for counts in got {
                    let key = HotKey::Entity { biz: c.biz, entity: counts.entity };
                    if !self.marks.contains_key(&key)
                        || self.written.get(&key).is_some_and(|&w| w > epoch)
                    {
                        continue;
                    }
                    if self.counts.len() >= MAX_ENTRIES
                        && !self.counts.contains_key(&(c.biz, counts.entity))
                    {
                        continue;
                    }
                    self.counts
                        .insert((c.biz, counts.entity), Entry { value: *counts, sent: sent_at });
                }
            }
            (Request::Query(q), Response::Query(reply)) => {
                remember(&mut self.ranks, q.rank);
                let board = match &q.board {
                    BoardRef::TypeId(t) => Some(t.clone()),
                    BoardRef::At { .. } => None,
                };
                let after = |w: Option<&u64>| w.is_some_and(|&w| w > epoch);
                let written = after(self.written_rank.get(&q.rank))
                    || match &board {
                        Some(b) => after(self.written_board.get(&(q.rank, b.clone()))),
                        None => after(self.written_any.get(&q.rank)),
                    };
                if written || !self.marks.contains_key(&HotKey::board(q.rank, &q.board)) {
                    return;
                }
                let Some(k) = encode(q) else { return };
                if self.pages.len() >= MAX_ENTRIES {
                    let ttl = self.ttl;
                    self.pages.retain(|_, p| sent_at.saturating_duration_since(p.entry.sent) < ttl);
                    if self.pages.len() >= MAX_ENTRIES {
                        return;
                    }
                }
                let entry = Entry { value: reply.clone(), sent: sent_at };
                self.pages.insert((q.rank, k), Page { entry, board });
            }
            _ => {}
        }
    }

    /// Keys a node lists as hot now.
    pub(crate) fn listed(&mut self, keys: impl IntoIterator<Item = HotKey>, now: Instant) {
        for key in keys {
            if let Some(m) = self.marks.get_mut(&key) {
                m.listed = now;
                continue;
            }
            if self.marks.len() >= MAX_MARKS {
                continue;
            }
            // Stamped as if written: a read sent before it was tracked
            // may predate a write that was not stamped.
            self.epoch += 1;
            match &key {
                HotKey::Board { rank, .. } => {
                    self.written_rank.insert(*rank, self.epoch);
                    self.written_any.insert(*rank, self.epoch);
                }
                _ => {
                    self.written.insert(key.clone(), self.epoch);
                }
            }
            self.marks.insert(key, Mark { listed: now, reads: 0 });
        }
    }

    /// Once a poll: forgets the keys no node listed since the last tick
    /// that this client read less than `KEEP_READS_PER_S` since, with
    /// their entries.
    pub(crate) fn tick(&mut self, now: Instant) {
        let since = self.last_tick.replace(now);
        let Some(since) = since else { return };
        let secs = now.saturating_duration_since(since).as_secs_f64().max(0.001);
        self.marks.retain(|_, m| {
            let keep = m.listed >= since || f64::from(m.reads) / secs >= KEEP_READS_PER_S;
            m.reads = 0;
            keep
        });
        let marks = &self.marks;
        self.counts.retain(|(biz, entity), _| {
            marks.contains_key(&HotKey::Entity { biz: *biz, entity: *entity })
        });
        self.written.retain(|k, _| marks.contains_key(k));
        let ranks: Vec<RankId> = marks
            .keys()
            .filter_map(|k| match k {
                HotKey::Board { rank, .. } => Some(*rank),
                _ => None,
            })
            .collect();
        self.pages.retain(|(rank, _), _| ranks.contains(rank));
        self.written_board.retain(|(rank, _), _| ranks.contains(rank));
        // Bounded: past it, each ranking's board stamps fold into one that
        // covers all its boards (stricter, never looser).
        if self.written_board.len() > MAX_ENTRIES {
            for ((rank, _), w) in self.written_board.drain() {
                let all = self.written_rank.entry(rank).or_insert(0);
                *all = (*all).max(w);
            }
        }
    }

    /// How many keys are hot here now.
    #[cfg(test)]
    pub(crate) fn hot_keys(&self) -> usize {
        self.marks.len()
    }
}

/// Merges a `Part` plan's answer into the full one.
pub(crate) fn merge_part(have: Vec<Option<EntityCounts>>, answer: Response) -> Option<Response> {
    let Response::Counts(got) = answer else { return Some(answer) };
    let mut got = got.into_iter();
    let mut all = Vec::with_capacity(have.len());
    for h in have {
        all.push(match h {
            Some(c) => c,
            None => got.next()?,
        });
    }
    Some(Response::Counts(all))
}

fn remember<T: PartialEq + Copy>(list: &mut Vec<T>, id: T) {
    if !list.contains(&id) && list.len() < MAX_HOT_SCOPE {
        list.push(id);
    }
}

fn encode(q: &QueryRequest) -> Option<Vec<u8>> {
    plaudit_proto::codec::to_bytes(q).ok()
}

#[cfg(test)]
mod tests;
