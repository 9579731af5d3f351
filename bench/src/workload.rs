//! The like workload shared by both targets: the operation mix, the
//! per-worker generator (users, Zipf-skewed entities, toggle knowledge) and
//! the per-worker statistics that are merged at the end.

use crate::hist::Histogram;
use crate::rng::FastRng;
use crate::zipf::Zipf;
use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::time::Instant;

/// Entities per `status` / `counts` request (one feed page).
pub const BATCH: usize = 20;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum OpKind {
    Like,
    Status,
    Counts,
}

impl OpKind {
    pub const ALL: [OpKind; 3] = [OpKind::Like, OpKind::Status, OpKind::Counts];

    pub fn name(self) -> &'static str {
        match self {
            OpKind::Like => "like",
            OpKind::Status => "status",
            OpKind::Counts => "counts",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// Relative weights of the operations, e.g. `like=10,status=45,counts=45`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mix {
    weights: [u32; 3],
    total: u32,
}

impl Mix {
    pub fn parse(s: &str) -> Result<Mix, String> {
        let mut weights = [0u32; 3];
        let mut seen = [false; 3];
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (name, w) = part
                .split_once('=')
                .ok_or_else(|| format!("mix entry {part:?} is not name=weight"))?;
            let kind = OpKind::ALL
                .into_iter()
                .find(|k| k.name() == name.trim())
                .ok_or_else(|| format!("unknown op {:?} in mix (like, status, counts)", name))?;
            let w: u32 =
                w.trim().parse().map_err(|_| format!("bad weight {w:?} for {}", kind.name()))?;
            if w > 1_000_000 {
                return Err(format!("weight {w} for {} is too large", kind.name()));
            }
            if std::mem::replace(&mut seen[kind.index()], true) {
                return Err(format!("op {} appears twice in the mix", kind.name()));
            }
            weights[kind.index()] = w;
        }
        let total = weights.iter().sum();
        if total == 0 {
            return Err("the mix needs at least one op with a positive weight".into());
        }
        Ok(Mix { weights, total })
    }

    pub fn weight(&self, kind: OpKind) -> u32 {
        self.weights[kind.index()]
    }

    /// The ops with a positive weight, in a fixed order.
    pub fn active(&self) -> impl Iterator<Item = OpKind> + '_ {
        OpKind::ALL.into_iter().filter(|k| self.weight(*k) > 0)
    }

    pub fn pick(&self, rng: &mut FastRng) -> OpKind {
        let mut x = rng.below(self.total as u64) as u32;
        for k in OpKind::ALL {
            let w = self.weights[k.index()];
            if x < w {
                return k;
            }
            x -= w;
        }
        unreachable!("weights sum to total")
    }
}

/// What every worker generates from.
#[derive(Debug, Clone)]
pub struct Workload {
    pub biz: u32,
    pub users: u64,
    pub entities: Zipf,
    pub mix: Mix,
    /// Whether like actions carry an owner (the entity's author).
    pub owners: bool,
}

impl Workload {
    /// The author of an entity: a fixed pseudo-random user.
    pub fn owner_of(&self, entity: u64) -> u64 {
        1 + entity.wrapping_mul(0x9E37_79B9_7F4A_7C15) % self.users
    }
}

/// One generated operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    /// Like, or unlike when this worker knows it liked the pair.
    Toggle {
        user: u64,
        entity: u64,
        unlike: bool,
    },
    Status {
        user: u64,
        entities: Vec<u64>,
    },
    Counts {
        entities: Vec<u64>,
    },
}

impl Op {
    pub fn kind(&self) -> OpKind {
        match self {
            Op::Toggle { .. } => OpKind::Like,
            Op::Status { .. } => OpKind::Status,
            Op::Counts { .. } => OpKind::Counts,
        }
    }
}

/// One worker's generator. Worker `w` of `n` draws users from its own slice
/// `{u : u % n == w}` (when there are enough users), so its knowledge of what
/// it liked is exact without any shared state.
pub struct Worker {
    pub rng: FastRng,
    liked: HashSet<(u64, u64)>,
    user_offset: u64,
    user_stride: u64,
    user_slots: u64,
}

