//! The measured loop of every Redis driver: queue `pipeline` ops, write them
//! in one go, read their replies in order, record each op's latency from the
//! write; on a broken connection count the unanswered ops as `Io` errors and
//! re-dial until the run stops. A workload says only how to make, queue and
//! read its ops (`PipelinedOps`).

use crate::load::{Phase, Stats, MEASURE, STOP};
use crate::redis::Conn;
use std::time::{Duration, Instant};

pub trait PipelinedOps {
    type Op;
    /// How many op kinds the stats track.
    fn ops(&self) -> usize;
    fn next_op(&mut self) -> Self::Op;
    /// The op's index in the stats.
    fn kind(op: &Self::Op) -> usize;
    /// Encodes the op's command(s) into the connection's write buffer.
    fn queue(&mut self, conn: &mut Conn, op: &Self::Op);
    /// Reads the op's reply (or replies): `Err` for a broken connection,
    /// `Ok(Err(code))` for a Redis error reply.
    fn read(
        &mut self,
        conn: &mut Conn,
        op: &Self::Op,
    ) -> impl std::future::Future<Output = anyhow::Result<Result<(), String>>> + Send;
}

/// Runs the measured loop on one connection until the phase is `STOP`.
pub async fn run<W: PipelinedOps>(
    addr: String,
    mut conn: Conn,
    mut work: W,
    pipeline: usize,
    phase: Phase,
) -> Stats {
    let mut stats = Stats::new(work.ops());
    let mut batch: Vec<W::Op> = Vec::with_capacity(pipeline);
    loop {
        let p = phase.get();
        if p == STOP {
            return stats;
        }
        let measuring = p == MEASURE;
        batch.clear();
        for _ in 0..pipeline {
            let op = work.next_op();
            work.queue(&mut conn, &op);
            batch.push(op);
        }
        let started = Instant::now();
        let mut answered = 0;
        let mut failure = conn.flush().await.err().map(anyhow::Error::from);
        if failure.is_none() {
            for op in &batch {
                match work.read(&mut conn, op).await {
                    Ok(r) => {
                        answered += 1;
                        if measuring {
                            match r {
                                Ok(()) => stats.ok(W::kind(op), started),
                                Err(code) => stats.error(W::kind(op), &code),
                            }
                        }
                    }
                    Err(e) => {
                        failure = Some(e);
                        break;
                    }
                }
            }
        }
        if let Some(e) = failure {
            // The connection is unusable: the batch's unanswered ops failed.
            if measuring {
                for op in &batch[answered..] {
                    stats.error(W::kind(op), "Io");
                }
            }
            eprintln!("redis connection error: {e:#}; reconnecting");
            loop {
                if phase.get() == STOP {
                    return stats;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
                if let Ok(c) = Conn::connect(&addr).await {
                    conn = c;
                    break;
                }
            }
        }
    }
}

/// The first word of a Redis error (`ERR`, `NOSCRIPT`, `BUSY`, `OOM`, ...).
pub fn error_code(e: &str) -> String {
    e.split_whitespace().next().unwrap_or("ERR").to_string()
}
