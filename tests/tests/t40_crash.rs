//! SIGKILL during concurrent load: every acknowledged write survives, and
//! once derived state converges, counts and received totals match the
//! recovered states exactly (no drift, no double count).

use plaudit_client::proto::{BizConfig, ErrorCode, LikeAction, LikeState, UserId};
use plaudit_client::{Client, ClientOptions};
use plaudit_tests::history::{next_state, Rng};
use plaudit_tests::{wait_converged, wait_until, Node};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const TASKS: u64 = 8;
/// Concurrent requests per task, each on a different user of the task.
const LANES: usize = 8;
const USERS: u64 = 200;
const ENTITIES: u64 = 50;
const OWNERS: u64 = 5;
const SEED: u64 = 0x5eed_2024_c0ff_ee00;

fn owner_of(entity: u64) -> UserId {
    1_000_000 + entity % OWNERS
}

/// What one task knows about one `(user, entity)` pair.
#[derive(Debug, Default, Clone, Copy)]
struct PairLog {
    /// `now` of the last acknowledged action.
    acked: Option<LikeState>,
    /// An action sent after the last ack whose reply never came.
    unacked: Option<LikeAction>,
}

/// Acts on random pairs of this task's users (`user % TASKS == task`) in
/// rounds of `LANES` concurrent requests on distinct users, so at most one
/// request per pair is ever in flight and each pair's order is known. Stops
/// at the first round with a failure (the node died).
async fn load(
    client: Client,
    biz: u32,
    task: u64,
    acks: Arc<AtomicU64>,
) -> HashMap<(u64, u64), PairLog> {
    let mut rng = Rng(SEED ^ task.wrapping_mul(0x1234_5678_9abc_def1));
    let mut log: HashMap<(u64, u64), PairLog> = HashMap::new();
    let mine: Vec<u64> = (0..USERS).filter(|u| u % TASKS == task).collect();
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        // LANES distinct users: a partial shuffle of this task's users.
        let mut users = mine.clone();
        for i in 0..LANES {
            let j = i + rng.below((users.len() - i) as u64) as usize;
            users.swap(i, j);
        }
        let round: Vec<(u64, u64, LikeAction)> = users[..LANES]
            .iter()
            .map(|&u| (u, rng.below(ENTITIES), LikeAction::ALL[rng.below(4) as usize]))
            .collect();
        let calls = round.iter().map(|&(user, entity, action)| {
            log.entry((user, entity)).or_default().unacked = Some(action);
            let client = client.clone();
            async move { client.act(biz, entity, user, Some(owner_of(entity)), action).await }
        });
        let replies = spawn_and_join_all(calls).await;
        let mut failed = false;
        for (&(user, entity, action), reply) in round.iter().zip(replies) {
            let pair = log.get_mut(&(user, entity)).expect("logged above");
            match reply {
                Ok(reply) => {
                    let prev = pair.acked.unwrap_or(LikeState::None);
                    assert_eq!(reply.prev, prev, "{user}/{entity}: the previous acked state");
                    assert_eq!(reply.now, next_state(prev, action), "{user}/{entity} {action:?}");
                    pair.acked = Some(reply.now);
                    pair.unacked = None;
                    acks.fetch_add(1, Ordering::Relaxed);
                }
                Err(e) => {
                    assert!(
                        e.is_connection() || e.code() == Some(ErrorCode::Timeout),
                        "only the crash may fail a request: {e}"
                    );
                    failed = true;
                }
            }
        }
        if failed {
            return log;
        }
    }
    panic!("task {task}: the load never failed, so the node was never killed");
}

