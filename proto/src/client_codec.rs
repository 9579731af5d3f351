//! The client's side of the hand-written codec: the busiest requests
//! (scoring events, board queries, likes, status and counts) written by
//! hand, and their replies read by hand. The node's side is `fast_decode`
//! (those requests) and `fast_encode` (those replies).
//!
//! Why: on hot scoring the SDK spent about a seventh of the client's core
//! in bincode's serde path, encoding each event and decoding each reply
//! (perf on `plaudit-bench`), for a dozen varints a request. The client's
//! core is part of every request's round trip: while it encodes and
//! decodes, the node waits for its next requests.
//!
//! The serde encoding stays the definition of the format. The encoder
//! writes byte for byte what serde writes; the decoder answers only for a
//! reply whose every field it understands, with no byte left over, and
//! leaves everything else to serde, which decodes it or reports the error
//! exactly as before. Property tests check both against serde, on valid
//! and broken input.

use crate::fast_decode as req;
use crate::fast_encode as rep;
use crate::likes::{EntityCounts, EntityState, LikeReply, LikeState};
use crate::message::{Envelope, Request, Response};
use crate::scoring::ScoreReply;
use crate::scoring::{BoardOutcome, BoardQuery, BoardRef, Outcome, QueryReply, RankedItem};
use crate::varint::{option, signed, string, varint, Cursor};

/// The most elements a sequence reserves room for before reading them.
const MAX_RESERVE: usize = 1024;

/// `Response::Like`'s variant index; a test checks it against serde.
const LIKE_REPLY_VARIANT: u64 = 3;

/// Appends the body of `Envelope { req_id, body: req }` (the payload
/// after its version byte) as serde writes it, if `req` is one of the
/// requests written here; false (and nothing appended) otherwise.
pub(crate) fn encode_request_body(req_id: u64, req: &Request, out: &mut Vec<u8>) -> bool {
    let start = out.len();
    varint(out, req_id);
    match req {
        Request::Score(s) => {
            variant(out, req::SCORE_VARIANT);
            varint(out, u64::from(s.rank));
            varint(out, s.item);
            signed(out, s.score);
            option(out, s.sub.map(u64::from), varint);
            dims(out, &s.dims);
            signed(out, s.ts);
            varint(out, s.event_id);
        }
        Request::Query(q) => {
            variant(out, req::QUERY_VARIANT);
            varint(out, u64::from(q.rank));
            match &q.board {
                BoardRef::TypeId(t) => {
                    varint(out, 0);
                    string(out, t);
                }
                BoardRef::At { dims: d, granularity, ts } => {
                    varint(out, 1);
                    dims(out, d);
                    varint(out, *granularity as u64);
                    signed(out, *ts);
                }
            }
            // `BoardQuery`'s variants in declaration order; the tests check each.
            match &q.query {
                BoardQuery::Top { offset, limit } => {
                    varint(out, 0);
                    varint(out, u64::from(*offset));
                    varint(out, u64::from(*limit));
                }
                BoardQuery::RankOf { item } => {
                    varint(out, 1);
                    varint(out, *item);
                }
                BoardQuery::Around { item, k } => {
                    varint(out, 2);
                    varint(out, *item);
                    varint(out, u64::from(*k));
                }
                BoardQuery::Scores { items } => {
                    varint(out, 3);
                    ids(out, items);
                }
                BoardQuery::Size => varint(out, 4),
            }
        }
        Request::Like(l) => {
            variant(out, req::LIKE_VARIANT);
            varint(out, u64::from(l.biz));
            varint(out, l.entity);
            varint(out, l.user);
            option(out, l.owner, varint);
            varint(out, l.action as u64);
        }
        Request::Status(s) => {
            variant(out, req::STATUS_VARIANT);
            varint(out, u64::from(s.biz));
            varint(out, s.user);
            ids(out, &s.entities);
        }
        Request::Counts(c) => {
            variant(out, req::COUNTS_VARIANT);
            varint(out, u64::from(c.biz));
            ids(out, &c.entities);
        }
        _ => {
            out.truncate(start);
            return false;
        }
    }
    true
}

fn variant(out: &mut Vec<u8>, index: u32) {
    varint(out, u64::from(index));
}

fn ids(out: &mut Vec<u8>, ids: &[u64]) {
    varint(out, ids.len() as u64);
    for &id in ids {
        varint(out, id);
    }
}

fn dims(out: &mut Vec<u8>, dims: &[(String, u64)]) {
    varint(out, dims.len() as u64);
    for (name, v) in dims {
        string(out, name);
        varint(out, *v);
    }
}

