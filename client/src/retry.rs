//! When a call is tried again, and when it gives up: the pure half of the
//! retry loop in `cluster/call.rs`.
//!
//! ```text
//! one attempt ─► Outcome ─┬─ Done(reply or error) ─────────────► return it
//!                         ├─ NotLeader(hint) ─► View::learn ─► at the hinted node / wait / refresh
//!                         ├─ NodeDown (dial, socket, silence) ─► mark it down, elsewhere
//!                         ├─ Busy (Overloaded, Timeout) ─────► back off, a few times
//!                         └─ Moving (Moved) ─────────────────► back off, as for an election
//! ```
//!
//! Every request the SDK sends may be sent twice, so each must be safe to
//! repeat: reads are; a like sets a state (repeating it changes nothing); a
//! score carries its event id (a repeat is a `duplicate`); a registry change
//! is wrapped in `Request::Once` with a random id, which the cluster applies
//! at most once and answers a repeat with the first result. A `Timeout` or a
//! dropped connection leaves a write "maybe applied", and repeating it is
//! what settles it.
//!
//! Retries are bounded by the call's deadline (`ClientOptions::timeout`,
//! enforced by the caller): a call that waits out an election or a
//! hand-off keeps trying, each try after a backoff, until then, however
//! long the caller allowed. Attempts made back to back, with no pause
//! between them (the first redirects, another node after a dead one), are
//! also bounded by `MAX_ATTEMPTS`, so that views that disagree cannot spin
//! a call. `Busy` answers are retried only `BUSY_RETRIES` times, since a
//! node that sheds load is asking for less of it, not more. A call that
//! gives up returns its last error, made honest by `final_error`.

use crate::error::ClientError;
use plaudit_proto::error::LeaderHint;
use plaudit_proto::{ErrorCode, Request, Response};
use std::hash::{BuildHasher, Hasher};
use std::time::Duration;

/// Attempts of one call made back to back, with no pause between them.
/// (A count of every attempt let a call with a long timeout give up after
/// ~4 s of backoff, still inside its deadline.)
pub(crate) const MAX_ATTEMPTS: u32 = 24;
/// Retries after an `Overloaded` or `Timeout` answer.
pub(crate) const BUSY_RETRIES: u32 = 2;
/// Redirects followed at once; past these, each waits a backoff step (two
/// nodes with stale views must not bounce a call between them at full speed).
pub(crate) const FREE_REDIRECTS: u32 = 2;
/// The first backoff step; each further step doubles, up to `MAX_BACKOFF`.
pub(crate) const FIRST_BACKOFF: Duration = Duration::from_millis(20);
pub(crate) const MAX_BACKOFF: Duration = Duration::from_millis(200);

/// What one attempt's result means for the call.
#[derive(Debug)]
pub(crate) enum Outcome {
    /// The answer (a reply, or an error that retrying cannot change).
    Done(Result<Response, ClientError>),
    /// The node does not lead the group; the hint says who does, if known.
    NotLeader(Option<LeaderHint>, ClientError),
    /// The node could not be reached, dropped the connection, or stopped
    /// answering.
    NodeDown(ClientError),
    /// The node shed the request or ran out of time on it.
    Busy(ClientError),
    /// The sub-board is between shards (a move under way) and the node
    /// could not follow it in time: like an election, it is waited out.
    Moving(ClientError),
}

/// Sorts one attempt's result.
pub(crate) fn outcome(r: Result<Response, ClientError>) -> Outcome {
    match r {
        Ok(Response::Error(e)) => match e.code {
            ErrorCode::NotLeader => Outcome::NotLeader(e.leader.clone(), ClientError::Server(e)),
            ErrorCode::Overloaded | ErrorCode::Timeout => Outcome::Busy(ClientError::Server(e)),
            ErrorCode::Moved => Outcome::Moving(ClientError::Server(e)),
            _ => Outcome::Done(Err(ClientError::Server(e))),
        },
        Ok(reply) => Outcome::Done(Ok(reply)),
        Err(e) if e.is_connection() => Outcome::NodeDown(e),
        Err(e) => Outcome::Done(Err(e)),
    }
}

