//! `plaudit admin status` and `plaudit admin drain`: the clap definitions
//! (of every `admin` command: `move` and `placements` are `placement.rs`
//! for boards and `entity_placement.rs` for entities),
//! how a `ClusterStatus` prints, and how a drain is watched. `status`
//! `--json` prints the status exactly as `proto::cluster::StatusView`
//! serialises (the shape scripts and tests rely on); people get two tables:
//!
//! ```text
//! cluster epoch 3, as node 1 sees it
//!
//! NODE  STATE  CLIENT          SHARDS_LED
//!    1  up     10.0.0.1:7401            2
//!    3  down   10.0.0.3:7401            0
//!
//! SHARD  LEADER  REPLICAS  TERM  APPLIED/LAG
//!  meta       1  1,2,3        2  1:40/0 2:40/0 3:down
//!     0       1  1,3,2        3  1:120/0 3:down 2:118/2
//! ```
//!
//! `APPLIED/LAG` is, per replica, its applied log index and how many entries
//! it is behind its leader (unacknowledged plus not yet applied); `down`
//! when the replica did not report.

use super::human::{table, Align};
use super::json;
use clap::{ArgGroup, Subcommand};
use plaudit_proto::cluster::{ClusterStatus, GroupStatus, ReplicaStatus, StatusView};
use std::fmt::Write;

/// What `admin hotkeys` ranks keys by.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum HotBy {
    Requests,
    /// The CPU time their requests cost the nodes that received them.
    Cpu,
}

