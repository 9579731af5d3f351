//! An entity moved to another shard under concurrent likes, unlikes,
//! dislikes and undislikes loses nothing and applies nothing twice, with a
//! SIGKILL of the source or the target shard's leader in the middle of the
//! move.
//!
//! ```text
//! 3 nodes, 6 shards, PLAUDIT_MOVE_STEP_PAUSE_MS=300 (the mover sleeps before each step)
//! writers ─ users 1..=USERS act on entities A and B (owned by OWNER_A, OWNER_B) at
//!           random, each user's actions one at a time
//! move A  ─ home -> a shard led elsewhere; at Copy/Release: SIGKILL of the source's
//!           leader, restart 1 s later; the move must finish there
//! move B  ─ home -> a shard led elsewhere; once copied (Release/Activate): SIGKILL
//!           of the target's leader, restart; the move must finish there
//! move A on ─ to a third shard, through its home (Hold .. Pass): at Hold/Freeze
//!           SIGKILL of the home's leader, restart; the move must finish there
//! move B back home ─ at Pass/Activate SIGKILL of the home's leader (the target's)
//! end     ─ the truth is each user's state (its own shard decides it); each entity's
//!           counts (at the leader and at every replica), its likers and its owner's
//!           received total must come to exactly what the truth implies (more: a delta
//!           applied twice; less: one lost); and not vacuously: likes were acknowledged
//!           while each move ran, and both entities ended on their targets
//! ```
//!
//! Then: a move to where it is, or to no shard, is a bad request and
//! records nothing.
//!
//! And two moves given up under likes (every copy over a size): one from
//! home (the source applies what it held), and one on from where a moved
//! entity lives (its home sends what it held back to the source).

use plaudit_client::proto::business::BizConfig;
use plaudit_client::proto::likes::{CountsRequest, LikeAction, LikeState};
use plaudit_client::proto::placement::{EntityKey, EntityPlacements, MoveEntity, MoveStep};
use plaudit_client::proto::routing::shard_of;
use plaudit_client::proto::{BizId, EntityId, ErrorCode, Request, Response, UserId};
use plaudit_client::{Client, ClientError};
use plaudit_tests::{grows_by, Cluster};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const SHARDS: u32 = 6;
const USERS: u64 = 120;
const WRITERS: u64 = 6;
const STEP_PAUSE_MS: u64 = 300;
const OWNER_A: UserId = 900_001;
const OWNER_B: UserId = 900_002;
/// How long a move may take once its node is killed, and how long the
/// counts may take to catch up with the truth at the end.
const DEADLINE: Duration = Duration::from_secs(60);

/// The tests each start three nodes: one at a time, so the SIGKILL
/// scenario's timings do not depend on the other's load on the cores.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Two entities whose hash shards differ, so each move has its own source.
fn entities() -> (EntityId, EntityId) {
    let a = 1_000;
    let b = (a + 1..).find(|&e| shard_of(1, e, SHARDS) != shard_of(1, a, SHARDS)).unwrap();
    (a, b)
}

fn owner_of(e: EntityId) -> UserId {
    if e == entities().0 {
        OWNER_A
    } else {
        OWNER_B
    }
}

struct Load {
    stop: AtomicBool,
    acked: AtomicU64,
    errors: AtomicU64,
}

