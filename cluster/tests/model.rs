//! Model-based tests of the engine.
//!
//! Random sequences of like / unlike / dislike / undislike over a few users
//! and entities go through `Engine::handle`; every reply is checked against a
//! small reference model (a map of states plus a transition table written out
//! here, independently of `plaudit-actors`). Once the outbox has drained, every
//! view is compared with the same model: the truth (status, user lists) on the
//! users' shards and the derived state (counts, liker lists, received totals)
//! on the entities' and owners' shards.
//!
//! ```text
//! ops ─> Engine::handle(Like) ─> reply vs model ─┐
//!                                                └─> outbox_backlog() == 0 ─> every read vs model
//! ```

use anyhow::{bail, ensure, Context, Result};
use plaudit_cluster::{Engine, EngineConfig, GroupConfig};
use plaudit_proto::business::CreateBiz;
use plaudit_proto::likes::{
    CountsRequest, LikeReply, LikeRequest, LikersRequest, ListItem, ReceivedRequest, StatusRequest,
    UserLikesRequest,
};
use plaudit_proto::{BizConfig, BizId, EntityId, LikeAction, LikeState, Millis, Request};
use plaudit_proto::{Response, UserId};
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use std::collections::{BTreeSet, HashMap};
use std::future::Future;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Two businesses with the same user and entity ids: nothing may leak between them.
const BIZS: [BizId; 2] = [1, 2];
const USERS: [UserId; 3] = [1, 2, 3];
/// Owner 1 is also an acting user, so its received total shares a shard with
/// its own like truth; owner 900 never acts.
const OWNER_A: UserId = 1;
const OWNER_B: UserId = 900;
/// `(entity, owner)`: two entities of one owner, one of another, one without.
const ENTITIES: [(EntityId, Option<UserId>); 4] =
    [(10, Some(OWNER_A)), (11, Some(OWNER_A)), (12, Some(OWNER_B)), (13, None)];
const PAGE: u32 = 2;
const CONVERGE_WITHIN: Duration = Duration::from_secs(15);

// ---------------------------------------------------------------------------
// The reference model

/// The like state machine, as the product defines it: like and dislike set
/// their state from anywhere; unlike only undoes a like, undislike only a
/// dislike; everything else is a repeat.
const TRANSITIONS: [(LikeState, LikeAction, LikeState); 12] = {
    use LikeAction::*;
    use LikeState::{Dislike as D, Like as L, None as N};
    [
        (N, Like, L),
        (N, Unlike, N),
        (N, Dislike, D),
        (N, Undislike, N),
        (L, Like, L),
        (L, Unlike, N),
        (L, Dislike, D),
        (L, Undislike, L),
        (D, Like, L),
        (D, Unlike, D),
        (D, Dislike, D),
        (D, Undislike, N),
    ]
};

