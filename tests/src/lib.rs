//! The end-to-end harness: real `plaudit-node` processes on 127.0.0.1 ports.
//!
//! ```text
//! Node::start()  ─ pick free ports ─ spawn target/debug/plaudit-node ─ poll GET /readyz
//!   .client()    ─ plaudit_client::Client on the client port
//!   .kill9() / .terminate() / .restart()   (same data dir, same ports)
//! drop(node)     ─ SIGKILL; the tempdir (data + node.log) goes with it
//! ```
//!
//! Every node gets its own tempdir holding its data dir and `node.log` (the
//! process's stderr, appended across restarts). When a test panics, dropping
//! its `Node` prints the log's tail, so the failure comes with the node's view.
//!
//! Tests wait on conditions (`wait_until`, `wait_converged`), never on bare
//! sleeps: derived state (counts, likers, received) is applied asynchronously.
//!
//! `raw` speaks the frame protocol by hand over a tokio `TcpStream`, for tests
//! that must send what the SDK never would. `cluster` starts clusters of
//! nodes and cuts their links; `history` records what a load did and checks
//! a cluster's final state against it.

use plaudit_client::{Client, ClientOptions};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub use plaudit_client::proto;

mod builder;
pub mod cluster;
pub mod history;
pub mod partition;
pub mod pods;
mod ports;
pub mod raw;
pub mod sdk_log;
pub mod tls;
pub mod util;

pub use builder::NodeBuilder;
pub use cluster::Cluster;
pub use ports::{free_port, free_ports, localhost};
pub(crate) use util::http_request;
pub use util::{
    grows_by, http_get, http_get_bearer, metric_sum, now_secs, score_event, total_ranking,
    wait_converged, wait_until,
};

/// How long a node may take to become ready (start or restart).
pub const READY_TIMEOUT: Duration = Duration::from_secs(30);
/// How long derived state may take to converge in a test.
pub const CONVERGE_TIMEOUT: Duration = Duration::from_secs(30);
/// The node's log filter: our own info lines, openraft's warnings only.
const LOG_FILTER: &str =
    "info,openraft=warn,ractor_cluster=error,ractor=warn,plaudit_cluster::state_machine=debug";
/// Lines of `node.log` printed when a test fails.
const LOG_TAIL_LINES: usize = 60;

/// Where the node binary is: next to the test executable's directory
/// (`target/debug/deps/<test>` -> `target/debug/plaudit-node`), else
/// `$PLAUDIT_NODE_BIN`.
pub fn node_bin() -> PathBuf {
    bin("plaudit-node", "PLAUDIT_NODE_BIN")
}

/// Runs `plaudit-node --data-dir DATA_DIR ARGS...` with `env` added and
/// returns its stderr once it has exited; panics if it exits successfully
/// or is still running after 20 s (a node expected to refuse to start).
pub fn refused_start(data_dir: &Path, args: &[&str], env: &[(&str, &str)]) -> String {
    let mut child = std::process::Command::new(node_bin())
        .arg("--data-dir")
        .arg(data_dir)
        .args(args)
        .envs(env.iter().copied())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn plaudit-node");
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            assert!(!status.success(), "the node exited successfully ({args:?})");
            let mut err = String::new();
            std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut err).unwrap();
            return err;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("the node did not refuse to start ({args:?})");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The `plaudit` CLI binary, found like `node_bin` (or `$PLAUDIT_CLI_BIN`).
pub fn cli_bin() -> PathBuf {
    bin("plaudit", "PLAUDIT_CLI_BIN")
}

fn bin(name: &str, env: &str) -> PathBuf {
    // A test runs from target/<profile>/deps, a binary of this crate from
    // target/<profile>: look beside both.
    let exe = std::env::current_exe().ok();
    let dirs = exe.iter().flat_map(|e| e.parent()).flat_map(|d| [Some(d), d.parent()]).flatten();
    for d in dirs {
        let p = d.join(name);
        if p.is_file() {
            return p;
        }
    }
    match std::env::var_os(env).map(PathBuf::from) {
        Some(p) if p.is_file() => p,
        _ => panic!(
            "{name} not found next to the test executable nor in ${env}; \
             run `cargo build --bins` first"
        ),
    }
}

