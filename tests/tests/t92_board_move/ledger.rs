//! The scorers' ledger: every event acknowledged, each counted once, what
//! failed on the way, and the scorer tasks that fill it.

use super::{ITEMS, RANK, STEP_PAUSE_MS};
use plaudit_client::proto::scoring::{Outcome, ScoreRequest};
use plaudit_client::{Client, ClientError};
use plaudit_tests::history::Rng;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long one event may take to be acknowledged, its retries included.
const EVENT_DEADLINE: Duration = Duration::from_secs(30);

/// An acknowledged event.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Acked {
    pub(crate) item: u64,
    pub(crate) score: i64,
    pub(crate) id: u64,
    /// When it was first sent, and how long until it was acknowledged.
    pub(crate) sent: Instant,
    pub(crate) took: Duration,
}

/// What the scorers did.
pub(crate) struct Ledger {
    /// Per item (index `item - 1`): the scores of acknowledged events, each
    /// event counted once, when first acknowledged.
    pub(crate) sums: Vec<AtomicI64>,
    pub(crate) acked: AtomicU64,
    /// Of those, the ones acknowledged as `duplicate` (an attempt before,
    /// whose answer was lost, had applied them).
    pub(crate) duplicates: AtomicU64,
    /// Failed calls (each retried with the same event id).
    pub(crate) errors: AtomicU64,
    /// Failed calls by error, for the report.
    pub(crate) error_kinds: Mutex<BTreeMap<String, u64>>,
    /// Every acknowledged event, for the move windows and the re-send check.
    pub(crate) events: Mutex<Vec<Acked>>,
    /// Events never acknowledged, or answered with an outcome that is
    /// neither applied nor duplicate nor shed.
    pub(crate) violations: Mutex<Vec<String>>,
    pub(crate) stop: AtomicBool,
}

impl Ledger {
    pub(crate) fn new() -> Ledger {
        Ledger {
            sums: (0..ITEMS).map(|_| AtomicI64::new(0)).collect(),
            acked: AtomicU64::new(0),
            duplicates: AtomicU64::new(0),
            errors: AtomicU64::new(0),
            error_kinds: Mutex::new(BTreeMap::new()),
            events: Mutex::new(Vec::new()),
            violations: Mutex::new(Vec::new()),
            stop: AtomicBool::new(false),
        }
    }

    pub(crate) fn ack(&self, event: Acked, outcome: Outcome) {
        self.sums[(event.item - 1) as usize].fetch_add(event.score, Ordering::SeqCst);
        self.events.lock().unwrap().push(event);
        if outcome == Outcome::Duplicate {
            self.duplicates.fetch_add(1, Ordering::Relaxed);
        }
        self.acked.fetch_add(1, Ordering::SeqCst);
    }

    /// Of the events first sent within `from..until`: how many, and how
    /// many of them took `STEP_PAUSE_MS` or longer to be acknowledged (held
    /// while the board could not take them).
    pub(crate) fn sent_within(&self, from: Instant, until: Instant) -> (usize, usize) {
        let events = self.events.lock().unwrap();
        let within: Vec<&Acked> =
            events.iter().filter(|e| e.sent >= from && e.sent < until).collect();
        let held = within.iter().filter(|e| e.took >= Duration::from_millis(STEP_PAUSE_MS));
        (within.len(), held.count())
    }

    pub(crate) fn error(&self, what: &str) {
        self.errors.fetch_add(1, Ordering::Relaxed);
        *self.error_kinds.lock().unwrap().entry(what.to_string()).or_default() += 1;
    }

    pub(crate) fn sum(&self, item: u64) -> i64 {
        self.sums[(item - 1) as usize].load(Ordering::SeqCst)
    }
}

/// Scores events one at a time until told to stop, each retried with the
/// same event id until it is acknowledged (or `EVENT_DEADLINE` passes: a
/// violation). The event in hand when `stop` is set is finished first.
/// The event `id`: `score` for `item` on the ranking's board, now.
pub(crate) fn event(item: u64, score: i64, id: u64) -> ScoreRequest {
    plaudit_tests::score_event(RANK, item, score, id)
}

pub(crate) async fn scorer(client: Client, task: u64, l: Arc<Ledger>) {
    let mut rng = Rng(0x92 ^ task.wrapping_mul(0x9e37_79b9_7f4a_7c15));
    let mut n = 0u64;
    while !l.stop.load(Ordering::Relaxed) {
        n += 1;
        let (item, score, id) = (1 + rng.below(ITEMS), 1 + rng.below(9) as i64, task << 32 | n);
        let event = event(item, score, id);
        let started = Instant::now();
        loop {
            let failed = match client.score(event.clone()).await {
                Ok(r) => match r.boards.as_slice() {
                    [b] if matches!(b.outcome, Outcome::Applied | Outcome::Duplicate) => {
                        let took = started.elapsed();
                        l.ack(Acked { item, score, id, sent: started, took }, b.outcome);
                        break;
                    }
                    // Not applied: the same id again is safe.
                    [b] if b.outcome == Outcome::Shed => "outcome shed".to_string(),
                    other => {
                        let why = format!("event {id} (item {item}) answered {other:?}");
                        l.violations.lock().unwrap().push(why);
                        break;
                    }
                },
                Err(ClientError::Server(e)) => format!("server {:?}: {}", e.code, e.message),
                Err(e) => format!("{e}"),
            };
            l.error(&failed);
            if started.elapsed() > EVENT_DEADLINE {
                let why = format!(
                    "event {id} (item {item}) not acknowledged within {EVENT_DEADLINE:?}; \
                     last error: {failed}"
                );
                l.violations.lock().unwrap().push(why);
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}