/// Runs every future as its own task; their outputs in the given order.
async fn spawn_and_join_all<F>(futs: impl Iterator<Item = F>) -> Vec<F::Output>
where
    F: std::future::Future + Send + 'static,
    F::Output: Send + 'static,
{
    let handles: Vec<_> = futs.map(tokio::spawn).collect();
    let mut out = Vec::with_capacity(handles.len());
    for h in handles {
        out.push(h.await.expect("request task"));
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_writes_survive_sigkill_during_load_and_counts_do_not_drift() {
    let mut node = Node::builder().shards(4).start();
    let admin = node.client().await;
    let biz = admin.create_biz(None, "crash", BizConfig::default()).await.unwrap().id;

    let acks = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for task in 0..TASKS {
        let opts = ClientOptions { pool_size: 1, ..ClientOptions::default() };
        let client = node.client_with(opts).await;
        tasks.push(tokio::spawn(load(client, biz, task, acks.clone())));
    }
    // Let the load run for a while (and make real progress) before the kill.
    let started = Instant::now();
    let progress = acks.clone();
    wait_until(Duration::from_secs(30), "the load made progress for 2 s", || {
        let ok = started.elapsed() >= Duration::from_millis(2000)
            && progress.load(Ordering::Relaxed) >= 200;
        async move { ok }
    })
    .await;
    node.kill9();
    let mut logs: HashMap<(u64, u64), PairLog> = HashMap::new();
    for t in tasks {
        logs.extend(t.await.expect("load task"));
    }
    let acked_total = acks.load(Ordering::Relaxed);
    let unacked = logs.values().filter(|p| p.unacked.is_some()).count();
    assert!(unacked <= TASKS as usize * LANES, "at most one round unacknowledged per task");

    node.restart();
    let c = node.client().await;

    // Every pair: the last acknowledged state, or the unacknowledged action's
    // result applied on top of it.
    let entities: Vec<u64> = (0..ENTITIES).collect();
    let mut likes = vec![0u64; ENTITIES as usize];
    let mut dislikes = vec![0u64; ENTITIES as usize];
    let mut applied_unacked = 0;
    let mut first_read = Vec::with_capacity(USERS as usize);
    for user in 0..USERS {
        let states = c.status(biz, user, &entities).await.expect("status after restart");
        first_read.push(states.clone());
        for s in states {
            let log = logs.get(&(user, s.entity)).copied().unwrap_or_default();
            let acked = log.acked.unwrap_or(LikeState::None);
            match log.unacked {
                None => assert_eq!(
                    s.state, acked,
                    "user {user} entity {}: lost or changed an acknowledged write",
                    s.entity
                ),
                Some(action) => {
                    let maybe = next_state(acked, action);
                    assert!(
                        s.state == acked || s.state == maybe,
                        "user {user} entity {}: {:?}, want {acked:?} or {maybe:?}",
                        s.entity,
                        s.state
                    );
                    applied_unacked += usize::from(s.state != acked);
                }
            }
            match s.state {
                LikeState::Like => likes[s.entity as usize] += 1,
                LikeState::Dislike => dislikes[s.entity as usize] += 1,
                LikeState::None => {}
            }
        }
    }

    wait_converged(&node).await;
    // Reads are linearizable: with no writes since, a second read must agree
    // with the first, even though the first came while the log was replaying.
    for user in 0..USERS {
        let again = c.status(biz, user, &entities).await.expect("status after convergence");
        assert_eq!(again, first_read[user as usize], "user {user}: status changed with no writes");
    }
    let counts = c.counts(biz, &entities).await.unwrap();
    for k in &counts {
        let e = k.entity as usize;
        assert_eq!(
            (k.likes, k.dislikes),
            (likes[e], dislikes[e]),
            "entity {}: counts vs the states of its users",
            k.entity
        );
    }
    for o in 0..OWNERS {
        let owner = 1_000_000 + o;
        let want: u64 =
            (0..ENTITIES).filter(|&e| owner_of(e) == owner).map(|e| likes[e as usize]).sum();
        let got = c.received(biz, owner).await.unwrap().likes;
        assert_eq!(got, want, "received likes of owner {owner}");
    }
    let total_likes: u64 = likes.iter().sum();
    assert!(total_likes > 0 && acked_total >= 200, "the load did something");
    eprintln!(
        "crash test: {acked_total} acked actions over {} pairs, {unacked} unacked at the kill \
         ({applied_unacked} of them applied); {total_likes} likes after recovery",
        logs.len()
    );
}