/// One running (or stopped) `plaudit-node` process with its own data dir.
pub struct Node {
    bin: PathBuf,
    data_dir: PathBuf,
    log_path: PathBuf,
    listen: SocketAddr,
    admin: SocketAddr,
    shards: u32,
    env: Vec<(String, String)>,
    /// Flags beyond the common ones (a cluster node's id, peers, secret).
    extra_args: Vec<String>,
    /// Whether `extra_args` are the whole command line (a pod's), with none
    /// of the common flags (data dir, listeners, shards, log) added.
    exact_args: bool,
    /// Given to the CLI and to SDK clients made without a token of their own.
    token: Option<String>,
    /// The CA the CLI and SDK clients trust, for a node with a certificate.
    tls_ca: Option<PathBuf>,
    id: u64,
    /// The peer listener of a cluster member.
    peer: Option<SocketAddr>,
    /// Runs as this `(uid, gid)` instead of the test's user (`partition.rs`).
    run_as: Option<(u32, u32)>,
    child: Option<Child>,
    // Last: removed after the process is gone.
    _dir: tempfile::TempDir,
}

impl Node {
    /// A node with 4 shards and default config.
    pub fn start() -> Node {
        NodeBuilder::default().start()
    }

    pub fn builder() -> NodeBuilder {
        NodeBuilder::default()
    }

    /// The client protocol address, `127.0.0.1:PORT`.
    pub fn addr(&self) -> String {
        self.listen.to_string()
    }

    pub fn admin_addr(&self) -> SocketAddr {
        self.admin
    }

    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    pub fn shards(&self) -> u32 {
        self.shards
    }

    /// The node's id in its cluster (1 for a lone node).
    pub fn id(&self) -> u64 {
        self.id
    }

    /// A node, not yet started, in a fresh tempdir: `(listen, admin, peer)`
    /// addresses, flags beyond the common ones, and its environment.
    pub(crate) fn new(
        id: u64,
        shards: u32,
        (listen, admin, peer): (SocketAddr, SocketAddr, SocketAddr),
        extra_args: Vec<String>,
        env: Vec<(String, String)>,
    ) -> Node {
        let dir =
            tempfile::Builder::new().prefix(&format!("plaudit-n{id}-")).tempdir().expect("tempdir");
        Node {
            bin: node_bin(),
            data_dir: dir.path().join("data"),
            log_path: dir.path().join("node.log"),
            _dir: dir,
            listen,
            admin,
            shards,
            env,
            extra_args,
            exact_args: false,
            token: None,
            tls_ca: None,
            id,
            peer: Some(peer),
            run_as: None,
            child: None,
        }
    }

    /// Runs the node as `partition::USER` from its next start, so that a
    /// `partition::KernelCut` can isolate it.
    pub fn run_as_partition_user(&mut self) -> Result<(), String> {
        self.run_as = Some(partition::user()?);
        partition::give(self._dir.path())?;
        partition::give(&self.data_dir).or_else(|e| {
            // Not made yet: the node makes it, inside its own directory.
            if self.data_dir.exists() {
                Err(e)
            } else {
                Ok(())
            }
        })
    }

    /// Makes `args` the node's whole command line: nothing is added to
    /// them (a pod's container arguments, already naming every address).
    pub(crate) fn set_exact_args(&mut self, args: Vec<String>) {
        self.extra_args = args;
        self.exact_args = true;
    }

    /// The admin token the CLI and SDK clients of this node present.
    pub fn set_token(&mut self, token: &str) {
        self.token = Some(token.to_string());
    }

    /// Makes the CLI and SDK clients speak TLS to this node, trusting `ca`.
    pub fn set_tls_ca(&mut self, ca: &Path) {
        self.tls_ca = Some(ca.to_path_buf());
    }

    /// The peer address of a cluster member (`127.0.0.1:PORT`).
    pub fn peer_addr(&self) -> String {
        self.peer.map(|p| p.to_string()).unwrap_or_default()
    }

