//! How a lone node is started: shards, environment, data directory, the
//! admin port's address.

use crate::{free_port, free_ports, localhost, Node};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

/// How to start a node.
#[derive(Debug, Clone)]
pub struct NodeBuilder {
    shards: u32,
    env: Vec<(String, String)>,
    data_dir: Option<PathBuf>,
    admin_ip: Option<std::net::IpAddr>,
}

impl Default for NodeBuilder {
    fn default() -> Self {
        NodeBuilder { shards: 4, env: Vec::new(), data_dir: None, admin_ip: None }
    }
}

impl NodeBuilder {
    pub fn shards(mut self, n: u32) -> Self {
        self.shards = n;
        self
    }

    /// Sets an environment variable for the node, e.g. `PLAUDIT_MAX_CONNECTIONS`.
    pub fn env(mut self, key: &str, value: impl ToString) -> Self {
        self.env.push((key.to_string(), value.to_string()));
        self
    }

    /// Keeps the node's data in `dir` (e.g. on a small file system a test
    /// fills) instead of the node's own temporary directory.
    pub fn data_dir(mut self, dir: &Path) -> Self {
        self.data_dir = Some(dir.to_path_buf());
        self
    }

    /// Binds the admin port on `ip` (e.g. 0.0.0.0, every address) instead of
    /// 127.0.0.1; the node is still reached through loopback.
    pub fn admin_ip(mut self, ip: std::net::IpAddr) -> Self {
        self.admin_ip = Some(ip);
        self
    }

    /// Spawns the node without waiting for it to be ready (it may never be:
    /// a node meant to join a cluster that refuses it).
    pub fn spawn_only(self) -> Node {
        let ports = free_ports(2);
        let addrs = (localhost(ports[0]), localhost(ports[1]), localhost(0));
        let mut node = Node::new(0, self.shards, addrs, Vec::new(), self.env);
        node.peer = None;
        if let Err(e) = node.spawn() {
            node.fail(&e);
        }
        node
    }

    /// Spawns the node and waits until `/readyz` answers 200.
    pub fn start(self) -> Node {
        let admin = SocketAddr::new(self.admin_ip.unwrap_or(localhost(0).ip()), 0);
        let mut node =
            Node::new(1, self.shards, (localhost(0), admin, localhost(0)), Vec::new(), self.env);
        node.peer = None;
        if let Some(dir) = self.data_dir {
            node.data_dir = dir;
        }
        // Another process may take a port between our probe and the node's
        // bind; on a fresh start (nothing stored yet) just try other ports.
        for attempt in 1..=3 {
            node.listen.set_port(free_port());
            node.admin.set_port(free_port());
            if node.admin == node.listen {
                continue;
            }
            match node.spawn_and_wait_ready() {
                Ok(()) => return node,
                Err(e) if attempt < 3 && e.contains("binding") => continue,
                Err(e) => node.fail(&e),
            }
        }
        node.fail("could not find free ports")
    }
}
