//! The control plane, on ractor_cluster: which nodes exist, which are up,
//! and who leads what, gossiped among all of them.
//!
//! ```text
//! seeds (--join) and known members ─ dial loop ─ PLDT control preamble ─ NodeServer session
//! peer listener ─ control connection ─────────────────────────────────────┘   (cookie auth)
//! session events ─> up / down per node id ─> failover (elect on the dead leader's groups)
//! beats (every 200 ms) and gossip heard ─> liveness: silent past the deadline ─> down
//! ControlActor in pg group "plaudit.control" <─ Gossip { me, member?, known nodes, leaders }
//! ```
//!
//! ractor_cluster numbers sessions with a counter that changes on every
//! reconnect and does not reconnect by itself; this module keeps the
//! stable map (session -> node id, from the session's peer name
//! `plaudit-<id>`) and redials on its own. A node is up while it has at
//! least one ready session (two nodes dialing each other at once leave one
//! session; the other is dropped before it is ready).
//!
//! The NodeServer also binds its own listener (ractor_cluster 0.16 always
//! does); it is bound to 127.0.0.1 on a free port and unused: sessions
//! arrive through the peer listener instead.

mod messages;

use crate::liveness::{Liveness, BEAT_EVERY};
use crate::peer::auth::Credentials;
use crate::peer::conn::DialFault;
use crate::peer::links::Links;
use crate::peer::stream::PeerStream;
use crate::peer::wire::{GroupId, KIND_CONTROL};
use crate::peer::Peers;
use crate::types::NodeId;
pub use messages::{Beat, ControlMsg, Gossip, GossipBytes};
use messages::{ControlActor, Event, Subscription, GROUP};
use plaudit_proto::cluster::NodeInfo;
use ractor::{Actor, ActorRef};
use ractor_cluster::node::NodeServerSessionInformation;
use ractor_cluster::{ClusterBidiStream, NodeServer, NodeServerMessage};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, watch};
use tracing::{debug, info, warn};

/// How often the control loop dials missing peers and gossips.
const TICK: Duration = Duration::from_millis(250);
/// Gossip is sent at least this often even when nothing changed.
const GOSSIP_EVERY: Duration = Duration::from_secs(1);
/// A dial that has not produced a ready session by then may be retried.
const DIAL_PATIENCE: Duration = Duration::from_secs(2);

/// A TCP stream handed to ractor_cluster, labelled `addr#id`: the address
/// dialed (or the remote address, for accepted ones) and the node id our
/// own handshake proved (0: a seed dialed before its id was known). A
/// session whose ractor peer name claims another id is dropped: the name is
/// only self-declared.
struct Bidi {
    stream: PeerStream,
    label: String,
}

impl ClusterBidiStream for Bidi {
    fn split(self: Box<Self>) -> (ractor_cluster::BoxRead, ractor_cluster::BoxWrite) {
        self.stream.split()
    }
    fn peer_label(&self) -> Option<String> {
        Some(self.label.clone())
    }
}

/// `addr#id` -> `(addr, id)` (`id` 0 when absent).
fn split_label(label: &str) -> (&str, NodeId) {
    match label.rsplit_once('#') {
        Some((addr, id)) => (addr, id.parse().unwrap_or(0)),
        None => (label, 0),
    }
}

fn node_name(id: NodeId) -> String {
    format!("plaudit-{id}")
}

/// The node id in a session's peer name (`plaudit-<id>@host`).
fn id_of(ses: &NodeServerSessionInformation) -> Option<NodeId> {
    let name = &ses.peer_name.as_ref()?.name;
    name.strip_prefix("plaudit-")?.split('@').next()?.parse().ok()
}