    /// The process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// The CPU time the node has used so far, user and system, in seconds
    /// (`/proc/PID/stat`).
    pub fn cpu_seconds(&self) -> f64 {
        let pid = self.pid().unwrap_or_else(|| self.fail("cpu of a node that is not running"));
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        // The command name may hold spaces: count fields after its ')'.
        let fields: Vec<&str> = stat
            .rsplit_once(')')
            .map(|(_, rest)| rest.split_whitespace().collect())
            .unwrap_or_default();
        // utime and stime are fields 14 and 15; 3 is the first after ')'.
        let ticks: u64 =
            fields.get(11..13).map_or(0, |f| f.iter().filter_map(|v| v.parse::<u64>().ok()).sum());
        // SAFETY: sysconf only reads a constant of the running system.
        let per_s = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
        ticks as f64 / per_s
    }

    /// The node's resident memory now, in bytes (`VmRSS`).
    pub fn rss_bytes(&self) -> u64 {
        let pid = self.pid().unwrap_or_else(|| self.fail("rss of a node that is not running"));
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
        let kib = status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok());
        kib.unwrap_or_else(|| self.fail("no VmRSS in /proc status")) * 1024
    }

    /// An SDK client with default options.
    pub async fn client(&self) -> Client {
        self.client_with(ClientOptions::default()).await
    }

    pub async fn client_with(&self, mut opts: ClientOptions) -> Client {
        if opts.token.is_none() {
            opts.token = self.token.clone();
        }
        if let (None, Some(ca)) = (&opts.tls, &self.tls_ca) {
            let tls = plaudit_client::Tls::from_ca_file(ca);
            opts.tls = Some(tls.unwrap_or_else(|e| self.fail(&format!("the CA file: {e}"))));
        }
        match Client::connect_with(&self.addr(), opts).await {
            Ok(c) => c,
            Err(e) => self.fail(&format!("connecting a client to {}: {e}", self.addr())),
        }
    }

    /// Replaces (or adds) an environment variable used by the next `restart`.
    pub fn set_env(&mut self, key: &str, value: impl ToString) {
        self.env.retain(|(k, _)| k != key);
        self.env.push((key.to_string(), value.to_string()));
    }

    /// Removes an environment variable for the next `restart`.
    pub fn unset_env(&mut self, key: &str) {
        self.env.retain(|(k, _)| k != key);
    }

    /// `GET path` on the admin port: `(status, body)`.
    pub fn admin_get(&self, path: &str) -> std::io::Result<(u16, String)> {
        http_get(self.admin, path)
    }

    /// Runs `plaudit --json ARGS` against this node and parses its one
    /// JSON object (errors included: they are objects too).
    pub fn cli_json(&self, args: &[&str]) -> serde_json::Value {
        let (_, mut lines) = self.cli_lines(args);
        if lines.len() != 1 {
            self.fail(&format!("plaudit {args:?} printed {} JSON lines: {lines:?}", lines.len()));
        }
        lines.remove(0)
    }

    /// Runs `plaudit --json ARGS` against this node: its exit status and
    /// every line of its output as JSON (`--wait` prints progress lines).
    pub fn cli_lines(&self, args: &[&str]) -> (i32, Vec<serde_json::Value>) {
        let mut cmd = std::process::Command::new(cli_bin());
        cmd.arg("--addr").arg(self.addr()).arg("--json").args(args).env_remove("PLAUDIT_TOKEN");
        cmd.env_remove("PLAUDIT_TLS_CA");
        if let Some(token) = &self.token {
            cmd.env("PLAUDIT_TOKEN", token);
        }
        if let Some(ca) = &self.tls_ca {
            cmd.env("PLAUDIT_TLS_CA", ca);
        }
        let out = cmd.output().expect("run the plaudit CLI");
        let stdout = String::from_utf8_lossy(&out.stdout);
        let lines = stdout.lines().filter(|l| !l.trim().is_empty()).map(|l| {
            serde_json::from_str(l).unwrap_or_else(|e| {
                self.fail(&format!(
                    "plaudit {args:?} printed a line that is not JSON ({e}): {l:?}, stderr {:?}",
                    String::from_utf8_lossy(&out.stderr)
                ))
            })
        });
        (out.status.code().unwrap_or(-1), lines.collect())
    }

    /// Whether `/readyz` answers 200 now.
    /// `cli_json` with the arguments written as one line (split on spaces).
    pub fn cli(&self, line: &str) -> serde_json::Value {
        self.cli_json(&line.split_whitespace().collect::<Vec<_>>())
    }

    pub fn is_ready(&self) -> bool {
        matches!(self.admin_get("/readyz"), Ok((200, _)))
    }

    /// The Prometheus text of `/metrics`.
    pub fn metrics_text(&self) -> String {
        match self.admin_get("/metrics") {
            Ok((200, body)) => body,
            Ok((status, body)) => self.fail(&format!("/metrics answered {status}: {body}")),
            Err(e) => self.fail(&format!("/metrics: {e}")),
        }
    }

    /// SIGKILL: the process dies without any shutdown work.
    pub fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            // SAFETY: kill(2) on our own child's pid; the child is not reaped
            // yet (we hold it), so the pid cannot have been reused.
            unsafe {
                libc::kill(child.id() as libc::pid_t, libc::SIGKILL);
            }
            let _ = child.wait();
        }
    }

    /// How the process ended, if it was started and has exited since.
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        let status = self.child.as_mut().and_then(|c| c.try_wait().ok().flatten())?;
        self.child = None;
        Some(status)
    }

    /// Whether the process runs (it may be paused).
    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    /// SIGSTOP: the process freezes (its sockets stay open, nothing answers).
    pub fn pause(&self) {
        if let Some(child) = &self.child {
            // SAFETY: kill(2) on our own unreaped child.
            unsafe {
                libc::kill(child.id() as libc::pid_t, libc::SIGSTOP);
            }
        }
    }

    /// SIGCONT after `pause`.
    pub fn resume(&self) {
        if let Some(child) = &self.child {
            // SAFETY: as in `pause`.
            unsafe {
                libc::kill(child.id() as libc::pid_t, libc::SIGCONT);
            }
        }
    }

    /// Starts the process again after `kill9` (same data dir and ports)
    /// without waiting for it to be ready (a cluster member may need its
    /// peers first).
    pub fn start_again(&mut self) {
        assert!(self.child.is_none(), "node {} still runs", self.id);
        if let Err(e) = self.spawn() {
            self.fail(&e);
        }
    }

    /// `POST path` on the admin port: `(status, body)`.
    pub fn admin_post(&self, path: &str) -> std::io::Result<(u16, String)> {
        http_request(self.admin, "POST", path, "")
    }

    /// SIGTERM and wait for a clean exit (status 0) within 20 s.
    pub fn terminate(&mut self) {
        self.terminate_within(Duration::from_secs(20));
    }

    /// SIGTERM and wait for a clean exit (status 0) within `grace`.
    pub fn terminate_within(&mut self, grace: Duration) {
        let Some(mut child) = self.child.take() else { return };
        // SAFETY: as in `kill9`.
        unsafe {
            libc::kill(child.id() as libc::pid_t, libc::SIGTERM);
        }
        let deadline = Instant::now() + grace;
        loop {
            match child.try_wait() {
                Ok(Some(status)) if status.success() => return,
                Ok(Some(status)) => self.fail(&format!("node exited with {status} after SIGTERM")),
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(20))
                }
                Ok(None) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    self.fail(&format!("node did not exit within {grace:?} of SIGTERM"));
                }
                Err(e) => self.fail(&format!("waiting for the node: {e}")),
            }
        }
    }

    /// Starts the node again on the same data dir and ports (SIGTERM first if
    /// it still runs) and waits until it is ready.
    pub fn restart(&mut self) {
        if self.child.is_some() {
            self.terminate();
        }
        // The ports were ours a moment ago; retry briefly in case the kernel
        // has not released them yet.
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            match self.spawn_and_wait_ready() {
                Ok(()) => return,
                Err(e) if e.contains("binding") && Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(100))
                }
                Err(e) => self.fail(&e),
            }
        }
    }

    /// The last `lines` lines of the node's stderr, across restarts.
    pub fn log_tail(&self, lines: usize) -> String {
        let text = std::fs::read_to_string(&self.log_path).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    /// Panics with `msg` and the node's log tail.
    pub fn fail(&self, msg: &str) -> ! {
        panic!(
            "{msg}\n--- {} (last {LOG_TAIL_LINES} lines) ---\n{}\n---",
            self.log_path.display(),
            self.log_tail(LOG_TAIL_LINES)
        )
    }

    fn spawn_and_wait_ready(&mut self) -> Result<(), String> {
        self.spawn()?;
        self.wait_ready(READY_TIMEOUT)
    }

    /// Starts the process (it must not be running).
    pub(crate) fn spawn(&mut self) -> Result<(), String> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log_path)
            .map_err(|e| format!("opening {}: {e}", self.log_path.display()))?;
        let mut cmd = match self.run_as {
            Some((uid, gid)) => {
                use std::os::unix::process::CommandExt;
                let mut c = Command::new(partition::runnable_copy(&self.bin));
                c.uid(uid).gid(gid);
                c
            }
            None => Command::new(&self.bin),
        };
        if !self.exact_args {
            cmd.arg("--data-dir")
                .arg(&self.data_dir)
                .arg("--listen")
                .arg(self.listen.to_string())
                .arg("--admin")
                .arg(self.admin.to_string())
                .arg("--shards")
                .arg(self.shards.to_string())
                .arg("--log")
                .arg(LOG_FILTER);
        }
        cmd.args(&self.extra_args).stdin(Stdio::null()).stdout(Stdio::null()).stderr(log);
        // Only the variables this test sets reach the node.
        for (k, _) in std::env::vars_os() {
            if k.to_string_lossy().starts_with("PLAUDIT_") {
                cmd.env_remove(k);
            }
        }
        // No key is hot enough for clients to cache unless a test says
        // so (t90): the other tests check what the nodes answer, and a
        // client serving a hot key from memory would answer for them.
        cmd.env("PLAUDIT_HOT_CACHE_MIN_RPS", "0");
        // The suite on another layout of shards in Raft groups
        // (`PLAUDIT_TEST_GROUPS=N cargo test`), unless a test sets its own.
        if let Ok(groups) = std::env::var("PLAUDIT_TEST_GROUPS") {
            cmd.env("PLAUDIT_GROUPS", groups);
        }
        cmd.envs(self.env.iter().map(|(k, v)| (k, v)));
        let child = cmd.spawn().map_err(|e| format!("spawning {}: {e}", self.bin.display()))?;
        self.child = Some(child);
        Ok(())
    }

    /// Waits until `/readyz` answers 200, or the process exits.
    pub(crate) fn wait_ready(&mut self, timeout: Duration) -> Result<(), String> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.child.as_mut().and_then(|c| c.try_wait().ok().flatten()) {
                self.child = None;
                let tail = self.log_tail(LOG_TAIL_LINES);
                return Err(format!("node exited with {status} before it was ready:\n{tail}"));
            }
            if self.is_ready() {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(format!("node {} not ready within {timeout:?}", self.id));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Node {
    /// With `PLAUDIT_KEEP_LOGS=DIR`, a failed test's node logs are copied
    /// there whole (the tempdir goes with the node), as
    /// `<tempdir name>.log`, to read past the tail printed above.
    fn keep_log(&self) {
        let Some(dir) = std::env::var_os("PLAUDIT_KEEP_LOGS") else { return };
        let name = self.log_path.parent().and_then(|d| d.file_name()).unwrap_or_default();
        let to = Path::new(&dir).join(format!("{}.log", name.to_string_lossy()));
        let kept = std::fs::create_dir_all(&dir).and_then(|()| std::fs::copy(&self.log_path, &to));
        match kept {
            Ok(_) => eprintln!("--- node {} log kept at {}", self.id, to.display()),
            Err(e) => eprintln!("--- node {} log not kept: {e}", self.id),
        }
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "--- {} (last {LOG_TAIL_LINES} lines) ---\n{}\n---",
                self.log_path.display(),
                self.log_tail(LOG_TAIL_LINES)
            );
            self.keep_log();
        }
        self.kill9();
    }
}
