//! The automatic relief of a hot node (`hot_move.rs` decides): once a
//! second, on the metadata leader, while `hot_move_min_rps` is set and no
//! actor move is under way, it reads every node's hot keys, asks the policy,
//! and records what it picks: an actor's move (driven by `actor_mover.rs`
//! like one an operator asked for), or two shards' preferred leaders
//! exchanged in the cluster map, which each shard's leader then follows
//! with a hand-off (`leaders.rs`'s balancer, `transfer.rs`).

use crate::actor_mover::{now_ms, Movable};
use crate::engine::Engine;
use crate::hot_move::{Actor, Hot, HotMoves, Look, Policy, Relief, Swap};
use plaudit_actors::rankings::route;
use plaudit_proto::hotkeys::HotKey;
use plaudit_proto::placement::{BoardKey, EntityKey};
use plaudit_proto::routing::shard_of;
use plaudit_proto::window::TypeId;
use plaudit_proto::{ShardId, WireError};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tracing::{info, warn};

/// How often the automatic mover looks at the hot keys, and how many of
/// each node's it reads.
const HOT_LOOK_EVERY: Duration = Duration::from_secs(1);
const HOT_LOOK_TOP: u32 = 64;

impl Engine {
    /// Once a second on the metadata leader, while `hot_move_min_rps` is
    /// set and nothing is moving (an actor, a replica): the policy's relief.
    pub(crate) async fn manage_hot_moves(self: Arc<Self>) {
        let policy = Policy { min_rps: self.cfg.hot_move_min_rps, after: self.cfg.hot_move_after };
        let mut moves = HotMoves::default();
        // The move last recorded, until it is over.
        let mut started: Option<(Actor, ShardId)> = None;
        loop {
            tokio::time::sleep(HOT_LOOK_EVERY).await;
            let moving = !self.directory.placements().moves.is_empty()
                || !self.directory.entity_placements().moves.is_empty()
                || self.directory.cluster_state().is_some_and(|s| !s.moves.is_empty());
            if !self.leads_meta() || moving {
                continue;
            }
            if let Some((actor, to)) = started.take() {
                if self.lives_on(&actor) != to {
                    warn!(?actor, to, "the hot move was given up; not tried again for an hour");
                    moves.gave_up(actor, Instant::now());
                }
            }
            let look = self.hot_look().await;
            let Some(relief) = moves.decide(policy, &look, Instant::now()) else { continue };
            // A swap weighs two shards, but a leadership is its group's:
            // with shards in groups it would move every shard of both
            // groups, and another shard of the group could swap it back.
            // Not until the policy weighs groups.
            if matches!(relief, Relief::Swap(_)) && self.layout.groups() < self.cfg.shards {
                continue;
            }
            let made = match &relief {
                Relief::Move(Actor::Board(b), to) => self.start_hot_move(b, *to).await,
                Relief::Move(Actor::Entity(e), to) => self.start_hot_move(e, *to).await,
                Relief::Swap(s) => self.swap_leaders(*s).await,
            };
            match made {
                Ok(recorded) => {
                    if let (true, Relief::Move(actor, to)) = (recorded, &relief) {
                        started = Some((actor.clone(), *to));
                    }
                    let loads = look.loads();
                    info!(?relief, ?loads, shard_load = ?look.shard_load, "hot relief recorded");
                    self.nudge.notify_one();
                }
                Err(e) => warn!(?relief, error = %e, "recording a hot relief failed"),
            }
        }
    }

    /// The shard `actor` lives on now.
    fn lives_on(&self, actor: &Actor) -> ShardId {
        match actor {
            Actor::Board(b) => self.board_home(b.rank, &b.type_key),
            Actor::Entity(e) => self.directory.entity_shard(e.biz, e.entity, self.cfg.shards),
        }
    }

