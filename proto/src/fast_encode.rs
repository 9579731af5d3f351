//! A hand-written encoder for the reply a busy node writes most: one
//! scoring event's outcome on one board (`Response::Score` with one
//! `BoardOutcome`).
//!
//! Why: building that reply took two allocations (the outcomes `Vec` and
//! the type id's `String`) and bincode's serde path, to write about twenty
//! bytes, on every scoring event (thirteenth Step 4 session). This writes
//! the same bytes from borrowed parts. The serde encoding stays the
//! definition: a property test checks that both write identical frames.

use crate::codec::CodecError;
use crate::frame;
use crate::scoring::Outcome;

/// `Response::Score`'s variant index; a test checks it against serde.
const SCORE_VARIANT: u64 = 11;

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
    varint(out, type_id.len() as u64);
    out.extend_from_slice(type_id.as_bytes());
    varint(out, outcome as u64);
    match score {
        None => out.push(0),
        Some(s) => {
            out.push(1);
            // Zigzag: 0, -1, 1, -2, ... -> 0, 1, 2, 3, ...
            varint(out, ((s << 1) ^ (s >> 63)) as u64);
        }
    }
    frame::end_frame(out, start)
}

/// Bincode's standard varint: below 251 one byte, else a tag (251, 252,
/// 253) and the value as a little-endian `u16`, `u32` or `u64`.
fn varint(out: &mut Vec<u8>, v: u64) {
    if v < 251 {
        out.push(v as u8);
    } else if let Ok(v) = u16::try_from(v) {
        out.push(251);
        out.extend_from_slice(&v.to_le_bytes());
    } else if let Ok(v) = u32::try_from(v) {
        out.push(252);
        out.extend_from_slice(&v.to_le_bytes());
    } else {
        out.push(253);
        out.extend_from_slice(&v.to_le_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::encode_frame;
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

    proptest! {
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
