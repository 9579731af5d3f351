//! Which keys take the most requests on this node: every client request
//! is sampled (one in `SAMPLE`) into a ten-second window of Space-Saving
//! summaries (`hot_sketch.rs`), and `admin hotkeys` merges every node's
//! heaviest keys.
//!
//! ```text
//! request ─ 1 in SAMPLE ─► its keys (entity, user, board) ─► Window (1 s buckets, 10 s)
//! HotKeys(top) ─► this node's top + every up peer's (PeerRequest::HotKeys) ─► heaviest first
//! HotSet(bizs, ranks) ─► this node's entities and boards of those, over the last
//!                        RECENT_SECS, at hot_cache_min_rps or more ─► the SDK caches them
//! ```
//!
//! The sample keeps the cost of a request that is not sampled at one
//! atomic increment; a sampled one locks the window and counts its keys
//! (a counts read of 20 entities counts 20). Rates are the sampled counts
//! times `SAMPLE`, over the seconds the window covers. A sampled request's
//! CPU time on this node (`cpu_meter.rs`) goes into a second window, its
//! keys sharing it evenly: `admin hotkeys --by cpu`, each key's share of
//! the node's CPU (`getrusage`, marked once a second).

use crate::cpu_meter::process_cpu_us;
use crate::engine::Engine;
use crate::hot_sketch::Window;
use crate::peer::wire::{PeerRequest, PeerResponse};
use plaudit_proto::hotkeys::{HotKey, HotKeyRow, HotSetRequest, Relief};
use plaudit_proto::routing::{board_shard, shard_of};
use plaudit_proto::window::TypeId;
use plaudit_proto::{Request, ShardId};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// One request in this many is counted (a power of two).
pub const SAMPLE: u64 = 8;
/// The window, in one-second buckets.
const SPAN_SECS: u64 = 10;
/// Keys tracked per bucket: any key with more than 1/`SLOTS` of a
/// second's sampled keys is found.
const SLOTS: usize = 128;
/// How long a peer may take to send its list.
const ASK_TIMEOUT: Duration = Duration::from_secs(1);
/// A key is hot for clients by its rate over about this many seconds (the
/// current one and those before): long enough to smooth a burst, short
/// enough that clients learn of it within a second or two.
const RECENT_SECS: u64 = 2;
/// The most keys one `HotSet` answer lists (two seconds' summaries hold at
/// most twice `SLOTS`).
const MAX_HOT_SET: usize = 2 * SLOTS;

/// This node's sampled keys.
pub struct HotKeys {
    seen: AtomicU64,
    window: Mutex<Window<HotKey>>,
    /// The CPU microseconds sampled requests cost, by key (`add_cpu`).
    cpu: Mutex<Window<HotKey>>,
    /// The process's CPU time at the first sample of recent seconds (and
    /// when counting began): `(when, microseconds)`, oldest first, for the
    /// node's CPU over the window.
    marks: Mutex<VecDeque<(Instant, u64)>>,
    /// The second of the newest mark (so a sample marks at most once a second).
    marked: AtomicU64,
    start: Instant,
}

/// A sampled request's keys, to charge the CPU its serving took to
/// (`HotKeys::add_cpu`).
#[derive(Debug)]
pub struct Sampled(Vec<HotKey>);

impl Default for HotKeys {
    fn default() -> Self {
        HotKeys {
            seen: AtomicU64::new(0),
            window: Mutex::new(Window::new(SPAN_SECS, SLOTS)),
            cpu: Mutex::new(Window::new(SPAN_SECS, SLOTS)),
            marks: Mutex::new(VecDeque::from([(Instant::now(), process_cpu_us())])),
            marked: AtomicU64::new(u64::MAX),
            start: Instant::now(),
        }
    }
}