    /// Records `s` in the cluster map: each of its shards' replicas (their
    /// groups') with the node to lead it first. Leaderships follow the map's first replica
    /// (the balancer hands each over within a few seconds), and the leader
    /// spread keeps the order, since each node still leads its share.
    async fn swap_leaders(&self, s: Swap) -> Result<bool, WireError> {
        self.change_state(|st| {
            for (shard, lead) in [(s.hot, s.to), (s.back, s.from)] {
                // Leadership is its group's: the group's own shard places it.
                let r = st.map.shards.get_mut(self.layout.group_of(shard) as usize)?;
                let at = r.iter().position(|&n| n == lead)?;
                let node = r.remove(at);
                r.insert(0, node);
            }
            Some(())
        })
        .await
    }

    /// Records the move the policy picked, unless one of `key` is under way.
    async fn start_hot_move<K: Movable>(&self, key: &K, to: ShardId) -> Result<bool, WireError> {
        let shards = self.cfg.shards;
        self.change_placements::<K>(|p| match p.move_of(key) {
            Some(_) => Ok(None),
            None => p.start(key.clone(), to, shards, now_ms()).map(Some),
        })
        .await
    }

    /// Every node's hot keys, as the policy reads them: boards and entities
    /// by where they live (a board counted by the dimensions its events
    /// carry is each of its live windows' boards), each shard's load as
    /// its hot keys', each shard's leader and replicas.
    async fn hot_look(&self) -> Look {
        let mut summed: HashMap<HotKey, u64> = HashMap::new();
        for row in self.hot_keys(HOT_LOOK_TOP).await {
            *summed.entry(row.key).or_default() += row.requests_per_s;
        }
        let shards = self.cfg.shards;
        let leaders: Vec<Option<u64>> = (0..shards).map(|s| self.leader_id(s)).collect();
        let replicas = self.directory.cluster().map_or_else(Vec::new, |m| m.shards.clone());
        let shard_load = vec![0; shards as usize];
        let mut look = Look { leaders, replicas, shard_load, ..Look::default() };
        for (key, rps) in summed {
            let on: Vec<(Option<Actor>, ShardId)> = match &key {
                HotKey::Entity { biz, entity } => {
                    let shard = self.directory.entity_shard(*biz, *entity, shards);
                    let e = EntityKey { biz: *biz, entity: *entity };
                    vec![(Some(Actor::Entity(e)), shard)]
                }
                HotKey::User { biz, user } => vec![(None, shard_of(*biz, *user, shards))],
                HotKey::Board { rank, board } => self
                    .boards_named(*rank, board)
                    .into_iter()
                    .map(|k| {
                        let shard = self.board_home(*rank, &k);
                        let b = BoardKey { rank: *rank, type_key: k };
                        (Some(Actor::Board(b)), shard)
                    })
                    .collect(),
            };
            for (actor, shard) in on {
                if let Some(l) = look.shard_load.get_mut(shard as usize) {
                    *l += rps;
                }
                if let Some(actor) = actor {
                    look.actors.push(Hot { actor, shard, rps });
                }
            }
        }
        look
    }

    /// The boards a hot key's name stands for: its type id, or the live
    /// windows' boards of the dimensions it names (`room=7`; none when the
    /// ranking or a dimension is unknown).
    fn boards_named(&self, rank: u32, name: &str) -> Vec<Vec<u8>> {
        if let Some(t) = TypeId::parse(name) {
            return vec![t.to_key()];
        }
        let Some(def) = self.directory.rank(rank) else { return Vec::new() };
        let dims: Option<Vec<(String, u64)>> = name
            .split(',')
            .filter(|p| !p.is_empty())
            .map(|p| p.split_once('=').and_then(|(d, v)| Some((d.to_string(), v.parse().ok()?))))
            .collect();
        let Some(Ok(values)) = dims.map(|d| route::dim_values(&def, &d)) else { return Vec::new() };
        let now = crate::rankings::now_secs();
        route::targets(&def, values, now, now)
            .into_iter()
            .filter(|t| !t.expired)
            .map(|t| t.type_id.to_key())
            .collect()
    }
}
