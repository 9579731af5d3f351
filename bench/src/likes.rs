//! The like workload shared by both targets: its ops and the per-worker
//! generator (users, Zipf-skewed entities, toggle knowledge).

use crate::args::{LikesArgs, Target};
use crate::load::{measure, Mix, Phase};
use crate::report::{self, RunInfo};
use crate::rng::FastRng;
use crate::zipf::Zipf;
use crate::{likes_plaudit, likes_redis, plaudit, plaudit_loop, redis, redis_loop};
use std::collections::HashSet;
use std::sync::Arc;

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
    /// Op names as the mix and the report spell them, in `index` order.
    pub const NAMES: &'static [&'static str] = &["like", "status", "counts"];

    /// The op's index in `NAMES`, the mix and the stats.
    pub fn index(self) -> usize {
        self as usize
    }

    pub fn parse_mix(s: &str) -> Result<Mix, String> {
        Mix::parse(s, Self::NAMES)
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
        let kind = OpKind::ALL[wl.mix.pick(&mut self.rng)];
        self.next_op_of(wl, kind)
    }

    /// An op of `kind`, whatever the mix says.
    pub fn next_op_of(&mut self, wl: &Workload, kind: OpKind) -> Op {
        match kind {
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

/// Runs the like workload against the chosen target and prints the report.
pub async fn run(args: &LikesArgs) -> anyhow::Result<()> {
    let c = &args.common;
    let wl = Arc::new(Workload {
        biz: args.biz,
        users: args.users,
        entities: Zipf::new(args.entities, args.zipf).map_err(anyhow::Error::msg)?,
        mix: args.mix.clone(),
        owners: args.owners,
    });
    let seed = c.seed();
    let phase = Phase::default();
    let (addr, target, preload, stats, window) = match c.target {
        Target::Redis => {
            let setup = likes_redis::setup(&c.redis_addr).await?;
            let sha: Arc<str> = setup.sha.into();
            let mut conns = Vec::with_capacity(c.connections);
            for i in 0..c.connections {
                let conn = redis::Conn::connect(&c.redis_addr).await?;
                conns.push((conn, Worker::new(i, c.connections, args.users, seed)));
            }
            let mut preload = None;
            if args.preload > 0 {
                c.progress(&format!("preloading {} like records", args.preload));
                let (done, p) =
                    likes_redis::preload(conns, sha.clone(), wl.clone(), args.preload, c.pipeline)
                        .await?;
                let known: usize = done.iter().map(|(_, w)| w.known_likes()).sum();
                c.progress(&format!("preload done; workers know {known} liked pairs"));
                conns = done;
                preload = Some(p);
            }
            let tasks: Vec<_> = conns
                .into_iter()
                .map(|(conn, worker)| {
                    let ops = likes_redis::LikeOps { sha: sha.clone(), wl: wl.clone(), worker };
                    tokio::spawn(redis_loop::run(
                        c.redis_addr.clone(),
                        conn,
                        ops,
                        c.pipeline,
                        phase.clone(),
                    ))
                })
                .collect();
            let (stats, window) = measure(c, &phase, wl.mix.ops(), tasks).await?;
            (c.redis_addr.clone(), "redis", preload, stats, window)
        }
        Target::Plaudit => {
            let clients = plaudit::connect(c).await?;
            likes_plaudit::ensure_biz(&clients[0], args.biz).await?;
            let loops = c.connections * c.pipeline;
            let mut workers: Vec<Worker> =
                (0..loops).map(|i| Worker::new(i, loops, args.users, seed)).collect();
            let mut preload = None;
            if args.preload > 0 {
                c.progress(&format!("preloading {} like records", args.preload));
                let (w, p) =
                    likes_plaudit::preload(&clients, workers, wl.clone(), args.preload).await?;
                let known: usize = w.iter().map(Worker::known_likes).sum();
                c.progress(&format!("preload done; workers know {known} liked pairs"));
                workers = w;
                preload = Some(p);
            }
            let tasks = match &args.rate {
                Some(rates) => crate::paced::spawn(&clients, &wl, rates, seed, &phase),
                None => plaudit_loop::spawn(
                    c,
                    &clients,
                    workers,
                    &phase,
                    |workers| likes_plaudit::LikeBatches { wl: wl.clone(), workers },
                    |client, worker, phase| {
                        likes_plaudit::run_loop(client, wl.clone(), worker, phase)
                    },
                ),
            };
            let (stats, window) = measure(c, &phase, wl.mix.ops(), tasks).await?;
            (c.addr.clone(), "plaudit", preload, stats, window)
        }
    };
    let info = RunInfo::new(
        c,
        target,
        addr,
        window,
        preload,
        vec![
            ("users", args.users.into()),
            ("entities", args.entities.into()),
            ("zipf", args.zipf.into()),
        ],
    );
    report::print(c.json, &info, &wl.mix, &stats);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn workload(users: u64, entities: u64, mix: &str) -> Workload {
        Workload {
            biz: 1,
            users,
            entities: Zipf::new(entities, 0.99).unwrap(),
            mix: OpKind::parse_mix(mix).unwrap(),
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