impl HotKeys {
    /// Counts `req`'s keys, one time in `SAMPLE`; a sampled request's keys
    /// come back, for the caller to charge its CPU time to.
    pub fn record(&self, req: &Request) -> Option<Sampled> {
        // Which requests are counted is mixed (Fibonacci hashing of the
        // sequence number), so a load that repeats with a period dividing
        // SAMPLE is not sampled on one phase only.
        let mixed = self.seen.fetch_add(1, Ordering::Relaxed).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        if mixed >> (64 - SAMPLE.trailing_zeros()) != 0 {
            return None;
        }
        let now = self.start.elapsed().as_secs();
        let mut keys = Vec::new();
        {
            let mut w = self.window.lock().unwrap_or_else(|e| e.into_inner());
            keys_of(req, mixed, &mut |k, weight| {
                w.add(now, &k, weight);
                keys.push(k);
            });
        }
        self.mark(now);
        (!keys.is_empty()).then_some(Sampled(keys))
    }

    /// Charges `ns` of CPU time to a sampled request's keys, shared evenly.
    pub fn add_cpu(&self, s: Sampled, ns: u64) {
        let each = (ns / 1000 / s.0.len() as u64).max(1);
        let now = self.start.elapsed().as_secs();
        let mut w = self.cpu.lock().unwrap_or_else(|e| e.into_inner());
        for k in &s.0 {
            w.add(now, k, each);
        }
    }

    /// Notes the process's CPU time at the first sample of a second.
    fn mark(&self, now: u64) {
        if self.marked.swap(now, Ordering::Relaxed) == now {
            return;
        }
        let cpu = process_cpu_us();
        let mut marks = self.marks.lock().unwrap_or_else(|e| e.into_inner());
        marks.push_back((Instant::now(), cpu));
        while marks.len() as u64 > SPAN_SECS + 1 {
            marks.pop_front();
        }
    }

    /// The node's CPU microseconds a second over the window (0 until a
    /// sample came a tenth of a second after counting began).
    pub fn node_cpu_us_per_s(&self) -> u64 {
        let marks = self.marks.lock().unwrap_or_else(|e| e.into_inner());
        match (marks.front(), marks.back()) {
            (Some(a), Some(b)) => {
                let secs = b.0.duration_since(a.0).as_secs_f64();
                if secs < 0.1 {
                    return 0;
                }
                (b.1.saturating_sub(a.1) as f64 / secs) as u64
            }
            _ => 0,
        }
    }

    /// The `n` keys whose requests cost the most CPU, with their CPU
    /// microseconds a second.
    pub fn top_cpu(&self, n: usize) -> Vec<(HotKey, u64)> {
        let (now, secs) = self.span();
        let w = self.cpu.lock().unwrap_or_else(|e| e.into_inner());
        w.top(now, n).into_iter().map(|h| (h.key, h.count * SAMPLE / secs)).collect()
    }

    /// `key`'s requests a second and CPU microseconds a second.
    pub fn rates_of(&self, key: &HotKey) -> (u64, u64) {
        let (now, secs) = self.span();
        let requests = self.window.lock().unwrap_or_else(|e| e.into_inner()).count_of(now, key);
        let cpu = self.cpu.lock().unwrap_or_else(|e| e.into_inner()).count_of(now, key);
        (requests * SAMPLE / secs, cpu * SAMPLE / secs)
    }

    /// The current second and the seconds the window covers (a young
    /// node's window covers only the seconds it has run).
    fn span(&self) -> (u64, u64) {
        let now = self.start.elapsed().as_secs();
        (now, (now + 1).min(SPAN_SECS))
    }

    /// The `n` heaviest keys now, with their estimated requests a second.
    pub fn top(&self, n: usize) -> Vec<(HotKey, u64)> {
        let (now, secs) = self.span();
        let w = self.window.lock().unwrap_or_else(|e| e.into_inner());
        w.top(now, n).into_iter().map(|h| (h.key, h.count * SAMPLE / secs)).collect()
    }

    /// The keys at `min_rps` requests a second or more over the last
    /// `RECENT_SECS` (the current second counted for the part of it that
    /// has passed), heaviest first; none when `min_rps` is 0.
    pub fn hot_now(&self, min_rps: u64) -> Vec<(HotKey, u64)> {
        if min_rps == 0 {
            return Vec::new();
        }
        let elapsed = self.start.elapsed().as_secs_f64();
        let now = elapsed as u64;
        // The span the summed buckets cover: the whole seconds before
        // this one, and this one so far.
        let span = elapsed - now.saturating_sub(RECENT_SECS - 1) as f64;
        let w = self.window.lock().unwrap_or_else(|e| e.into_inner());
        w.top_over(now, RECENT_SECS, MAX_HOT_SET)
            .into_iter()
            .map(|h| (h.key, (h.count * SAMPLE) as f64 / span.max(0.05)))
            .filter(|(_, rate)| *rate >= min_rps as f64)
            .map(|(key, rate)| (key, rate as u64))
            .collect()
    }
}