fn expected_next(prev: LikeState, action: LikeAction) -> LikeState {
    TRANSITIONS
        .iter()
        .find(|(p, a, _)| *p == prev && *a == action)
        .map(|&(_, _, next)| next)
        .expect("the transition table covers every (state, action)")
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Op {
    biz: BizId,
    user: UserId,
    entity: EntityId,
    owner: Option<UserId>,
    action: LikeAction,
}

impl Op {
    fn request(self) -> LikeRequest {
        LikeRequest {
            biz: self.biz,
            entity: self.entity,
            user: self.user,
            owner: self.owner,
            action: self.action,
        }
    }
}

/// `(biz, user, entity) -> (state, mtime)`; mtimes are the shard's, taken
/// from the replies that changed a state.
#[derive(Debug, Clone, Default)]
struct Model {
    states: HashMap<(BizId, UserId, EntityId), (LikeState, Millis)>,
}

impl Model {
    fn get(&self, biz: BizId, user: UserId, entity: EntityId) -> (LikeState, Millis) {
        self.states.get(&(biz, user, entity)).copied().unwrap_or((LikeState::None, 0))
    }

    /// Checks one reply against the model, then records it.
    fn apply(&mut self, op: Op, reply: LikeReply) -> Result<()> {
        let (prev, prev_mtime) = self.get(op.biz, op.user, op.entity);
        let now = expected_next(prev, op.action);
        let want_changed = now != prev;
        ensure!(
            reply.prev == prev && reply.now == now && reply.changed == want_changed,
            "reply {reply:?}, model expects prev {prev:?} now {now:?} changed {want_changed}"
        );
        if want_changed {
            ensure!(
                reply.mtime > 0 && reply.mtime >= prev_mtime,
                "reply {reply:?}: mtime went back from {prev_mtime}"
            );
            self.states.insert((op.biz, op.user, op.entity), (now, reply.mtime));
        } else {
            ensure!(
                none_mtime_matches(prev, reply.mtime, prev_mtime),
                "repeat reply {reply:?} should keep mtime {prev_mtime}"
            );
        }
        Ok(())
    }

    /// The part of the model one user's actions touch.
    fn of_user(&self, user: UserId) -> Model {
        let states = self.states.iter().filter(|(k, _)| k.1 == user).map(|(k, v)| (*k, *v));
        Model { states: states.collect() }
    }

    fn merge(&mut self, other: Model) {
        self.states.extend(other.states);
    }

    fn counts(&self, biz: BizId, entity: EntityId) -> (u64, u64) {
        let states = USERS.iter().map(|&u| self.get(biz, u, entity).0);
        states.fold((0, 0), |(l, d), s| match s {
            LikeState::Like => (l + 1, d),
            LikeState::Dislike => (l, d + 1),
            LikeState::None => (l, d),
        })
    }

    /// A user's liked entities, newest first (`(mtime, entity)` descending).
    fn user_list(&self, biz: BizId, user: UserId) -> Vec<ListItem> {
        let items = ENTITIES.iter().filter_map(|&(e, _)| match self.get(biz, user, e) {
            (LikeState::Like, mtime) => Some(ListItem { id: e, mtime }),
            _ => None,
        });
        newest_first(items.collect())
    }

    /// An entity's likers, newest first (`(mtime, user)` descending).
    fn likers(&self, biz: BizId, entity: EntityId) -> Vec<ListItem> {
        let items = USERS.iter().filter_map(|&u| match self.get(biz, u, entity) {
            (LikeState::Like, mtime) => Some(ListItem { id: u, mtime }),
            _ => None,
        });
        newest_first(items.collect())
    }

    fn received(&self, biz: BizId, owner: UserId) -> u64 {
        let owned = ENTITIES.iter().filter(|(_, o)| *o == Some(owner));
        owned.map(|&(e, _)| self.counts(biz, e).0).sum()
    }
}

/// Whether `got` is an acceptable mtime for a state whose model mtime is `want`.
///
/// Exact: a cleared (`None`) state keeps the time it was cleared, in storage
/// and in replies, whether or not the user's actor is active.
fn none_mtime_matches(_state: LikeState, got: Millis, want: Millis) -> bool {
    got == want
}

fn newest_first(mut items: Vec<ListItem>) -> Vec<ListItem> {
    items.sort_by_key(|i| std::cmp::Reverse((i.mtime, i.id)));
    items
}

// ---------------------------------------------------------------------------
// Generators

fn op(two_biz: bool) -> impl Strategy<Value = Op> {
    let biz = if two_biz {
        prop_oneof![3 => Just(BIZS[0]), 1 => Just(BIZS[1])].boxed()
    } else {
        Just(BIZS[0]).boxed()
    };
    let action = prop::sample::select(LikeAction::ALL.to_vec());
    (biz, prop::sample::select(USERS.to_vec()), prop::sample::select(ENTITIES.to_vec()), action)
        .prop_map(|(biz, user, (entity, owner), action)| Op { biz, user, entity, owner, action })
}

/// Up to 60 actions; in about half the sequences some go to the second business.
fn ops() -> impl Strategy<Value = Vec<Op>> {
    any::<bool>().prop_flat_map(|two_biz| prop::collection::vec(op(two_biz), 0..=60))
}

// ---------------------------------------------------------------------------
// The engine under test

/// The node's defaults, shrunk for one single-member engine per test case.
fn config(dir: &Path) -> EngineConfig {
    config_with_actors(dir, 8192, Duration::from_secs(120))
}

fn config_with_actors(dir: &Path, actor_budget: usize, actor_idle: Duration) -> EngineConfig {
    EngineConfig {
        groups: 0,
        data_dir: dir.to_path_buf(),
        shards: 4,
        group: GroupConfig {
            node_id: 1,
            heartbeat_ms: 50,
            election_min_ms: 150,
            election_max_ms: 300,
            read_lease_ms: 75,
            snapshot_every: 50_000,
            logs_to_keep: 1000,
            batch_max: 4096,
            max_in_flight: 4,
            max_pending: 65_536,
            disk: plaudit_cluster::disk::DiskGuard::new(0),
            memory: plaudit_cluster::memory::MemoryGuard::new(u64::MAX),
        },
        actor_budget: 16_384,
        // Each shard its own budget, as the callers mean it.
        actor_budget_per_shard: Some(actor_budget),
        actor_idle,
        retention_sweep: Duration::from_secs(60),
        score_future_horizon: Duration::from_secs(86_400),
        max_boards_per_ranking: 100_000,
        hot_cache_min_rps: 500,
        move_step_pause: Duration::ZERO,
        move_max_copy_bytes: plaudit_cluster::actor_mover::MAX_COPY_BYTES,
        hot_move_min_rps: 0,
        hot_move_after: Duration::from_secs(10),
        event_ids: plaudit_actors::command::Dedup::DEFAULT,
        // Small, so checkpoints interleave with applies and reads all the time.
        checkpoint: plaudit_storage::CheckpointPolicy {
            max_keys: 64,
            max_age: Duration::from_millis(20),
        },
        outbox_batch: 4096,
        sled_cache_bytes: 16 * 1024 * 1024,
        cluster: plaudit_cluster::ClusterConfig::single(1),
        request_timeout: Duration::from_secs(5),
    }
}

/// Runs one test case on its own multi-thread runtime, turning an error into
/// a proptest failure (with its context chain) so that proptest shrinks it.
fn run_case<F, Fut>(case: F) -> Result<(), TestCaseError>
where
    F: FnOnce(tempfile::TempDir) -> Fut,
    Fut: Future<Output = Result<()>>,
{
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| TestCaseError::fail(e.to_string()))?;
    let dir = tempfile::tempdir().map_err(|e| TestCaseError::fail(e.to_string()))?;
    rt.block_on(case(dir)).map_err(|e| TestCaseError::fail(format!("{e:#}")))
}