/// Wraps a registry change in `Request::Once { id }`, so sending it again
/// cannot apply it twice; anything else is returned as it is. Token changes
/// are registry changes: a repeated create must not mint a second token
/// with the same secret, and a repeated revoke must answer as the first.
/// `id` is asked for only then: a fresh id costs a hash, and most requests
/// of a pipeline are not registry changes.
pub(crate) fn once(req: Request, id: impl FnOnce() -> u64) -> Request {
    if req.is_registry_change() {
        Request::Once { id: id(), req: Box::new(req) }
    } else {
        req
    }
}

/// Whether sending `req` again after an unknown outcome is harmless. True
/// of everything but a bare registry change (which `once` wraps first).
pub(crate) fn safe_to_repeat(req: &Request) -> bool {
    !req.is_registry_change()
}

/// The `n`th backoff step (0-based): 20, 40, 80, 160, 200, 200... ms.
pub(crate) fn backoff(n: u32) -> Duration {
    FIRST_BACKOFF.saturating_mul(1u32 << n.min(16)).min(MAX_BACKOFF)
}

/// A step with "equal jitter": half of it fixed, half random, so calls that
/// failed together do not all come back together.
pub(crate) fn jittered(step: Duration) -> Duration {
    let half = step / 2;
    half + half.mul_f64((random_u64() >> 11) as f64 / (1u64 << 53) as f64)
}

/// 64 random bits without a dependency: SipHash keyed by a fresh
/// `RandomState` (whose keys std seeds from the OS once per thread and
/// steps for each new state), over a process-wide counter. Unpredictable
/// enough for `Once` ids and jitter; not for secrets.
pub(crate) fn random_u64() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    h.finish()
}

/// The error a call that gave up returns: the last one, except that a
/// "refused, not applied" answer (`NotLeader`, `Overloaded`) after an attempt
/// that may have applied becomes `Timeout`, whose meaning is "may or may
/// not have applied". `Timeout` when there was no error at all.
pub(crate) fn final_error(last: Option<ClientError>, maybe_applied: bool) -> ClientError {
    match last {
        None => ClientError::Timeout,
        Some(e)
            if maybe_applied
                && matches!(e.code(), Some(ErrorCode::NotLeader | ErrorCode::Overloaded)) =>
        {
            ClientError::Timeout
        }
        Some(e) => e,
    }
}

/// A call's answer, given whether an earlier attempt of it may have been
/// applied: then a scoring event's `duplicate` sub-boards are its own event,
/// applied by that attempt (a lost answer, a timeout), and are reported
/// `applied`: the caller sent the event once, and it counted once. A first
/// attempt's `duplicate` stays one (the caller sent that id before).
pub(crate) fn settle(
    answer: Result<Response, ClientError>,
    maybe_applied: bool,
) -> Result<Response, ClientError> {
    use plaudit_proto::scoring::Outcome as Scored;
    match answer {
        Ok(Response::Score(mut reply)) if maybe_applied => {
            for b in &mut reply.boards {
                if b.outcome == Scored::Duplicate {
                    b.outcome = Scored::Applied;
                }
            }
            Ok(Response::Score(reply))
        }
        other => other,
    }
}

/// The bookkeeping of one call's attempts.
#[derive(Debug, Default)]
pub(crate) struct Attempts {
    /// Attempts made with no pause before them, the first one included.
    at_once: u32,
    busy: u32,
    redirects: u32,
    waits: u32,
}

/// What to do after an attempt that did not finish the call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Step {
    /// Try again at once.
    Now,
    /// Try again after this long.
    After(Duration),
    /// Stop and return the last error.
    GiveUp,
}

impl Attempts {
    /// Another attempt at once; `GiveUp` once `MAX_ATTEMPTS` have been
    /// made back to back.
    fn at_once(&mut self) -> Step {
        self.at_once = self.at_once.max(1) + 1;
        if self.at_once <= MAX_ATTEMPTS {
            Step::Now
        } else {
            Step::GiveUp
        }
    }

    /// Another attempt after a backoff, growing; the deadline bounds these.
    fn wait(&mut self) -> Step {
        let step = backoff(self.waits);
        self.waits += 1;
        self.at_once = 0;
        Step::After(step)
    }

    /// After a redirect to a node the hint names.
    pub(crate) fn redirected(&mut self) -> Step {
        self.redirects += 1;
        if self.redirects <= FREE_REDIRECTS {
            self.at_once()
        } else {
            self.wait()
        }
    }

    /// After an answer that asks to wait (no leader yet, or the leader is
    /// down): back off, growing.
    pub(crate) fn waited(&mut self) -> Step {
        self.wait()
    }

