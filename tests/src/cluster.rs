//! Clusters of real `plaudit-node` processes on 127.0.0.1, for the
//! multi-node scenarios.
//!
//! ```text
//! Cluster::start(3) ─ free ports for every node (client, admin, peer) ─ a secret file
//!   ─ spawn nodes 1..=n with --join <every peer> --bootstrap-expect n ─ wait: every node
//!     ready, every shard led
//! .kill9(id) / .pause(id) / .resume(id) / .start_again(id)     processes
//! .cut(id, &[others]) / .heal(id)                               links (POST /fault/links)
//! .status() / .leaders() / .most_leading()                      GET /status
//! .wait_converged()   outboxes empty, logs applied, and every replica of every group
//!                     at the same applied index holds the same state (GET /debug/digest)
//! ```
//!
//! Nodes run with `fault_injection` on (the links seam and the digest
//! endpoint); everything else is the production configuration.

mod builder;

pub use builder::ClusterBuilder;

use crate::{free_ports, metric_sum, wait_until, Node, CONVERGE_TIMEOUT, READY_TIMEOUT};

use plaudit_client::{Client, ClientOptions};
use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

pub struct Cluster {
    nodes: Vec<Node>,
    secret_dir: tempfile::TempDir,
    shards: u32,
    /// Every node's environment (a node added later gets the same).
    env: Vec<(String, String)>,
    /// The admin token SDK clients present (nodes started with one).
    token: Option<String>,
    client_ca: Option<std::path::PathBuf>,
}

/// The cluster secret's file name inside `Cluster::secret_dir`.
const SECRET_FILE: &str = "cluster-secret";

impl Cluster {
    /// Cuts node `id` (started `isolatable`) off from every other node with
    /// the kernel's packet filter: its peer traffic is dropped both ways,
    /// silently. Healed when the returned cut drops.
    pub fn isolate(&self, id: u64) -> crate::partition::KernelCut {
        let port = |n: &Node| n.peer_addr().rsplit(':').next().and_then(|p| p.parse().ok());
        let me: u16 = port(self.node(id)).unwrap_or_else(|| self.node(id).fail("no peer port"));
        let others: Vec<u16> = self
            .ids()
            .into_iter()
            .filter(|&o| o != id)
            .filter_map(|o| port(self.node(o)))
            .collect();
        crate::partition::KernelCut::isolate(me, &others)
            .unwrap_or_else(|e| self.node(id).fail(&format!("isolating node {id}: {e}")))
    }

    /// Starts a new node, the next id, that joins the running cluster
    /// (`--bootstrap-expect 0`, the current nodes' peer addresses its
    /// seeds), and waits until it is ready (a member following the
    /// metadata group). Returns its id.
    pub fn add_node(&mut self) -> u64 {
        let id = self.nodes.len() as u64 + 1;
        let ports = free_ports(3);
        let addr = |port| SocketAddr::from(([127, 0, 0, 1], port));
        let join: Vec<String> = self.nodes.iter().map(|n| n.peer_addr()).collect();
        let args = vec![
            format!("--node-id={id}"),
            format!("--peer-listen={}", addr(ports[2])),
            format!("--join={}", join.join(",")),
            "--bootstrap-expect=0".to_string(),
            format!("--cluster-secret-file={}", self.secret_file().display()),
        ];
        let mut node = Node::new(
            id,
            self.shards,
            (addr(ports[0]), addr(ports[1]), addr(ports[2])),
            args,
            self.env.clone(),
        );
        if let Err(e) = node.spawn() {
            node.fail(&e);
        }
        if let Err(e) = node.wait_ready(READY_TIMEOUT) {
            node.fail(&format!("node {id} did not join: {e}"));
        }
        self.nodes.push(node);
        id
    }

    /// Starts a like and scoring load through the SDK (every node a seed:
    /// three likers, one scorer) and waits until it runs. Returns the admin
    /// client the history check needs, and the load.
    pub async fn start_load(&self, seed: u64) -> (Client, crate::history::Workload) {
        crate::sdk_log::install();
        let admin = self.auditor().await;
        let mut w = crate::history::Workload::setup(&admin, seed).await;
        let mut likers = Vec::new();
        for _ in 0..3 {
            likers.push(self.client().await);
        }
        w.start(likers, vec![self.client().await]);
        w.wait_acks(200, Duration::from_secs(30), "the load runs").await;
        (admin, w)
    }

