//! The measured loop of every Plaudit driver with `--sdk batch`: one op
//! per slot, sent together with `Client::pipeline`, each op timed from the
//! send, its answer judged by the workload; until the run stops. The same
//! shape as the Redis drivers' loop (`redis_loop.rs`): a workload says only
//! how to make an op, its request, and what its answer means
//! (`BatchOps`).

use crate::args::{Common, Sdk};
use crate::load::{Phase, Stats, MEASURE, STOP};
use crate::plaudit::{error_name, Backoff};
use plaudit_client::{Client, ClientError};
use plaudit_proto::{Request, Response};
use std::future::Future;
use std::time::Instant;
use tokio::task::JoinHandle;

/// Why an op "failed": a client error, or an answer the workload does not
/// accept (counted under its name).
pub enum Failure {
    Client(ClientError),
    Outcome(&'static str),
}

pub trait BatchOps {
    type Op;
    /// How many op kinds the stats track.
    fn ops(&self) -> usize;
    /// The next op of slot `slot` (each slot has one op in every batch).
    fn next_op(&mut self, slot: usize) -> Self::Op;
    /// The op's index in the stats.
    fn kind(op: &Self::Op) -> usize;
    fn request(&self, op: &Self::Op) -> Request;
    /// Whether the answer is what the op expects (and whatever the slot
    /// learns from it).
    fn judge(
        &mut self,
        slot: usize,
        op: &Self::Op,
        answer: Result<Response, ClientError>,
    ) -> Result<(), Failure>;
}

/// Runs batches of `slots` ops on `client` until the phase is `STOP`.
pub async fn run<W: BatchOps>(client: Client, mut work: W, slots: usize, phase: Phase) -> Stats {
    let mut stats = Stats::new(work.ops());
    let mut backoff = Backoff::default();
    loop {
        let p = phase.get();
        if p == STOP {
            return stats;
        }
        let ops: Vec<W::Op> = (0..slots).map(|slot| work.next_op(slot)).collect();
        let reqs = ops.iter().map(|op| work.request(op)).collect();
        let started = Instant::now();
        let answers = client.pipeline(reqs).await;
        // Every answer arrived when the pipeline returned.
        let took = started.elapsed().as_nanos() as u64;
        let mut failed = None;
        for (slot, (op, answer)) in ops.iter().zip(answers).enumerate() {
            let r = work.judge(slot, op, answer);
            if p == MEASURE {
                match &r {
                    Ok(()) => stats.ok_ns(W::kind(op), took),
                    Err(Failure::Client(e)) => stats.error(W::kind(op), error_name(e)),
                    Err(Failure::Outcome(o)) => stats.error(W::kind(op), o),
                }
            }
            if let Err(Failure::Client(e)) = r {
                failed = Some(e);
            }
        }
        backoff.after_error(failed.as_ref()).await;
    }
}

/// Starts the measured loops of a Plaudit driver: `slots` (one per loop,
/// `pipeline` per client, client-major) go `pipeline` at a time into one
/// batch loop per client (`--sdk batch`, `batch` makes its work), or one
/// single-call loop each (`--sdk calls`, `call` runs it).
pub fn spawn<S, W, F>(
    c: &Common,
    clients: &[Client],
    slots: Vec<S>,
    phase: &Phase,
    batch: impl Fn(Vec<S>) -> W,
    call: impl Fn(Client, S, Phase) -> F,
) -> Vec<JoinHandle<Stats>>
where
    W: BatchOps + Send + 'static,
    W::Op: Send,
    F: Future<Output = Stats> + Send + 'static,
{
    let mut slots = slots.into_iter();
    match c.sdk {
        Sdk::Batch => clients
            .iter()
            .map(|client| {
                let work = batch(slots.by_ref().take(c.pipeline).collect());
                tokio::spawn(run(client.clone(), work, c.pipeline, phase.clone()))
            })
            .collect(),
        Sdk::Calls => slots
            .enumerate()
            .map(|(i, slot)| {
                tokio::spawn(call(clients[i / c.pipeline].clone(), slot, phase.clone()))
            })
            .collect(),
    }
}
