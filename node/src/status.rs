//! What the admin endpoint shows: readiness and metrics, with the engine's
//! per-shard gauges (active actors, outbox backlog, apply lag, leadership).

use crate::admin::AdminSource;
use crate::metrics::{Gauge, Metrics};
use plaudit_cluster::Engine;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

pub struct NodeStatus {
    pub engine: Arc<Engine>,
    pub metrics: Arc<Metrics>,
    /// Cleared when shutdown begins, so load balancers stop routing here.
    pub serving: AtomicBool,
}

impl AdminSource for NodeStatus {
    fn ready(&self) -> bool {
        self.serving.load(Ordering::Relaxed) && self.engine.ready()
    }

    fn metrics_text(&self) -> String {
        let mut gauges = Vec::new();
        let shard_gauge = |name, help, shard: u32, value: f64| Gauge {
            name,
            help,
            labels: vec![("shard", shard.to_string())],
            value,
        };
        for s in self.engine.stats() {
            gauges.push(Gauge {
                name: "plaudit_active_actors",
                help: "Active virtual actors per shard and kind.",
                labels: vec![("shard", s.shard.to_string()), ("kind", "user".into())],
                value: s.active_users as f64,
            });
            gauges.push(Gauge {
                name: "plaudit_active_actors",
                help: "Active virtual actors per shard and kind.",
                labels: vec![("shard", s.shard.to_string()), ("kind", "entity".into())],
                value: s.active_entities as f64,
            });
            gauges.push(Gauge {
                name: "plaudit_active_actors",
                help: "Active virtual actors per shard and kind.",
                labels: vec![("shard", s.shard.to_string()), ("kind", "board".into())],
                value: s.active_boards as f64,
            });
            gauges.push(shard_gauge(
                "plaudit_board_members",
                "Members on the active (in-memory) sub-boards, per shard.",
                s.shard,
                s.board_members as f64,
            ));
            gauges.push(shard_gauge(
                "plaudit_board_heap_bytes",
                "Heap held by the active sub-boards' member maps and order lists, per shard.",
                s.shard,
                s.board_heap_bytes as f64,
            ));
            gauges.push(shard_gauge(
                "plaudit_rank_events_shed_total",
                "Scoring events shed under overload (lowest priority classes first), per shard.",
                s.shard,
                s.shed_events as f64,
            ));
            gauges.push(shard_gauge(
                "plaudit_rank_events_coalesced_total",
                "Scoring events merged with an earlier event of the same board member \
                 into one command before proposing, per shard.",
                s.shard,
                s.coalesced_events as f64,
            ));
            gauges.push(shard_gauge(
                "plaudit_outbox_backlog",
                "Derived deltas waiting for delivery, per source shard.",
                s.shard,
                s.outbox_len as f64,
            ));
            gauges.push(shard_gauge(
                "plaudit_raft_apply_lag",
                "Log entries appended but not yet applied, per shard.",
                s.shard,
                s.apply_lag as f64,
            ));
            gauges.push(shard_gauge(
                "plaudit_raft_is_leader",
                "1 when this node leads the shard.",
                s.shard,
                if s.is_leader { 1.0 } else { 0.0 },
            ));
        }
        let gc = self.engine.group_commit_stats();
        gauges.push(Gauge {
            name: "plaudit_log_flushes_total",
            help: "Group-commit flushes (flush + fdatasync) of the node's store.",
            labels: vec![],
            value: gc.flushes as f64,
        });
        gauges.push(Gauge {
            name: "plaudit_log_flush_waiters_total",
            help: "Durability waiters completed by group commit.",
            labels: vec![],
            value: gc.callbacks_completed as f64,
        });
        self.metrics.render(&gauges)
    }
}
