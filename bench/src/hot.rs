//! `plaudit-bench hot`: a load with hot keys, for measuring what relieves
//! them (`scripts/bench-hot.sh` runs it with the client cache off, then
//! on). Counts reads of one entity and likes pick entities by Zipf rank
//! (entity id = rank); `hot-board-share` of scoring events and top-10
//! reads go to board 0 of one ranking, the rest spread over all boards.
//!
//! Every answer is checked against a ledger of what was sent, acknowledged
//! and answered (`ledger.rs`): a node's answer must be linearizable (for a
//! count: never below one a node gave earlier; likes reach counts through
//! the outbox), a cached one true at most its reported age before the
//! call, and that age below the TTL. Every like is by a new user, so each one adds one
//! like; every event adds its score to one member of one board.
//!
//! `--sdk batch` sends each connection's `--pipeline` ops together and
//! waits for them all; `--sdk calls` runs `--pipeline` callers per
//! connection, each with one call in flight, as independent users are: a
//! read then waits for nobody's write but its own caller's.
//!
//! While the load runs, `admin hotkeys` is asked every 100 ms until the
//! hottest entity and the hot board are both listed: how long detection
//! takes.

use crate::args::{HotArgs, Sdk};
use crate::ledger::{self, Ledger};
use crate::load::{measure, Mix, Phase, Stats, MEASURE, STOP};
use crate::plaudit::{self, error_name, Backoff};
use crate::rankings::{Workload as Boards, TOP_N};
use crate::rankings_plaudit::{self, applied, event};
use crate::report::{self, RunInfo};
use crate::rng::FastRng;
use crate::zipf::Zipf;
use plaudit_client::{Cached, Client, ClientError};
use plaudit_proto::hotkeys::HotKey;
use plaudit_proto::likes::{CountsRequest, LikeRequest};
use plaudit_proto::scoring::{BoardQuery, BoardRef, QueryReply, QueryRequest};
use plaudit_proto::{LikeAction, Request, Response};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Op names as the mix and the report spell them, in `Op::kind` order.
pub const NAMES: &[&str] = &["counts", "top", "like", "score"];

pub fn parse_mix(s: &str) -> Result<Mix, String> {
    Mix::parse(s, NAMES)
}

#[derive(Debug, Clone, Copy)]
enum Op {
    Counts { entity: u64 },
    Top { board: u64 },
    Like { entity: u64, user: u64 },
    Score { board: u64, member: u64, score: i64, event_id: u64 },
}

impl Op {
    fn kind(&self) -> usize {
        match self {
            Op::Counts { .. } => 0,
            Op::Top { .. } => 1,
            Op::Like { .. } => 2,
            Op::Score { .. } => 3,
        }
    }

    /// The ledger entry of a write.
    fn write(&self) -> Option<(ledger::Key, i64)> {
        match *self {
            Op::Like { entity, .. } => Some((ledger::entity(entity), 1)),
            Op::Score { board, member, score, .. } => Some(((board, member), score)),
            _ => None,
        }
    }
}

struct Workload {
    args: HotArgs,
    entities: Zipf,
    /// Fresh ids: every like is by a new user, every event has its own id.
    next_id: AtomicU64,
    ledger: Ledger,
    /// Answers checked, of which from the cache, and those out of bounds.
    checked: AtomicU64,
    cached: AtomicU64,
    violations: AtomicU64,
}

impl Workload {
    fn next_op(&self, rng: &mut FastRng) -> Op {
        let a = &self.args;
        let board = |rng: &mut FastRng| {
            if rng.unit_f64() < a.hot_board_share {
                0
            } else {
                rng.below(a.boards)
            }
        };
        match a.mix.pick(rng) {
            0 => Op::Counts { entity: self.entities.sample(rng) },
            1 => Op::Top { board: board(rng) },
            2 => Op::Like {
                entity: self.entities.sample(rng),
                user: self.next_id.fetch_add(1, Ordering::Relaxed),
            },
            _ => Op::Score {
                board: board(rng),
                member: 1 + rng.below(a.members),
                score: 1 + rng.below(10) as i64,
                event_id: self.next_id.fetch_add(1, Ordering::Relaxed),
            },
        }
    }

