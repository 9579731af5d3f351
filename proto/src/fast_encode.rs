//! Hand-written encoders for the replies a busy node writes most: one
//! scoring event's outcome on one board (`Response::Score` with one
//! `BoardOutcome`), the states and counts of a batch of entities
//! (`Response::Status`, `Response::Counts`), and board query replies
//! (`Response::Query`: top-N, rank-of, scores, size).
//!
//! Why: building a scoring reply took two allocations (the outcomes `Vec`
//! and the type id's `String`) and bincode's serde path, to write about
//! twenty bytes, on every scoring event; a counts reply is sixty varints
//! through serde, one call each (3.3% of the likes mix in
//! `varint_encode_u64` alone); a top-10 or rank-of reply went through serde
//! too (1.5% of the rankings mix). These write the same bytes directly. The
//! serde encoding stays the definition: property tests check that both
//! write identical frames.

use crate::codec::CodecError;
use crate::frame;
use crate::likes::{EntityCounts, EntityState};
use crate::scoring::{Outcome, QueryReply, RankedItem};
use crate::varint::{option, signed, string, varint};

/// Variant indexes in `Response`; a test checks them against serde.
pub(crate) const STATUS_VARIANT: u64 = 4;
pub(crate) const COUNTS_VARIANT: u64 = 5;
pub(crate) const SCORE_VARIANT: u64 = 11;
pub(crate) const QUERY_VARIANT: u64 = 12;

/// Appends the frame of `Envelope { req_id, Response::Score(ScoreReply {
/// boards: vec![BoardOutcome { type_id, outcome, score }] }) }` to `out`,
/// byte for byte what `frame::encode_frame` writes for it.
pub fn encode_score_reply(
    req_id: u64,
    type_id: &str,
    outcome: Outcome,
    score: Option<i64>,
    out: &mut Vec<u8>,
) -> Result<(), CodecError> {
    let start = frame::begin_frame(out);
    varint(out, req_id);
    varint(out, SCORE_VARIANT);
    varint(out, 1); // one board
    string(out, type_id);
    varint(out, outcome as u64);
    option(out, score, signed);
    frame::end_frame(out, start)
}

/// Appends the frame of `Envelope { req_id, Response::Query(reply) }`.
pub fn encode_query_reply(
    req_id: u64,
    reply: &QueryReply,
    out: &mut Vec<u8>,
) -> Result<(), CodecError> {
    let start = frame::begin_frame(out);
    varint(out, req_id);
    varint(out, QUERY_VARIANT);
    // `QueryReply`'s variants in declaration order; a test checks each.
    match reply {
        QueryReply::Items { type_id, items } => {
            varint(out, 0);
            string(out, type_id);
            varint(out, items.len() as u64);
            for it in items {
                ranked(out, it);
            }
        }
        QueryReply::RankOf { item, row } => {
            varint(out, 1);
            varint(out, *item);
            option(out, row.as_ref(), ranked);
        }
        QueryReply::Scores(scores) => {
            varint(out, 2);
            varint(out, scores.len() as u64);
            for &(item, score) in scores {
                varint(out, item);
                option(out, score, signed);
            }
        }
        QueryReply::Size(n) => {
            varint(out, 3);
            varint(out, *n);
        }
    }
    frame::end_frame(out, start)
}

/// A `RankedItem`'s fields in declaration order.
fn ranked(out: &mut Vec<u8>, r: &RankedItem) {
    varint(out, r.rank);
    varint(out, r.item);
    signed(out, r.score);
    option(out, r.sub.map(u64::from), varint);
}

/// Appends the frame of `Envelope { req_id, Response::Counts(counts) }`.
pub fn encode_counts_reply(
    req_id: u64,
    counts: &[EntityCounts],
    out: &mut Vec<u8>,
) -> Result<(), CodecError> {
    let fields = |c: &EntityCounts| [c.entity, c.likes, c.dislikes];
    encode_batch_reply(req_id, COUNTS_VARIANT, counts, fields, out)
}