impl Worker {
    pub fn new(index: usize, workers: usize, users: u64, seed: u64) -> Worker {
        let (w, n) = (index as u64, workers.max(1) as u64);
        let rng = FastRng::seed(seed ^ (w.wrapping_mul(0xD1B5_4A32_D192_ED03)));
        let (user_offset, user_stride, user_slots) = if users >= n {
            // users w+1, w+1+n, ... up to `users`
            (w, n, (users - w).div_ceil(n))
        } else {
            (0, 1, users)
        };
        Worker { rng, liked: HashSet::new(), user_offset, user_stride, user_slots }
    }

    pub fn user(&mut self) -> u64 {
        1 + self.user_offset + self.user_stride * self.rng.below(self.user_slots)
    }

    fn distinct_entities(&mut self, wl: &Workload) -> Vec<u64> {
        let want = BATCH.min(wl.entities.n() as usize);
        let mut out = Vec::with_capacity(want);
        let mut attempts = 0;
        while out.len() < want && attempts < BATCH * 20 {
            attempts += 1;
            let e = wl.entities.sample(&mut self.rng);
            if !out.contains(&e) {
                out.push(e);
            }
        }
        out
    }

    pub fn next_op(&mut self, wl: &Workload) -> Op {
        match wl.mix.pick(&mut self.rng) {
            OpKind::Like => {
                let user = self.user();
                let entity = wl.entities.sample(&mut self.rng);
                let unlike = self.liked.contains(&(user, entity));
                Op::Toggle { user, entity, unlike }
            }
            OpKind::Status => {
                let user = self.user();
                Op::Status { user, entities: self.distinct_entities(wl) }
            }
            OpKind::Counts => Op::Counts { entities: self.distinct_entities(wl) },
        }
    }

    /// A like of a pair this worker has not liked yet (for preloading).
    pub fn next_preload(&mut self, wl: &Workload) -> (u64, u64) {
        for _ in 0..64 {
            let pair = (self.user(), wl.entities.sample(&mut self.rng));
            if !self.liked.contains(&pair) {
                return pair;
            }
        }
        (self.user(), 1 + self.rng.below(wl.entities.n()))
    }

    /// Records what the server said the pair's state now is.
    pub fn learn(&mut self, user: u64, entity: u64, liked: bool) {
        if liked {
            self.liked.insert((user, entity));
        } else {
            self.liked.remove(&(user, entity));
        }
    }

    pub fn known_likes(&self) -> usize {
        self.liked.len()
    }
}

/// Benchmark phases, advanced by the driver and read by every worker.
pub const WARMUP: u8 = 0;
pub const MEASURE: u8 = 1;
pub const STOP: u8 = 2;

#[derive(Clone)]
pub struct Phase(Arc<AtomicU8>);

impl Default for Phase {
    fn default() -> Self {
        Phase(Arc::new(AtomicU8::new(WARMUP)))
    }
}

impl Phase {
    pub fn get(&self) -> u8 {
        self.0.load(Ordering::Relaxed)
    }
    pub fn set(&self, p: u8) {
        self.0.store(p, Ordering::Relaxed)
    }
}

/// Latencies (in nanoseconds) and error counts per op, for one worker.
#[derive(Debug, Default, Clone)]
pub struct Stats {
    pub hist: [Histogram; 3],
    pub errors: [BTreeMap<String, u64>; 3],
}

impl Stats {
    pub fn ok(&mut self, kind: OpKind, started: Instant) {
        self.hist[kind.index()].record(started.elapsed().as_nanos() as u64);
    }

    #[cfg(test)]
    pub fn ok_ns(&mut self, kind: OpKind, ns: u64) {
        self.hist[kind.index()].record(ns);
    }

    pub fn error(&mut self, kind: OpKind, code: &str) {
        *self.errors[kind.index()].entry(code.to_string()).or_default() += 1;
    }

    pub fn merge(&mut self, other: &Stats) {
        for i in 0..3 {
            self.hist[i].merge(&other.hist[i]);
            for (code, n) in &other.errors[i] {
                *self.errors[i].entry(code.clone()).or_default() += n;
            }
        }
    }