    fn request(&self, op: &Op) -> Request {
        let (biz, rank) = (self.args.biz, self.args.rank);
        match *op {
            Op::Counts { entity } => Request::Counts(CountsRequest { biz, entities: vec![entity] }),
            Op::Top { board } => Request::Query(QueryRequest {
                rank,
                board: BoardRef::TypeId(Boards::type_id(board)),
                query: BoardQuery::Top { offset: 0, limit: TOP_N },
            }),
            Op::Like { entity, user } => Request::Like(LikeRequest {
                biz,
                entity,
                user,
                owner: None,
                action: LikeAction::Like,
            }),
            Op::Score { board, member, score, event_id } => {
                Request::Score(event(rank, board, member, score, event_id))
            }
        }
    }

    /// Judges one answer; reads are checked against the ledger as true
    /// after `sent` (less their age) and before `done`.
    fn judge(
        &self,
        op: &Op,
        answer: &Result<Cached<Response>, ClientError>,
        sent: Instant,
        done: Instant,
    ) -> Result<(), &'static str> {
        let answer = match answer {
            Ok(a) => a,
            Err(e) => return Err(error_name(e)),
        };
        let reads: Vec<(ledger::Key, i64)> = match (op, &answer.value) {
            (Op::Like { .. }, Response::Like(r)) if r.changed => return Ok(()),
            (Op::Like { .. }, Response::Like(_)) => return Err("unchanged"),
            (Op::Score { .. }, Response::Score(r)) => {
                return applied(r).map_err(|_| "not_applied");
            }
            (Op::Counts { entity }, Response::Counts(c)) if c.len() == 1 => {
                vec![(ledger::entity(*entity), c[0].likes as i64)]
            }
            (Op::Top { board }, Response::Query(QueryReply::Items { items, .. })) => {
                items.iter().map(|i| ((*board, i.item), i.score)).collect()
            }
            _ => return Err("unexpected_reply"),
        };
        self.checked.fetch_add(1, Ordering::Relaxed);
        let since = match answer.age {
            Some(age) => {
                self.cached.fetch_add(1, Ordering::Relaxed);
                if age >= self.args.common.cache_ttl {
                    self.violations.fetch_add(1, Ordering::Relaxed);
                    return Err("age_over_ttl");
                }
                sent.checked_sub(age).unwrap_or(sent)
            }
            None => sent,
        };
        let bad = self.ledger.check(&reads, since, done, answer.age.is_none());
        if let Some(v) = bad.first() {
            if self.violations.fetch_add(1, Ordering::Relaxed) == 0 {
                eprintln!("plaudit-bench: first stale answer: {v:?} (age {:?})", answer.age);
            }
            return Err("stale");
        }
        Ok(())
    }
}

impl Workload {
    /// Judges the answers of ops sent together at `sent`, counts them in
    /// `stats` while measuring, and records the writes acknowledged; the
    /// last client error, for the backoff.
    fn settle<'a>(
        &self,
        answered: impl Iterator<Item = (&'a Op, &'a Result<Cached<Response>, ClientError>)>,
        sent: Instant,
        measuring: bool,
        stats: &mut Stats,
    ) -> Option<&'a ClientError> {
        let done = Instant::now();
        let took = done.duration_since(sent).as_nanos() as u64;
        let mut acked = Vec::new();
        let mut failed = None;
        for (op, answer) in answered {
            let r = self.judge(op, answer, sent, done);
            if r.is_ok() {
                acked.extend(op.write());
            }
            if measuring {
                match r {
                    Ok(()) => stats.ok_ns(op.kind(), took),
                    Err(name) => stats.error(op.kind(), name),
                }
            }
            if let Err(e) = answer {
                failed = Some(e);
            }
        }
        if !acked.is_empty() {
            self.ledger.acked(&acked);
        }
        failed
    }
}

/// One loop until `STOP`: with `--sdk batch` a connection's, `pipeline`
/// ops at a time sent together and waited for together; with `--sdk
/// calls` one caller's, one op at a time in a call of its own, so a read
/// never waits for an unrelated write sent beside it.
async fn run_loop(client: Client, wl: Arc<Workload>, mut rng: FastRng, phase: Phase) -> Stats {
    let sdk = wl.args.common.sdk;
    let slots = match sdk {
        Sdk::Batch => wl.args.common.pipeline,
        Sdk::Calls => 1,
    };
    let mut stats = Stats::new(NAMES.len());
    let mut backoff = Backoff::default();
    loop {
        let p = phase.get();
        if p == STOP {
            return stats;
        }
        let ops: Vec<Op> = (0..slots).map(|_| wl.next_op(&mut rng)).collect();
        let writes: Vec<(ledger::Key, i64)> = ops.iter().filter_map(Op::write).collect();
        if !writes.is_empty() {
            wl.ledger.sent(&writes);
        }
        let mut reqs: Vec<Request> = ops.iter().map(|op| wl.request(op)).collect();
        let sent = Instant::now();
        let answers = match sdk {
            Sdk::Batch => client.pipeline_cached(reqs).await,
            Sdk::Calls => vec![client.request_cached(reqs.remove(0)).await],
        };
        let failed = wl.settle(ops.iter().zip(&answers), sent, p == MEASURE, &mut stats);
        backoff.after_error(failed).await;
    }
}