/// Appends the frame of `Envelope { req_id, Response::Status(states) }`.
pub fn encode_status_reply(
    req_id: u64,
    states: &[EntityState],
    out: &mut Vec<u8>,
) -> Result<(), CodecError> {
    // A unit variant (the state) is written as its index.
    let fields = |s: &EntityState| [s.entity, s.state as u64, s.mtime];
    encode_batch_reply(req_id, STATUS_VARIANT, states, fields, out)
}

/// A reply that is a sequence of structs of three unsigned fields each
/// (what serde writes for a `Vec` of them: its length, then the fields).
fn encode_batch_reply<T>(
    req_id: u64,
    variant: u64,
    items: &[T],
    fields: impl Fn(&T) -> [u64; 3],
    out: &mut Vec<u8>,
) -> Result<(), CodecError> {
    let start = frame::begin_frame(out);
    varint(out, req_id);
    varint(out, variant);
    varint(out, items.len() as u64);
    for item in items {
        for v in fields(item) {
            varint(out, v);
        }
    }
    frame::end_frame(out, start)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::frame::encode_frame;
    use crate::likes::LikeState;
    use crate::message::{Envelope, Response};
    use crate::scoring::{BoardOutcome, ScoreReply};
    use proptest::prelude::*;

    fn by_serde(req_id: u64, type_id: &str, outcome: Outcome, score: Option<i64>) -> Vec<u8> {
        let board = BoardOutcome { type_id: type_id.to_string(), outcome, score };
        let body = Response::Score(ScoreReply { boards: vec![board] });
        let mut out = vec![9]; // something already in the buffer
        encode_frame(&Envelope { req_id, body }, &mut out).unwrap();
        out
    }

    fn by_hand(req_id: u64, type_id: &str, outcome: Outcome, score: Option<i64>) -> Vec<u8> {
        let mut out = vec![9];
        encode_score_reply(req_id, type_id, outcome, score, &mut out).unwrap();
        out
    }

    #[test]
    fn every_outcome_and_varint_width_matches_serde() {
        let outcomes = [Outcome::Applied, Outcome::Duplicate, Outcome::Filtered, Outcome::Shed];
        let ints = [0, 1, 250, 251, 65_535, 65_536, u32::MAX as u64, u32::MAX as u64 + 1, u64::MAX];
        for o in outcomes {
            for &n in &ints {
                for score in [None, Some(n as i64), Some(-(n as i64)), Some(i64::MIN)] {
                    let t = "total:room_7";
                    assert_eq!(
                        by_hand(n, t, o, score),
                        by_serde(n, t, o, score),
                        "{o:?} {n} {score:?}"
                    );
                }
            }
        }
    }

    fn serde_frame(req_id: u64, body: Response) -> Vec<u8> {
        let mut out = vec![9];
        encode_frame(&Envelope { req_id, body }, &mut out).unwrap();
        out
    }

    fn counts_by_hand(req_id: u64, counts: &[EntityCounts]) -> Vec<u8> {
        let mut out = vec![9];
        encode_counts_reply(req_id, counts, &mut out).unwrap();
        out
    }

    fn status_by_hand(req_id: u64, states: &[EntityState]) -> Vec<u8> {
        let mut out = vec![9];
        encode_status_reply(req_id, states, &mut out).unwrap();
        out
    }

    #[test]
    fn every_like_state_and_empty_batches_match_serde() {
        let states: Vec<EntityState> = [LikeState::None, LikeState::Like, LikeState::Dislike]
            .into_iter()
            .enumerate()
            .map(|(i, state)| EntityState { entity: i as u64 * 300, state, mtime: u64::MAX })
            .collect();
        assert_eq!(status_by_hand(3, &states), serde_frame(3, Response::Status(states.clone())));
        assert_eq!(status_by_hand(3, &[]), serde_frame(3, Response::Status(vec![])));
        assert_eq!(counts_by_hand(3, &[]), serde_frame(3, Response::Counts(vec![])));
    }

    pub(crate) fn ranked_item() -> impl Strategy<Value = RankedItem> {
        (any::<u64>(), any::<u64>(), any::<i64>(), any::<Option<u32>>())
            .prop_map(|(rank, item, score, sub)| RankedItem { rank, item, score, sub })
    }

    pub(crate) fn query_reply() -> impl Strategy<Value = QueryReply> {
        prop_oneof![
            (".{0,300}", prop::collection::vec(ranked_item(), 0..20))
                .prop_map(|(type_id, items)| QueryReply::Items { type_id, items }),
            (any::<u64>(), prop::option::of(ranked_item()))
                .prop_map(|(item, row)| QueryReply::RankOf { item, row }),
            prop::collection::vec(any::<(u64, Option<i64>)>(), 0..20).prop_map(QueryReply::Scores),
            any::<u64>().prop_map(QueryReply::Size),
        ]
    }

    #[test]
    fn every_query_variant_and_varint_width_matches_serde() {
        let ints = [0, 1, 250, 251, 65_535, 65_536, u32::MAX as u64, u32::MAX as u64 + 1, u64::MAX];
        for &n in &ints {
            let row = RankedItem { rank: n, item: n, score: -(n as i64), sub: Some(n as u32) };
            let replies = [
                QueryReply::Items { type_id: "day:1713110400_7".into(), items: vec![row; 3] },
                QueryReply::Items { type_id: String::new(), items: vec![] },
                QueryReply::RankOf { item: n, row: Some(RankedItem { sub: None, ..row }) },
                QueryReply::RankOf { item: n, row: None },
                QueryReply::Scores(vec![(n, Some(n as i64)), (n, None), (n, Some(i64::MIN))]),
                QueryReply::Size(n),
            ];
            for reply in replies {
                let mut out = vec![9];
                encode_query_reply(n, &reply, &mut out).unwrap();
                assert_eq!(out, serde_frame(n, Response::Query(reply.clone())), "{reply:?}");
            }
        }
    }

    #[test]
    fn a_reply_past_the_frame_limit_fails_as_serde_does_and_writes_nothing() {
        let big =
            QueryReply::Items { type_id: "x".repeat(crate::limits::MAX_FRAME_LEN), items: vec![] };
        let env = crate::message::Envelope { req_id: 1, body: Response::Query(big) };
        let mut out = vec![9];
        assert!(crate::frame::encode_reply(&env, &mut out).is_err());
        assert_eq!(out, vec![9], "nothing of the frame is left");
        assert!(encode_frame(&env, &mut out).is_err());
        assert_eq!(out, vec![9]);
    }

    pub(crate) fn like_state() -> impl Strategy<Value = LikeState> {
        prop::sample::select(vec![LikeState::None, LikeState::Like, LikeState::Dislike])
    }

    proptest! {
        #[test]
        fn counts_and_states_are_written_as_serde_writes_them(
            req_id in any::<u64>(),
            counts in prop::collection::vec(
                (any::<u64>(), any::<u64>(), any::<u64>()).prop_map(|(entity, likes, dislikes)| {
                    EntityCounts { entity, likes, dislikes }
                }),
                0..30,
            ),
            states in prop::collection::vec(
                (any::<u64>(), like_state(), any::<u64>())
                    .prop_map(|(entity, state, mtime)| EntityState { entity, state, mtime }),
                0..30,
            ),
        ) {
            prop_assert_eq!(
                counts_by_hand(req_id, &counts),
                serde_frame(req_id, Response::Counts(counts.clone()))
            );
            prop_assert_eq!(
                status_by_hand(req_id, &states),
                serde_frame(req_id, Response::Status(states.clone()))
            );
        }

        #[test]
        fn query_replies_are_written_as_serde_writes_them(
            req_id in any::<u64>(),
            reply in query_reply(),
        ) {
            let mut out = vec![9];
            encode_query_reply(req_id, &reply, &mut out).unwrap();
            prop_assert_eq!(out, serde_frame(req_id, Response::Query(reply)));
        }

        #[test]
        fn writes_what_serde_writes(
            req_id in any::<u64>(),
            type_id in ".{0,300}",
            outcome in prop::sample::select(vec![
                Outcome::Applied, Outcome::Duplicate, Outcome::Filtered, Outcome::Shed,
            ]),
            score in any::<Option<i64>>(),
        ) {
            prop_assert_eq!(
                by_hand(req_id, &type_id, outcome, score),
                by_serde(req_id, &type_id, outcome, score)
            );
        }
    }
}
