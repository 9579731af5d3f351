//! The rankings workload against a Plaudit node through the SDK: one
//! `score` call per event (the outcome must be `applied`; anything else is
//! counted as an error under its outcome's name), `top` of 10 and `rank_of`.

use crate::load::{Phase, Stats, MEASURE, STOP};
use crate::plaudit::{error_name, retry_setup, Backoff};
use crate::plaudit_loop::{BatchOps, Failure};
use crate::rankings::{preload_report, Op, PreloadPlan, Workload, TOP_N};
use crate::report::Preload;
use crate::rng::FastRng;
use anyhow::{bail, Context};
use plaudit_client::{Client, ClientError};
use plaudit_proto::rankings::{Aggregation, RankDef, RankSettings, TieMode};
use plaudit_proto::scoring::{
    BoardQuery, BoardRef, Outcome, QueryRequest, ScoreReply, ScoreRequest,
};
use plaudit_proto::window::{Granularity, UtcOffset};
use plaudit_proto::{ErrorCode, Request, Response};
use rand::RngCore;
use std::sync::Arc;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// The one dimension of the bench ranking; its value is the board number.
pub const DIM: &str = "board";

/// Makes sure ranking `rank` exists with the shape the workload needs
/// (creating it if missing); refuses one of another shape.
pub async fn ensure_rank(client: &Client, rank: u32) -> anyhow::Result<()> {
    let def = retry_setup(|| try_ensure_rank(client, rank)).await?;
    if def.dims != [DIM] || def.granularities != [Granularity::Total] {
        bail!(
            "ranking {rank} exists with dims {:?} and granularities {:?}; the bench needs \
             [{DIM:?}] and [total] (pick another --rank)",
            def.dims,
            def.granularities
        );
    }
    Ok(())
}

async fn try_ensure_rank(client: &Client, rank: u32) -> anyhow::Result<RankDef> {
    match client.get_rank(rank).await {
        Ok(def) => Ok(def),
        Err(e) if e.code() == Some(ErrorCode::NotFound) => {
            let def = RankDef {
                id: rank,
                name: format!("bench-{rank}"),
                dims: vec![DIM.into()],
                granularities: vec![Granularity::Total],
                utc_offset: UtcOffset::from_seconds(0).expect("UTC is a valid offset"),
                aggregation: Aggregation::Incr,
                ties: TieMode::EarlierFirst,
                settings: RankSettings::default(),
            };
            match client.create_rank(def).await {
                Ok(d) => Ok(d),
                // Someone else may have created it meanwhile.
                Err(create) => client
                    .get_rank(rank)
                    .await
                    .with_context(|| format!("creating ranking {rank}: {create}")),
            }
        }
        Err(e) => Err(e).with_context(|| format!("looking up ranking {rank}")),
    }
}

fn now_secs() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs() as i64).unwrap_or(0)
}

pub fn event(rank: u32, board: u64, member: u64, score: i64, event_id: u64) -> ScoreRequest {
    ScoreRequest {
        rank,
        item: member,
        score,
        sub: None,
        dims: vec![(DIM.into(), board)],
        ts: now_secs(),
        event_id,
    }
}

/// An event's answer is accepted only if it applied on its one board.
pub fn applied(reply: &ScoreReply) -> Result<(), Failure> {
    match reply.boards.as_slice() {
        [b] if b.outcome == Outcome::Applied => Ok(()),
        [b] => Err(Failure::Outcome(b.outcome.as_str())),
        _ => Err(Failure::Outcome("boards")),
    }
}

async fn score(
    client: &Client,
    rank: u32,
    board: u64,
    member: u64,
    score: i64,
    event_id: u64,
) -> Result<(), Failure> {
    let ev = event(rank, board, member, score, event_id);
    applied(&client.score(ev).await.map_err(Failure::Client)?)
}

async fn run_op(client: &Client, wl: &Workload, op: Op) -> Result<(), Failure> {
    match op {
        Op::Score { board, member, score: s, event_id } => {
            score(client, wl.rank, board, member, s, event_id).await
        }
        Op::Top { board } => {
            let b = BoardRef::TypeId(Workload::type_id(board));
            client.top(wl.rank, b, 0, TOP_N).await.map(drop).map_err(Failure::Client)
        }
        Op::Rank { board, member } => {
            let b = BoardRef::TypeId(Workload::type_id(board));
            client.rank_of(wl.rank, b, member).await.map(drop).map_err(Failure::Client)
        }
    }
}