    pub fn hist(&self, kind: OpKind) -> &Histogram {
        &self.hist[kind.index()]
    }

    pub fn errors(&self, kind: OpKind) -> &BTreeMap<String, u64> {
        &self.errors[kind.index()]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_mixes() {
        let m = Mix::parse("like=10,status=45,counts=45").unwrap();
        assert_eq!(
            (m.weight(OpKind::Like), m.weight(OpKind::Status), m.weight(OpKind::Counts)),
            (10, 45, 45)
        );
        let m = Mix::parse(" counts = 3 , like=1 ").unwrap();
        assert_eq!(m.active().collect::<Vec<_>>(), vec![OpKind::Like, OpKind::Counts]);
        let m = Mix::parse("like=1,status=0").unwrap();
        assert_eq!(m.active().collect::<Vec<_>>(), vec![OpKind::Like]);
    }

    #[test]
    fn rejects_bad_mixes() {
        for bad in
            ["", "like", "like=x", "like=-1", "foo=3", "like=0", "like=1,like=2", "like=9999999"]
        {
            assert!(Mix::parse(bad).is_err(), "{bad:?} should be rejected");
        }
    }

    #[test]
    fn pick_follows_the_weights() {
        let m = Mix::parse("like=10,status=30,counts=60").unwrap();
        let mut rng = FastRng::seed(5);
        let mut n = [0u32; 3];
        for _ in 0..100_000 {
            n[m.pick(&mut rng).index()] += 1;
        }
        for (got, want) in n.iter().zip([10_000, 30_000, 60_000]) {
            assert!((*got as i64 - want).abs() < 1_000, "{n:?}");
        }
    }

    fn workload(users: u64, entities: u64, mix: &str) -> Workload {
        Workload {
            biz: 1,
            users,
            entities: Zipf::new(entities, 0.99).unwrap(),
            mix: Mix::parse(mix).unwrap(),
            owners: true,
        }
    }

    #[test]
    fn workers_own_disjoint_user_slices() {
        let users = 1000;
        let mut seen = vec![None::<usize>; users as usize + 1];
        for w in 0..7 {
            let mut worker = Worker::new(w, 7, users, 1);
            for _ in 0..5000 {
                let u = worker.user();
                assert!((1..=users).contains(&u));
                assert_eq!(*seen[u as usize].get_or_insert(w), w, "user {u} shared");
            }
        }
        assert!(seen[1..].iter().all(Option::is_some), "some user never drawn");
        // Fewer users than workers: everyone draws from all users.
        let mut w = Worker::new(5, 8, 3, 1);
        assert!((0..100).all(|_| (1..=3).contains(&w.user())));
    }

    #[test]
    fn toggles_unlike_what_was_liked() {
        let wl = workload(10, 5, "like=1");
        let mut w = Worker::new(0, 1, 10, 3);
        for _ in 0..1000 {
            let Op::Toggle { user, entity, unlike } = w.next_op(&wl) else { panic!() };
            assert_eq!(unlike, w.liked.contains(&(user, entity)));
            w.learn(user, entity, !unlike);
        }
        assert!(w.known_likes() > 0);
    }

    #[test]
    fn batches_are_distinct_and_sized() {
        let wl = workload(100, 1000, "status=1,counts=1");
        let mut w = Worker::new(0, 1, 100, 3);
        for _ in 0..200 {
            let es = match w.next_op(&wl) {
                Op::Status { entities, .. } | Op::Counts { entities } => entities,
                Op::Toggle { .. } => panic!("no likes in this mix"),
            };
            assert_eq!(es.len(), BATCH);
            let set: HashSet<_> = es.iter().collect();
            assert_eq!(set.len(), BATCH);
        }
        let tiny = workload(100, 3, "counts=1");
        let Op::Counts { entities } = w.next_op(&tiny) else { panic!() };
        assert_eq!(entities.len(), 3);
    }

    #[test]
    fn owners_are_valid_users() {
        let wl = workload(50, 1000, "like=1");
        assert!((1..=1000).all(|e| (1..=50).contains(&wl.owner_of(e))));
    }
}
