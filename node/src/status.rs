//! What the admin endpoint shows: readiness and metrics, with the engine's
//! per-shard gauges (active actors, outbox backlog, apply lag, leadership).

use crate::admin::{AdminSource, BoxFuture};
use crate::metrics::{Gauge, Metrics};
use plaudit_cluster::Engine;
use plaudit_proto::cluster::StatusView;
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// The heaviest keys `/metrics` shows per node.
const HOT_KEYS_EXPORTED: usize = 5;

/// A hot key as one label: `biz:entity`, `biz:user` or `rank:board`.
fn hot_key_label(key: &plaudit_proto::hotkeys::HotKey) -> String {
    use plaudit_proto::hotkeys::HotKey;
    match key {
        HotKey::Entity { biz, .. } | HotKey::User { biz, .. } => format!("{biz}:{}", key.name()),
        HotKey::Board { rank, .. } => format!("{rank}:{}", key.name()),
    }
}

pub struct NodeStatus {
    pub engine: Arc<Engine>,
    pub metrics: Arc<Metrics>,
    /// Cleared during shutdown once the client listener has closed and its
    /// connections have drained, before Raft stops (`main.rs`).
    pub serving: AtomicBool,
    /// Whether `/fault/links` may cut links (tests only).
    pub fault_injection: bool,
}

impl AdminSource for NodeStatus {
    fn ready(&self) -> bool {
        self.serving.load(Ordering::Relaxed) && self.engine.ready()
    }

