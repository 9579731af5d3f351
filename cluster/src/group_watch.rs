//! The tasks that judge, from a group's Raft metrics, when this node may
//! act as its leader for reads: whether it is the only voter
//! (`watch_sole_voter`), whether a quorum is still in touch
//! (`quorum_in_touch`, `watch_quorum`), and the reader that batches
//! read-index checks (`read_loop`, `confirm_leadership`). `group.rs` starts
//! them and asks them; the lease that lets most reads skip the check is
//! `lease.rs`.

use crate::group::{not_leader, ReadWaiter};
use crate::types::{NodeId, Raft};
use openraft::error::RaftError;
use openraft::BasicNode;
use plaudit_proto::WireError;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

/// Tracks whether reads may skip the read-index check: this node leads, is
/// the only voter, has applied an entry of its current term, and has applied
/// everything its log held when it opened (`logged`). The last two matter
/// after a restart: entries acknowledged before a crash are in the log but
/// not yet re-applied. A new term's first entry (the leader's blank entry)
/// is applied only after all of them; but openraft restores a sole voter
/// that led before the crash as leader *of the same term*, with no new
/// entry, so the term alone let reads through before the replay (t40 caught
/// it once the shards' state could lag the log by a second). A membership
/// change shows in the metrics as soon as its entry is appended, before it
/// can take effect, so the flag clears in time.
///
/// The applied index matters only while this node leads as the only
/// voter and has not yet applied in its term; otherwise only a change of
/// vote (the term), state, leader or membership can change the answer,
/// and openraft sends those server metrics only when they change. So the
/// task waits on them alone (a replica of a replicated group always
/// does): the full metrics are sent after every batch the core handles,
/// and waking this task for each was ~1% of a busy node.
///
/// Clearing uses the server metrics, the newest word on leadership;
/// setting also needs the full metrics (one consistent report, sent last
/// in each) to agree, so two snapshots of different reports never set the
/// flag together.
pub(crate) async fn watch_sole_voter(raft: Raft, flag: Arc<AtomicBool>, logged: u64) {
    let mut server = raft.server_metrics();
    let mut full = raft.metrics();
    loop {
        let (leads_alone, sole) = {
            let s = server.borrow_and_update();
            let mut voters = s.membership_config.membership().voter_ids();
            let leads_alone = s.current_leader == Some(s.id)
                && s.state == openraft::ServerState::Leader
                && voters.next() == Some(s.id)
                && voters.next().is_none();
            let sole = leads_alone && {
                let m = full.borrow_and_update();
                m.current_term == s.vote.leader_id().get_term() && sole_in_report(&m, logged)
            };
            (leads_alone, sole)
        };
        flag.store(sole, Ordering::Release);
        let changed = if leads_alone && !sole {
            tokio::select! {
                r = server.changed() => r,
                r = full.changed() => r,
            }
        } else {
            server.changed().await
        };
        if changed.is_err() {
            flag.store(false, Ordering::Release);
            return;
        }
    }
}

/// `watch_sole_voter`'s judgement on one report of the full metrics.
fn sole_in_report(m: &openraft::RaftMetrics<NodeId, BasicNode>, logged: u64) -> bool {
    let mut voters = m.membership_config.membership().voter_ids();
    let applied_this_term =
        m.last_applied.is_some_and(|l| l.leader_id.term == m.current_term && l.index >= logged);
    m.current_leader == Some(m.id)
        && m.state == openraft::ServerState::Leader
        && applied_this_term
        && voters.next() == Some(m.id)
        && voters.next().is_none()
}

/// Whether a leader has heard from a quorum within the followers' lease
/// (`lease_ms`): past it they may have elected another leader. The one
/// judgement `Group::is_leader` and the reads' retry share.
pub(crate) fn quorum_in_touch(m: &openraft::RaftMetrics<NodeId, BasicNode>, lease_ms: u64) -> bool {
    let mut voters = m.membership_config.membership().voter_ids();
    let alone = voters.next().is_some() && voters.next().is_none();
    alone || m.millis_since_quorum_ack.is_none_or(|ms| ms <= lease_ms)
}

/// How often a leader checks that it is still in touch with a quorum.
const QUORUM_CHECK: std::time::Duration = std::time::Duration::from_millis(100);

