//! How a cluster is started: its size, shards, environment, and which
//! nodes come up first.

use super::*;

/// How a cluster is started.
#[derive(Debug, Clone)]
pub struct ClusterBuilder {
    pub(super) size: usize,
    pub(super) shards: u32,
    pub(super) env: Vec<(String, String)>,
    /// `--bootstrap-expect`; every node when unset.
    pub(super) expect: Option<usize>,
    /// Nodes that run as `partition::USER`.
    pub(super) isolatable: Vec<u64>,
    /// The CA SDK clients trust (nodes started with certificates).
    pub(super) client_ca: Option<std::path::PathBuf>,
}

impl ClusterBuilder {
    pub fn shards(mut self, n: u32) -> Self {
        self.shards = n;
        self
    }

    /// Every node presents `cert` (`key`) to clients and peers and trusts
    /// `ca` for peers; SDK clients trust `ca`.
    pub fn tls(self, ca: &std::path::Path, cert: &std::path::Path, key: &std::path::Path) -> Self {
        let mut b = self
            .env("PLAUDIT_TLS_CERT_FILE", cert.display())
            .env("PLAUDIT_TLS_KEY_FILE", key.display())
            .env("PLAUDIT_TLS_CA_FILE", ca.display());
        b.client_ca = Some(ca.to_path_buf());
        b
    }

    /// Sets an environment variable for every node, e.g. `PLAUDIT_SNAPSHOT_EVERY_ENTRIES`.
    pub fn env(mut self, key: &str, value: impl ToString) -> Self {
        self.env.push((key.to_string(), value.to_string()));
        self
    }

    /// Runs node `id` as `partition::USER`, so that `Cluster::isolate`
    /// can cut it off with the kernel's packet filter.
    pub fn isolatable(mut self, id: u64) -> Self {
        self.isolatable.push(id);
        self
    }

    /// `--bootstrap-expect` for every node (the founders are the nodes at
    /// the first `n` seed addresses, sorted); by default, every node.
    pub fn bootstrap_expect(mut self, n: usize) -> Self {
        self.expect = Some(n);
        self
    }

    /// Spawns every node and waits until each is ready and every shard has
    /// a leader.
    pub fn start(self) -> Cluster {
        let mut cluster = self.build();
        for n in &mut cluster.nodes {
            if let Err(e) = n.spawn() {
                n.fail(&e);
            }
        }
        let deadline = Instant::now() + READY_TIMEOUT;
        for i in 0..cluster.nodes.len() {
            let left = deadline.saturating_duration_since(Instant::now());
            let n = &cluster.nodes[i];
            if let Err(e) = wait_ready_shared(n, left) {
                n.fail(&format!("cluster did not form: {e}"));
            }
        }
        cluster
    }

    /// Spawns the nodes in `order` (ids), `gap` apart, and returns without
    /// waiting for any to be ready.
    pub fn spawn_in_order(self, order: &[u64], gap: Duration) -> Cluster {
        let mut cluster = self.build();
        for &id in order {
            let n = cluster.node_mut(id);
            if let Err(e) = n.spawn() {
                n.fail(&e);
            }
            std::thread::sleep(gap);
        }
        cluster
    }

    /// The nodes, not started: every node's peer address is a seed.
    fn build(self) -> Cluster {
        let secret_dir = tempfile::tempdir().expect("tempdir");
        let secret = secret_dir.path().join(SECRET_FILE);
        std::fs::write(&secret, "test-cluster-secret-0123456789abcdef\n").expect("secret file");
        let addr = |port| SocketAddr::from(([127, 0, 0, 1], port));
        let all = free_ports(self.size * 3);
        let ports: Vec<(u16, u16, u16)> = all.chunks(3).map(|c| (c[0], c[1], c[2])).collect();
        let join: Vec<String> = ports.iter().map(|p| addr(p.2).to_string()).collect();
        let mut env = self.env.clone();
        env.push(("PLAUDIT_FAULT_INJECTION".into(), "true".into()));
        let nodes: Vec<Node> = ports
            .iter()
            .enumerate()
            .map(|(i, &(client, admin, peer))| {
                let args = vec![
                    format!("--node-id={}", i + 1),
                    format!("--peer-listen={}", addr(peer)),
                    format!("--join={}", join.join(",")),
                    format!("--bootstrap-expect={}", self.expect.unwrap_or(self.size)),
                    format!("--cluster-secret-file={}", secret.display()),
                ];
                Node::new(
                    i as u64 + 1,
                    self.shards,
                    (addr(client), addr(admin), addr(peer)),
                    args,
                    env.clone(),
                )
            })
            .collect();
        let (shards, client_ca) = (self.shards, self.client_ca.clone());
        let mut cluster = Cluster { nodes, secret_dir, shards, env, token: None, client_ca };
        for id in self.isolatable {
            let secret = cluster.secret_dir.path().to_path_buf();
            let n = cluster.node_mut(id);
            let given = n.run_as_partition_user().and_then(|()| crate::partition::give(&secret));
            if let Err(e) = given {
                n.fail(&format!("cannot run node {id} as {}: {e}", crate::partition::USER));
            }
        }
        cluster
    }
}

/// `Node::wait_ready` for a node that is borrowed shared.
fn wait_ready_shared(n: &Node, timeout: Duration) -> Result<(), String> {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if n.is_ready() {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Err(format!("node {} not ready within {timeout:?}", n.id()))
}
