//! `plaudit admin decommission`, `recommission` and `rebalance`, and how
//! their `--wait` is watched: once a second the status is read (the moves
//! under way, the node's state and replicas) and a progress line printed:
//! one JSON object a line with `--json`, else a bar on a terminal
//! (replicas and bytes moved, rate, time left) or a plain line elsewhere.
//!
//! ```text
//! {"node":4,"state":"decommissioning","replicas":3,"replicas_moved":5,"moves":2,
//!  "bytes_done":1048576,"bytes_total":4194304,"rate_bps":524288,"elapsed_ms":3000}
//! ```
//!
//! A decommission is done when the node is `decommissioned` and holds no
//! replica; a rebalance when no move has been under way for two looks in a
//! row (the manager plans within a second of being asked).

use crate::{Client, ClientError};
use plaudit_proto::cluster::ClusterStatus;
use plaudit_proto::membership::{MemberOp, NodeRow};
use plaudit_proto::WireError;
use std::io::IsTerminal;
use std::time::{Duration, Instant};

/// How long `--wait` waits before it gives up (exit 1, `Timeout`).
pub const WAIT_FOR: Duration = Duration::from_secs(3600);

/// One look at a change under way.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Progress {
    /// The node decommissioned, if any, with its state and replicas.
    pub node: Option<(u64, String, u32)>,
    /// Replicas moved since the watch began (the node's, or moves finished).
    pub moved: u64,
    pub moves: usize,
    pub bytes_done: u64,
    pub bytes_total: u64,
}

impl Progress {
    /// A look at `status` and `rows`: `first` is the decommissioned node's
    /// replica count when the watch began, `finished` the moves seen to end.
    pub fn of(
        status: &ClusterStatus,
        rows: &[NodeRow],
        node: Option<u64>,
        first: u32,
        finished: u64,
    ) -> Progress {
        let row = node.and_then(|n| rows.iter().find(|r| r.id == n));
        let node = row.map(|r| (r.id, r.state.as_str().to_string(), r.replicas));
        let moved = match &node {
            Some((_, _, left)) => u64::from(first.saturating_sub(*left)),
            None => finished,
        };
        Progress {
            node,
            moved,
            moves: status.moves.len(),
            bytes_done: status.moves.iter().map(|m| m.bytes_done).sum(),
            bytes_total: status.moves.iter().map(|m| m.bytes_total).sum(),
        }
    }

    /// Whether the change is over.
    pub fn done(&self) -> bool {
        match &self.node {
            Some((_, state, replicas)) => state == "decommissioned" && *replicas == 0,
            None => self.moves == 0,
        }
    }

    /// The `--json` line.
    pub fn json(&self, rate_bps: u64, elapsed: Duration) -> String {
        let node = match &self.node {
            Some((id, state, replicas)) => {
                format!("\"node\":{id},\"state\":\"{state}\",\"replicas\":{replicas},")
            }
            None => String::new(),
        };
        format!(
            "{{{node}\"replicas_moved\":{},\"moves\":{},\"bytes_done\":{},\"bytes_total\":{},\
             \"rate_bps\":{rate_bps},\"elapsed_ms\":{}}}",
            self.moved,
            self.moves,
            self.bytes_done,
            self.bytes_total,
            elapsed.as_millis()
        )
    }

    /// The line for people: a bar when the whole is known (a decommission).
    pub fn human(&self, first: u32, rate_bps: u64, elapsed: Duration) -> String {
        let mib = |b: u64| b as f64 / (1u64 << 20) as f64;
        let bytes = format!(
            "{:.1}/{:.1} MiB, {:.1} MiB/s",
            mib(self.bytes_done),
            mib(self.bytes_total),
            mib(rate_bps)
        );
        match &self.node {
            Some((id, state, left)) => {
                let total = u64::from(first.max(1));
                let width = 24;
                let filled = (self.moved.min(total) * width / total) as usize;
                let bar = "=".repeat(filled) + &" ".repeat(width as usize - filled);
                let eta = eta(self.moved, total, elapsed)
                    .map_or("-".to_string(), |d| format!("~{} s left", d.as_secs()));
                format!(
                    "node {id} {state}: [{bar}] {}/{first} replicas moved, {left} left, {bytes}, {eta}",
                    self.moved
                )
            }
            None => format!(
                "{} move(s) under way, {} replica(s) moved, {bytes}, {:.0} s",
                self.moves,
                self.moved,
                elapsed.as_secs_f64()
            ),
        }
    }
}

/// Time left at the pace so far, once anything moved.
fn eta(done: u64, total: u64, elapsed: Duration) -> Option<Duration> {
    if done == 0 || done >= total {
        return None;
    }
    Some(elapsed.mul_f64((total - done) as f64 / done as f64))
}