/// While this replica leads but has not heard from a quorum for the
/// followers' lease, wakes the writes waiting on it (`cut_off`) every
/// `QUORUM_CHECK`, so they are answered `Timeout` ("may still apply")
/// rather than at the request's deadline: they cannot commit unless the
/// cut heals before the others elect, and a client that knows that much
/// goes elsewhere (the SDK retries what is safe to repeat). Until Raft
/// stops.
pub(crate) async fn watch_quorum(raft: Raft, cut_off: Arc<tokio::sync::Notify>, lease_ms: u64) {
    loop {
        tokio::time::sleep(QUORUM_CHECK).await;
        let m = raft.metrics().borrow().clone();
        if m.running_state.is_err() || m.state == openraft::ServerState::Shutdown {
            return;
        }
        if m.state == openraft::ServerState::Leader && !quorum_in_touch(&m, lease_ms) {
            cut_off.notify_waiters();
        }
    }
}

pub(crate) async fn read_loop(
    shard: u32,
    raft: Raft,
    mut rx: mpsc::Receiver<ReadWaiter>,
    lease_ms: u64,
) {
    while let Some(first) = rx.recv().await {
        let mut waiters = vec![first];
        while let Ok(w) = rx.try_recv() {
            waiters.push(w);
        }
        let res = confirm_leadership(shard, &raft, lease_ms).await;
        for w in waiters {
            let _ = w.send(res.clone());
        }
    }
}

/// How long reads wait for a quorum to confirm this node's leadership
/// before they are answered `Timeout`: with the next batch's wait after it,
/// still below the default request timeout of 5 s, so the client learns why.
const CONFIRM_FOR: Duration = Duration::from_secs(2);
/// The first pause between two attempts at confirming it; it doubles up
/// to `CONFIRM_PAUSE_MAX`. A cut link fails an attempt at once, and
/// openraft logs every failed heartbeat: a fixed 20 ms would log ~100
/// lines a second per shard through a partition.
const CONFIRM_PAUSE: Duration = Duration::from_millis(20);
const CONFIRM_PAUSE_MAX: Duration = Duration::from_millis(320);

/// A read-index check, tried again while no quorum answers.
///
/// Why again: the check's heartbeats time out after one heartbeat
/// interval (100 ms), and a loaded machine can hold the followers' answers
/// that long without anything being wrong: in the 3-node benchmark on two
/// cores, with a compiler running beside it, every node timed out to every
/// other at the same instant and reads failed with `Internal`
/// (`docs/benchmarks.md`). Nothing is lost by asking again: the waiters
/// asked before the first attempt, so any later confirmation still covers
/// every write committed before they asked. A node that lost its
/// leadership hears of it and answers `NotLeader`, and so does one that
/// has not heard from a quorum for the followers' lease (`lease_ms`, as
/// `Group::is_leader` judges it: they may have elected another leader);
/// one that stays cut off for less than that answers `Timeout`, which
/// clients retry.
async fn confirm_leadership(shard: u32, raft: &Raft, lease_ms: u64) -> Result<(), WireError> {
    use openraft::error::CheckIsLeaderError;
    let deadline = Instant::now() + CONFIRM_FOR;
    let mut pause = CONFIRM_PAUSE;
    loop {
        let short = match raft.ensure_linearizable().await {
            Ok(_) => return Ok(()),
            Err(RaftError::APIError(CheckIsLeaderError::ForwardToLeader(f))) => {
                return Err(not_leader(shard, f.leader_id))
            }
            Err(RaftError::APIError(CheckIsLeaderError::QuorumNotEnough(e))) => e,
            Err(RaftError::Fatal(e)) => {
                return Err(WireError::internal(format!("raft stopped: {e}")))
            }
        };
        if !quorum_in_touch(&raft.metrics().borrow(), lease_ms) {
            return Err(not_leader(shard, None));
        }
        if Instant::now() >= deadline {
            return Err(WireError::timeout(format!(
                "shard {shard}: no quorum confirmed this node's leadership for {} s ({short})",
                CONFIRM_FOR.as_secs()
            )));
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(CONFIRM_PAUSE_MAX);
    }
}