/// The envelope in `body` (a reply payload without its version byte), if
/// it holds a reply this decoder reads in full; `None` leaves it to serde.
pub(crate) fn reply_envelope(body: &[u8]) -> Option<Envelope<Response>> {
    let mut c = Cursor(body);
    let req_id = c.u64()?;
    let body = match u64::from(c.u32()?) {
        rep::SCORE_VARIANT => {
            let boards = seq(&mut c, |c| {
                let type_id = c.string()?;
                let outcome = *Outcome::ALL.get(usize::try_from(c.u32()?).ok()?)?;
                Some(BoardOutcome { type_id, outcome, score: opt(c, Cursor::i64)? })
            })?;
            Response::Score(ScoreReply { boards })
        }
        rep::QUERY_VARIANT => Response::Query(query_reply(&mut c)?),
        rep::STATUS_VARIANT => Response::Status(seq(&mut c, |c| {
            let entity = c.u64()?;
            let state = like_state(c)?;
            Some(EntityState { entity, state, mtime: c.u64()? })
        })?),
        rep::COUNTS_VARIANT => Response::Counts(seq(&mut c, |c| {
            Some(EntityCounts { entity: c.u64()?, likes: c.u64()?, dislikes: c.u64()? })
        })?),
        LIKE_REPLY_VARIANT => {
            let (prev, now) = (like_state(&mut c)?, like_state(&mut c)?);
            let changed = match c.byte()? {
                0 => false,
                1 => true,
                _ => return None,
            };
            Response::Like(LikeReply { prev, now, changed, mtime: c.u64()? })
        }
        _ => return None,
    };
    if !c.0.is_empty() {
        return None;
    }
    Some(Envelope { req_id, body })
}

fn query_reply(c: &mut Cursor<'_>) -> Option<QueryReply> {
    Some(match c.u32()? {
        0 => QueryReply::Items { type_id: c.string()?, items: seq(c, ranked)? },
        1 => QueryReply::RankOf { item: c.u64()?, row: opt(c, ranked)? },
        2 => QueryReply::Scores(seq(c, |c| Some((c.u64()?, opt(c, Cursor::i64)?)))?),
        3 => QueryReply::Size(c.u64()?),
        _ => return None,
    })
}

fn ranked(c: &mut Cursor<'_>) -> Option<RankedItem> {
    let (rank, item, score) = (c.u64()?, c.u64()?, c.i64()?);
    Some(RankedItem { rank, item, score, sub: opt(c, Cursor::u32)? })
}

fn like_state(c: &mut Cursor<'_>) -> Option<LikeState> {
    LikeState::ALL.get(usize::try_from(c.u32()?).ok()?).copied()
}

/// An `Option`: `None` for a bad tag or a value that does not read.
fn opt<'a, T>(
    c: &mut Cursor<'a>,
    read: impl FnOnce(&mut Cursor<'a>) -> Option<T>,
) -> Option<Option<T>> {
    match c.byte()? {
        0 => Some(None),
        1 => Some(Some(read(c)?)),
        _ => None,
    }
}