/// Backs off on the client errors that call for it.
async fn back_off(backoff: &mut Backoff, r: &Result<(), Failure>) {
    match r {
        Ok(()) => backoff.after_error(None).await,
        Err(Failure::Client(e)) => backoff.after_error(Some(e)).await,
        Err(Failure::Outcome(_)) => {}
    }
}

/// The rankings workload as batches (`plaudit_loop.rs`): slot `i` draws
/// its ops from `rngs[i]`.
pub struct RankBatches {
    pub wl: Arc<Workload>,
    pub rngs: Vec<FastRng>,
}

impl BatchOps for RankBatches {
    type Op = Op;

    fn ops(&self) -> usize {
        self.wl.mix.ops()
    }

    fn next_op(&mut self, slot: usize) -> Op {
        self.wl.next_op(&mut self.rngs[slot])
    }

    fn kind(op: &Op) -> usize {
        op.kind().index()
    }

    fn request(&self, op: &Op) -> Request {
        let (rank, board) = (self.wl.rank, |b| BoardRef::TypeId(Workload::type_id(b)));
        match *op {
            Op::Score { board: b, member, score, event_id } => {
                Request::Score(event(rank, b, member, score, event_id))
            }
            Op::Top { board: b } => Request::Query(QueryRequest {
                rank,
                board: board(b),
                query: BoardQuery::Top { offset: 0, limit: TOP_N },
            }),
            Op::Rank { board: b, member } => Request::Query(QueryRequest {
                rank,
                board: board(b),
                query: BoardQuery::RankOf { item: member },
            }),
        }
    }

    fn judge(
        &mut self,
        _slot: usize,
        op: &Op,
        answer: Result<Response, ClientError>,
    ) -> Result<(), Failure> {
        match (op, answer.map_err(Failure::Client)?) {
            (Op::Score { .. }, Response::Score(reply)) => applied(&reply),
            (Op::Top { .. } | Op::Rank { .. }, Response::Query(_)) => Ok(()),
            _ => Err(Failure::Outcome("unexpected_reply")),
        }
    }
}

/// One measured loop: one call in flight at a time, until `STOP`.
pub async fn run_loop(client: Client, wl: Arc<Workload>, mut rng: FastRng, phase: Phase) -> Stats {
    let mut stats = Stats::new(wl.mix.ops());
    let mut backoff = Backoff::default();
    loop {
        let p = phase.get();
        if p == STOP {
            return stats;
        }
        let op = wl.next_op(&mut rng);
        let started = Instant::now();
        let r = run_op(&client, &wl, op).await;
        if p == MEASURE {
            let k = op.kind().index();
            match &r {
                Ok(()) => stats.ok(k, started),
                Err(Failure::Client(e)) => stats.error(k, error_name(e)),
                Err(Failure::Outcome(o)) => stats.error(k, o),
            }
        }
        back_off(&mut backoff, &r).await;
    }
}

/// Gives members `1..=plan.per_board` of every board one event each, from
/// `pipeline` loops per client. A failed call is retried with the same
/// event id: whether the first attempt applied is unknowable after a
/// timeout, and a repeat that did reports `duplicate`, which counts as done.
pub async fn preload(
    clients: &[Client],
    pipeline: usize,
    wl: &Arc<Workload>,
    plan: PreloadPlan,
    seed: u64,
) -> anyhow::Result<Preload> {
    let loops = (clients.len() * pipeline) as u64;
    let started = Instant::now();
    let mut tasks = Vec::with_capacity(loops as usize);
    for i in 0..loops {
        let client = clients[i as usize / pipeline].clone();
        let wl = wl.clone();
        let mut rng = FastRng::seed(seed ^ 0x5EED ^ i);
        tasks.push(tokio::spawn(async move {
            let mut errors = 0u64;
            let mut backoff = Backoff::default();
            for idx in plan.share(i, loops) {
                let (board, member) = plan.pair(idx);
                let (s, id) = (wl.score(&mut rng), rng.next_u64());
                for _attempt in 0..10 {
                    let r = score(&client, wl.rank, board, member, s, id).await;
                    match r {
                        Ok(()) | Err(Failure::Outcome("duplicate")) => break,
                        _ => errors += 1,
                    }
                    back_off(&mut backoff, &r).await;
                }
            }
            errors
        }));
    }
    let mut errors = 0;
    for t in tasks {
        errors += t.await?;
    }
    Ok(preload_report(plan.total(), started, errors))
}
