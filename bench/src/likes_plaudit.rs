//! The like workload against a Plaudit node through the SDK. `connections`
//! separate `Client`s (pool size 1 each), with `pipeline` requests in
//! flight on each: one batch of them per `Client::pipeline` call
//! (`--sdk batch`, as the Redis driver pipelines), or as many concurrent
//! loops of single calls (`--sdk calls`).

use crate::likes::{Op, Worker, Workload};
use crate::load::{Phase, Stats, MEASURE, STOP};
use crate::plaudit::{error_name, retry_setup, Backoff};
use crate::plaudit_loop::{BatchOps, Failure};
use crate::report::Preload;
use anyhow::Context;
use plaudit_client::{Client, ClientError};
use plaudit_proto::likes::{CountsRequest, LikeReply, LikeRequest, StatusRequest};
use plaudit_proto::{BizConfig, ErrorCode, LikeAction, LikeState, Request, Response};
use std::sync::Arc;
use std::time::Instant;

/// Makes sure business `biz` exists, creating it with the default config.
pub async fn ensure_biz(client: &Client, biz: u32) -> anyhow::Result<()> {
    retry_setup(|| try_ensure_biz(client, biz)).await
}

async fn try_ensure_biz(client: &Client, biz: u32) -> anyhow::Result<()> {
    match client.get_biz(biz).await {
        Ok(_) => Ok(()),
        Err(e) if e.code() == Some(ErrorCode::NotFound) => {
            match client.create_biz(Some(biz), &format!("bench-{biz}"), BizConfig::default()).await
            {
                Ok(_) => Ok(()),
                // Someone else may have created it meanwhile.
                Err(create) => client
                    .get_biz(biz)
                    .await
                    .map(|_| ())
                    .with_context(|| format!("creating business {biz}: {create}")),
            }
        }
        Err(e) => Err(e).with_context(|| format!("looking up business {biz}")),
    }
}

async fn act(
    client: &Client,
    wl: &Workload,
    user: u64,
    entity: u64,
    action: LikeAction,
) -> Result<LikeReply, ClientError> {
    let owner = wl.owners.then(|| wl.owner_of(entity));
    client.act(wl.biz, entity, user, owner, action).await
}

/// Writes `quota` new likes from one loop.
async fn preload_loop(
    client: Client,
    wl: Arc<Workload>,
    mut worker: Worker,
    quota: u64,
) -> (Worker, u64) {
    let mut errors = 0;
    let mut backoff = Backoff::default();
    for _ in 0..quota {
        let (user, entity) = worker.next_preload(&wl);
        let r = act(&client, &wl, user, entity, LikeAction::Like).await;
        let r = r.map(|reply| worker.learn(user, entity, reply.now == LikeState::Like));
        if r.is_err() {
            errors += 1;
        }
        backoff.after(&r).await;
    }
    (worker, errors)
}

/// One loop per (client, pipeline slot): `workers` is laid out client-major.
pub async fn preload(
    clients: &[Client],
    workers: Vec<Worker>,
    wl: Arc<Workload>,
    records: u64,
) -> anyhow::Result<(Vec<Worker>, Preload)> {
    let n = workers.len() as u64;
    let per_client = workers.len() / clients.len();
    let started = Instant::now();
    let mut tasks = Vec::with_capacity(workers.len());
    for (i, worker) in workers.into_iter().enumerate() {
        let quota = records / n + u64::from((i as u64) < records % n);
        let client = clients[i / per_client].clone();
        tasks.push(tokio::spawn(preload_loop(client, wl.clone(), worker, quota)));
    }
    let mut out = Vec::with_capacity(tasks.len());
    let mut errors = 0;
    for t in tasks {
        let (w, e) = t.await?;
        errors += e;
        out.push(w);
    }
    let seconds = started.elapsed().as_secs_f64();
    let per_s = (records as f64 / seconds.max(1e-9)).round();
    Ok((out, Preload { records, seconds: (seconds * 1000.0).round() / 1000.0, per_s, errors }))
}

