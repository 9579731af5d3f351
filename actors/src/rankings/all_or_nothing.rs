//! Scoring an event on all of its sub-boards or on none.
//!
//! An event lands on one sub-board per granularity, and those boards live
//! on different shards (`routing::board_shard`), each its own Raft group:
//! the edge proposes one `Score` command per board, concurrently, here or
//! on the board's leader elsewhere (`PeerRequest::Propose`). Each board
//! applies its command atomically, but nothing ties the groups together,
//! so an increment that overflows `i64` on one board used to fail the call
//! after the other boards had applied it (and used up its event id there:
//! a corrected retry was reported `duplicate` on them).
//!
//! The only way an admitted event fails on a board is that overflow (an
//! `incr` ranking; `best` and `set` never add). So before proposing
//! anything, the edge asks every board of the event, on its leader and
//! after its read barrier, whether the event would apply there
//! (`Board::check`, which agrees with `Board::apply` and changes nothing,
//! plus the board's event-id memory: a repeat is a duplicate, not an
//! overflow). If any board would overflow, the call fails with
//! `BadRequest` naming those boards, nothing is proposed, and the event id
//! is recorded nowhere.
//!
//! **What is guaranteed.** An event that would overflow any of its boards
//! at the moment the edge checks them is applied to none of them, and its
//! event id stays unused, so a corrected retry with the same id applies
//! everywhere. The check is skipped only where it cannot change anything:
//! rankings other than `incr`, a zero increment, and events with a single
//! live board (a board applies or refuses an event on its own, atomically).
//!
//! **What is not.** The check and the proposals are separate steps: if
//! another event for the same member is applied to one of the boards in
//! between and pushes it to where this event overflows, that board refuses
//! this event at apply (without recording its id) while the others keep it;
//! the call fails `BadRequest`, and a retry reports the others `duplicate`.
//! Closing that window takes agreement between the boards' Raft groups (a
//! two-phase commit on every event) for increments that meet `i64::MAX`
//! under concurrent updates of one member; not worth it. Partial outcomes
//! that are not errors stay as they were: under overload a board may
//! `shed` the event while others apply it, and a call that times out may
//! have applied on some boards; retrying with the same event id completes
//! the event without counting it twice.

use crate::command::EventResult;
use plaudit_proto::rankings::Aggregation;
use plaudit_proto::WireError;

/// Whether an event must be checked on every board before it is proposed:
/// only an `incr` of a non-zero score can fail, and only across boards can a
/// failure leave the event half applied.
pub fn must_check(aggregation: Aggregation, score: i64, live_boards: usize) -> bool {
    aggregation == Aggregation::Incr && score != 0 && live_boards > 1
}

/// The decision over every board's check, `(type_id, would-be result)` in
/// board order: go ahead, or refuse the event everywhere with every board
/// that would fail named.
pub fn verdict(event_id: u64, checks: &[(String, EventResult)]) -> Result<(), WireError> {
    let failed: Vec<String> = checks
        .iter()
        .filter_map(|(board, r)| r.as_ref().err().map(|e| format!("{board}: {}", e.message)))
        .collect();
    if failed.is_empty() {
        return Ok(());
    }
    Err(WireError::bad_request(format!(
        "event {event_id} refused on every board, nothing applied (its id stays unused): {}",
        failed.join("; ")
    )))
}

#[cfg(test)]
mod tests {
    use super::*;
    use plaudit_proto::scoring::Outcome;
    use plaudit_proto::ErrorCode;

    #[test]
    fn only_increments_over_several_boards_are_checked() {
        assert!(must_check(Aggregation::Incr, 5, 2));
        assert!(must_check(Aggregation::Incr, -5, 3));
        assert!(!must_check(Aggregation::Incr, 5, 1), "one board is atomic by itself");
        assert!(!must_check(Aggregation::Incr, 0, 3), "adding zero cannot overflow");
        assert!(!must_check(Aggregation::Best, 5, 3));
        assert!(!must_check(Aggregation::Set, i64::MAX, 3));
    }

    #[test]
    fn one_failing_board_refuses_the_event_and_names_it() {
        let ok = |o| Ok((o, Some(1)));
        let overflow = Err(WireError::bad_request("score of item 1 would overflow: 9 + 9"));
        let fine = [("day:0".to_string(), ok(Outcome::Applied))];
        assert_eq!(verdict(7, &fine), Ok(()));
        let dup = [("day:0".to_string(), ok(Outcome::Duplicate)), fine[0].clone()];
        assert_eq!(verdict(7, &dup), Ok(()), "a repeat is no reason to refuse");
        let mixed = [fine[0].clone(), ("total:0".to_string(), overflow)];
        let e = verdict(7, &mixed).unwrap_err();
        assert_eq!(e.code, ErrorCode::BadRequest);
        assert!(e.message.contains("event 7 refused on every board"), "{e}");
        assert!(e.message.contains("total:0: score of item 1 would overflow"), "{e}");
        assert!(!e.message.contains("day:0"), "only the failing boards are named: {e}");
    }
}