/// What the rest of the node reads from the control plane.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct View {
    /// Every node heard of (including this one), and whether it said it
    /// belongs to a cluster.
    pub known: BTreeMap<NodeId, (NodeInfo, bool)>,
    /// Nodes with a live session (not including this one).
    pub up: BTreeSet<NodeId>,
    /// Nodes that said they are draining (not including this one).
    pub draining: BTreeSet<NodeId>,
    /// Each node's incarnation and zone, as it last said (this one's too).
    pub identity: BTreeMap<NodeId, (plaudit_proto::membership::Incarnation, Option<String>)>,
}

/// What gossip says of this node, filled by the engine.
#[derive(Debug, Clone, Default)]
pub struct Local {
    pub member: bool,
    pub draining: bool,
    pub leaders: Vec<(GroupId, NodeId, u64)>,
}

/// Reads `Local` when gossip is due.
pub type LocalView = Arc<dyn Fn() -> Local + Send + Sync>;
/// Receives leaders other nodes report.
pub type LeaderSink = Arc<dyn Fn(Vec<(GroupId, NodeId, u64)>) + Send + Sync>;

pub struct Control {
    node_server: ActorRef<NodeServerMessage>,
    view: watch::Sender<View>,
    /// Live sessions' actors per node, to drop them when a link is cut.
    sessions: Mutex<HashMap<NodeId, Vec<NodeServerSessionInformation>>>,
    links: Arc<Links>,
}

pub struct ControlConfig {
    pub me: NodeInfo,
    pub cookie: String,
    pub seeds: Vec<String>,
    /// A peer silent this long is down (`liveness.rs`).
    pub peer_timeout: Duration,
    /// This node's incarnation and zone, for gossip.
    pub incarnation: plaudit_proto::membership::Incarnation,
    pub zone: Option<String>,
    /// Control connections prove the cluster secret (and declare the
    /// shard count) before ractor_cluster sees them, as data connections do.
    pub creds: Credentials,
}

impl Control {
    /// Starts the NodeServer, the gossip actor and the control loop.
    pub async fn start(
        cfg: ControlConfig,
        peers: Arc<Peers>,
        links: Arc<Links>,
        local: LocalView,
        leaders: LeaderSink,
    ) -> anyhow::Result<Arc<Control>> {
        let server = NodeServer::new(
            0,
            cfg.cookie.clone(),
            node_name(cfg.me.id),
            "plaudit".to_string(),
            None,
            Some(ractor_cluster::node::NodeConnectionMode::Isolated),
        )
        .with_listen_addr(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST))
        .with_max_inbound_frame_size(1 << 20);
        let (node_server, _) = Actor::spawn(None, server, ())
            .await
            .map_err(|e| anyhow::anyhow!("starting the control plane: {e}"))?;
        let (tx, rx) = mpsc::unbounded_channel();
        node_server
            .cast(NodeServerMessage::SubscribeToEvents {
                id: "plaudit".into(),
                subscription: Box::new(Subscription(tx.clone())),
            })
            .map_err(|e| anyhow::anyhow!("subscribing to control events: {e}"))?;
        Actor::spawn(None, ControlActor { inbox: tx }, ())
            .await
            .map_err(|e| anyhow::anyhow!("starting the gossip actor: {e}"))?;
        let mut known = BTreeMap::new();
        known.insert(cfg.me.id, (cfg.me.clone(), false));
        let mut identity = BTreeMap::new();
        identity.insert(cfg.me.id, (cfg.incarnation, cfg.zone.clone()));
        let (view, _) = watch::channel(View {
            known,
            up: BTreeSet::new(),
            draining: BTreeSet::new(),
            identity,
        });
        let control = Arc::new(Control { node_server, view, sessions: Mutex::default(), links });
        let lp = Loop {
            control: control.clone(),
            me: cfg.me,
            seeds: cfg.seeds,
            creds: cfg.creds,
            peers,
            local,
            leaders,
            dialing: HashMap::new(),
            seed_ids: HashMap::new(),
            last_gossip: None,
            last_sent: Gossip::default(),
            liveness: Liveness::new(cfg.peer_timeout),
            incarnation: cfg.incarnation,
            zone: cfg.zone,
        };
        tokio::spawn(lp.run(rx));
        Ok(control)
    }

    pub fn watch(&self) -> watch::Receiver<View> {
        self.view.subscribe()
    }

    pub fn view(&self) -> View {
        self.view.borrow().clone()
    }

    /// Takes over a control connection that arrived on the peer listener.
    pub fn accept(&self, from: NodeId, stream: PeerStream) {
        if self.links.is_blocked(from) {
            return;
        }
        let addr = stream.peer_addr().map(|a| a.to_string()).unwrap_or_default();
        let label = format!("{addr}#{from}");
        let msg = NodeServerMessage::ConnectionOpenedExternal {
            stream: Box::new(Bidi { stream, label }),
            is_server: true,
        };
        if let Err(e) = self.node_server.cast(msg) {
            warn!(error = %e, "the control plane is not running");
        }
    }

    /// Drops the sessions of nodes whose link was just cut.
    pub fn cut(&self, nodes: &BTreeSet<NodeId>) {
        let sessions = self.sessions.lock().unwrap_or_else(|e| e.into_inner());
        for n in nodes {
            for ses in sessions.get(n).into_iter().flatten() {
                ses.actor.stop(Some("link cut (fault injection)".into()));
            }
        }
    }
}