#[derive(Debug, Subcommand)]
pub enum AdminCommand {
    /// Show every node and Raft group: which nodes are up, who leads each
    /// shard, and how far each replica lags.
    ///
    /// Nodes: id, whether the answering node can reach it, its client
    /// address and how many shards it leads. Then one line per group (the
    /// metadata group first): its leader (`-` during an election), its
    /// replicas, the highest term, and per replica `NODE:APPLIED/LAG`, the
    /// applied log index and the entries it is behind its leader, or
    /// `NODE:down`. With --json, the status as one object.
    Status,
    /// List every member: id, incarnation, client address, state (up, down,
    /// unreachable, draining, decommissioning, decommissioned, dead), zone,
    /// the shards it holds a replica of and the shards it leads. With
    /// --json: `{"nodes":[{"id":1,"incarnation":"…","addr":"…","state":"up",
    /// "replicas":4,"leaders":2,"peer":"…","zone":null}]}`.
    Nodes,
    /// The keys taking the most requests (or CPU, `--by cpu`) on every node
    /// over the last 10 s (sampled), heaviest first: kind (entity, user,
    /// board), business or ranking, key, the node that counted them,
    /// shard, requests a second, the share of that node's CPU their
    /// requests cost it, and relief. With --json: `{"keys":[{"kind":
    /// "entity","biz":1,"key":"42","node":2,"shard":3,"requests_per_s":
    /// 1200,"cpu_share":0.031,"relief":"none"}]}` (`"rank"` for a board;
    /// `cpu_share` null while the node's CPU is not known yet).
    Hotkeys {
        /// How many keys to list (1 to 1000).
        #[arg(long, default_value_t = 10)]
        top: u32,
        /// What "most" means: requests, or cpu (the CPU time their requests
        /// cost the node that received them: the connection's and the
        /// request's own work there, not the apply of writes).
        #[arg(long, value_enum, default_value = "requests")]
        by: HotBy,
    },
    /// Make NODE hand every leadership it holds to another replica of the
    /// group, and take none until it restarts (what SIGTERM does first).
    ///
    /// With --wait, watches until NODE leads no group, one line a second
    /// (--json: one JSON object a line, `{"node":N,"leading":K,"elapsed_ms":T}`),
    /// and exits 0 when it is done, 1 if it is not within 2 minutes.
    Drain {
        /// The node's id.
        node: u64,
        /// Wait until the node leads nothing.
        #[arg(long)]
        wait: bool,
    },
    /// Move every replica off NODE, then mark it decommissioned (it can then
    /// be stopped for good). Refused (`Refused`, exit 1) when fewer active
    /// members than the replication factor would be left.
    ///
    /// With --wait, watches until NODE holds no replica and is
    /// decommissioned: a progress bar on a terminal (replicas and bytes
    /// moved, rate, time left), with --json one JSON object a second
    /// (`{"node":N,"state":"…","replicas":K,"replicas_moved":M,"moves":J,
    /// "bytes_done":B,"bytes_total":T,"rate_bps":R,"elapsed_ms":E}`), then
    /// the result; exits 0 when done, 1 if not within an hour.
    Decommission {
        /// The node's id.
        node: u64,
        /// Wait until the node is decommissioned.
        #[arg(long)]
        wait: bool,
    },
    /// Make a decommissioning or decommissioned NODE an active member again
    /// (it is given replicas back as the cluster rebalances).
    Recommission {
        /// The node's id.
        node: u64,
    },
    /// Plan replica moves now (the cluster also does so by itself every
    /// second): each node ends with shards x RF / nodes replicas and leads
    /// shards / nodes, both ±1. With --wait, watches until no move is under
    /// way, as `decommission --wait` does.
    Rebalance {
        /// Wait until no move is under way.
        #[arg(long)]
        wait: bool,
    },
    /// Move one sub-board (--board), or one entity's counts and likers
    /// (--entity), to another shard (e.g. a hot board or entity off a busy
    /// shard).
    ///
    /// A board's scores pause while it moves; reads keep being served. An
    /// entity's likes are never refused during a move; its counts lag until
    /// the move ends. A moved entity can be moved again, or back to its
    /// hash shard.
    ///
    /// Waits until the move is over (the placements are read every 50 ms)
    /// and prints how long it took; exits 1 (`Timeout`) if it is not within
    /// 30 s, saying which step it is at. Refused (`Refused`, exit 1) while
    /// the board or entity is moving already. With --json:
    /// `{"rank":7,"board":"total:0","to_shard":3,"ms":84}` for a board,
    /// `{"biz":1,"entity":42,"to_shard":3,"ms":84}` for an entity
    /// (`"ms":null` with --no-wait).
    #[command(group(ArgGroup::new("what").required(true).args(["board", "entity"])))]
    Move {
        /// The sub-board: its ranking id, a colon, then its type id, e.g.
        /// `7:total:0` or `7:day:1713052800_110000260`.
        #[arg(long, value_name = "RANK:TYPE_ID", value_parser = super::placement::parse_board)]
        board: Option<super::placement::BoardName>,
        /// The entity: its business id, a colon, then its id, e.g. `1:42`.
        #[arg(
            long,
            value_name = "BIZ:ENTITY",
            value_parser = super::entity_placement::parse_entity
        )]
        entity: Option<super::entity_placement::EntityName>,
        /// The shard to move it to.
        #[arg(long, value_name = "S")]
        to_shard: u32,
        /// Return once the move is recorded, without waiting for its end.
        #[arg(long)]
        no_wait: bool,
    },
    /// List the sub-boards that live off their hash shard (moved by `admin
    /// move`) as RANK:TYPE_ID and shard, then the moves under way: from,
    /// to, and the step each takes next (freeze, copy, release, activate).
    /// Then the same for entities, as BIZ:ENTITY. With --json:
    /// `{"epoch":5,"placed":[{"rank":7,"board":"total:0","shard":3}],
    /// "moves":[{"rank":7,"board":"…","from":1,"to":2,"step":"copy"}],
    /// "entities":{"epoch":2,"placed":[{"biz":1,"entity":42,"shard":3}],
    /// "moves":[{"biz":1,"entity":43,"from":1,"to":2,"step":"copy"}]}}`.
    Placements,
}

impl AdminCommand {
    /// The membership change a command asks for, and whether to wait.
    pub fn member_op(&self) -> Option<(plaudit_proto::membership::MemberOp, bool)> {
        use plaudit_proto::membership::MemberOp;
        match *self {
            AdminCommand::Decommission { node, wait } => Some((MemberOp::Decommission(node), wait)),
            AdminCommand::Recommission { node } => Some((MemberOp::Recommission(node), false)),
            AdminCommand::Rebalance { wait } => Some((MemberOp::Rebalance, wait)),
            _ => None,
        }
    }
}

/// How long `drain --wait` waits.
pub const DRAIN_WAIT: std::time::Duration = std::time::Duration::from_secs(120);