/// `WRITERS` writers on `biz` (`writer`), each with a client of its own.
struct Writers {
    load: Arc<Load>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Writers {
    async fn start(cluster: &Cluster, biz: BizId) -> Writers {
        let load = Arc::new(Load {
            stop: AtomicBool::new(false),
            acked: AtomicU64::new(0),
            errors: AtomicU64::new(0),
        });
        let mut tasks = Vec::new();
        for w in 0..WRITERS {
            tasks.push(tokio::spawn(writer(cluster.client().await, biz, w, load.clone())));
        }
        Writers { load, tasks }
    }

    async fn stop(self) -> Arc<Load> {
        self.load.stop.store(true, Ordering::Relaxed);
        for t in self.tasks {
            t.await.expect("a writer");
        }
        self.load
    }
}

/// One writer: its users act on the two entities at random until stopped.
async fn writer(client: Client, biz: BizId, w: u64, load: Arc<Load>) {
    let (a, b) = entities();
    let mut rng = 0x9e37_79b9_7f4a_7c15u64 ^ w;
    let mut next = || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    let actions =
        [LikeAction::Like, LikeAction::Unlike, LikeAction::Dislike, LikeAction::Undislike];
    while !load.stop.load(Ordering::Relaxed) {
        let user = 1 + w + WRITERS * (next() % (USERS / WRITERS));
        let entity = if next() % 2 == 0 { a } else { b };
        // Likes twice as often as the rest, so counts stay well above 0.
        let action =
            if next() % 3 == 0 { actions[(next() % 4) as usize] } else { LikeAction::Like };
        match client.act(biz, entity, user, Some(owner_of(entity)), action).await {
            Ok(_) => load.acked.fetch_add(1, Ordering::Relaxed),
            Err(_) => load.errors.fetch_add(1, Ordering::Relaxed),
        };
    }
}

async fn placements(client: &Client) -> Result<EntityPlacements, ClientError> {
    match client.request(Request::EntityPlacements).await? {
        Response::EntityPlacements(p) => Ok(*p),
        other => panic!("EntityPlacements answered {other:?}"),
    }
}

async fn move_entity(
    client: &Client,
    biz: BizId,
    entity: EntityId,
    to: u32,
) -> Result<Response, ClientError> {
    client.request(Request::MoveEntity(MoveEntity { biz, entity, to_shard: to })).await
}

/// A shard other than `from` led by another node than `from`'s leader.
fn target(cluster: &Cluster, from: u32) -> u32 {
    let leaders = cluster.leaders();
    let source_leader = leaders[from as usize];
    (1..SHARDS)
        .map(|d| (from + d) % SHARDS)
        .find(|&s| leaders[s as usize].is_some_and(|l| Some(l) != source_leader))
        .unwrap_or_else(|| panic!("no shard led by another node than shard {from}'s: {leaders:?}"))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Victim {
    Source,
    Target,
    /// The entity's hash shard, which holds its deltas during a move from
    /// elsewhere.
    Home,
}

/// Moves `entity` from where it lives to `to` (by default a shard led
/// elsewhere); once the move is at one of `kill_at`, kills the `victim`
/// shard's leader with SIGKILL and restarts it 1 s later; waits until the
/// move is done. Returns the target and the likes acknowledged while the
/// move ran.
async fn move_killing(
    cluster: &mut Cluster,
    admin: &Client,
    load: &Load,
    (key, to): (EntityKey, Option<u32>),
    victim: Victim,
    kill_at: &[MoveStep],
) -> (u32, u64) {
    let home = shard_of(key.biz, key.entity, SHARDS);
    let from =
        placements(admin).await.expect("placements").entity_shard(key.biz, key.entity, SHARDS);
    let to = to.unwrap_or_else(|| target(cluster, from));
    let acked_before = load.acked.load(Ordering::SeqCst);
    let sent = Instant::now();
    match move_entity(admin, key.biz, key.entity, to).await {
        Ok(Response::Done) => {}
        other => panic!("MoveEntity of {key:?} to shard {to}: {other:?}"),
    }
    // Wait for the step to kill at.
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut seen = Vec::new();
    let step = loop {
        if let Ok(p) = placements(admin).await {
            match p.move_of(&key) {
                Some(m) if kill_at.contains(&m.step) => {
                    assert_eq!((m.from, m.to), (from, to), "the move recorded: {m:?}");
                    break m.step;
                }
                Some(m) if seen.last() != Some(&m.step) => seen.push(m.step),
                Some(_) => {}
                None if !seen.is_empty() => {
                    cluster.dump_logs();
                    panic!("the move of {key:?} ended before {kill_at:?} (seen {seen:?}): {p:?}");
                }
                None => {}
            }
        }
        if Instant::now() > deadline {
            cluster.dump_logs();
            panic!("the move of {key:?} never reached {kill_at:?} (seen {seen:?})");
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    let shard = match victim {
        Victim::Source => from,
        Victim::Target => to,
        Victim::Home => home,
    };
    let killed = cluster.leader_of(shard).await;
    eprintln!(
        "t96: move of {key:?} {from} -> {to} at {step:?} after {:?}: SIGKILL of node {killed} \
         ({victim:?} shard {shard}'s leader)",
        sent.elapsed()
    );
    cluster.kill9(killed);
    tokio::time::sleep(Duration::from_secs(1)).await;
    tokio::task::block_in_place(|| cluster.restart(killed));
    let deadline = Instant::now() + DEADLINE;
    loop {
        let last = match placements(admin).await {
            Ok(p)
                if p.move_of(&key).is_none()
                    && p.entity_shard(key.biz, key.entity, SHARDS) == to =>
            {
                break;
            }
            other => other,
        };
        if Instant::now() > deadline {
            cluster.dump_logs();
            panic!("the move of {key:?} to {to} did not finish within {DEADLINE:?}: {last:?}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let acked = load.acked.load(Ordering::SeqCst) - acked_before;
    eprintln!(
        "t96: move of {key:?} {from} -> {to} done after {:?}, {acked} acknowledged while it ran",
        sent.elapsed()
    );
    (to, acked)
}

/// What the users' own states say each entity's counts, likers and owner's
/// received total must be.
#[derive(Debug, Default, PartialEq, Eq)]
struct Truth {
    likes: u64,
    dislikes: u64,
    likers: BTreeSet<UserId>,
}

async fn truth(client: &Client, biz: BizId) -> BTreeMap<EntityId, Truth> {
    let (a, b) = entities();
    let mut out: BTreeMap<EntityId, Truth> = BTreeMap::new();
    for user in 1..=USERS {
        let states = client.status(biz, user, &[a, b]).await.expect("a user's states");
        for s in states {
            let t = out.entry(s.entity).or_default();
            match s.state {
                LikeState::Like => {
                    t.likes += 1;
                    t.likers.insert(user);
                }
                LikeState::Dislike => t.dislikes += 1,
                LikeState::None => {}
            }
        }
    }
    out
}

/// An entity's likers, every page.
async fn likers(client: &Client, biz: BizId, entity: EntityId) -> BTreeSet<UserId> {
    let mut out = BTreeSet::new();
    let mut cursor: Option<String> = None;
    loop {
        let page = client.likers(biz, entity, cursor.as_deref(), 50).await.expect("likers");
        out.extend(page.items.iter().map(|i| i.id));
        match page.next {
            Some(next) => cursor = Some(next),
            None => return out,
        }
    }
}

/// What the cluster shows of `entity` now: counts, likers, and its owner's
/// received total (derived one delivery further on than the counts, so it
/// may lag them for a moment).
async fn shown(client: &Client, biz: BizId, entity: EntityId) -> (Truth, u64) {
    let c = client.counts(biz, &[entity]).await.expect("counts");
    let received = client.received(biz, owner_of(entity)).await.expect("received").likes;
    let t = Truth {
        likes: c[0].likes,
        dislikes: c[0].dislikes,
        likers: likers(client, biz, entity).await,
    };
    (t, received)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_moved_entity_under_likes_loses_nothing_and_applies_nothing_twice() {
    let _serial = SERIAL.lock().await;
    let started = Instant::now();
    let phase = |what: &str| eprintln!("t96: {what} at {:.1} s", started.elapsed().as_secs_f64());
    let mut cluster =
        Cluster::builder(3).shards(SHARDS).env("PLAUDIT_MOVE_STEP_PAUSE_MS", STEP_PAUSE_MS).start();
    cluster.wait_converged().await;
    let admin = cluster.client().await;
    let biz = admin.create_biz(Some(1), "moved", BizConfig::default()).await.expect("business").id;
    let (a, b) = entities();
    phase("cluster formed");

    let writers = Writers::start(&cluster, biz).await;
    let load = writers.load.clone();
    grows_by(&load.acked, 300, Duration::from_secs(30), "likes before the moves").await;
    phase("liking");

    let key_a = EntityKey { biz, entity: a };
    let (to_a, during_a) = move_killing(
        &mut cluster,
        &admin,
        &load,
        (key_a, None),
        Victim::Source,
        &[MoveStep::Copy, MoveStep::Release],
    )
    .await;
    grows_by(&load.acked, 200, Duration::from_secs(30), "likes after move A").await;
    let key_b = EntityKey { biz, entity: b };
    let (to_b, during_b) = move_killing(
        &mut cluster,
        &admin,
        &load,
        (key_b, None),
        Victim::Target,
        &[MoveStep::Release, MoveStep::Activate],
    )
    .await;
    grows_by(&load.acked, 200, Duration::from_secs(30), "likes after move B").await;
    // A on, to a shard neither its home nor where it is: through its home.
    let (home_a, home_b) = (shard_of(biz, a, SHARDS), shard_of(biz, b, SHARDS));
    let on_a = (1..SHARDS).map(|d| (to_a + d) % SHARDS).find(|s| *s != home_a).unwrap();
    let (on_a, during_on) = move_killing(
        &mut cluster,
        &admin,
        &load,
        (key_a, Some(on_a)),
        Victim::Home,
        &[MoveStep::Hold, MoveStep::Freeze],
    )
    .await;
    grows_by(&load.acked, 200, Duration::from_secs(30), "likes after A moved on").await;
    // B back home, its home's leader killed once it has the copy.
    let (back_b, during_back) = move_killing(
        &mut cluster,
        &admin,
        &load,
        (key_b, Some(home_b)),
        Victim::Home,
        &[MoveStep::Pass, MoveStep::Activate],
    )
    .await;
    grows_by(&load.acked, 200, Duration::from_secs(30), "likes after B came home").await;
    writers.stop().await;
    phase("writers stopped");
    eprintln!(
        "t96: {} actions acknowledged, {} failed",
        load.acked.load(Ordering::Relaxed),
        load.errors.load(Ordering::Relaxed)
    );
    let during = [during_a, during_b, during_on, during_back];
    assert!(during.iter().all(|d| *d > 0), "likes went on while each move ran: {during:?}");

    let p = placements(&admin).await.expect("placements at the end");
    assert!(p.moves.is_empty(), "{p:?}");
    assert_eq!(p.entity_shard(biz, a, SHARDS), on_a, "{p:?}");
    assert_eq!(p.entity_shard(biz, b, SHARDS), home_b, "{p:?}");
    assert_eq!(back_b, home_b);
    assert!(![home_a, to_a].contains(&on_a) && to_b != home_b, "{to_a} {on_a} {to_b}");
    assert_eq!(p.placed, vec![(key_a, on_a)], "B, home again, has no entry: {p:?}");

    let want = assert_caught_up(&cluster, &admin, biz).await;
    phase("counts caught up");
    // At every replica too (the SDK spreads `Replica` reads over them).
    cluster.wait_converged().await;
    for _ in 0..9 {
        let req = Request::Replica(Box::new(Request::Counts(CountsRequest {
            biz,
            entities: vec![a, b],
        })));
        match admin.request(req).await {
            Ok(Response::Counts(c)) => {
                for (c, e) in c.iter().zip([a, b]) {
                    let want = (e, want[&e].likes, want[&e].dislikes);
                    assert_eq!((c.entity, c.likes, c.dislikes), want, "a replica read");
                }
            }
            other => panic!("a replica read: {other:?}"),
        }
    }

    // The CLI lists where A went; B, home again, is not listed.
    let v = tokio::task::block_in_place(|| cluster.node(cluster.ids()[0]).cli("admin placements"));
    let placed = &v["entities"]["placed"];
    let row = serde_json::json!({"biz": biz, "entity": a, "shard": on_a});
    assert_eq!(placed.as_array(), Some(&vec![row]), "{v}");

    // A move to where it is, or to no shard, is refused.
    for to in [on_a, SHARDS] {
        match move_entity(&admin, biz, a, to).await {
            Err(ClientError::Server(e)) => {
                assert_eq!(e.code, ErrorCode::BadRequest, "a move of A to shard {to}: {e}")
            }
            other => panic!("a move of A to shard {to} was not refused: {other:?}"),
        }
    }
    let after = placements(&admin).await.expect("placements");
    assert_eq!(after.epoch, p.epoch, "refused moves record nothing: {after:?}");
    phase("checked");
}

/// Three nodes whose moves give up any copy over `bytes`, their admin
/// client, and a new business.
async fn copying_at_most(bytes: u64) -> (Cluster, Client, BizId) {
    let cluster = Cluster::builder(3)
        .shards(SHARDS)
        .env("PLAUDIT_MOVE_STEP_PAUSE_MS", STEP_PAUSE_MS)
        .env("PLAUDIT_MOVE_MAX_COPY_BYTES", bytes)
        .start();
    cluster.wait_converged().await;
    let admin = cluster.client().await;
    let biz = admin.create_biz(Some(1), "stays", BizConfig::default()).await.expect("business").id;
    (cluster, admin, biz)
}

/// The steps a move of `key` (recorded just before) was seen at, until it
/// was gone; and the placements then.
async fn steps_until_gone(
    admin: &Client,
    key: EntityKey,
) -> (BTreeSet<&'static str>, EntityPlacements) {
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut seen = BTreeSet::new();
    loop {
        let p = placements(admin).await.expect("placements");
        match p.move_of(&key) {
            Some(m) => {
                seen.insert(m.step.as_str());
            }
            None if !seen.is_empty() => {
                eprintln!("t96: steps seen {seen:?}, then the move was gone");
                return (seen, p);
            }
            None => {}
        }
        assert!(Instant::now() < deadline, "the move did not end: {p:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Waits until both entities show what the users' states say (the truth:
/// the derived state catches up with it once every delta is delivered, and
/// must then equal it); returns the truth.
async fn assert_caught_up(
    cluster: &Cluster,
    admin: &Client,
    biz: BizId,
) -> BTreeMap<EntityId, Truth> {
    let (a, b) = entities();
    let want = truth(admin, biz).await;
    assert!(want.values().all(|t| t.likes > 0), "likes were kept: {want:?}");
    let deadline = Instant::now() + DEADLINE;
    for e in [a, b] {
        loop {
            let (got, received) = shown(admin, biz, e).await;
            if got == want[&e] && received == want[&e].likes {
                break;
            }
            if Instant::now() > deadline {
                cluster.dump_logs();
                panic!(
                    "entity {e}: shown {} likes, {} dislikes, {} likers, the owner's received \
                     total {received}; the users' states say {} likes, {} dislikes; likers missing \
                     {:?}, extra {:?} (more: applied twice; less: lost)",
                    got.likes,
                    got.dislikes,
                    got.likers.len(),
                    want[&e].likes,
                    want[&e].dislikes,
                    want[&e].likers.difference(&got.likers).collect::<Vec<_>>(),
                    got.likers.difference(&want[&e].likers).collect::<Vec<_>>(),
                );
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    want
}

/// A move whose copy cannot be made is given up (every copy too large:
/// `PLAUDIT_MOVE_MAX_COPY_BYTES`): the deltas the source held while the
/// entity was frozen are applied there, the target drops what it may
/// hold, and under likes nothing is lost or applied twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_move_given_up_applies_the_held_deltas_where_the_entity_stayed() {
    let _serial = SERIAL.lock().await;
    let (cluster, admin, biz) = copying_at_most(64).await;
    let (a, _) = entities();
    let writers = Writers::start(&cluster, biz).await;
    let load = writers.load.clone();
    grows_by(&load.acked, 300, Duration::from_secs(30), "likes before the move").await;
    let home = shard_of(biz, a, SHARDS);
    let to = target(&cluster, home);
    // Through the CLI, not waiting for the end (the move is given up).
    let line = format!("admin move --entity {biz}:{a} --to-shard {to} --no-wait");
    let v = tokio::task::block_in_place(|| cluster.node(cluster.ids()[0]).cli(&line));
    let want = serde_json::json!({"biz": biz, "entity": a, "to_shard": to, "ms": null});
    assert_eq!(v, want, "plaudit --json {line}");
    let (seen, p) = steps_until_gone(&admin, EntityKey { biz, entity: a }).await;
    assert!(seen.contains("copy"), "the move was frozen, waiting for its copy: {seen:?}");
    assert!(p.placed.is_empty(), "nothing placed: {p:?}");
    grows_by(&load.acked, 200, Duration::from_secs(30), "likes after the move").await;
    writers.stop().await;
    assert_caught_up(&cluster, &admin, biz).await;
    cluster.wait_converged().await;
}

/// A move on from where a moved entity lives, given up (its copy has
/// grown past `PLAUDIT_MOVE_MAX_COPY_BYTES` since its first move): its
/// home held the entity's deltas from the Hold, and sends them back to
/// the source, which takes them again; under likes nothing is lost or
/// applied twice, and the entity stays where it was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_move_on_given_up_sends_what_the_home_held_back_to_the_source() {
    let _serial = SERIAL.lock().await;
    let (cluster, admin, biz) = copying_at_most(300).await;
    let (a, _) = entities();
    let key = EntityKey { biz, entity: a };
    let home = shard_of(biz, a, SHARDS);
    // Moved once with no likers yet: a copy of a few bytes.
    let to = target(&cluster, home);
    assert!(matches!(move_entity(&admin, biz, a, to).await, Ok(Response::Done)));
    let deadline = Instant::now() + DEADLINE;
    loop {
        let p = placements(&admin).await.expect("placements");
        if p.move_of(&key).is_none() && p.entity_shard(biz, a, SHARDS) == to {
            break;
        }
        assert!(Instant::now() < deadline, "the first move did not finish: {p:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let writers = Writers::start(&cluster, biz).await;
    let load = writers.load.clone();
    // Enough likers that the copy passes 300 bytes (~10 bytes a liker).
    loop {
        let c = admin.counts(biz, &[a]).await.expect("counts");
        if c[0].likes >= 40 {
            break;
        }
        assert!(Instant::now() < deadline, "no likers: {c:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let on = (1..SHARDS).map(|d| (to + d) % SHARDS).find(|s| *s != home).unwrap();
    match move_entity(&admin, biz, a, on).await {
        Ok(Response::Done) => {}
        other => panic!("the move on to shard {on}: {other:?}"),
    }
    let (seen, p) = steps_until_gone(&admin, key).await;
    assert!(seen.contains("hold") && seen.contains("copy"), "held, then copying: {seen:?}");
    assert_eq!(p.entity_shard(biz, a, SHARDS), to, "it stays where it was: {p:?}");
    grows_by(&load.acked, 200, Duration::from_secs(30), "likes after the move").await;
    writers.stop().await;
    assert_caught_up(&cluster, &admin, biz).await;
    cluster.wait_converged().await;
}