/// The control loop's own state.
struct Loop {
    control: Arc<Control>,
    me: NodeInfo,
    seeds: Vec<String>,
    creds: Credentials,
    peers: Arc<Peers>,
    local: LocalView,
    leaders: LeaderSink,
    /// Addresses being dialed, since when.
    dialing: HashMap<String, Instant>,
    /// Seed addresses whose node id is known.
    seed_ids: HashMap<String, NodeId>,
    last_gossip: Option<Instant>,
    last_sent: Gossip,
    liveness: Liveness,
    incarnation: plaudit_proto::membership::Incarnation,
    zone: Option<String>,
}

impl Loop {
    async fn run(mut self, mut events: mpsc::UnboundedReceiver<Event>) {
        let mut tick = tokio::time::interval(TICK);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut beat = tokio::time::interval(BEAT_EVERY);
        beat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                ev = events.recv() => match ev {
                    Some(ev) => self.event(ev),
                    None => return,
                },
                _ = beat.tick() => {
                    self.beat();
                    self.down_the_silent();
                }
                _ = tick.tick() => {
                    self.dial_missing();
                    self.gossip();
                }
            }
        }
    }

    /// Tells every peer with a session that this node is alive.
    fn beat(&self) {
        for cell in ractor::pg::get_members(&GROUP.to_string()) {
            if cell.get_id().is_local() {
                continue;
            }
            let actor: ActorRef<ControlMsg> = cell.into();
            let _ = actor.cast(ControlMsg::Beat(Beat(self.me.id)));
        }
    }

    /// Declares down every peer not heard from within the deadline, whatever
    /// its sessions say (a silent partition keeps them open for minutes):
    /// drops its sessions and data connections so that both are redialed.
    fn down_the_silent(&mut self) {
        let now = Instant::now();
        let up = self.control.view.borrow().up.clone();
        for node in self.liveness.overdue(&up, now) {
            let silent = self.liveness.silent_for(node, now).unwrap_or_default();
            warn!(
                node,
                silent_ms = silent.as_millis() as u64,
                deadline_ms = self.liveness.deadline().as_millis() as u64,
                "peer silent past the deadline: down"
            );
            self.liveness.forget(node);
            self.control.view.send_modify(|v| {
                v.up.remove(&node);
            });
            let sessions =
                self.control.sessions.lock().unwrap_or_else(|e| e.into_inner()).remove(&node);
            for ses in sessions.into_iter().flatten() {
                ses.actor.stop(Some("peer silent past the liveness deadline".into()));
            }
            self.peers.set_down(node, true);
            self.peers.disconnect(node);
        }
    }

    fn event(&mut self, ev: Event) {
        match ev {
            Event::Ready(ses) => {
                let Some(id) = id_of(&ses) else { return };
                let (addr, proved) = split_label(&ses.peer_addr);
                if proved != 0 && proved != id {
                    warn!(proved, claimed = id, %addr, "a control session names another node; dropped");
                    ses.actor.stop(Some("peer name does not match the proved id".into()));
                    return;
                }
                self.dialing.remove(addr);
                if self.seeds.iter().any(|s| s == addr) {
                    self.seed_ids.insert(addr.to_string(), id);
                }
                if id == self.me.id {
                    // A seed that is this node under another address.
                    ses.actor.stop(None);
                    return;
                }
                info!(node = id, "control session up");
                self.liveness.heard(id, Instant::now());
                self.peers.set_down(id, false);
                self.control
                    .sessions
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .entry(id)
                    .or_default()
                    .push(ses);
                self.control.view.send_modify(|v| {
                    v.up.insert(id);
                });
                // Tell the newcomer about us at once.
                self.last_gossip = None;
            }
            Event::Gone(ses) => {
                let Some(id) = id_of(&ses) else { return };
                let still_up = {
                    let mut all = self.control.sessions.lock().unwrap_or_else(|e| e.into_inner());
                    let list = all.entry(id).or_default();
                    list.retain(|s| s.node_id != ses.node_id);
                    !list.is_empty()
                };
                if !still_up && self.control.view.borrow().up.contains(&id) {
                    info!(node = id, "control session down");
                    self.control.view.send_modify(|v| {
                        v.up.remove(&id);
                    });
                    self.liveness.forget(id);
                    self.peers.set_down(id, true);
                    self.peers.disconnect(id);
                }
            }
            Event::Gossip(g) => {
                if let Some(from) = &g.from {
                    self.heard(from.id);
                }
                self.merge(g)
            }
            Event::Beat(from) => self.heard(from),
        }
    }

    /// `node` said something: alive, if it is up (a message from a node
    /// declared down waits for its new session).
    fn heard(&mut self, node: NodeId) {
        if self.control.view.borrow().up.contains(&node) {
            self.liveness.heard(node, Instant::now());
        }
    }

    fn merge(&mut self, g: Gossip) {
        if !g.leaders.is_empty() {
            (self.leaders)(g.leaders.clone());
        }
        let mut changed = false;
        let mut view = self.control.view.borrow().clone();
        if let Some(from) = &g.from {
            let id = (g.incarnation, g.zone.clone());
            if view.identity.get(&from.id) != Some(&id) {
                changed = true;
                view.identity.insert(from.id, id);
            }
            let was = view.draining.contains(&from.id);
            if g.draining != was {
                changed = true;
                if g.draining {
                    view.draining.insert(from.id);
                } else {
                    view.draining.remove(&from.id);
                }
            }
        }
        let mut infos: Vec<(NodeInfo, Option<bool>)> =
            g.known.into_iter().map(|n| (n, None)).collect();
        if let Some(from) = g.from {
            infos.push((from, Some(g.member)));
        }
        for (info, member) in infos {
            if info.id == self.me.id {
                continue;
            }
            let entry = view.known.entry(info.id).or_insert_with(|| {
                changed = true;
                (info.clone(), false)
            });
            if entry.0 != info {
                entry.0 = info.clone();
                changed = true;
            }
            if let Some(m) = member {
                if entry.1 != m {
                    entry.1 = m;
                    changed = true;
                }
            }
            self.peers.set_addr(info.id, info.peer.clone());
        }
        if changed {
            self.control.view.send_replace(view);
        }
    }

    /// Dials seeds whose id is unknown and known nodes without a session.
    fn dial_missing(&mut self) {
        let view = self.control.view.borrow().clone();
        // A seed that is a known node's address needs no dial of its own:
        // that node is dialed (or up) by id. (Which of two racing sessions
        // survives is ractor_cluster's choice, so a seed's id is not always
        // learnt from our own dial.)
        let up_addrs: Vec<&str> = view
            .known
            .iter()
            .filter(|(id, _)| view.up.contains(id) || **id == self.me.id)
            .map(|(_, (info, _))| info.peer.as_str())
            .collect();
        let mut targets: Vec<String> = Vec::new();
        for s in &self.seeds {
            if *s == self.me.peer || up_addrs.contains(&s.as_str()) {
                continue;
            }
            match self.seed_ids.get(s) {
                Some(id) if view.up.contains(id) || *id == self.me.id => {}
                Some(id) if self.control.links.is_blocked(*id) => {}
                _ => targets.push(s.clone()),
            }
        }
        for (id, (info, _)) in &view.known {
            if *id != self.me.id && !view.up.contains(id) && !self.control.links.is_blocked(*id) {
                targets.push(info.peer.clone());
            }
        }
        let ids: HashMap<String, NodeId> =
            view.known.iter().map(|(id, (info, _))| (info.peer.clone(), *id)).collect();
        targets.sort();
        targets.dedup();
        for addr in targets {
            if self.dialing.get(&addr).is_some_and(|t| t.elapsed() < DIAL_PATIENCE) {
                continue;
            }
            self.dialing.insert(addr.clone(), Instant::now());
            let (server, me) = (self.control.node_server.clone(), self.me.id);
            let to = ids.get(&addr).copied().unwrap_or(0);
            let creds = self.creds.clone();
            tokio::spawn(async move {
                match dial(&server, me, to, &addr, &creds).await {
                    Ok(()) => {}
                    // Configuration that no redial will fix (a node joining
                    // with another shard count, or another secret): the
                    // operator must see it, but not every 2 s.
                    Err(DialFault::Mismatch(why)) if crate::peer::quiet::due(&why) => {
                        warn!("control dial: {why}")
                    }
                    Err(e) => debug!(%addr, error = %e, "control dial failed"),
                }
            });
        }
    }

    fn gossip(&mut self) {
        let Local { member, draining, leaders } = (self.local)();
        let view = self.control.view.borrow().clone();
        let mut known: Vec<NodeInfo> = view.known.values().map(|(n, _)| n.clone()).collect();
        known.sort_by_key(|n| n.id);
        let g = Gossip {
            from: Some(self.me.clone()),
            member,
            draining,
            incarnation: self.incarnation,
            zone: self.zone.clone(),
            known,
            leaders,
        };
        let due = self.last_gossip.is_none_or(|t| t.elapsed() >= GOSSIP_EVERY);
        if g == self.last_sent && !due {
            return;
        }
        // Our own entry's membership flag, for bootstrap's view.
        if view.known.get(&self.me.id).is_some_and(|(_, m)| *m != member) {
            self.control.view.send_modify(|v| {
                if let Some(e) = v.known.get_mut(&self.me.id) {
                    e.1 = member;
                }
            });
        }
        for cell in ractor::pg::get_members(&GROUP.to_string()) {
            if cell.get_id().is_local() {
                continue;
            }
            let actor: ActorRef<ControlMsg> = cell.into();
            let _ = actor.cast(ControlMsg::Gossip(GossipBytes(g.clone())));
        }
        self.last_gossip = Some(Instant::now());
        self.last_sent = g;
    }
}

/// Opens an authenticated control connection to node `to` (0: unknown yet)
/// at `addr` and hands it to the NodeServer.
async fn dial(
    server: &ActorRef<NodeServerMessage>,
    me: NodeId,
    to: NodeId,
    addr: &str,
    creds: &Credentials,
) -> Result<(), DialFault> {
    let stream = crate::peer::conn::dial_authenticated(
        me,
        to,
        addr,
        KIND_CONTROL,
        creds,
        Duration::from_secs(2),
    )
    .await?;
    let bidi = Bidi { stream, label: format!("{addr}#{to}") };
    ractor_cluster::client_connect_external(server, Box::new(bidi))
        .await
        .map_err(|e| DialFault::Failed(e.to_string()))
}
