//! A hand-written decoder for the requests a busy node reads most: a
//! scoring event (`Request::Score`), a board query (`Request::Query`), and
//! a like, a status and a counts request.
//!
//! Why: bincode's serde path (a visitor per struct, field and enum) was 7%
//! of the node's core on hot scoring and 3.5% on the rankings mix (perf),
//! for about a dozen varints; a counts or status request is twenty entity
//! ids through a sequence visitor (about 3% of the likes mix). This reads
//! the same bytes directly.
//!
//! The serde decoder stays the definition of the format. This one answers
//! only for an envelope holding one of those requests whose every
//! field it understands, with no byte left over; anything else (another
//! request, an integer tag it does not expect, bad UTF-8, trailing bytes)
//! it leaves to the serde decoder, which then decodes it or reports the
//! error exactly as before. Where it does answer, it reads what bincode's
//! standard configuration reads: little-endian varints (a byte below 251
//! is the value; 251, 252 and 253 announce a `u16`, `u32` or `u64`),
//! zigzag for signed integers, an enum's variant index as a `u32` varint,
//! one tag byte (0 or 1) for an `Option`, a varint length before a string
//! or a sequence. The tests check that, on valid and broken input alike,
//! it never answers differently from the serde decoder.

use crate::likes::{CountsRequest, LikeAction, LikeRequest, StatusRequest};
use crate::message::{Envelope, Request};
use crate::scoring::{BoardQuery, BoardRef, QueryRequest, ScoreRequest, MAX_SCORE_BATCH};
use crate::varint::Cursor;
use crate::window::Granularity;

/// The variant indexes of the requests read here (their positions in the
/// enum); a test checks them against the serde encoding.
pub(crate) const LIKE_VARIANT: u32 = 5;
pub(crate) const STATUS_VARIANT: u32 = 6;
pub(crate) const COUNTS_VARIANT: u32 = 7;
pub(crate) const SCORE_VARIANT: u32 = 15;
pub(crate) const QUERY_VARIANT: u32 = 16;

/// The envelope in `body` (a payload without its version byte), if it holds
/// a request this decoder reads in full; `None` leaves it to serde.
pub(crate) fn request_envelope(body: &[u8]) -> Option<Envelope<Request>> {
    let mut c = Cursor(body);
    let req_id = c.u64()?;
    let body = match c.u32()? {
        LIKE_VARIANT => Request::Like(like(&mut c)?),
        STATUS_VARIANT => {
            let (biz, user) = (c.u32()?, c.u64()?);
            Request::Status(StatusRequest { biz, user, entities: c.ids()? })
        }
        COUNTS_VARIANT => {
            let biz = c.u32()?;
            Request::Counts(CountsRequest { biz, entities: c.ids()? })
        }
        SCORE_VARIANT => Request::Score(score(&mut c)?),
        QUERY_VARIANT => Request::Query(query(&mut c)?),
        _ => return None,
    };
    if !c.0.is_empty() {
        return None;
    }
    Some(Envelope { req_id, body })
}

fn like(c: &mut Cursor<'_>) -> Option<LikeRequest> {
    let biz = c.u32()?;
    let entity = c.u64()?;
    let user = c.u64()?;
    let owner = c.option_u64()?;
    let action = *LikeAction::ALL.get(usize::try_from(c.u32()?).ok()?)?;
    Some(LikeRequest { biz, entity, user, owner, action })
}

fn score(c: &mut Cursor<'_>) -> Option<ScoreRequest> {
    let rank = c.u32()?;
    let item = c.u64()?;
    let score = c.i64()?;
    let sub = match c.byte()? {
        0 => None,
        1 => Some(c.u32()?),
        _ => return None,
    };
    let dims = c.dims()?;
    let ts = c.i64()?;
    let event_id = c.u64()?;
    Some(ScoreRequest { rank, item, score, sub, dims, ts, event_id })
}

