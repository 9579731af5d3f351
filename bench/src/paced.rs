//! An offered load (`likes --rate like=15000,counts=15000`): each op kind
//! is sent at its own fixed rate whether or not earlier requests have been
//! answered, as a platform's traffic arrives, instead of the closed loops
//! of the other modes (where a slow server is sent less).
//!
//! ```text
//! per op kind with a rate: LANES lanes, each a timer firing every LANES / rate s
//!   tick (scheduled at t) ─ spawn the call ─► latency = answer time - t
//!   more than MAX_IN_FLIGHT unanswered per lane: the tick is counted as the error "not_sent"
//! ```
//!
//! Latency counts from when a request was due, not when it left: a client
//! that falls behind shows up in the latency, not as a lower rate
//! (coordinated omission). Likes are sent as likes only (the lanes do not
//! learn which pairs they liked; a like of a liked pair changes nothing but
//! is a write all the same).

use crate::likes::{OpKind, Worker, Workload};
use crate::load::{Mix, Phase, Stats, MEASURE, STOP};
use crate::plaudit::error_name;
use plaudit_client::Client;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Semaphore;
use tokio::task::JoinHandle;
use tokio::time::{Instant, MissedTickBehavior};

/// Timers per op kind: one would have to fire every 67 µs at 15k/s.
const LANES: usize = 16;
/// Unanswered requests a lane allows before it stops sending (a server
/// that has stopped answering must not make the bench hold every request).
const MAX_IN_FLIGHT: usize = 4096;

/// Starts the lanes of every op kind `rates` gives a rate (requests a
/// second); each returns its stats when the phase is `STOP` and its last
/// requests are answered (or 5 s have passed).
pub fn spawn(
    clients: &[Client],
    wl: &Arc<Workload>,
    rates: &Mix,
    seed: u64,
    phase: &Phase,
) -> Vec<JoinHandle<Stats>> {
    let mut tasks = Vec::new();
    let mut lane = 0usize;
    for kind in OpKind::ALL {
        let rate = rates.weight(kind.index());
        if rate == 0 {
            continue;
        }
        let every = Duration::from_secs_f64(LANES as f64 / f64::from(rate));
        for _ in 0..LANES {
            let client = clients[lane % clients.len()].clone();
            let worker = Worker::new(lane, LANES * OpKind::ALL.len(), wl.users, seed);
            let (wl, phase) = (wl.clone(), phase.clone());
            // Lanes start spread over one period, not all on the same tick.
            let offset = every.mul_f64(lane as f64 / LANES as f64 % 1.0);
            tasks.push(tokio::spawn(run_lane(client, wl, worker, kind, every, offset, phase)));
            lane += 1;
        }
    }
    tasks
}

async fn run_lane(
    client: Client,
    wl: Arc<Workload>,
    mut worker: Worker,
    kind: OpKind,
    every: Duration,
    offset: Duration,
    phase: Phase,
) -> Stats {
    let stats = Arc::new(Mutex::new(Stats::new(wl.mix.ops())));
    let room = Arc::new(Semaphore::new(MAX_IN_FLIGHT));
    let mut timer = tokio::time::interval_at(Instant::now() + offset, every);
    // Late ticks fire at once, each with its own due time: the load offered
    // stays the rate asked for.
    timer.set_missed_tick_behavior(MissedTickBehavior::Burst);
    loop {
        let due = timer.tick().await;
        let p = phase.get();
        if p == STOP {
            break;
        }
        let measured = p == MEASURE;
        let Ok(permit) = room.clone().try_acquire_owned() else {
            if measured {
                lock(&stats).error(kind.index(), "not_sent");
            }
            continue;
        };
        let op = worker.next_op_of(&wl, kind);
        let (client, wl, stats) = (client.clone(), wl.clone(), stats.clone());
        tokio::spawn(async move {
            let r = crate::likes_plaudit::send_op(&client, &wl, &op).await;
            if measured {
                let mut s = lock(&stats);
                match r {
                    Ok(()) => s.ok_ns(kind.index(), due.elapsed().as_nanos() as u64),
                    Err(e) => s.error(kind.index(), error_name(&e)),
                }
            }
            drop(permit);
        });
    }
    // The last requests' answers, for as long as they may take.
    let _ =
        tokio::time::timeout(Duration::from_secs(5), room.acquire_many(MAX_IN_FLIGHT as u32)).await;
    let s = lock(&stats);
    s.clone()
}

fn lock(s: &Mutex<Stats>) -> std::sync::MutexGuard<'_, Stats> {
    s.lock().unwrap_or_else(|e| e.into_inner())
}