    /// Ends a load that no request may have failed: stops it, asserts none
    /// failed, waits until every replica converged, and runs the history
    /// check through `admin`.
    pub async fn finish_load(&self, admin: &Client, mut w: crate::history::Workload) {
        w.stop().await;
        // What the SDK went through up to the first failure (its time of
        // day is in the text), and since.
        let first = w.first_failure();
        let at = first.as_deref().and_then(|f| f.rsplit("(at ").next()).unwrap_or("");
        assert_eq!(
            w.failed(),
            0,
            "no request failed; the first: {first:?}; the SDK's log lines up to it:\n{}\n\
             and its last ones:\n{}",
            crate::sdk_log::until(at, 80),
            crate::sdk_log::tail(20)
        );
        self.wait_converged().await;
        w.check(admin).await;
    }

    /// `plaudit admin nodes --json` through node `via`: id -> row.
    pub fn nodes(&self, via: u64) -> BTreeMap<u64, serde_json::Value> {
        let out = self.node(via).cli("admin nodes");
        out["nodes"]
            .as_array()
            .unwrap_or_else(|| panic!("no nodes: {out}"))
            .iter()
            .map(|n| (n["id"].as_u64().unwrap_or(0), n.clone()))
            .collect()
    }

    /// A cluster of nodes made elsewhere (`pods`): node `i` has id `i + 1`;
    /// `token` is presented by every SDK client, which trusts `client_ca`.
    pub(crate) fn of_nodes(
        nodes: Vec<Node>,
        secret_dir: tempfile::TempDir,
        shards: u32,
        token: Option<String>,
        client_ca: Option<std::path::PathBuf>,
    ) -> Cluster {
        for (i, n) in nodes.iter().enumerate() {
            assert_eq!(n.id(), i as u64 + 1, "nodes in id order");
        }
        Cluster { nodes, secret_dir, shards, env: Vec::new(), token, client_ca }
    }

    /// Adds a node made elsewhere, the next id.
    pub(crate) fn push(&mut self, node: Node) {
        assert_eq!(node.id(), self.nodes.len() as u64 + 1, "nodes in id order");
        self.nodes.push(node);
    }

    /// `None` if `ids` hold `shards * rf / n` replicas each and lead
    /// `shards / n` each (both ±1), with no move under way, as node `via`
    /// sees it; else why not.
    fn unbalanced(&self, via: u64, ids: &[u64], shards: u64, rf: u64) -> Option<String> {
        let rows = self.nodes(via);
        let n = ids.len() as u64;
        let (rep_lo, rep_hi) = ((shards * rf) / n, (shards * rf).div_ceil(n));
        let (lead_lo, lead_hi) = (shards / n, shards.div_ceil(n));
        // No status read is not "no moves".
        let Some(status) = self.status_via(via) else { return Some("no status".into()) };
        if status["moves"].as_array().is_none_or(|m| !m.is_empty()) {
            return Some(format!("moves under way: {}", status["moves"]));
        }
        let within = |v: &serde_json::Value, lo: u64, hi: u64| {
            v.as_u64().is_some_and(|v| v + 1 >= lo && v <= hi + 1)
        };
        let off: Vec<String> = ids
            .iter()
            .filter(|id| {
                rows.get(id).is_none_or(|r| {
                    !within(&r["replicas"], rep_lo, rep_hi)
                        || !within(&r["leaders"], lead_lo, lead_hi)
                })
            })
            .map(|id| match rows.get(id) {
                Some(r) => {
                    format!("node {id}: {} replicas, {} leaders", r["replicas"], r["leaders"])
                }
                None => format!("node {id}: no row"),
            })
            .collect();
        if off.is_empty() {
            return None;
        }
        let leaders: Vec<String> = status["shards"]
            .as_array()
            .map(|a| a.iter().map(|g| format!("{}:{}", g["shard"], g["leader"])).collect())
            .unwrap_or_default();
        Some(format!(
            "{} (replicas {rep_lo}..={rep_hi}, leaders {lead_lo}..={lead_hi}, ±1); shard:leader {}",
            off.join("; "),
            leaders.join(" ")
        ))
    }

