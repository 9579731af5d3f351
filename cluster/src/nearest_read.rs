//! Reads at the nearest replica of each shard they touch: `Request::Stale`
//! (no read barrier, answered with the most entries any replica lags) and
//! `Request::Replica` (after that replica's barrier: linearizable,
//! `follower_read.rs`). A node with no usable replica of a shard asks a
//! peer that has one.

use crate::engine::{internal, Engine};
use crate::router::Hop;
use plaudit_proto::likes::{CountsRequest, EntityCounts};
use plaudit_proto::routing::shard_of;
use plaudit_proto::{Request, Response, WireError};
use std::collections::BTreeMap;

impl Engine {
    /// A read served by the nearest replica of each shard it touches,
    /// without a read barrier, with the most entries any of them lags.
    pub(crate) async fn stale(&self, req: Request) -> Result<Response, WireError> {
        let (reply, lag) = self.read_any(req, false).await?;
        Ok(Response::Stale { lag, reply: Box::new(reply) })
    }

    /// A linearizable read served by the nearest replica of each shard it
    /// touches (`follower_read.rs`).
    pub(crate) async fn replica(&self, req: Request) -> Result<Response, WireError> {
        Ok(self.read_any(req, true).await?.0)
    }

    /// A read by the nearest replica of each shard it touches, `fresh`
    /// (after that replica's barrier) or stale, with the most entries any
    /// of them lags.
    async fn read_any(&self, req: Request, fresh: bool) -> Result<(Response, u64), WireError> {
        let shards = self.cfg.shards;
        let on = |shard, req| self.stale_on(shard, req, fresh);
        let (reply, lag) = match req {
            Request::Counts(r) => {
                let mut by_shard: BTreeMap<u32, Vec<u64>> = BTreeMap::new();
                for &e in &r.entities {
                    by_shard
                        .entry(self.directory.entity_shard(r.biz, e, shards))
                        .or_default()
                        .push(e);
                }
                let parts = by_shard.into_iter().map(|(shard, entities)| {
                    let sub = Request::Counts(CountsRequest { biz: r.biz, entities });
                    async move { on(shard, sub).await }
                });
                let mut found: BTreeMap<u64, EntityCounts> = BTreeMap::new();
                let mut lag = 0;
                for part in futures::future::join_all(parts).await {
                    let (reply, l) = part?;
                    lag = lag.max(l);
                    match reply {
                        Response::Counts(c) => found.extend(c.into_iter().map(|c| (c.entity, c))),
                        other => return Err(internal(format!("unexpected answer {other:?}"))),
                    }
                }
                let out = r.entities.iter().filter_map(|e| found.get(e).copied()).collect();
                (Response::Counts(out), lag)
            }
            Request::Status(ref r) => on(shard_of(r.biz, r.user, shards), req).await?,
            Request::UserLikes(ref r) => on(shard_of(r.biz, r.user, shards), req).await?,
            Request::Received(ref r) => on(shard_of(r.biz, r.user, shards), req).await?,
            Request::Likers(ref r) => {
                on(self.directory.entity_shard(r.biz, r.entity, shards), req).await?
            }
            Request::Query(ref q) => {
                let def = self.rank_def(q.rank).await?;
                let t = plaudit_actors::rankings::route::board_of(&def, &q.board)?;
                let shard = self.board_home(q.rank, &t.to_key());
                on(shard, req).await?
            }
            ref r if r.is_registry_read() && !fresh => match self.read_registry(&req) {
                Some(reply) => (reply?, self.lag_of(self.router.meta_id)),
                None => return Err(internal(format!("{} is not a registry read", req.op()))),
            },
            other => {
                return Err(WireError::bad_request(format!("{} cannot be read stale", other.op())))
            }
        };
        Ok((reply, lag))
    }

    /// Entries this replica of `group` knows committed but has not applied.
    fn lag_of(&self, group: u32) -> u64 {
        let Some(g) = self.router.group(group) else { return 0 };
        let applied = g.raft.metrics().borrow().last_applied.map_or(0, |l| l.index);
        g.log.committed_index().unwrap_or(0).saturating_sub(applied)
    }

    /// One shard's part of a read: this node's replica (after its barrier
    /// when `fresh`), or the first replica that answers.
    async fn stale_on(
        &self,
        shard: u32,
        req: Request,
        fresh: bool,
    ) -> Result<(Response, u64), WireError> {
        // This node's replica, unless it has stopped (a fatal storage error,
        // a half-installed snapshot): then a peer's.
        if let Some(g) = self.router.group(shard).filter(|g| {
            g.raft.metrics().borrow().running_state.is_ok() && !self.store.is_incomplete(shard)
        }) {
            if fresh {
                self.replica_barrier(&g, shard).await?;
            }
            let reply = self.on_local(&g, shard, req, false).await?;
            return Ok((reply, self.lag_of(shard)));
        }
        let replicas: Vec<u64> = self
            .directory
            .cluster()
            .map(|m| m.replicas(shard).to_vec())
            .unwrap_or_default()
            .into_iter()
            .filter(|r| *r != self.node_id())
            .collect();
        let mut last = WireError::internal(format!("no replica of shard {shard} is known"));
        for r in replicas {
            let wrapped = match fresh {
                true => Request::Replica(Box::new(req.clone())),
                false => Request::Stale(Box::new(req.clone())),
            };
            match self.router.forward(r, wrapped).await {
                Ok(Response::Stale { lag, reply }) => return Ok((*reply, lag)),
                Ok(Response::Error(e)) => return Err(e),
                Ok(reply) if fresh => return Ok((reply, 0)),
                Ok(other) => return Err(internal(format!("unexpected answer {other:?}"))),
                Err(Hop::Answer(e)) => return Err(e),
                Err(Hop::Unreachable(why)) | Err(Hop::NoAnswer(why)) => {
                    last = WireError::internal(why)
                }
            }
        }
        Err(last)
    }
}