/// Watches `op` until it is done, printing a line a second.
pub async fn watch(client: &Client, op: MemberOp, json: bool) -> Result<(), ClientError> {
    let node = match op {
        MemberOp::Decommission(n) => Some(n),
        _ => None,
    };
    let started = Instant::now();
    let terminal = !json && std::io::stderr().is_terminal();
    let first = match node {
        Some(n) => client.nodes().await?.iter().find(|r| r.id == n).map_or(0, |r| r.replicas),
        None => 0,
    };
    let mut under_way: Vec<(u32, u64)> = Vec::new();
    let mut finished = 0u64;
    let mut quiet_looks = 0;
    let mut last_bytes: Option<(u64, Instant)> = None;
    loop {
        let status = client.cluster_status().await?;
        let rows = client.nodes().await?;
        let now: Vec<(u32, u64)> = status.moves.iter().map(|m| (m.shard, m.to)).collect();
        finished += under_way.iter().filter(|m| !now.contains(m)).count() as u64;
        under_way = now;
        let p = Progress::of(&status, &rows, node, first, finished);
        let rate = match last_bytes {
            Some((b, at)) if p.bytes_done >= b && at.elapsed() > Duration::ZERO => {
                ((p.bytes_done - b) as f64 / at.elapsed().as_secs_f64()) as u64
            }
            _ => 0,
        };
        last_bytes = Some((p.bytes_done, Instant::now()));
        if json {
            println!("{}", p.json(rate, started.elapsed()));
        } else if terminal {
            eprint!("\r\x1b[2K{}", p.human(first, rate, started.elapsed()));
        } else {
            eprintln!("{}", p.human(first, rate, started.elapsed()));
        }
        quiet_looks = if p.moves == 0 { quiet_looks + 1 } else { 0 };
        let over = match node {
            Some(_) => p.done(),
            None => quiet_looks >= 2,
        };
        if over {
            if terminal {
                eprintln!();
            }
            return Ok(());
        }
        if started.elapsed() >= WAIT_FOR {
            return Err(ClientError::Server(WireError::timeout(format!(
                "{op:?} not done after {} s",
                WAIT_FOR.as_secs()
            ))));
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// The result object: `{"decommission":{"node":4,"done":true}}`,
/// `{"recommission":{"node":4}}`, `{"rebalance":{"done":false}}`.
pub fn result_json(op: MemberOp, done: bool) -> String {
    match op {
        MemberOp::Decommission(n) => {
            format!("{{\"decommission\":{{\"node\":{n},\"done\":{done}}}}}")
        }
        MemberOp::Recommission(n) => format!("{{\"recommission\":{{\"node\":{n}}}}}"),
        MemberOp::Rebalance => format!("{{\"rebalance\":{{\"done\":{done}}}}}"),
    }
}

pub fn result_human(op: MemberOp, done: bool) -> String {
    match (op, done) {
        (MemberOp::Decommission(n), true) => {
            format!("node {n} is decommissioned: it holds no replica\n")
        }
        (MemberOp::Decommission(n), false) => {
            format!("node {n} is decommissioning: its replicas move (admin nodes shows them go)\n")
        }
        (MemberOp::Recommission(n), _) => format!("node {n} is active again\n"),
        (MemberOp::Rebalance, true) => "balanced: no move under way\n".to_string(),
        (MemberOp::Rebalance, false) => "rebalancing (admin status shows the moves)\n".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use plaudit_proto::cluster::{ClusterStatus, GroupStatus};
    use plaudit_proto::membership::{MoveStatus, NodeLife};

    fn status(moves: Vec<MoveStatus>) -> ClusterStatus {
        let meta = GroupStatus { shard: None, leader: None, replicas: vec![], states: vec![] };
        ClusterStatus { reporter: 1, epoch: 1, nodes: vec![], meta, shards: vec![], moves }
    }

    fn row(id: u64, state: NodeLife, replicas: u32) -> NodeRow {
        NodeRow {
            id,
            incarnation: 1,
            addr: String::new(),
            peer: String::new(),
            zone: None,
            state,
            replicas,
            leaders: 0,
        }
    }

    fn mv(done: u64, total: u64) -> MoveStatus {
        MoveStatus {
            shard: 0,
            from: Some(4),
            to: 1,
            phase: "learner".into(),
            bytes_done: done,
            bytes_total: total,
        }
    }

    #[test]
    fn a_decommission_is_done_when_the_node_holds_nothing() {
        let rows = [row(4, NodeLife::Decommissioning, 2)];
        let p = Progress::of(&status(vec![mv(10, 40), mv(0, 0)]), &rows, Some(4), 6, 0);
        assert_eq!((p.moved, p.moves, p.bytes_done, p.bytes_total), (4, 2, 10, 40));
        assert!(!p.done());
        assert_eq!(
            p.json(5, Duration::from_millis(1500)),
            "{\"node\":4,\"state\":\"decommissioning\",\"replicas\":2,\"replicas_moved\":4,\
             \"moves\":2,\"bytes_done\":10,\"bytes_total\":40,\"rate_bps\":5,\"elapsed_ms\":1500}"
        );
        let line = p.human(6, 0, Duration::from_secs(4));
        assert!(line.contains("4/6 replicas moved") && line.contains("~2 s left"), "{line}");
        let end =
            Progress::of(&status(vec![]), &[row(4, NodeLife::Decommissioned, 0)], Some(4), 6, 0);
        assert!(end.done());
    }

    #[test]
    fn a_rebalance_counts_the_moves_that_ended() {
        let p = Progress::of(&status(vec![]), &[], None, 0, 3);
        assert_eq!((p.moved, p.moves), (3, 0));
        assert!(p.done());
        assert!(p.json(0, Duration::ZERO).starts_with("{\"replicas_moved\":3,"));
        assert_eq!(result_json(MemberOp::Rebalance, true), "{\"rebalance\":{\"done\":true}}");
    }
}