/// A sequence. A length past the bytes left (each element takes at least
/// one) is refused, and the first reservation is capped, so a broken
/// length reserves little: the rest grows with elements actually read.
fn seq<'a, T>(
    c: &mut Cursor<'a>,
    mut read: impl FnMut(&mut Cursor<'a>) -> Option<T>,
) -> Option<Vec<T>> {
    let n = usize::try_from(c.u64()?).ok()?;
    if n > c.0.len() {
        return None;
    }
    let mut out = Vec::with_capacity(n.min(MAX_RESERVE));
    for _ in 0..n {
        out.push(read(c)?);
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec;
    use crate::fast_decode::tests::request;
    use crate::fast_encode::tests::{like_state, query_reply};
    use crate::frame::{self, encode_frame};
    use crate::likes::CountsRequest;
    use crate::varint::fuzz::{broken, led_by};
    use proptest::prelude::*;

    fn by_serde(body: &[u8]) -> Option<Envelope<Response>> {
        codec::from_bytes::<Envelope<Response>>(body).ok()
    }

    fn encoded(req_id: u64, body: &Response) -> Vec<u8> {
        codec::to_bytes(&Envelope { req_id, body: body.clone() }).unwrap()
    }

    fn outcome() -> impl Strategy<Value = Outcome> {
        prop::sample::select(Outcome::ALL.to_vec())
    }

    fn reply() -> impl Strategy<Value = Response> {
        let board = (".{0,24}", outcome(), any::<Option<i64>>())
            .prop_map(|(type_id, outcome, score)| BoardOutcome { type_id, outcome, score });
        let state = (any::<u64>(), like_state(), any::<u64>())
            .prop_map(|(entity, state, mtime)| EntityState { entity, state, mtime });
        let counts = any::<(u64, u64, u64)>().prop_map(|(entity, likes, dislikes)| EntityCounts {
            entity,
            likes,
            dislikes,
        });
        let like = (like_state(), like_state(), any::<bool>(), any::<u64>())
            .prop_map(|(prev, now, changed, mtime)| LikeReply { prev, now, changed, mtime });
        prop_oneof![
            prop::collection::vec(board, 0..4)
                .prop_map(|boards| Response::Score(ScoreReply { boards })),
            query_reply().prop_map(Response::Query),
            prop::collection::vec(state, 0..24).prop_map(Response::Status),
            prop::collection::vec(counts, 0..24).prop_map(Response::Counts),
            like.prop_map(Response::Like),
        ]
    }

    #[test]
    fn the_like_reply_variant_index_is_serdes() {
        let like =
            LikeReply { prev: LikeState::None, now: LikeState::Like, changed: true, mtime: 9 };
        // req_id 7 is one byte; the variant index follows.
        assert_eq!(u64::from(encoded(7, &Response::Like(like))[1]), LIKE_REPLY_VARIANT);
    }

    #[test]
    fn other_requests_and_replies_are_left_to_serde() {
        let mut out = vec![9];
        for req in [Request::Ping, Request::ListRanks, Request::GetBiz(3)] {
            assert!(!encode_request_body(1, &req, &mut out));
            assert_eq!(out, vec![9], "nothing written");
        }
        for body in [Response::Pong, Response::Hello, Response::BizList(vec![])] {
            assert!(reply_envelope(&encoded(1, &body)).is_none());
        }
    }

    #[test]
    fn a_request_past_the_frame_limit_fails_as_serde_does_and_writes_nothing() {
        let n = crate::limits::MAX_FRAME_LEN / 8;
        let req = Request::Counts(CountsRequest { biz: 1, entities: vec![u64::MAX; n] });
        let mut out = vec![9];
        assert!(frame::encode_request(1, &req, &mut out).is_err());
        assert_eq!(out, vec![9], "nothing of the frame is left");
        assert!(encode_frame(&Envelope { req_id: 1, body: &req }, &mut out).is_err());
    }

    #[test]
    fn a_long_sequence_length_reserves_nothing_and_is_left_to_serde() {
        let mut bytes = encoded(1, &Response::Counts(vec![]));
        bytes.pop(); // the empty length
        bytes.extend_from_slice(&[253, 0, 0, 0, 0, 0, 0, 0, 1]);
        assert!(reply_envelope(&bytes).is_none());
        assert!(by_serde(&bytes).is_none());
    }

    proptest! {
        #[test]
        fn writes_every_request_it_knows_as_serde_does(req_id in any::<u64>(), req in request()) {
            let mut fast = vec![9];
            prop_assert!(encode_request_body(req_id, &req, &mut fast));
            prop_assert_eq!(&fast[1..], &codec::to_bytes(&Envelope { req_id, body: &req }).unwrap()[..]);
            let (mut framed, mut by_serde) = (vec![], vec![]);
            frame::encode_request(req_id, &req, &mut framed).unwrap();
            encode_frame(&Envelope { req_id, body: &req }, &mut by_serde).unwrap();
            prop_assert_eq!(framed, by_serde);
        }

        #[test]
        fn reads_every_reply_it_knows_as_serde_does(req_id in any::<u64>(), body in reply()) {
            let bytes = encoded(req_id, &body);
            let fast = reply_envelope(&bytes);
            prop_assert_eq!(&fast, &Some(Envelope { req_id, body }));
            prop_assert_eq!(fast, by_serde(&bytes));
        }

        /// Broken input: a cut, a changed byte, an added byte. Whatever the
        /// fast decoder answers, serde answers the same.
        #[test]
        fn never_disagrees_with_serde_on_broken_replies(
            req_id in any::<u64>(),
            body in reply(),
            at in any::<prop::sample::Index>(),
            byte in any::<u8>(),
            how in 0..3u8,
        ) {
            let bytes = broken(encoded(req_id, &body), at, byte, how);
            if let Some(fast) = reply_envelope(&bytes) {
                prop_assert_eq!(Some(fast), by_serde(&bytes));
            }
        }

        #[test]
        fn never_disagrees_with_serde_on_any_bytes(
            variant in prop::sample::select(vec![
                LIKE_REPLY_VARIANT, rep::STATUS_VARIANT, rep::COUNTS_VARIANT,
                rep::SCORE_VARIANT, rep::QUERY_VARIANT,
            ]),
            bytes in prop::collection::vec(any::<u8>(), 0..64),
        ) {
            for b in led_by(variant as u8, &bytes) {
                if let Some(fast) = reply_envelope(&b) {
                    prop_assert_eq!(Some(fast), by_serde(&b));
                }
            }
        }
    }
}