/// Asks `admin hotkeys` every 100 ms until entity 1 and board 0 of the
/// ranking are both listed (or the phase stops); how long that took.
async fn detect(client: Client, biz: u32, rank: u32, phase: Phase) -> Option<Duration> {
    let start = Instant::now();
    let entity = HotKey::Entity { biz, entity: 1 };
    let board = HotKey::board(rank, &BoardRef::TypeId(Boards::type_id(0)));
    while phase.get() != STOP {
        if let Ok(rows) = client.hot_keys(20).await {
            let listed = |k: &HotKey| rows.iter().any(|r| &r.key == k);
            if listed(&entity) && listed(&board) {
                return Some(start.elapsed());
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    None
}

pub async fn run(args: &HotArgs) -> anyhow::Result<()> {
    let c = &args.common;
    // The connections are shared out as evenly as whole pools allow.
    let pool = c.connections.div_ceil(args.clients);
    let clients = plaudit::connect_pooled(c, args.clients, pool).await?;
    crate::likes_plaudit::ensure_biz(&clients[0], args.biz).await?;
    rankings_plaudit::ensure_rank(&clients[0], args.rank).await?;
    let wl = Arc::new(Workload {
        args: args.clone(),
        entities: Zipf::new(args.entities, args.zipf).map_err(anyhow::Error::msg)?,
        next_id: AtomicU64::new(1),
        ledger: Ledger::default(),
        checked: AtomicU64::new(0),
        cached: AtomicU64::new(0),
        violations: AtomicU64::new(0),
    });
    let seed = c.seed();
    let phase = Phase::default();
    let detector = tokio::spawn(detect(clients[0].uncached(), args.biz, args.rank, phase.clone()));
    // One loop per connection (`--sdk batch`) or `pipeline` per connection
    // (`--sdk calls`), dealt round robin over the clients.
    let loops = match c.sdk {
        Sdk::Batch => c.connections,
        Sdk::Calls => c.connections * c.pipeline,
    };
    let tasks: Vec<_> = (0..loops)
        .map(|i| {
            let client = clients[i % clients.len()].clone();
            let rng = FastRng::seed(seed ^ (i as u64).wrapping_mul(0xD1B5_4A32_D192_ED03));
            tokio::spawn(run_loop(client, wl.clone(), rng, phase.clone()))
        })
        .collect();
    let (stats, window) = measure(c, &phase, NAMES.len(), tasks).await?;
    let detected = detector.await.ok().flatten();
    let mut all = crate::hist::Histogram::new();
    for op in 0..NAMES.len() {
        all.merge(stats.hist(op));
    }
    let checked = wl.checked.load(Ordering::Relaxed);
    let cached = wl.cached.load(Ordering::Relaxed);
    let info = RunInfo::new(
        c,
        "plaudit",
        c.addr.clone(),
        window,
        None,
        vec![
            ("clients", args.clients.into()),
            ("entities", args.entities.into()),
            ("zipf", args.zipf.into()),
            ("boards", args.boards.into()),
            ("hot_board_share", args.hot_board_share.into()),
            ("cache_ttl_ms", (c.cache_ttl.as_millis() as u64).into()),
            ("p99_all_us", (all.quantile(0.99) as f64 / 1000.0).into()),
            ("answers_checked", checked.into()),
            ("answers_cached", cached.into()),
            ("stale_answers", wl.violations.load(Ordering::Relaxed).into()),
            ("hot_listed_after_ms", detected.map(|d| d.as_millis() as u64).into()),
        ],
    );
    report::print(c.json, &info, &args.mix, &stats);
    if !c.json {
        eprintln!(
            "checked {checked} answers ({cached} from the cache), {} stale; hottest keys listed after {}",
            wl.violations.load(Ordering::Relaxed),
            detected.map_or("(not listed)".into(), |d| format!("{} ms", d.as_millis()))
        );
    }
    Ok(())
}