    fn status_json(&self) -> BoxFuture<'_, String> {
        Box::pin(async move {
            let status = self.engine.status().await;
            serde_json::to_string(&StatusView::from(&status))
                .unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
        })
    }

    fn digests_json(&self) -> BoxFuture<'_, Option<String>> {
        Box::pin(self.digests_json_now())
    }

    fn transfer(&self, group: u32, to: u64) -> BoxFuture<'_, Option<Result<String, String>>> {
        Box::pin(async move {
            if !self.fault_injection {
                return None;
            }
            let took = self.engine.transfer_leader(group, to).await;
            Some(took.map(|t| format!("{}", t.as_millis())).map_err(|e| e.to_string()))
        })
    }

    fn set_links(&self, cut: &str) -> Option<Result<String, String>> {
        if !self.fault_injection {
            return None;
        }
        let nodes: Result<BTreeSet<u64>, String> = cut
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(|s| s.parse::<u64>().map_err(|e| format!("{s:?} is not a node id: {e}")))
            .collect();
        Some(nodes.map(|nodes| {
            tracing::warn!(?nodes, "fault injection: links to these nodes are cut");
            self.engine.cut_links(nodes.clone());
            format!("cut {nodes:?}")
        }))
    }

    fn metrics_text(&self) -> String {
        let mut gauges = Vec::new();
        let shard_gauge = |name, help, shard: u32, value: f64| Gauge {
            name,
            help,
            labels: vec![("shard", shard.to_string())],
            value,
        };
        // The few heaviest keys only: a label per key is an id, and the
        // series come and go with the load (`admin hotkeys` has the rest).
        for (i, (key, rate)) in self.engine.hot.top(HOT_KEYS_EXPORTED).into_iter().enumerate() {
            gauges.push(Gauge {
                name: "plaudit_hot_key_requests_per_second",
                help: "The heaviest keys of this node's clients' requests over about 10 s, \
                       sampled; `place` 1 is the heaviest.",
                labels: vec![
                    ("place", (i + 1).to_string()),
                    ("kind", key.kind().to_string()),
                    ("key", hot_key_label(&key)),
                ],
                value: rate as f64,
            });
        }
        gauges.push(Gauge {
            name: "plaudit_forwarded_requests_total",
            help: "Client requests this node passed to another node to serve (a smart \
                   client sends each shard's requests to its leader).",
            labels: vec![],
            value: self.engine.forwarded() as f64,
        });
        gauges.push(Gauge {
            name: "plaudit_follower_reads_total",
            help: "Linearizable reads this node served as a follower, after applying its \
                   leader's read index (Request::Replica).",
            labels: vec![],
            value: self.engine.follower_reads() as f64,
        });
        for (peer, dials, calls) in self.engine.peer_errors() {
            let peer_gauge = |name, help, value: u64| Gauge {
                name,
                help,
                labels: vec![("peer", peer.to_string())],
                value: value as f64,
            };
            gauges.push(peer_gauge(
                "plaudit_peer_dial_failures_total",
                "Failed dials (connect or handshake) of the data connection to each peer.",
                dials,
            ));
            gauges.push(peer_gauge(
                "plaudit_peer_call_failures_total",
                "Requests to each peer that got no answer (unreachable or timed out).",
                calls,
            ));
        }
        for s in self.engine.stats() {
            let role = ["leader", "follower", "candidate", "learner", "shutdown"];
            for r in role {
                gauges.push(Gauge {
                    name: "plaudit_raft_role",
                    help: "1 for this replica's current Raft role, per shard.",
                    labels: vec![("shard", s.shard.to_string()), ("role", r.to_string())],
                    value: if s.role == r { 1.0 } else { 0.0 },
                });
            }
            gauges.push(shard_gauge(
                "plaudit_raft_term",
                "The current Raft term, per shard (a rise is an election).",
                s.shard,
                s.term as f64,
            ));
            gauges.push(shard_gauge(
                "plaudit_raft_last_log_index",
                "The last log index, per shard.",
                s.shard,
                s.last_log as f64,
            ));
            gauges.push(shard_gauge(
                "plaudit_raft_commit_index",
                "The last committed log index this replica knows, per shard.",
                s.shard,
                s.committed.map_or(0.0, |c| c as f64),
            ));
            gauges.push(shard_gauge(
                "plaudit_raft_applied_index",
                "The last applied log index, per shard.",
                s.shard,
                s.applied as f64,
            ));
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
                "plaudit_boards_loaded_total",
                "Sub-boards read from the store into memory, per shard.",
                s.shard,
                s.boards_loaded as f64,
            ));
            gauges.push(shard_gauge(
                "plaudit_boards_written_back_total",
                "Changed sub-boards written back when let go (idle, or past the \
                 shard's actor budget), per shard: a steady rate means boards churn.",
                s.shard,
                s.boards_written_back as f64,
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
        let disk = &self.engine.disk();
        gauges.push(Gauge {
            name: "plaudit_disk_free_bytes",
            help: "Free space on the data directory's disk at the last check (every second).",
            labels: vec![],
            value: disk.free_bytes().map_or(f64::NAN, |b| b as f64),
        });
        gauges.push(Gauge {
            name: "plaudit_disk_writes_refused",
            help: "1 while free space is below min_free_disk_mb and new writes are refused.",
            labels: vec![],
            value: if disk.is_low() { 1.0 } else { 0.0 },
        });
        let memory = &self.engine.memory();
        gauges.push(Gauge {
            name: "plaudit_memory_writes_refused",
            help: "1 while resident memory is at max_memory_mb and new writes are refused.",
            labels: vec![],
            value: if memory.is_high() { 1.0 } else { 0.0 },
        });
        self.metrics.render(&gauges)
    }
}

impl NodeStatus {
    async fn digests_json_now(&self) -> Option<String> {
        if !self.fault_injection {
            return None;
        }
        let outbox = self.engine.outbox_dump();
        let rows: Vec<serde_json::Value> = self
            .engine
            .digests()
            .await
            .into_iter()
            .map(|(g, applied, hash)| {
                let pending: Vec<_> = outbox
                    .iter()
                    .filter(|(og, _, _)| *og == g)
                    .map(|(_, t, seqs)| serde_json::json!({"target": t, "seqs": seqs}))
                    .collect();
                serde_json::json!({
                    "group": g, "applied": applied, "digest": format!("{hash:016x}"),
                    "outbox": pending,
                })
            })
            .collect();
        Some(serde_json::Value::Array(rows).to_string())
    }
}
