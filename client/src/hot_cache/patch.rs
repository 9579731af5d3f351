//! A cached board answer brought up to date with this client's own
//! acknowledged score (pure). A score's answer names the member's total on
//! each board it scored; where that total decides the page without
//! guessing, the page is patched and stays cached, so a client that scores
//! a hot board more often than a read's round trip still reads it from its
//! cache and still reads its own writes. Where it would take a guess, the
//! page is dropped, as before.
//!
//! ```text
//! Top{offset 0}: a page of distinct scores, no sub-scores
//!   member on it, total up ─► moved up, ranks renumbered
//!   member off it, page full, total above its last ─► in, its last out
//!   member off it, total below its last ─► unchanged
//!   a total down, a tie with any row, a page not full (the board's size
//!   or cap unknown) ─► dropped
//! Scores{items} ─► the member's row set to its total
//! RankOf, Around, Size, any other page ─► dropped
//! ```
//!
//! Why ties drop: rows with equal scores are ordered by the ranking's tie
//! mode (who reached it first or last, or a sub-score), which the answer
//! does not say.

use plaudit_proto::rankings::ItemId;
use plaudit_proto::scoring::{BoardQuery, QueryReply, RankedItem};

/// `reply` (the answer to `query`) after `item`'s total on its board
/// became `score`; `None` when that cannot be told from the page.
pub(crate) fn patched(
    query: &BoardQuery,
    reply: &QueryReply,
    item: ItemId,
    score: i64,
) -> Option<QueryReply> {
    match (query, reply) {
        (BoardQuery::Top { offset: 0, limit }, QueryReply::Items { type_id, items }) => {
            let items = top(items, *limit as usize, item, score)?;
            Some(QueryReply::Items { type_id: type_id.clone(), items })
        }
        (BoardQuery::Scores { .. }, QueryReply::Scores(rows)) => Some(QueryReply::Scores(
            rows.iter()
                .map(|&(id, s)| if id == item { (id, Some(score)) } else { (id, s) })
                .collect(),
        )),
        _ => None,
    }
}

/// The first `limit` rows of a board (`rows`, best first) after `item`'s
/// total became `score`.
fn top(rows: &[RankedItem], limit: usize, item: ItemId, score: i64) -> Option<Vec<RankedItem>> {
    if rows.iter().any(|r| r.sub.is_some()) || rows.windows(2).any(|w| w[0].score <= w[1].score) {
        return None;
    }
    let mut rows = rows.to_vec();
    match rows.iter().position(|r| r.item == item) {
        Some(at) if score < rows[at].score => return None,
        Some(at) => {
            rows.remove(at);
        }
        // Not full: the board may hold fewer members than the page, or a
        // cap may keep it short; which, the page does not say.
        None if rows.len() < limit => return None,
        None => {
            let last = rows.last()?.score;
            if score < last {
                return Some(rows);
            }
            if score == last {
                return None;
            }
            rows.pop();
        }
    }
    if rows.iter().any(|r| r.score == score) {
        return None;
    }
    let at = rows.iter().position(|r| r.score < score).unwrap_or(rows.len());
    rows.insert(at, RankedItem { rank: 0, item, score, sub: None });
    for (i, r) in rows.iter_mut().enumerate() {
        r.rank = i as u64 + 1;
    }
    Some(rows)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A board: members with totals and the order they reached them; best
    /// first by total, then who reached it first, then member id (the
    /// `EarlierFirst` tie mode).
    #[derive(Debug, Clone)]
    struct Board {
        members: Vec<(ItemId, i64, u64)>,
    }

    impl Board {
        fn top(&self, limit: usize) -> Vec<RankedItem> {
            let mut m = self.members.clone();
            m.sort_by_key(|&(id, score, reached)| (std::cmp::Reverse(score), reached, id));
            m.iter()
                .take(limit)
                .enumerate()
                .map(|(i, &(item, score, _))| RankedItem {
                    rank: i as u64 + 1,
                    item,
                    score,
                    sub: None,
                })
                .collect()
        }

        fn set(&mut self, item: ItemId, score: i64, now: u64) {
            self.members.retain(|m| m.0 != item);
            self.members.push((item, score, now));
        }
    }

    fn items(rows: Vec<RankedItem>) -> QueryReply {
        QueryReply::Items { type_id: "total:0".into(), items: rows }
    }

    proptest! {
        /// Whatever the board and the event, a patched page is exactly the
        /// page the board would answer after the event.
        #[test]
        fn a_patched_top_page_is_the_page_after_the_event(
            scores in proptest::collection::vec(0i64..30, 0..20),
            limit in 1usize..8,
            item in 0u64..25,
            to in 0i64..40,
        ) {
            let mut board = Board {
                members: scores.iter().enumerate().map(|(i, &s)| (i as u64, s, i as u64)).collect(),
            };
            let q = BoardQuery::Top { offset: 0, limit: limit as u32 };
            let before = items(board.top(limit));
            board.set(item, to, 1_000);
            if let Some(p) = patched(&q, &before, item, to) {
                prop_assert_eq!(p, items(board.top(limit)));
            }
        }
    }

    #[test]
    fn a_total_that_decides_the_page_patches_it() {
        let row = |rank, item, score| RankedItem { rank, item, score, sub: None };
        let q = BoardQuery::Top { offset: 0, limit: 3 };
        let page = items(vec![row(1, 10, 50), row(2, 11, 40), row(3, 12, 30)]);
        // Up the page.
        let up = patched(&q, &page, 12, 45).unwrap();
        assert_eq!(up, items(vec![row(1, 10, 50), row(2, 12, 45), row(3, 11, 40)]));
        // Onto it, the last off.
        let on = patched(&q, &page, 99, 60).unwrap();
        assert_eq!(on, items(vec![row(1, 99, 60), row(2, 10, 50), row(3, 11, 40)]));
        // Below it: unchanged.
        assert_eq!(patched(&q, &page, 99, 20).unwrap(), page);
        // A tie, a total down, another page: dropped.
        assert_eq!(patched(&q, &page, 99, 40), None);
        assert_eq!(patched(&q, &page, 10, 45), None);
        assert_eq!(patched(&BoardQuery::Top { offset: 3, limit: 3 }, &page, 12, 45), None);
        assert_eq!(patched(&BoardQuery::Size, &QueryReply::Size(3), 12, 45), None);
        // A page shorter than its limit: the board's size is not known.
        let short = items(vec![row(1, 10, 50)]);
        assert_eq!(patched(&q, &short, 99, 60), None);
        assert!(patched(&q, &short, 10, 60).is_some(), "its own row moves within it");
        // Scores: the member's row only.
        let scores = QueryReply::Scores(vec![(7, Some(3)), (8, None)]);
        let asked = BoardQuery::Scores { items: vec![7, 8] };
        assert_eq!(
            patched(&asked, &scores, 8, 5),
            Some(QueryReply::Scores(vec![(7, Some(3)), (8, Some(5))]))
        );
    }
}