    /// Waits until `ids` share `shards` shards of three replicas evenly
    /// (`unbalanced`); on timeout, panics saying which nodes are off and
    /// who leads each shard.
    pub async fn wait_balanced(&self, via: u64, ids: &[u64], shards: u64, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        loop {
            let why = match self.unbalanced(via, ids, shards, 3) {
                None => return,
                Some(why) => why,
            };
            if Instant::now() > deadline {
                panic!("not balanced on {ids:?} after {timeout:?}: {why}");
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// The node leading the metadata group, as node `via` sees it; waits up
    /// to 10 s for one (the leader balancer may be moving it just then).
    pub fn meta_leader(&self, via: u64) -> u64 {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let leader = self.status_via(via).and_then(|s| s["meta"]["leader"].as_u64());
            match leader {
                Some(id) => return id,
                None if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(50)),
                None => self.node(via).fail("no metadata leader within 10 s"),
            }
        }
    }

    /// The file holding the cluster's secret, for a node started beside it.
    pub fn secret_file(&self) -> std::path::PathBuf {
        self.secret_dir.path().join(SECRET_FILE)
    }

    /// Three nodes of `shards` shards that relieve a hot node on their own
    /// (`hot_move_min_rps` 100, after 2 s: the automatic relief tests),
    /// converged, and an admin client.
    pub async fn hot_relief(shards: u32) -> (Cluster, Client) {
        let cluster = Cluster::builder(3)
            .shards(shards)
            .env("PLAUDIT_HOT_MOVE_MIN_RPS", 100)
            .env("PLAUDIT_HOT_MOVE_AFTER_SECS", 2)
            .start();
        cluster.wait_converged().await;
        let admin = cluster.client().await;
        (cluster, admin)
    }

    pub fn builder(size: usize) -> ClusterBuilder {
        ClusterBuilder {
            size,
            shards: 4,
            env: Vec::new(),
            expect: None,
            isolatable: Vec::new(),
            client_ca: None,
        }
    }

    /// A cluster of `size` nodes, 4 shards, default configuration.
    pub fn start(size: usize) -> Cluster {
        Cluster::builder(size).start()
    }

    pub fn node(&self, id: u64) -> &Node {
        &self.nodes[(id - 1) as usize]
    }

    pub fn node_mut(&mut self, id: u64) -> &mut Node {
        &mut self.nodes[(id - 1) as usize]
    }

    pub fn ids(&self) -> Vec<u64> {
        (1..=self.nodes.len() as u64).collect()
    }

    /// The sum of a counter over every running node; each must export it.
    pub fn metric_total(&self, name: &str) -> f64 {
        self.running()
            .into_iter()
            .map(|id| {
                let node = self.node(id);
                metric_sum(&node.metrics_text(), name)
                    .unwrap_or_else(|| node.fail(&format!("no {name} in /metrics")))
            })
            .sum()
    }

    /// Ids of the nodes whose process runs (paused ones included).
    pub fn running(&self) -> Vec<u64> {
        self.nodes.iter().filter(|n| n.is_running()).map(Node::id).collect()
    }

    /// Every node's client address, comma separated (the SDK's seeds).
    pub fn seeds(&self) -> String {
        self.nodes.iter().map(Node::addr).collect::<Vec<_>>().join(",")
    }

    /// An SDK client seeded with every node.
    pub async fn client(&self) -> Client {
        self.client_with(ClientOptions::default()).await
    }

    /// The client a history check runs through (`Workload::check`): it
    /// reports scoring outcomes as the nodes give them, so a re-sent event
    /// the cluster kept reads `duplicate` even when an attempt of the
    /// re-send was lost (`ClientOptions::raw_score_outcomes`).
    pub async fn auditor(&self) -> Client {
        self.client_with(ClientOptions { raw_score_outcomes: true, ..Default::default() }).await
    }

    /// `client` with `opts`, given the cluster's token and CA.
    pub async fn client_with(&self, opts: ClientOptions) -> Client {
        let tls = self.client_ca.as_ref().map(|ca| {
            plaudit_client::Tls::from_ca_file(ca)
                .unwrap_or_else(|e| self.nodes[0].fail(&e.to_string()))
        });
        let opts = ClientOptions { token: self.token.clone(), tls, ..opts };
        match Client::connect_with(&self.seeds(), opts).await {
            Ok(c) => c,
            Err(e) => self.nodes[0].fail(&format!("connecting a cluster client: {e}")),
        }
    }

    /// The cluster status (GET /status) as a running, unpaused node sees it.
    pub fn status_via(&self, id: u64) -> Option<serde_json::Value> {
        match self.node(id).admin_get("/status") {
            Ok((200, body)) => serde_json::from_str(&body).ok(),
            _ => None,
        }
    }

    /// The status from the first node that answers.
    pub fn status(&self) -> serde_json::Value {
        for id in self.running() {
            if let Some(s) = self.status_via(id) {
                return s;
            }
        }
        self.nodes[0].fail("no node answers GET /status")
    }

    /// Each shard's leader as the status reports it.
    pub fn leaders(&self) -> Vec<Option<u64>> {
        let s = self.status();
        s["shards"]
            .as_array()
            .map(|a| a.iter().map(|g| g["leader"].as_u64()).collect())
            .unwrap_or_default()
    }

    /// The shards `id` leads, as the status reports it.
    pub fn shards_led_by(&self, id: u64) -> Vec<u32> {
        let leaders = self.leaders();
        (0..leaders.len() as u32).filter(|&s| leaders[s as usize] == Some(id)).collect()
    }

    /// The node leading the most shards (the lowest id among equals).
    pub fn most_leading(&self) -> u64 {
        let mut count: BTreeMap<u64, usize> = BTreeMap::new();
        for l in self.leaders().into_iter().flatten() {
            *count.entry(l).or_default() += 1;
        }
        count.into_iter().max_by_key(|(id, n)| (*n, std::cmp::Reverse(*id))).map_or(1, |(id, _)| id)
    }

    /// The leader of `shard` as the status reports it, waiting up to 10 s
    /// for one (the test fails without).
    pub async fn leader_of(&self, shard: u32) -> u64 {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(Some(id)) = self.leaders().get(shard as usize) {
                return *id;
            }
            if Instant::now() > deadline {
                self.dump_logs();
                panic!("shard {shard} has no leader within 10 s");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Waits until every shard has a leader among `among` (as `via` sees it).
    pub async fn wait_led_by(&self, via: u64, among: &[u64], timeout: Duration) {
        let among: BTreeSet<u64> = among.iter().copied().collect();
        wait_until(timeout, "every shard has a leader among the live nodes", || {
            let s = self.status_via(via);
            let ok = s.is_some_and(|s| {
                let shards = s["shards"].as_array().cloned().unwrap_or_default();
                let meta = s["meta"]["leader"].as_u64();
                !shards.is_empty()
                    && meta.is_some_and(|m| among.contains(&m))
                    && shards
                        .iter()
                        .all(|g| g["leader"].as_u64().is_some_and(|l| among.contains(&l)))
            });
            async move { ok }
        })
        .await;
    }

    /// Cuts `id`'s links to `others` (both directions, as seen from `id`;
    /// the others are told too, so neither side waits for the other's timeouts).
    pub fn cut(&self, id: u64, others: &[u64]) {
        let list = |ids: &[u64]| ids.iter().map(u64::to_string).collect::<Vec<_>>().join(",");
        self.post_links(id, &list(others));
        for &o in others {
            self.post_links(o, &id.to_string());
        }
    }

    /// Heals every link of every running node.
    pub fn heal(&self) {
        for id in self.running() {
            self.post_links(id, "");
        }
    }

    fn post_links(&self, id: u64, cut: &str) {
        let n = self.node(id);
        match n.admin_post(&format!("/fault/links?cut={cut}")) {
            Ok((200, _)) => {}
            other => n.fail(&format!("POST /fault/links?cut={cut}: {other:?}")),
        }
    }

    /// Waits until derived state has converged on every running node and
    /// every replica of every group holds the same state at the same
    /// applied index (compared by digest).
    pub async fn wait_converged(&self) {
        let running = self.running();
        let deadline = Instant::now() + CONVERGE_TIMEOUT;
        loop {
            let pending: Vec<(u64, f64, f64)> = running
                .iter()
                .map(|&id| match self.node(id).admin_get("/metrics") {
                    Ok((200, text)) => (
                        id,
                        metric_sum(&text, "plaudit_outbox_backlog").unwrap_or(0.0),
                        metric_sum(&text, "plaudit_raft_apply_lag").unwrap_or(0.0),
                    ),
                    _ => (id, f64::NAN, f64::NAN),
                })
                .filter(|(_, backlog, lag)| *backlog != 0.0 || *lag != 0.0)
                .collect();
            if pending.is_empty() {
                break;
            }
            if Instant::now() > deadline {
                for &id in &running {
                    if let Ok((_, text)) = self.node(id).admin_get("/metrics") {
                        let lines: Vec<&str> = text
                            .lines()
                            .filter(|l| {
                                l.starts_with("plaudit_outbox_backlog")
                                    || l.starts_with("plaudit_raft_role") && l.ends_with(" 1")
                                    || l.starts_with("plaudit_raft_applied_index")
                            })
                            .collect();
                        eprintln!("node {id}:\n{}", lines.join("\n"));
                    }
                }
                for &id in &running {
                    if let Ok((_, body)) = self.node(id).admin_get("/debug/digest") {
                        eprintln!("node {id} digests: {body}");
                    }
                }
                self.dump_logs();
                self.nodes[0].fail(&format!(
                    "not converged within {CONVERGE_TIMEOUT:?}: (node, outbox backlog, apply lag) {pending:?}"
                ));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let deadline = Instant::now() + CONVERGE_TIMEOUT;
        loop {
            match self.compare_replicas(&running) {
                Ok(()) => return,
                Err(why) if Instant::now() > deadline => {
                    self.nodes[0].fail(&format!("replicas differ: {why}"))
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
    }

    /// Every group's replicas on `nodes`: same applied index, same digest.
    fn compare_replicas(&self, nodes: &[u64]) -> Result<(), String> {
        let mut by_group: BTreeMap<u64, Vec<(u64, u64, String)>> = BTreeMap::new();
        for &id in nodes {
            let body = match self.node(id).admin_get("/debug/digest") {
                Ok((200, b)) => b,
                other => return Err(format!("node {id}: /debug/digest {other:?}")),
            };
            let rows: serde_json::Value = serde_json::from_str(&body).map_err(|e| e.to_string())?;
            for r in rows.as_array().cloned().unwrap_or_default() {
                let g = r["group"].as_u64().unwrap_or(u64::MAX);
                let applied = r["applied"].as_u64().unwrap_or(0);
                let digest = r["digest"].as_str().unwrap_or("").to_string();
                by_group.entry(g).or_default().push((id, applied, digest));
            }
        }
        for (g, reps) in by_group {
            let first = &reps[0];
            for r in &reps[1..] {
                if r.1 != first.1 {
                    return Err(format!(
                        "group {g}: node {} applied {}, node {} {}",
                        first.0, first.1, r.0, r.1
                    ));
                }
                if r.2 != first.2 {
                    return Err(format!(
                        "group {g} at index {}: node {} has state {}, node {} has {}",
                        first.1, first.0, first.2, r.0, r.2
                    ));
                }
            }
        }
        Ok(())
    }

    /// Kills node `id` with SIGKILL.
    pub fn kill9(&mut self, id: u64) {
        self.node_mut(id).kill9();
    }

    /// Starts a killed node again and waits until it is ready.
    pub fn restart(&mut self, id: u64) {
        let n = self.node_mut(id);
        n.start_again();
        if let Err(e) = n.wait_ready(READY_TIMEOUT) {
            n.fail(&e);
        }
    }

    /// Prints every node's log tail (call when a scenario fails).
    pub fn dump_logs(&self) {
        for n in &self.nodes {
            eprintln!("--- node {} ---\n{}", n.id(), n.log_tail(40));
        }
        if std::env::var_os("PLAUDIT_TESTS_KEEP_LOGS").is_some() {
            for n in &self.nodes {
                let to = format!("/tmp/plaudit-node-{}.log", n.id());
                let _ = std::fs::write(&to, n.log_tail(1_000_000));
            }
        }
    }
}
