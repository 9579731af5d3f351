//! Fast failover: when the control plane sees a peer's session drop (a few
//! ms to tens of ms after the process dies), the followers of the groups
//! that peer led elect a new leader as soon as openraft will let them,
//! instead of waiting for their randomised election timers.
//!
//! openraft 0.9 makes a voter refuse votes while its leader lease runs
//! (`election_timeout_max` since it last heard from the leader), and its own
//! timer would wait the lease plus a random election timeout. So each
//! follower waits until the lease has run out (measured from the last
//! AppendEntries it received, plus a small margin for the other voters'
//! clocks), then calls `trigger().elect()`. Surviving voters are ranked by
//! id and stagger their attempts, so two of them do not split the vote, and
//! each tries again after `RETRY`, then ever later up to the election
//! timeout (`transfer::campaign_pause`), until a leader is known: a first attempt
//! refused because another voter heard the dead leader a little later than
//! this one does not wait for the next voter's turn.

use crate::control::Control;
use crate::engine::Engine;
use crate::group::Group;
use crate::types::NodeId;
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tracing::{debug, info};

/// Waited past the lease, for the other voters' leases to run out too.
const MARGIN: Duration = Duration::from_millis(30);
/// Between the first attempts of successive surviving voters.
const STAGGER: Duration = Duration::from_millis(100);
/// Before one voter's second attempt while no leader is known; each
/// further pause doubles, up to the election timeout.
const RETRY: Duration = Duration::from_millis(150);
/// Attempts per voter before the randomised timers are left to it.
const ATTEMPTS: u32 = 8;

pub(crate) async fn run(engine: Arc<Engine>, control: Arc<Control>) {
    let mut view = control.watch();
    let mut up: BTreeSet<NodeId> = view.borrow().up.clone();
    while view.changed().await.is_ok() {
        let now_up = view.borrow().up.clone();
        for &dead in up.difference(&now_up) {
            for g in engine.router.local() {
                let e = engine.clone();
                tokio::spawn(async move { elect_after_lease(e, g, dead).await });
            }
        }
        up = now_up;
    }
}

async fn elect_after_lease(engine: Arc<Engine>, g: Arc<Group>, dead: NodeId) {
    let me = engine.node_id();
    let (leader, voters) = {
        let m = g.raft.metrics();
        let m = m.borrow();
        let voters: Vec<NodeId> = m.membership_config.membership().voter_ids().collect();
        (m.current_leader, voters)
    };
    if leader != Some(dead) || !voters.contains(&me) {
        return;
    }
    let mut survivors: Vec<NodeId> = voters.into_iter().filter(|v| *v != dead).collect();
    survivors.sort_unstable();
    let rank = survivors.iter().position(|v| *v == me).unwrap_or(0) as u32;
    let lease = Duration::from_millis(engine.cfg.group.election_max_ms);
    let heard = g.last_heard().unwrap_or_else(Instant::now);
    let at = heard + lease + MARGIN + STAGGER * rank;
    tokio::time::sleep_until(at.into()).await;
    let still_dead = |g: &Group| {
        let l = g.raft.metrics().borrow().current_leader;
        l.is_none() || l == Some(dead)
    };
    for attempt in 0..ATTEMPTS {
        if !still_dead(&g) {
            debug!(shard = g.gid, attempt, "a leader is known");
            return;
        }
        // Only the control session may have dropped: if the leader still
        // sends AppendEntries, a campaign would only depose it. AppendEntries
        // are refused from before this check until the campaign is queued,
        // so none accepted in between can count towards the leader's read
        // lease (`lease.rs`; the leader stamps each before it is heard).
        g.set_electing(true);
        if g.last_heard().is_some_and(|t| t.elapsed() < lease) {
            g.set_electing(false);
            debug!(shard = g.gid, "the leader is still heard from; no election");
            return;
        }
        info!(
            shard = g.gid,
            dead,
            attempt,
            since_heard_ms = heard.elapsed().as_millis() as u64,
            "leader lost: electing"
        );
        // Queued behind the campaign, a late AppendEntries meets its higher term.
        let elected = g.raft.trigger().elect().await;
        g.set_electing(false);
        if let Err(e) = elected {
            debug!(shard = g.gid, error = %e, "triggering an election failed");
            return;
        }
        let most = Duration::from_millis(engine.cfg.group.election_min_ms);
        tokio::time::sleep(crate::transfer::campaign_pause(attempt, RETRY, most)).await;
    }
}