/// Opens an engine on `dir` and registers both businesses.
async fn open_fresh(dir: &Path) -> Result<Arc<Engine>> {
    create_businesses(Engine::open(config(dir)).await.context("opening the engine")?).await
}

async fn create_businesses(engine: Arc<Engine>) -> Result<Arc<Engine>> {
    for biz in BIZS {
        let create =
            CreateBiz { id: Some(biz), name: format!("biz{biz}"), config: BizConfig::default() };
        match engine.handle(Request::CreateBiz(create)).await {
            Response::Biz(b) if b.id == biz => {}
            other => bail!("creating business {biz}: {other:?}"),
        }
    }
    Ok(engine)
}

/// Opens the engine again on `dir` after a shutdown. The old engine's sled
/// handle is released only once its actors and Raft tasks have finished
/// dropping, which `Engine::shutdown` does not wait for; until then sled's
/// file lock is still held, so this retries on exactly that error.
async fn reopen(dir: &Path) -> Result<Arc<Engine>> {
    let started = Instant::now();
    loop {
        match Engine::open(config(dir)).await {
            Ok(engine) => return Ok(engine),
            Err(e) if e.to_string().contains("could not acquire lock") => {
                ensure!(started.elapsed() < Duration::from_secs(10), "reopening: {e:#}");
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            Err(e) => return Err(e.context("reopening")),
        }
    }
}

/// Runs `body` and shuts the engine down whatever it returned.
async fn with_shutdown(engine: &Engine, body: impl Future<Output = Result<()>>) -> Result<()> {
    let res = body.await;
    engine.shutdown().await;
    res
}

async fn like(engine: &Engine, op: Op) -> Result<LikeReply> {
    match engine.handle(Request::Like(op.request())).await {
        Response::Like(r) => Ok(r),
        other => bail!("{op:?}: {other:?}"),
    }
}

/// Applies `ops` one after the other, checking each reply.
async fn apply_in_order(engine: &Engine, ops: &[Op], model: &mut Model) -> Result<()> {
    for (i, &op) in ops.iter().enumerate() {
        let reply = like(engine, op).await?;
        model.apply(op, reply).with_context(|| format!("action #{i} {op:?}"))?;
    }
    Ok(())
}

/// Applies `ops` with one task per user (in order within each user), so that
/// different users' commands meet in the same proposal batches.
async fn apply_per_user(engine: &Arc<Engine>, ops: &[Op], model: &mut Model) -> Result<()> {
    let mut tasks = Vec::new();
    for user in USERS {
        let mine: Vec<Op> = ops.iter().copied().filter(|o| o.user == user).collect();
        let mut sub = model.of_user(user);
        let engine = engine.clone();
        tasks.push(tokio::spawn(async move {
            apply_in_order(&engine, &mine, &mut sub)
                .await
                .with_context(|| format!("user {user}"))
                .map(|()| sub)
        }));
    }
    for t in tasks {
        model.merge(t.await.context("user task panicked")??);
    }
    Ok(())
}

/// Waits until every outbox entry has been delivered and acknowledged.
async fn converge(engine: &Engine) -> Result<()> {
    let deadline = Instant::now() + CONVERGE_WITHIN;
    loop {
        let backlog = engine.outbox_backlog();
        if backlog == 0 {
            return Ok(());
        }
        ensure!(Instant::now() < deadline, "outbox still holds {backlog} entries");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Reads a whole list, `PAGE` items at a time.
async fn read_pages(
    engine: &Engine,
    req: impl Fn(Option<String>) -> Request,
) -> Result<Vec<ListItem>> {
    let mut items = Vec::new();
    let mut cursor = None;
    for _ in 0..=ENTITIES.len().max(USERS.len()) {
        let page = match engine.handle(req(cursor.take())).await {
            Response::Page(p) => p,
            other => bail!("page after {} items: {other:?}", items.len()),
        };
        ensure!(page.items.len() <= PAGE as usize, "page of {} items", page.items.len());
        items.extend(page.items.iter().copied());
        match page.next {
            Some(next) => {
                ensure!(page.items.len() == PAGE as usize, "short page with a next cursor");
                cursor = Some(next);
            }
            None => return Ok(items),
        }
    }
    bail!("paging never ended: {items:?}")
}

/// The truth, on the users' shards: states and user lists.
async fn check_truth(engine: &Engine, model: &Model) -> Result<()> {
    let entities: Vec<EntityId> = ENTITIES.iter().map(|e| e.0).collect();
    for biz in BIZS {
        for user in USERS {
            let req = StatusRequest { biz, user, entities: entities.clone() };
            let states = match engine.handle(Request::Status(req)).await {
                Response::Status(s) => s,
                other => bail!("status of biz {biz} user {user}: {other:?}"),
            };
            let got: Vec<_> = states.iter().map(|s| (s.entity, s.state, s.mtime)).collect();
            let want: Vec<_> = entities
                .iter()
                .map(|&e| {
                    let (state, mtime) = model.get(biz, user, e);
                    (e, state, mtime)
                })
                .collect();
            let same = got.len() == want.len()
                && got
                    .iter()
                    .zip(&want)
                    .all(|(g, w)| g.0 == w.0 && g.1 == w.1 && none_mtime_matches(w.1, g.2, w.2));
            ensure!(same, "status of biz {biz} user {user}: got {got:?}, want {want:?}");

            let got = read_pages(engine, |cursor| {
                Request::UserLikes(UserLikesRequest { biz, user, cursor, limit: PAGE })
            })
            .await?;
            let want = model.user_list(biz, user);
            ensure!(got == want, "likes of biz {biz} user {user}: got {got:?}, want {want:?}");
        }
    }
    Ok(())
}

/// The derived state, once converged: counts, likers and received totals.
async fn check_derived(engine: &Engine, model: &Model) -> Result<()> {
    let entities: Vec<EntityId> = ENTITIES.iter().map(|e| e.0).collect();
    for biz in BIZS {
        let req = CountsRequest { biz, entities: entities.clone() };
        let counts = match engine.handle(Request::Counts(req)).await {
            Response::Counts(c) => c,
            other => bail!("counts of biz {biz}: {other:?}"),
        };
        let got: Vec<_> = counts.iter().map(|c| (c.entity, c.likes, c.dislikes)).collect();
        let want: Vec<_> = entities
            .iter()
            .map(|&e| {
                let (likes, dislikes) = model.counts(biz, e);
                (e, likes, dislikes)
            })
            .collect();
        ensure!(got == want, "counts of biz {biz}: got {got:?}, want {want:?}");

        for &entity in &entities {
            let got = read_pages(engine, |cursor| {
                Request::Likers(LikersRequest { biz, entity, cursor, limit: PAGE })
            })
            .await?;
            let want = model.likers(biz, entity);
            ensure!(got == want, "likers of biz {biz} entity {entity}: got {got:?}, want {want:?}");
        }

        // Users who own nothing must have received nothing.
        let people: BTreeSet<UserId> = USERS.iter().copied().chain([OWNER_A, OWNER_B]).collect();
        for user in people {
            let got = match engine.handle(Request::Received(ReceivedRequest { biz, user })).await {
                Response::Received(r) if r.user == user => r.likes,
                other => bail!("received of biz {biz} user {user}: {other:?}"),
            };
            let want = model.received(biz, user);
            ensure!(got == want, "received of biz {biz} user {user}: got {got}, want {want}");
        }
    }
    Ok(())
}

async fn check_all(engine: &Engine, model: &Model) -> Result<()> {
    converge(engine).await?;
    check_truth(engine, model).await.context("truth")?;
    check_derived(engine, model).await.context("derived state")
}

// ---------------------------------------------------------------------------
// The properties

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 24,
        // Failures print the shrunk sequence; nothing is written next to the sources.
        failure_persistence: None,
        max_shrink_iters: 256,
        ..ProptestConfig::default()
    })]

    #[test]
    fn sequential_actions_match_the_model(ops in ops()) {
        run_case(|dir| async move {
            let engine = open_fresh(dir.path()).await?;
            let mut model = Model::default();
            with_shutdown(&engine, async {
                apply_in_order(&engine, &ops, &mut model).await?;
                check_all(&engine, &model).await
            })
            .await
        })?;
    }

    #[test]
    fn concurrent_users_match_the_model(ops in ops()) {
        run_case(|dir| async move {
            let engine = open_fresh(dir.path()).await?;
            let mut model = Model::default();
            with_shutdown(&engine, async {
                apply_per_user(&engine, &ops, &mut model).await?;
                check_all(&engine, &model).await
            })
            .await
        })?;
    }

    /// One active actor per kind and shard, passivated after 50 ms idle: users
    /// and entities are re-activated from storage over and over.
    #[test]
    fn passivating_actors_match_the_model(ops in ops()) {
        run_case(|dir| async move {
            let cfg = config_with_actors(dir.path(), 1, Duration::from_millis(50));
            let engine = Engine::open(cfg).await.context("opening the engine")?;
            let engine = create_businesses(engine).await?;
            let mut model = Model::default();
            with_shutdown(&engine, async {
                apply_per_user(&engine, &ops, &mut model).await?;
                check_all(&engine, &model).await
            })
            .await
        })?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 8,
        failure_persistence: None,
        max_shrink_iters: 64,
        ..ProptestConfig::default()
    })]

    /// The engine stops mid-sequence, usually with deltas still in the outbox,
    /// and reopens on the same directory: the truth is there at once, the
    /// derived state converges to the model with no delta lost or applied twice.
    #[test]
    fn restart_mid_sequence_keeps_the_model((ops, split) in ops().prop_flat_map(|ops| {
        let len = ops.len();
        (Just(ops), 0..=len)
    })) {
        run_case(|dir| async move {
            let (before, after) = ops.split_at(split);
            let mut model = Model::default();
            let engine = open_fresh(dir.path()).await?;
            with_shutdown(&engine, apply_in_order(&engine, before, &mut model)).await?;
            drop(engine);

            let engine = reopen(dir.path()).await?;
            with_shutdown(&engine, async {
                check_truth(&engine, &model).await.context("right after the restart")?;
                apply_in_order(&engine, after, &mut model).await.context("after the restart")?;
                check_all(&engine, &model).await
            })
            .await
        })?;
    }
}

#[test]
fn transition_table_is_total() {
    for prev in [LikeState::None, LikeState::Like, LikeState::Dislike] {
        for action in LikeAction::ALL {
            let n = TRANSITIONS.iter().filter(|(p, a, _)| *p == prev && *a == action).count();
            assert_eq!(n, 1, "{prev:?} x {action:?}");
        }
    }
}