/// Groups (shards and the metadata group) `node` leads in `s`.
pub fn leading(s: &ClusterStatus, node: u64) -> usize {
    std::iter::once(&s.meta).chain(&s.shards).filter(|g| g.leader == Some(node)).count()
}

/// One progress line of `drain --wait`.
pub fn drain_progress(
    node: u64,
    leading: usize,
    elapsed: std::time::Duration,
    json: bool,
) -> String {
    if json {
        format!("{{\"node\":{node},\"leading\":{leading},\"elapsed_ms\":{}}}", elapsed.as_millis())
    } else {
        format!("node {node}: leads {leading} group(s), {:.1} s", elapsed.as_secs_f64())
    }
}

/// `--json`: the documented `StatusView` shape, byte for byte.
pub fn status_json(s: &ClusterStatus) -> String {
    json::encode(&StatusView::from(s))
}

/// The people-facing tables.
pub fn status_human(s: &ClusterStatus) -> String {
    let mut out = format!("cluster epoch {}, as node {} sees it\n\n", s.epoch, s.reporter);
    let nodes: Vec<Vec<String>> = s
        .nodes
        .iter()
        .map(|n| {
            vec![
                n.info.id.to_string(),
                n.life.as_str().to_string(),
                n.info.client.clone(),
                n.shards_led.to_string(),
            ]
        })
        .collect();
    out += &table(
        &[
            ("NODE", Align::Right),
            ("STATE", Align::Left),
            ("CLIENT", Align::Left),
            ("SHARDS_LED", Align::Right),
        ],
        &nodes,
    );
    out.push('\n');
    let groups: Vec<Vec<String>> =
        std::iter::once(&s.meta).chain(&s.shards).map(group_row).collect();
    out += &table(
        &[
            ("SHARD", Align::Right),
            ("LEADER", Align::Right),
            ("REPLICAS", Align::Left),
            ("TERM", Align::Right),
            ("APPLIED/LAG", Align::Left),
        ],
        &groups,
    );
    if !s.moves.is_empty() {
        let moves: Vec<Vec<String>> = s.moves.iter().map(move_row).collect();
        out.push('\n');
        out += &table(
            &[
                ("MOVE", Align::Right),
                ("FROM", Align::Right),
                ("TO", Align::Right),
                ("PHASE", Align::Left),
                ("SNAPSHOT", Align::Right),
            ],
            &moves,
        );
    }
    out
}

/// `shard from to phase sent/total` (`-` for a replica added, or before a
/// snapshot is sent).
fn move_row(m: &plaudit_proto::membership::MoveStatus) -> Vec<String> {
    let kib = |b: u64| format!("{} KiB", b.div_ceil(1024));
    vec![
        m.shard.to_string(),
        m.from.map_or("-".to_string(), |f| f.to_string()),
        m.to.to_string(),
        m.phase.clone(),
        if m.bytes_total == 0 {
            "-".to_string()
        } else {
            format!("{}/{}", kib(m.bytes_done), kib(m.bytes_total))
        },
    ]
}

fn group_row(g: &GroupStatus) -> Vec<String> {
    let replicas: Vec<String> = g.replicas.iter().map(u64::to_string).collect();
    let term = g.states.iter().map(|r| r.term).max().unwrap_or(0);
    let progress: Vec<String> = g.states.iter().map(progress).collect();
    vec![
        g.shard.map_or("meta".to_string(), |s| s.to_string()),
        g.leader.map_or("-".to_string(), |l| l.to_string()),
        replicas.join(","),
        term.to_string(),
        progress.join(" "),
    ]
}

/// `node:applied/lag`, or `node:down` / `node:unreachable` (no report).
fn progress(r: &ReplicaStatus) -> String {
    let mut cell = format!("{}:", r.node);
    if r.role == "down" || r.role == "unreachable" {
        cell.push_str(&r.role);
        return cell;
    }
    let applied = r.applied.map_or("-".to_string(), |a| a.to_string());
    let lag = r.apply_lag + r.behind_leader.unwrap_or(0);
    // Writing to a String cannot fail.
    let _ = write!(cell, "{applied}/{lag}");
    cell
}