fn query(c: &mut Cursor<'_>) -> Option<QueryRequest> {
    let rank = c.u32()?;
    let board = match c.u32()? {
        0 => BoardRef::TypeId(c.string()?),
        1 => {
            let dims = c.dims()?;
            let granularity = *Granularity::ALL.get(usize::try_from(c.u32()?).ok()?)?;
            BoardRef::At { dims, granularity, ts: c.i64()? }
        }
        _ => return None,
    };
    let query = match c.u32()? {
        0 => BoardQuery::Top { offset: c.u32()?, limit: c.u32()? },
        1 => BoardQuery::RankOf { item: c.u64()? },
        2 => BoardQuery::Around { item: c.u64()?, k: c.u32()? },
        3 => {
            let n = c.u64()?;
            // Longer batches are refused later; serde decodes them for that.
            if n > MAX_SCORE_BATCH as u64 {
                return None;
            }
            let items = (0..n).map(|_| c.u64()).collect::<Option<Vec<_>>>()?;
            BoardQuery::Scores { items }
        }
        4 => BoardQuery::Size,
        _ => return None,
    };
    Some(QueryRequest { rank, board, query })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::codec;
    use crate::limits::MAX_BATCH;
    use crate::rankings::MAX_DIMS;
    use crate::varint::fuzz::{broken, led_by};
    use proptest::prelude::*;

    fn encoded(req_id: u64, body: &Request) -> Vec<u8> {
        codec::to_bytes(&Envelope { req_id, body: body.clone() }).unwrap()
    }

    fn sample() -> Request {
        Request::Score(ScoreRequest {
            rank: 903,
            item: 77,
            score: -5,
            sub: Some(3),
            dims: vec![("room".into(), 9), ("país".into(), u64::MAX)],
            ts: 1_764_000_000,
            event_id: 1 << 40,
        })
    }

    /// What the serde decoder makes of `body`, as the fast one would say it.
    fn by_serde(body: &[u8]) -> Option<Envelope<Request>> {
        codec::from_bytes::<Envelope<Request>>(body).ok()
    }

    #[test]
    fn the_variant_indexes_are_scores_and_queries() {
        // req_id 7 is one byte; the variant index follows.
        assert_eq!(u32::from(encoded(7, &sample())[1]), SCORE_VARIANT);
        let q = Request::Query(QueryRequest {
            rank: 1,
            board: BoardRef::TypeId("total".into()),
            query: BoardQuery::Size,
        });
        assert_eq!(u32::from(encoded(7, &q)[1]), QUERY_VARIANT);
        let like = Request::Like(LikeRequest {
            biz: 1,
            entity: 2,
            user: 3,
            owner: None,
            action: LikeAction::Like,
        });
        assert_eq!(u32::from(encoded(7, &like)[1]), LIKE_VARIANT);
        let status = Request::Status(StatusRequest { biz: 1, user: 2, entities: vec![] });
        assert_eq!(u32::from(encoded(7, &status)[1]), STATUS_VARIANT);
        let counts = Request::Counts(CountsRequest { biz: 1, entities: vec![] });
        assert_eq!(u32::from(encoded(7, &counts)[1]), COUNTS_VARIANT);
    }

    #[test]
    fn like_actions_are_read_by_their_index() {
        for action in LikeAction::ALL {
            let like = Request::Like(LikeRequest {
                biz: 9,
                entity: u64::MAX,
                user: 251,
                owner: Some(0),
                action,
            });
            let bytes = encoded(1, &like);
            assert_eq!(request_envelope(&bytes), Some(Envelope { req_id: 1, body: like }));
        }
    }

    #[test]
    fn granularities_are_read_by_their_index() {
        for g in Granularity::ALL {
            let q = Request::Query(QueryRequest {
                rank: 1,
                board: BoardRef::At { dims: vec![], granularity: g, ts: -1 },
                query: BoardQuery::Top { offset: 0, limit: 10 },
            });
            let bytes = encoded(1, &q);
            assert_eq!(request_envelope(&bytes), Some(Envelope { req_id: 1, body: q }));
        }
    }

    #[test]
    fn wide_and_unusual_varints_read_as_serde_reads_them() {
        let mut bytes = encoded(5, &sample());
        // req_id 5 written the long way (tag 251, then a u16): serde takes it.
        bytes.splice(0..1, [251, 5, 0]);
        assert_eq!(request_envelope(&bytes), by_serde(&bytes));
        assert!(request_envelope(&bytes).is_some());
        // A u64 tag (253) where a u32 (the variant index) belongs: an error
        // for serde, so left to it.
        let mut bad = encoded(5, &sample());
        bad.splice(1..2, [253, 15, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(request_envelope(&bad), None);
        assert_eq!(by_serde(&bad), None);
    }

    #[test]
    fn other_requests_are_left_to_serde() {
        for body in [Request::Ping, Request::ListRanks, Request::Routing] {
            assert!(request_envelope(&encoded(1, &body)).is_none());
        }
    }

    #[test]
    fn a_trailing_byte_is_left_to_serde() {
        let mut bytes = encoded(7, &sample());
        bytes.push(0);
        assert!(request_envelope(&bytes).is_none());
        assert!(by_serde(&bytes).is_none());
    }

    #[test]
    fn too_many_dims_or_items_are_left_to_serde() {
        let Request::Score(mut r) = sample() else { unreachable!() };
        r.dims = (0..=MAX_DIMS as u64).map(|i| (format!("d{i}"), i)).collect();
        let q = Request::Query(QueryRequest {
            rank: 1,
            board: BoardRef::TypeId("total".into()),
            query: BoardQuery::Scores { items: (0..=MAX_SCORE_BATCH as u64).collect() },
        });
        let long: Vec<u64> = (0..=MAX_BATCH as u64).collect();
        let counts = Request::Counts(CountsRequest { biz: 1, entities: long.clone() });
        let status = Request::Status(StatusRequest { biz: 1, user: 2, entities: long });
        for body in [Request::Score(r), q, counts, status] {
            let bytes = encoded(1, &body);
            assert!(request_envelope(&bytes).is_none());
            // Serde decodes it; validation refuses it later.
            assert!(by_serde(&bytes).is_some());
        }
    }

    fn dims() -> impl Strategy<Value = Vec<(String, u64)>> {
        prop::collection::vec((".{0,12}", any::<u64>()), 0..=MAX_DIMS)
    }

    fn score_request() -> impl Strategy<Value = Request> {
        let ints = (any::<u32>(), any::<u64>(), any::<i64>(), any::<Option<u32>>());
        (ints, dims(), any::<i64>(), any::<u64>()).prop_map(
            |((rank, item, score, sub), dims, ts, event_id)| {
                Request::Score(ScoreRequest { rank, item, score, sub, dims, ts, event_id })
            },
        )
    }

    fn query_request() -> impl Strategy<Value = Request> {
        let board = prop_oneof![
            ".{0,20}".prop_map(BoardRef::TypeId),
            (dims(), prop::sample::select(Granularity::ALL.to_vec()), any::<i64>())
                .prop_map(|(dims, granularity, ts)| BoardRef::At { dims, granularity, ts }),
        ];
        let query = prop_oneof![
            (any::<u32>(), any::<u32>())
                .prop_map(|(offset, limit)| BoardQuery::Top { offset, limit }),
            any::<u64>().prop_map(|item| BoardQuery::RankOf { item }),
            (any::<u64>(), any::<u32>()).prop_map(|(item, k)| BoardQuery::Around { item, k }),
            prop::collection::vec(any::<u64>(), 0..8)
                .prop_map(|items| BoardQuery::Scores { items }),
            Just(BoardQuery::Size),
        ];
        (any::<u32>(), board, query)
            .prop_map(|(rank, board, query)| Request::Query(QueryRequest { rank, board, query }))
    }

    fn likes_request() -> impl Strategy<Value = Request> {
        let ids = || prop::collection::vec(any::<u64>(), 0..24);
        let action = prop::sample::select(LikeAction::ALL.to_vec());
        prop_oneof![
            (any::<u32>(), any::<u64>(), any::<u64>(), any::<Option<u64>>(), action).prop_map(
                |(biz, entity, user, owner, action)| {
                    Request::Like(LikeRequest { biz, entity, user, owner, action })
                }
            ),
            (any::<u32>(), any::<u64>(), ids()).prop_map(|(biz, user, entities)| {
                Request::Status(StatusRequest { biz, user, entities })
            }),
            (any::<u32>(), ids())
                .prop_map(|(biz, entities)| Request::Counts(CountsRequest { biz, entities })),
        ]
    }

    pub(crate) fn request() -> impl Strategy<Value = Request> {
        prop_oneof![score_request(), query_request(), likes_request()]
    }

    proptest! {
        #[test]
        fn reads_every_request_it_knows_as_serde_does(req_id in any::<u64>(), body in request()) {
            let bytes = encoded(req_id, &body);
            let fast = request_envelope(&bytes);
            prop_assert_eq!(&fast, &Some(Envelope { req_id, body }));
            prop_assert_eq!(fast, by_serde(&bytes));
        }

        /// Broken input: a cut, a changed byte, an added byte. Whatever the
        /// fast decoder answers, serde answers the same.
        #[test]
        fn never_disagrees_with_serde_on_broken_input(
            req_id in any::<u64>(),
            body in request(),
            at in any::<prop::sample::Index>(),
            byte in any::<u8>(),
            how in 0..3u8,
        ) {
            let bytes = broken(encoded(req_id, &body), at, byte, how);
            if let Some(fast) = request_envelope(&bytes) {
                prop_assert_eq!(Some(fast), by_serde(&bytes));
            }
        }

        #[test]
        fn never_disagrees_with_serde_on_any_bytes(
            variant in prop::sample::select(vec![
                LIKE_VARIANT, STATUS_VARIANT, COUNTS_VARIANT, SCORE_VARIANT, QUERY_VARIANT,
            ]),
            bytes in prop::collection::vec(any::<u8>(), 0..64),
        ) {
            for b in led_by(variant as u8, &bytes) {
                if let Some(fast) = request_envelope(&b) {
                    prop_assert_eq!(Some(fast), by_serde(&b));
                }
            }
        }
    }
}