/// Whether a client can serve `key` from its own memory: an entity's
/// counts and a board's pages can; a user's states and lists are read by
/// that user's own calls, which a shared cache would not spare.
pub fn cacheable(key: &HotKey) -> bool {
    matches!(key, HotKey::Entity { .. } | HotKey::Board { .. })
}

/// Whether `key` is one `req` asks about.
fn in_scope(req: &HotSetRequest, key: &HotKey) -> bool {
    match key {
        HotKey::Entity { biz, .. } => req.bizs.contains(biz),
        HotKey::Board { rank, .. } => req.ranks.contains(rank),
        HotKey::User { .. } => false,
    }
}

/// Calls `f` with the keys `req` touches and their weights. A read of
/// many entities counts one of them, picked by `mixed` (the sample's
/// hash), for all: the same expected count per entity as counting each,
/// for one lookup in the sketch instead of up to 500.
fn keys_of(req: &Request, mixed: u64, f: &mut impl FnMut(HotKey, u64)) {
    match req {
        Request::Like(r) => {
            f(HotKey::Entity { biz: r.biz, entity: r.entity }, 1);
            f(HotKey::User { biz: r.biz, user: r.user }, 1);
        }
        Request::Status(r) => f(HotKey::User { biz: r.biz, user: r.user }, 1),
        Request::UserLikes(r) => f(HotKey::User { biz: r.biz, user: r.user }, 1),
        Request::Received(r) => f(HotKey::User { biz: r.biz, user: r.user }, 1),
        Request::Likers(r) => f(HotKey::Entity { biz: r.biz, entity: r.entity }, 1),
        Request::Counts(r) if !r.entities.is_empty() => {
            let n = r.entities.len() as u64;
            // The low bits: the high ones decided that this one is sampled.
            let entity = r.entities[(mixed % n) as usize];
            f(HotKey::Entity { biz: r.biz, entity }, n);
        }
        Request::Query(q) => f(HotKey::board(q.rank, &q.board), 1),
        Request::Score(s) => f(HotKey::scored(s.rank, &s.dims), 1),
        Request::Stale(inner) | Request::Once { req: inner, .. } => keys_of(inner, mixed, f),
        _ => {}
    }
}

/// The shard `key` lives on in a cluster of `shards`, if the key says.
pub fn shard_of_key(key: &HotKey, shards: u32) -> Option<ShardId> {
    match key {
        HotKey::Entity { biz, entity } => Some(shard_of(*biz, *entity, shards)),
        HotKey::User { biz, user } => Some(shard_of(*biz, *user, shards)),
        HotKey::Board { rank, board } => {
            TypeId::parse(board).map(|t| board_shard(*rank, &t.to_key(), shards))
        }
    }
}

impl Engine {
    /// This node's `top` heaviest keys by requests and its `top` by CPU,
    /// as rows (a key in both once), each with both figures.
    pub(crate) fn hot_keys_here(&self, top: u32) -> Vec<HotKeyRow> {
        let node = self.node_id();
        let told: Vec<HotKey> =
            self.hot.hot_now(self.cfg.hot_cache_min_rps).into_iter().map(|(k, _)| k).collect();
        let node_cpu_us_per_s = self.hot.node_cpu_us_per_s();
        let mut keys: Vec<HotKey> =
            self.hot.top(top as usize).into_iter().map(|(k, _)| k).collect();
        for (k, _) in self.hot.top_cpu(top as usize) {
            if !keys.contains(&k) {
                keys.push(k);
            }
        }
        keys.into_iter()
            .map(|key| {
                let (requests_per_s, cpu_us_per_s) = self.hot.rates_of(&key);
                let mut shard = shard_of_key(&key, self.cfg.shards);
                let mut relief = if cacheable(&key) && told.contains(&key) {
                    Relief::ClientCache
                } else {
                    Relief::None
                };
                // A moved board or entity is where the placements say.
                let placed = match (&key, shard) {
                    (HotKey::Board { rank, board }, Some(_)) => {
                        TypeId::parse(board).map(|t| self.board_home(*rank, &t.to_key()))
                    }
                    (HotKey::Entity { biz, entity }, _) => {
                        Some(self.directory.entity_shard(*biz, *entity, self.cfg.shards))
                    }
                    _ => None,
                };
                if let (Some(placed), Some(hashed)) = (placed, shard) {
                    if placed != hashed {
                        (shard, relief) = (Some(placed), Relief::Moved);
                    }
                }
                HotKeyRow {
                    shard,
                    relief,
                    key,
                    node,
                    requests_per_s,
                    cpu_us_per_s,
                    node_cpu_us_per_s,
                }
            })
            .collect()
    }