    /// After a connection failure; `elsewhere` says whether another node is
    /// up to try at once.
    pub(crate) fn node_down(&mut self, elsewhere: bool) -> Step {
        if elsewhere {
            self.at_once()
        } else {
            self.wait()
        }
    }

    /// After `Overloaded` or `Timeout`: a few times, backing off.
    pub(crate) fn busy(&mut self) -> Step {
        if self.busy >= BUSY_RETRIES {
            return Step::GiveUp;
        }
        self.busy += 1;
        self.wait()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use plaudit_proto::auth::{CreateToken, TokenSecret};
    use plaudit_proto::business::{CreateBiz, UpdateBiz};
    use plaudit_proto::WireError;

    fn server(e: WireError) -> Result<Response, ClientError> {
        Ok(Response::Error(e))
    }

    #[test]
    fn not_leader_overloaded_timeout_and_dropped_connections_are_retried() {
        let mut e = WireError::new(ErrorCode::NotLeader, "no");
        e.leader = Some(LeaderHint { shard: 1, leader: Some(2), epoch: 1 });
        assert!(
            matches!(outcome(server(e)), Outcome::NotLeader(Some(h), _) if h.leader == Some(2))
        );
        assert!(matches!(outcome(server(WireError::overloaded("x"))), Outcome::Busy(_)));
        assert!(matches!(outcome(server(WireError::timeout("x"))), Outcome::Busy(_)));
        assert!(matches!(outcome(Err(ClientError::Closed)), Outcome::NodeDown(_)));
        let io = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        assert!(matches!(outcome(Err(ClientError::Io(io))), Outcome::NodeDown(_)));
    }

    #[test]
    fn replies_and_other_errors_are_returned_as_they_are() {
        assert!(matches!(outcome(Ok(Response::Pong)), Outcome::Done(Ok(Response::Pong))));
        for e in [WireError::not_found("x"), WireError::bad_request("x"), WireError::internal("x")]
        {
            let code = e.code;
            match outcome(server(e)) {
                Outcome::Done(Err(err)) => assert_eq!(err.code(), Some(code)),
                other => panic!("{code}: {other:?}"),
            }
        }
        let p = outcome(Err(ClientError::Protocol("bad frame".into())));
        assert!(matches!(p, Outcome::Done(Err(ClientError::Protocol(_)))));
    }

    #[test]
    fn registry_changes_are_wrapped_in_once_and_nothing_else_is() {
        let create = Request::CreateBiz(CreateBiz {
            id: None,
            name: "x".into(),
            config: Default::default(),
        });
        assert!(!safe_to_repeat(&create));
        let wrapped = once(create.clone(), || 77);
        assert_eq!(wrapped, Request::Once { id: 77, req: Box::new(create) });
        assert!(safe_to_repeat(&wrapped));
        let update = Request::UpdateBiz(UpdateBiz { id: 1, config: Default::default() });
        assert!(matches!(once(update, || 1), Request::Once { .. }));
        assert_eq!(once(Request::GetBiz(1), || 5), Request::GetBiz(1));
        assert_eq!(
            once(Request::Ping, || unreachable!("an id only for a wrapped request")),
            Request::Ping
        );
    }

    #[test]
    fn token_changes_are_wrapped_in_once_and_token_reads_are_not() {
        let create = Request::CreateToken(CreateToken {
            secret: TokenSecret("s".repeat(plaudit_proto::auth::SECRET_LEN)),
            biz: 1,
            ranks: vec![2],
            read_only: false,
        });
        assert!(!safe_to_repeat(&create));
        let wrapped = once(create.clone(), || 9);
        assert_eq!(wrapped, Request::Once { id: 9, req: Box::new(create) });
        // What the node accepts inside a Once, it accepts from us.
        assert!(wrapped.validate().is_ok(), "{:?}", wrapped.validate());
        let revoke = once(Request::RevokeToken(4), || 9);
        assert_eq!(revoke, Request::Once { id: 9, req: Box::new(Request::RevokeToken(4)) });
        assert!(revoke.validate().is_ok());
        assert_eq!(once(Request::ListTokens, || 9), Request::ListTokens);
        assert!(safe_to_repeat(&Request::ListTokens));
    }

    #[test]
    fn a_refusal_after_a_maybe_applied_attempt_is_reported_as_a_timeout() {
        let overloaded = || ClientError::Server(WireError::overloaded("busy"));
        assert_eq!(final_error(Some(overloaded()), false).code(), Some(ErrorCode::Overloaded));
        assert!(matches!(final_error(Some(overloaded()), true), ClientError::Timeout));
        let nf = ClientError::Server(WireError::not_found("x"));
        assert_eq!(final_error(Some(nf), true).code(), Some(ErrorCode::NotFound));
        assert!(final_error(Some(ClientError::Closed), true).is_connection());
        assert!(matches!(final_error(None, false), ClientError::Timeout));
    }

    #[test]
    fn a_duplicate_after_a_maybe_applied_attempt_is_the_calls_own_event() {
        use plaudit_proto::scoring::{BoardOutcome, Outcome as Scored, ScoreReply};
        let reply = |o: Scored| {
            let b = BoardOutcome { type_id: "total:0".into(), outcome: o, score: Some(5) };
            Ok(Response::Score(ScoreReply { boards: vec![b] }))
        };
        let outcome = |r: Result<Response, ClientError>| match r {
            Ok(Response::Score(r)) => r.boards[0].outcome,
            other => panic!("{other:?}"),
        };
        assert_eq!(outcome(settle(reply(Scored::Duplicate), true)), Scored::Applied);
        assert_eq!(outcome(settle(reply(Scored::Duplicate), false)), Scored::Duplicate);
        assert_eq!(outcome(settle(reply(Scored::Filtered), true)), Scored::Filtered);
        assert!(matches!(settle(Ok(Response::Pong), true), Ok(Response::Pong)));
    }

    #[test]
    fn backoff_doubles_from_20_ms_up_to_200_ms() {
        let ms: Vec<u128> = (0..6).map(|n| backoff(n).as_millis()).collect();
        assert_eq!(ms, vec![20, 40, 80, 160, 200, 200]);
        assert_eq!(backoff(u32::MAX), MAX_BACKOFF);
        for _ in 0..100 {
            let j = jittered(Duration::from_millis(40));
            assert!(j >= Duration::from_millis(20) && j <= Duration::from_millis(40), "{j:?}");
        }
    }

    #[test]
    fn random_ids_differ() {
        let ids: std::collections::HashSet<u64> = (0..1000).map(|_| random_u64()).collect();
        assert_eq!(ids.len(), 1000);
    }

    #[test]
    fn two_redirects_are_free_then_each_backs_off() {
        let mut a = Attempts::default();
        assert_eq!(a.redirected(), Step::Now);
        assert_eq!(a.redirected(), Step::Now);
        assert_eq!(a.redirected(), Step::After(backoff(0)));
        assert_eq!(a.waited(), Step::After(backoff(1)));
    }

    #[test]
    fn busy_answers_are_retried_twice_only() {
        let mut a = Attempts::default();
        assert_eq!(a.busy(), Step::After(backoff(0)));
        assert_eq!(a.busy(), Step::After(backoff(1)));
        assert_eq!(a.busy(), Step::GiveUp);
    }

    #[test]
    fn a_dead_node_is_left_at_once_when_another_is_up() {
        let mut a = Attempts::default();
        assert_eq!(a.node_down(true), Step::Now);
        assert_eq!(a.node_down(false), Step::After(backoff(0)));
    }

    #[test]
    fn no_call_makes_more_than_max_attempts_back_to_back() {
        let mut a = Attempts::default();
        let mut made = 1; // the first attempt
        while a.node_down(true) != Step::GiveUp {
            made += 1;
        }
        assert_eq!(made, MAX_ATTEMPTS);
        // A pause starts a new run of attempts.
        assert!(matches!(a.node_down(false), Step::After(_)));
        let mut again = 1;
        while a.node_down(true) != Step::GiveUp {
            again += 1;
        }
        assert_eq!(again, MAX_ATTEMPTS);
    }

    #[test]
    fn waits_are_bounded_by_the_deadline_not_by_a_count() {
        // An election or a hand-off longer than MAX_ATTEMPTS backoff steps
        // (~4 s) is waited out while the caller's timeout allows.
        let mut a = Attempts::default();
        for _ in 0..FREE_REDIRECTS {
            assert_eq!(a.redirected(), Step::Now);
        }
        for n in 0..10 * MAX_ATTEMPTS {
            let step = if n % 3 == 0 { a.redirected() } else { a.waited() };
            assert!(matches!(step, Step::After(d) if d <= MAX_BACKOFF), "{n}: {step:?}");
        }
    }
}
