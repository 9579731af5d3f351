//! A record of what a concurrent load did, and a check of a cluster's final
//! state against it.
//!
//! ```text
//! like_load tasks ─ rounds of concurrent actions on distinct users ─┐  per (user, entity):
//!   (one action per pair in flight at a time, so each pair's order  ├─ last acknowledged state
//!    is known)                                                      └─ actions whose outcome is unknown
//! score_load ─ events with unique ids ─ acknowledged | unknown
//!
//! check_likes: every pair's state is the acknowledged one, or one the unknown actions lead to;
//!              counts, likers and received totals equal what the states imply (no drift,
//!              nothing applied twice)
//! check_scores: re-send every event: each acknowledged one must come back a duplicate (not
//!               lost); afterwards each member's score is exactly its number of events (none
//!               applied twice)
//! ```
//!
//! Reads in the checks go through the SDK (linearizable, on the leaders);
//! `Cluster::wait_converged` compares every replica's state besides.

use plaudit_client::proto::likes::ListItem;
use plaudit_client::proto::rankings::ItemId;
use plaudit_client::proto::scoring::{BoardRef, Outcome, ScoreRequest};
use plaudit_client::proto::{LikeAction, LikeState};
use plaudit_client::{Client, ClientError};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Concurrent actions per like task round, each on a different user.
const LANES: usize = 8;

/// splitmix64: a small seeded generator, so a failing run can be replayed.
pub struct Rng(pub u64);

impl Rng {
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }
}

/// The state after `action` from `prev` (the documented transition table).
pub fn next_state(prev: LikeState, action: LikeAction) -> LikeState {
    match (action, prev) {
        (LikeAction::Like, _) => LikeState::Like,
        (LikeAction::Dislike, _) => LikeState::Dislike,
        (LikeAction::Unlike, LikeState::Like) | (LikeAction::Undislike, LikeState::Dislike) => {
            LikeState::None
        }
        (_, p) => p,
    }
}

/// What the load knows about one `(user, entity)` pair.
#[derive(Debug, Default, Clone)]
struct PairLog {
    acked: Option<LikeState>,
    /// Actions sent after the last acknowledgement whose outcome is unknown.
    unknown: Vec<LikeAction>,
}

impl PairLog {
    /// Every state the pair may be in: the acknowledged one with any
    /// subsequence of the unknown actions applied in order.
    fn possible(&self) -> Vec<LikeState> {
        let mut states = vec![self.acked.unwrap_or(LikeState::None)];
        for a in &self.unknown {
            let more: Vec<LikeState> = states.iter().map(|s| next_state(*s, *a)).collect();
            for s in more {
                if !states.contains(&s) {
                    states.push(s);
                }
            }
        }
        states
    }
}

/// The shape of a like load.
#[derive(Debug, Clone, Copy)]
pub struct LikeShape {
    pub biz: u32,
    pub users: u64,
    pub entities: u64,
    pub owners: u64,
    pub seed: u64,
}

impl LikeShape {
    pub fn owner_of(&self, entity: u64) -> u64 {
        1_000_000 + entity % self.owners
    }
}

/// Everything the loads did.
#[derive(Default)]
pub struct History {
    pairs: Mutex<HashMap<(u64, u64), PairLog>>,
    /// Scoring events: `(item, event id) -> acknowledged?`.
    events: Mutex<BTreeMap<(ItemId, u64), bool>>,
    pub acked: AtomicU64,
    pub unknown: AtomicU64,
    /// The first failed call's error, for the report.
    first_failure: Mutex<Option<String>>,
}

impl History {
    pub fn new() -> Arc<History> {
        Arc::default()
    }

    fn failure(&self, what: String) {
        self.unknown.fetch_add(1, Ordering::Relaxed);
        // The wall clock, to find the moment in the nodes' logs (UTC).
        let now =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        let s = now.as_secs() % 86_400;
        let at =
            format!("{:02}:{:02}:{:02}.{:03}Z", s / 3600, s / 60 % 60, s % 60, now.subsec_millis());
        self.first_failure.lock().unwrap().get_or_insert(format!("{what} (at {at})"));
    }