    /// The keys of `req`'s businesses and rankings that clients should
    /// cache now: cacheable, and at `hot_cache_min_rps` here.
    pub(crate) fn hot_set(&self, req: &HotSetRequest) -> Vec<HotKey> {
        self.hot
            .hot_now(self.cfg.hot_cache_min_rps)
            .into_iter()
            .map(|(k, _)| k)
            .filter(|k| cacheable(k) && in_scope(req, k))
            .collect()
    }

    /// The `top` heaviest keys of every reachable node, heaviest first. A
    /// key served by several nodes (through several clients' connections)
    /// has a row per node.
    pub(crate) async fn hot_keys(&self, top: u32) -> Vec<HotKeyRow> {
        let me = self.node_id();
        let map = self.directory.cluster().map(|m| (*m).clone()).unwrap_or_default();
        let asks = map.nodes.iter().filter(|n| n.id != me).map(|n| async move {
            self.peers.call(n.id, PeerRequest::HotKeys { top }, ASK_TIMEOUT).await
        });
        let mut rows = self.hot_keys_here(top);
        for answer in futures::future::join_all(asks).await {
            // A node that does not answer in time is left out: this is a
            // view of the load, not a record.
            if let Ok(PeerResponse::HotKeys(more)) = answer {
                rows.extend(more);
            }
        }
        // The `top` by requests and the `top` by CPU (`admin hotkeys --by`
        // sorts by either).
        let by_cpu = |a: &HotKeyRow, b: &HotKeyRow| {
            b.cpu_us_per_s.cmp(&a.cpu_us_per_s).then(a.key.cmp(&b.key))
        };
        let mut heavy: Vec<HotKeyRow> = rows.clone();
        heavy.sort_by(by_cpu);
        heavy.truncate(top as usize);
        rows.sort_by(|a, b| b.requests_per_s.cmp(&a.requests_per_s).then(a.key.cmp(&b.key)));
        rows.truncate(top as usize);
        for r in heavy {
            if !rows.iter().any(|x| x.key == r.key && x.node == r.node) {
                rows.push(r);
            }
        }
        rows
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use plaudit_proto::likes::{CountsRequest, LikeRequest};
    use plaudit_proto::LikeAction;

    #[test]
    fn a_request_counts_the_keys_it_touches() {
        let like = Request::Like(LikeRequest {
            biz: 1,
            entity: 7,
            user: 9,
            owner: None,
            action: LikeAction::Like,
        });
        let mut keys = Vec::new();
        keys_of(&like, 0, &mut |k, w| keys.push((k, w)));
        assert_eq!(
            keys,
            [(HotKey::Entity { biz: 1, entity: 7 }, 1), (HotKey::User { biz: 1, user: 9 }, 1)]
        );
        // A read of many entities counts one, picked by the sample, for all.
        let counts = Request::Counts(CountsRequest { biz: 1, entities: vec![3, 4] });
        for (mixed, entity) in [(0, 3), (1, 4)] {
            keys.clear();
            keys_of(&Request::Stale(Box::new(counts.clone())), mixed, &mut |k, w| {
                keys.push((k, w))
            });
            assert_eq!(keys, [(HotKey::Entity { biz: 1, entity }, 2)]);
        }
        keys.clear();
        keys_of(&Request::Ping, 0, &mut |k, w| keys.push((k, w)));
        assert!(keys.is_empty());
    }

    #[test]
    fn the_hottest_key_leads_with_its_rate() {
        let hot = HotKeys::default();
        let counts = |e| Request::Counts(CountsRequest { biz: 1, entities: vec![e] });
        for i in 0..8000u64 {
            // Entity 5 in every other request, the rest spread thin.
            hot.record(&counts(if i % 2 == 0 { 5 } else { 1000 + i }));
        }
        let top = hot.top(3);
        assert_eq!(top[0].0, HotKey::Entity { biz: 1, entity: 5 });
        // 4,000 requests within the first second of the window.
        assert!((3000..=5000).contains(&top[0].1), "{top:?}");
        assert!(top.iter().skip(1).all(|(_, r)| *r < top[0].1 / 10), "{top:?}");
    }

    #[test]
    fn only_keys_over_the_rate_are_hot_now() {
        let hot = HotKeys::default();
        let counts = |e| Request::Counts(CountsRequest { biz: 1, entities: vec![e] });
        for i in 0..8000u64 {
            hot.record(&counts(if i % 2 == 0 { 5 } else { 1000 + i }));
        }
        assert!(hot.hot_now(0).is_empty(), "0 turns the hot set off");
        // Entity 5 took 4,000 requests within the last fraction of a second.
        let now = hot.hot_now(1000);
        assert_eq!(now.len(), 1, "{now:?}");
        assert_eq!(now[0].0, HotKey::Entity { biz: 1, entity: 5 });
        assert!(hot.hot_now(u64::MAX / 2).is_empty());
    }

    #[test]
    fn a_hot_set_lists_cacheable_keys_of_the_businesses_and_rankings_asked_for() {
        let req = HotSetRequest { bizs: vec![1], ranks: vec![4] };
        assert!(in_scope(&req, &HotKey::Entity { biz: 1, entity: 2 }));
        assert!(!in_scope(&req, &HotKey::Entity { biz: 2, entity: 2 }));
        assert!(in_scope(&req, &HotKey::Board { rank: 4, board: "total".into() }));
        assert!(!in_scope(&req, &HotKey::Board { rank: 5, board: "total".into() }));
        assert!(!in_scope(&req, &HotKey::User { biz: 1, user: 2 }));
        assert!(!cacheable(&HotKey::User { biz: 1, user: 2 }));
    }

    #[test]
    fn keys_name_their_shard_when_they_can() {
        assert_eq!(shard_of_key(&HotKey::User { biz: 2, user: 3 }, 6), Some(shard_of(2, 3, 6)));
        let named = HotKey::Board { rank: 4, board: "total:0_1".into() };
        assert!(shard_of_key(&named, 6).is_some());
        let by_dims = HotKey::Board { rank: 4, board: "room=7".into() };
        assert_eq!(shard_of_key(&by_dims, 6), None);
    }

    #[test]
    fn sampled_requests_charge_their_cpu_to_their_keys() {
        let hot = HotKeys::default();
        let counts = |e| Request::Counts(CountsRequest { biz: 1, entities: vec![e] });
        let mut sampled = 0;
        for i in 0..8_000u64 {
            // Entity 5 is asked for half the time, but its reads are cheap;
            // entity 9's are ten times dearer.
            let (entity, ns) = if i % 2 == 0 { (5, 1_000) } else { (9, 10_000) };
            if let Some(s) = hot.record(&counts(entity)) {
                sampled += 1;
                hot.add_cpu(s, ns);
            }
        }
        assert!(sampled > 800 && sampled < 1_200, "one in {SAMPLE}: {sampled}");
        let by_cpu = hot.top_cpu(2);
        assert_eq!(by_cpu[0].0, HotKey::Entity { biz: 1, entity: 9 }, "{by_cpu:?}");
        let (requests, cpu) = hot.rates_of(&HotKey::Entity { biz: 1, entity: 5 });
        assert!(requests > 0 && cpu > 0, "{requests} {cpu}");
        let (_, dear) = hot.rates_of(&HotKey::Entity { biz: 1, entity: 9 });
        assert!(dear > 5 * cpu, "{dear} against {cpu}");
        assert_eq!(hot.rates_of(&HotKey::User { biz: 1, user: 1 }), (0, 0), "never seen");
    }
}
