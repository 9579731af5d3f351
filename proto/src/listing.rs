//! Paged listings of the registry: businesses and ranking definitions, in
//! id order, one page per request.
//!
//! A reply must fit one frame (`MAX_FRAME_LEN`, 1 MiB). Businesses are
//! small (under ~80 bytes), but a ranking's filter lists may hold 10,000
//! values each, ~450 KB for one definition, so a page is cut by count
//! (`limit`, at most `MAX_LIST_PAGE`) *and* by size: items are added while
//! their encoded bytes stay within `LIST_PAGE_BYTES`, and a page always
//! holds at least one item (one definition fits a frame: it arrived in one).
//!
//! The cursor is the id of the last item of the page (`next`); the next
//! page starts after it, so items created or changed meanwhile are seen
//! once, in id order, and a page never repeats one.
//!
//! `Request::ListBiz` and `Request::ListRanks` (the whole list in one reply)
//! stay for old callers; a node answers them `BadRequest` when the list no
//! longer fits a frame.

use crate::business::Business;
use crate::codec;
use crate::error::WireError;
use crate::ids::BizId;
use crate::limits::MAX_FRAME_LEN;
use crate::rankings::{RankDef, RankId};
use serde::{Deserialize, Serialize};

/// Most items one page may ask for.
pub const MAX_LIST_PAGE: u32 = 1000;
/// Encoded bytes of items a page stops at (after its first item): half a
/// frame, leaving ample room for the envelope.
pub const LIST_PAGE_BYTES: usize = MAX_FRAME_LEN / 2;

/// One page of a registry listing: up to `limit` items with ids above `after`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListPage {
    pub after: Option<u32>,
    pub limit: u32,
}

impl ListPage {
    /// The first page of the largest size.
    pub fn first() -> ListPage {
        ListPage { after: None, limit: MAX_LIST_PAGE }
    }

    pub fn validate(&self) -> Result<(), WireError> {
        if self.limit == 0 || self.limit > MAX_LIST_PAGE {
            return Err(WireError::bad_request(format!("limit must be in 1..={MAX_LIST_PAGE}")));
        }
        Ok(())
    }
}

/// Businesses in id order; `next` is the `after` of the next page, `None`
/// on the last.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BizPage {
    pub items: Vec<Business>,
    pub next: Option<BizId>,
}

/// Ranking definitions in id order, paged like [`BizPage`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RankPage {
    pub items: Vec<RankDef>,
    pub next: Option<RankId>,
}

/// Cuts one page from `items` (id order, every id above the cursor): up to
/// `limit` items while their encoded size stays within `budget` bytes, at
/// least one. Returns the page and its `next` cursor, which is set when an
/// item was left out. Pure; the node passes the registry's items.
pub fn cut<T: Serialize>(
    items: impl IntoIterator<Item = (u32, T)>,
    limit: u32,
    budget: usize,
) -> Result<(Vec<T>, Option<u32>), WireError> {
    let mut page = Vec::new();
    let mut last = None;
    let mut bytes = 0usize;
    for (id, item) in items {
        let size = codec::to_bytes(&item).map_err(|e| WireError::internal(e.to_string()))?.len();
        let full = page.len() >= limit as usize || (!page.is_empty() && bytes + size > budget);
        if full {
            return Ok((page, last));
        }
        bytes += size;
        last = Some(id);
        page.push(item);
    }
    Ok((page, None))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Items of the given encoded sizes (a `Vec<u8>` of n bytes encodes to
    /// n + 1 while n < 251), ids 1, 2, ...
    fn items(sizes: &[usize]) -> Vec<(u32, Vec<u8>)> {
        sizes.iter().enumerate().map(|(i, &n)| (i as u32 + 1, vec![0u8; n - 1])).collect()
    }

    #[test]
    fn a_page_stops_at_the_limit_or_the_budget_and_holds_one_item_at_least() {
        let (page, next) = cut(items(&[10, 10, 10]), 2, 1000).unwrap();
        assert_eq!((page.len(), next), (2, Some(2)));
        let (page, next) = cut(items(&[10, 10, 10]), 5, 25).unwrap();
        assert_eq!((page.len(), next), (2, Some(2)), "a third would pass 25 bytes");
        let (page, next) = cut(items(&[100, 10]), 5, 25).unwrap();
        assert_eq!((page.len(), next), (1, Some(1)), "one oversized item still makes a page");
        let (page, next) = cut(items(&[10, 10]), 2, 1000).unwrap();
        assert_eq!((page.len(), next), (2, None), "nothing left: the last page");
        let (page, next) = cut(items(&[]), 2, 1000).unwrap();
        assert_eq!((page.len(), next), (0, None));
    }

    #[test]
    fn page_sizes_are_bounded() {
        assert!(ListPage { after: None, limit: 0 }.validate().is_err());
        assert!(ListPage { after: None, limit: MAX_LIST_PAGE + 1 }.validate().is_err());
        assert!(ListPage::first().validate().is_ok());
    }

    proptest! {
        /// Following `next` from the first page yields every item once, in
        /// order, each page within its bounds.
        #[test]
        fn pages_cover_the_list_once(
            sizes in prop::collection::vec(2usize..120, 0..60),
            limit in 1u32..8,
            budget in 1usize..400,
        ) {
            let all = items(&sizes);
            let mut after = 0u32;
            let mut seen = Vec::new();
            loop {
                let rest: Vec<_> = all.iter().filter(|(id, _)| *id > after).cloned().collect();
                let (page, next) = cut(rest, limit, budget).unwrap();
                prop_assert!(page.len() <= limit as usize);
                let bytes: usize = page.iter().map(|v| v.len() + 1).sum();
                prop_assert!(page.len() <= 1 || bytes <= budget, "{} bytes", bytes);
                seen.extend(page);
                match next {
                    Some(n) => after = n,
                    None => break,
                }
            }
            let want: Vec<Vec<u8>> = all.into_iter().map(|(_, v)| v).collect();
            prop_assert_eq!(seen, want);
        }
    }
}