    fn record_like(
        &self,
        user: u64,
        entity: u64,
        action: LikeAction,
        res: &Result<LikeState, String>,
    ) {
        let mut pairs = self.pairs.lock().unwrap();
        let p = pairs.entry((user, entity)).or_default();
        match res {
            Ok(now) => {
                p.acked = Some(*now);
                p.unknown.clear();
                self.acked.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) => {
                p.unknown.push(action);
                self.failure(format!("{action:?} of ({user}, {entity}): {e}"));
            }
        }
    }
}

/// Runs like actions until `stop`: task `task` of `tasks` acts on its own
/// users (`user % tasks == task`), `LANES` at a time on distinct users, so
/// each pair has at most one action in flight. Errors are recorded as
/// unknown outcomes (the SDK retries what is safe; what reaches us is a
/// failure whose effect we cannot know), and the task goes on.
pub async fn like_load(
    client: Client,
    shape: LikeShape,
    task: u64,
    tasks: u64,
    hist: Arc<History>,
    stop: Arc<AtomicBool>,
) {
    let mut rng = Rng(shape.seed ^ task.wrapping_mul(0x1234_5678_9abc_def1));
    let mine: Vec<u64> = (0..shape.users).filter(|u| u % tasks == task).collect();
    let lanes = LANES.min(mine.len());
    while !stop.load(Ordering::Relaxed) {
        let mut users = mine.clone();
        for i in 0..lanes {
            let j = i + rng.below((users.len() - i) as u64) as usize;
            users.swap(i, j);
        }
        let round: Vec<(u64, u64, LikeAction)> = users[..lanes]
            .iter()
            .map(|&u| (u, rng.below(shape.entities), LikeAction::ALL[rng.below(4) as usize]))
            .collect();
        let calls = round.iter().map(|&(user, entity, action)| {
            let client = client.clone();
            let owner = Some(shape.owner_of(entity));
            tokio::spawn(async move { client.act(shape.biz, entity, user, owner, action).await })
        });
        let handles: Vec<_> = calls.collect();
        for (&(user, entity, action), h) in round.iter().zip(handles) {
            let res = match h.await.expect("like task") {
                Ok(reply) => Ok(reply.now),
                Err(e) => Err(e.to_string()),
            };
            hist.record_like(user, entity, action, &res);
        }
        if hist.unknown.load(Ordering::Relaxed) > 0 {
            // A failure: give the cluster a moment rather than spin on it.
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}

/// Checks the likes of `shape` against the history: truth on the users'
/// shards, and derived counts, likers and received totals.
pub async fn check_likes(client: &Client, shape: LikeShape, hist: &History) -> Result<(), String> {
    let pairs = hist.pairs.lock().unwrap().clone();
    let entities: Vec<u64> = (0..shape.entities).collect();
    let mut likes = vec![0u64; shape.entities as usize];
    let mut dislikes = vec![0u64; shape.entities as usize];
    let mut likers: Vec<BTreeSet<u64>> = vec![BTreeSet::new(); shape.entities as usize];
    for user in 0..shape.users {
        let states = client.status(shape.biz, user, &entities).await.map_err(|e| e.to_string())?;
        for s in states {
            let log = pairs.get(&(user, s.entity)).cloned().unwrap_or_default();
            if !log.possible().contains(&s.state) {
                return Err(format!(
                    "user {user} entity {}: state {:?}, but the history allows only {:?} \
                     (acked {:?}, unknown {:?}): an acknowledged write was lost or changed",
                    s.entity,
                    s.state,
                    log.possible(),
                    log.acked,
                    log.unknown
                ));
            }
            match s.state {
                LikeState::Like => {
                    likes[s.entity as usize] += 1;
                    likers[s.entity as usize].insert(user);
                }
                LikeState::Dislike => dislikes[s.entity as usize] += 1,
                LikeState::None => {}
            }
        }
    }
    let counts = client.counts(shape.biz, &entities).await.map_err(|e| e.to_string())?;
    for c in &counts {
        let e = c.entity as usize;
        if (c.likes, c.dislikes) != (likes[e], dislikes[e]) {
            return Err(format!(
                "entity {}: counts {}/{} but its users' states say {}/{} (drift or double apply)",
                c.entity, c.likes, c.dislikes, likes[e], dislikes[e]
            ));
        }
    }
    for e in 0..shape.entities {
        let got = all_likers(client, shape.biz, e).await?;
        if got != likers[e as usize] {
            return Err(format!("entity {e}: likers {got:?}, states say {:?}", likers[e as usize]));
        }
    }
    for o in 0..shape.owners {
        let owner = 1_000_000 + o;
        let want: u64 = (0..shape.entities)
            .filter(|&e| shape.owner_of(e) == owner)
            .map(|e| likes[e as usize])
            .sum();
        let got = client.received(shape.biz, owner).await.map_err(|e| e.to_string())?.likes;
        if got != want {
            return Err(format!("owner {owner}: received {got}, states say {want}"));
        }
    }
    Ok(())
}

async fn all_likers(client: &Client, biz: u32, entity: u64) -> Result<BTreeSet<u64>, String> {
    let mut out = BTreeSet::new();
    let mut cursor = None;
    loop {
        let page =
            client.likers(biz, entity, cursor.as_deref(), 100).await.map_err(|e| e.to_string())?;
        out.extend(page.items.iter().map(|i: &ListItem| i.id));
        match page.next {
            Some(n) => cursor = Some(n),
            None => return Ok(out),
        }
    }
}

/// The shape of a scoring load: one `total` board of an `incr` ranking
/// with no dimensions; every event scores 1.
#[derive(Debug, Clone, Copy)]
pub struct ScoreShape {
    pub rank: u32,
    pub items: u64,
    /// Event ids start here (a load's ids are unique).
    pub first_event: u64,
}

fn event(shape: ScoreShape, item: ItemId, event_id: u64) -> ScoreRequest {
    ScoreRequest {
        rank: shape.rank,
        item,
        score: 1,
        sub: None,
        dims: Vec::new(),
        ts: 1_700_000_000,
        event_id,
    }
}

/// Sends scoring events until `stop`, `LANES` at a time.
pub async fn score_load(
    client: Client,
    shape: ScoreShape,
    task: u64,
    hist: Arc<History>,
    stop: Arc<AtomicBool>,
) {
    let mut rng = Rng(0x5c0e ^ task);
    let mut next = shape.first_event + task * 1_000_000;
    while !stop.load(Ordering::Relaxed) {
        let batch: Vec<(ItemId, u64)> = (0..LANES)
            .map(|_| {
                next += 1;
                (rng.below(shape.items), next)
            })
            .collect();
        let handles: Vec<_> = batch
            .iter()
            .map(|&(item, id)| {
                let c = client.clone();
                tokio::spawn(async move { c.score(event(shape, item, id)).await })
            })
            .collect();
        for (&(item, id), h) in batch.iter().zip(handles) {
            // Each event id is sent by one call only: `Duplicate` here would
            // be the SDK reporting its own retry of an applied attempt as
            // someone else's (`retry::settle` reports it applied).
            let acked = match h.await.expect("score task") {
                Ok(r) if r.boards.iter().all(|b| b.outcome == Outcome::Applied) => Ok(()),
                Ok(r) => Err(format!("{:?}", r.boards)),
                Err(e) => Err(e.to_string()),
            };
            hist.events.lock().unwrap().insert((item, id), acked.is_ok());
            match acked {
                Ok(()) => {
                    hist.acked.fetch_add(1, Ordering::Relaxed);
                }
                Err(e) => hist.failure(format!("event {id} of item {item}: {e}")),
            }
        }
    }
}

/// Re-sends every event of the history: an acknowledged one must be a
/// duplicate now. Then every item's score must be its number of events.
pub async fn check_scores(
    client: &Client,
    shape: ScoreShape,
    hist: &History,
) -> Result<(), String> {
    let events = hist.events.lock().unwrap().clone();
    let mut per_item: BTreeMap<ItemId, i64> = BTreeMap::new();
    for (&(item, id), &acked) in &events {
        let r =
            client.score(event(shape, item, id)).await.map_err(|e| format!("re-send {id}: {e}"))?;
        for b in &r.boards {
            if acked && b.outcome != Outcome::Duplicate {
                return Err(format!(
                    "event {id} (item {item}) was acknowledged but re-sending it gave {:?}: it was lost",
                    b.outcome
                ));
            }
        }
        *per_item.entry(item).or_default() += 1;
    }
    let items: Vec<ItemId> = per_item.keys().copied().collect();
    for chunk in items.chunks(400) {
        let scores = client
            .scores(shape.rank, BoardRef::TypeId("total:0".into()), chunk)
            .await
            .map_err(|e: ClientError| e.to_string())?;
        for (item, score) in scores {
            let want = per_item.get(&item).copied().unwrap_or(0);
            if score != Some(want) {
                return Err(format!(
                    "item {item}: score {score:?}, {want} distinct events (each once)"
                ));
            }
        }
    }
    Ok(())
}

/// A like load and a scoring load on one business and one ranking, run by
/// several tasks on their own clients, with their shared history.
pub struct Workload {
    pub likes: LikeShape,
    pub scores: ScoreShape,
    pub hist: Arc<History>,
    stop: Arc<AtomicBool>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Workload {
    /// Creates the business and the ranking (through `admin`).
    pub async fn setup(admin: &Client, seed: u64) -> Workload {
        use plaudit_client::proto::rankings::{Aggregation, RankDef, RankSettings, TieMode};
        use plaudit_client::proto::window::{Granularity, UtcOffset};
        use plaudit_client::proto::BizConfig;
        let biz = admin.create_biz(None, "history", BizConfig::default()).await.expect("biz").id;
        let rank = 40 + (seed % 1000) as u32;
        let def = RankDef {
            id: rank,
            name: "history".into(),
            dims: Vec::new(),
            granularities: vec![Granularity::Total],
            utc_offset: UtcOffset::UTC,
            aggregation: Aggregation::Incr,
            ties: TieMode::EarlierFirst,
            // The highest priority class: never shed, so every event counts.
            settings: RankSettings { priority: 9, ..RankSettings::default() },
        };
        admin.create_rank(def).await.expect("ranking");
        Workload {
            likes: LikeShape { biz, users: 120, entities: 24, owners: 4, seed },
            scores: ScoreShape { rank, items: 60, first_event: 1 },
            hist: History::new(),
            stop: Arc::default(),
            tasks: Vec::new(),
        }
    }

    /// Starts like tasks on `like_clients` and scoring tasks on `score_clients`.
    pub fn start(&mut self, like_clients: Vec<Client>, score_clients: Vec<Client>) {
        let n = like_clients.len() as u64;
        for (i, c) in like_clients.into_iter().enumerate() {
            let (hist, stop) = (self.hist.clone(), self.stop.clone());
            self.tasks.push(tokio::spawn(like_load(c, self.likes, i as u64, n, hist, stop)));
        }
        for (i, c) in score_clients.into_iter().enumerate() {
            let (hist, stop) = (self.hist.clone(), self.stop.clone());
            self.tasks.push(tokio::spawn(score_load(c, self.scores, i as u64, hist, stop)));
        }
    }

    /// Operations whose outcome the client never learned (failed calls).
    pub fn failed(&self) -> u64 {
        self.hist.unknown.load(Ordering::Relaxed)
    }

    /// The first failed call, if any: what it was and its error.
    pub fn first_failure(&self) -> Option<String> {
        self.hist.first_failure.lock().unwrap().clone()
    }

    /// Acknowledged operations so far.
    pub fn acked(&self) -> u64 {
        self.hist.acked.load(Ordering::Relaxed)
    }

    /// Waits until `more` operations beyond those acknowledged now are
    /// acknowledged (the cluster serves writes).
    pub async fn wait_acks(&self, more: u64, timeout: Duration, what: &str) {
        let target = self.acked() + more;
        let hist = self.hist.clone();
        crate::wait_until(timeout, what, || {
            let ok = hist.acked.load(Ordering::Relaxed) >= target;
            async move { ok }
        })
        .await;
    }

    /// Stops every task and waits for them.
    pub async fn stop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.tasks.drain(..) {
            t.await.expect("load task");
        }
    }

    /// The history checks, through `client`, which must report scoring
    /// outcomes as the nodes give them (`Cluster::auditor`).
    pub async fn check(&self, client: &Client) {
        if let Err(e) = check_likes(client, self.likes, &self.hist).await {
            panic!("likes: {e}");
        }
        if let Err(e) = check_scores(client, self.scores, &self.hist).await {
            panic!("scores: {e}");
        }
        eprintln!(
            "history: {} acknowledged, {} unknown outcomes",
            self.acked(),
            self.hist.unknown.load(Ordering::Relaxed)
        );
    }
}