/// `admin nodes --json`: the documented `NodesView` shape.
pub fn nodes_json(rows: &[plaudit_proto::membership::NodeRow]) -> String {
    json::encode(&plaudit_proto::membership::NodesView::from(rows))
}

/// `admin nodes`, for people.
pub fn nodes_human(rows: &[plaudit_proto::membership::NodeRow]) -> String {
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            vec![
                r.id.to_string(),
                format!("{:016x}", r.incarnation),
                r.state.as_str().to_string(),
                r.addr.clone(),
                r.zone.clone().unwrap_or_else(|| "-".into()),
                r.replicas.to_string(),
                r.leaders.to_string(),
            ]
        })
        .collect();
    table(
        &[
            ("NODE", Align::Right),
            ("INCARNATION", Align::Left),
            ("STATE", Align::Left),
            ("CLIENT", Align::Left),
            ("ZONE", Align::Left),
            ("REPLICAS", Align::Right),
            ("LEADERS", Align::Right),
        ],
        &cells,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use plaudit_proto::cluster::{NodeInfo, NodeState, NodeStatus};
    use plaudit_proto::membership::{MoveStatus, NodeLife};

    fn replica(node: u64, role: &str, applied: Option<u64>, behind: Option<u64>) -> ReplicaStatus {
        ReplicaStatus {
            node,
            role: role.into(),
            term: if role == "down" { 0 } else { 3 },
            applied,
            apply_lag: 1,
            behind_leader: behind,
        }
    }

    fn status() -> ClusterStatus {
        let node = |id: u64, state, led| NodeStatus {
            info: NodeInfo {
                id,
                client: format!("10.0.0.{id}:7401"),
                peer: format!("10.0.0.{id}:7403"),
                admin: format!("10.0.0.{id}:7402"),
            },
            state,
            shards_led: led,
            life: if state == NodeState::Up { NodeLife::Up } else { NodeLife::Dead },
        };
        ClusterStatus {
            reporter: 1,
            epoch: 3,
            nodes: vec![node(1, NodeState::Up, 1), node(2, NodeState::Down, 0)],
            meta: GroupStatus {
                shard: None,
                leader: Some(1),
                replicas: vec![1, 2],
                states: vec![
                    replica(1, "leader", Some(40), Some(0)),
                    replica(2, "down", None, None),
                ],
            },
            shards: vec![GroupStatus {
                shard: Some(0),
                leader: None,
                replicas: vec![2, 1],
                states: vec![
                    replica(2, "candidate", Some(118), None),
                    replica(1, "follower", None, Some(4)),
                ],
            }],
            moves: vec![MoveStatus {
                shard: 0,
                from: Some(2),
                to: 3,
                phase: "learner".into(),
                bytes_done: 1 << 20,
                bytes_total: 4 << 20,
            }],
        }
    }

    #[test]
    fn json_is_the_status_view_exactly() {
        let s = status();
        let want = serde_json::to_string(&StatusView::from(&s)).unwrap();
        assert_eq!(status_json(&s), want);
        let v: serde_json::Value = serde_json::from_str(&status_json(&s)).unwrap();
        assert_eq!(v["nodes"][1]["state"], "down");
        assert_eq!(v["nodes"][1]["life"], "dead");
        assert_eq!(v["moves"][0]["from"], 2);
        assert_eq!(v["moves"][0]["bytes_total"], 4 << 20);
        assert_eq!(v["shards"][0]["leader"], serde_json::Value::Null);
        assert!(v["meta"].get("shard").is_none());
    }

    #[test]
    fn people_get_a_node_table_then_a_line_per_group() {
        let want = "\
cluster epoch 3, as node 1 sees it

NODE  STATE  CLIENT         SHARDS_LED
   1  up     10.0.0.1:7401           1
   2  dead   10.0.0.2:7401           0

SHARD  LEADER  REPLICAS  TERM  APPLIED/LAG
 meta       1  1,2          3  1:40/1 2:down
    0       -  2,1          3  2:118/1 1:-/5

MOVE  FROM  TO  PHASE             SNAPSHOT
   0     2   3  learner  1024 KiB/4096 KiB
";
        assert_eq!(status_human(&status()), want);
    }
}