/// Sends `op` without learning from the answer (`paced.rs`: a like is a
/// like, not a toggle).
pub async fn send_op(client: &Client, wl: &Workload, op: &Op) -> Result<(), ClientError> {
    match op {
        Op::Toggle { user, entity, .. } => {
            act(client, wl, *user, *entity, LikeAction::Like).await.map(drop)
        }
        Op::Status { user, entities } => client.status(wl.biz, *user, entities).await.map(drop),
        Op::Counts { entities } => client.counts(wl.biz, entities).await.map(drop),
    }
}

async fn run_op(
    client: &Client,
    wl: &Workload,
    worker: &mut Worker,
    op: &Op,
) -> Result<(), ClientError> {
    match op {
        Op::Toggle { user, entity, unlike } => {
            let action = if *unlike { LikeAction::Unlike } else { LikeAction::Like };
            let reply = act(client, wl, *user, *entity, action).await?;
            worker.learn(*user, *entity, reply.now == LikeState::Like);
            Ok(())
        }
        Op::Status { user, entities } => client.status(wl.biz, *user, entities).await.map(drop),
        Op::Counts { entities } => client.counts(wl.biz, entities).await.map(drop),
    }
}

/// The like workload as batches (`plaudit_loop.rs`): slot `i` is worker `i`.
pub struct LikeBatches {
    pub wl: Arc<Workload>,
    pub workers: Vec<Worker>,
}

impl BatchOps for LikeBatches {
    type Op = Op;

    fn ops(&self) -> usize {
        self.wl.mix.ops()
    }

    fn next_op(&mut self, slot: usize) -> Op {
        self.workers[slot].next_op(&self.wl)
    }

    fn kind(op: &Op) -> usize {
        op.kind().index()
    }

    fn request(&self, op: &Op) -> Request {
        let biz = self.wl.biz;
        match op {
            Op::Toggle { user, entity, unlike } => Request::Like(LikeRequest {
                biz,
                entity: *entity,
                user: *user,
                owner: self.wl.owners.then(|| self.wl.owner_of(*entity)),
                action: if *unlike { LikeAction::Unlike } else { LikeAction::Like },
            }),
            Op::Status { user, entities } => {
                Request::Status(StatusRequest { biz, user: *user, entities: entities.clone() })
            }
            Op::Counts { entities } => {
                Request::Counts(CountsRequest { biz, entities: entities.clone() })
            }
        }
    }

    fn judge(
        &mut self,
        slot: usize,
        op: &Op,
        answer: Result<Response, ClientError>,
    ) -> Result<(), Failure> {
        match (op, answer.map_err(Failure::Client)?) {
            (Op::Toggle { user, entity, .. }, Response::Like(reply)) => {
                self.workers[slot].learn(*user, *entity, reply.now == LikeState::Like);
                Ok(())
            }
            (Op::Status { .. }, Response::Status(_)) | (Op::Counts { .. }, Response::Counts(_)) => {
                Ok(())
            }
            _ => Err(Failure::Outcome("unexpected_reply")),
        }
    }
}

/// One measured loop: one call in flight at a time, until `STOP`.
pub async fn run_loop(
    client: Client,
    wl: Arc<Workload>,
    mut worker: Worker,
    phase: Phase,
) -> Stats {
    let mut stats = Stats::new(wl.mix.ops());
    let mut backoff = Backoff::default();
    loop {
        let p = phase.get();
        if p == STOP {
            return stats;
        }
        let op = worker.next_op(&wl);
        let started = Instant::now();
        let r = run_op(&client, &wl, &mut worker, &op).await;
        if p == MEASURE {
            match &r {
                Ok(()) => stats.ok(op.kind().index(), started),
                Err(e) => stats.error(op.kind().index(), error_name(e)),
            }
        }
        backoff.after(&r).await;
    }
}
