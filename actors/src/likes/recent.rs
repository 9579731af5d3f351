//! The newest part of a list (a user's likes, an entity's likers) kept in
//! memory while its actor is active. It always holds exactly the newest `k`
//! items of the full list for some `k <= cap`; `complete` says whether that is
//! the whole list. Pages that fit inside it are served from memory, the rest
//! from storage.

use plaudit_proto::likes::{ListItem, PageCursor};
use std::collections::VecDeque;

#[derive(Debug, Clone)]
pub struct Recent {
    /// Newest first, ordered by `(mtime, id)` descending.
    items: VecDeque<ListItem>,
    cap: usize,
    complete: bool,
}

fn key(i: &ListItem) -> (u64, u64) {
    (i.mtime, i.id)
}

impl Recent {
    /// From the newest items in storage; pass up to `cap + 1` so the window
    /// can tell whether it holds the whole list.
    pub fn from_loaded(mut loaded: Vec<ListItem>, cap: usize) -> Recent {
        let complete = loaded.len() <= cap;
        loaded.truncate(cap);
        Recent { items: loaded.into(), cap, complete }
    }

    pub fn len(&self) -> usize {
        self.items.len()
    }

    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// Records an item that is newer than or equal to everything seen.
    pub fn insert(&mut self, item: ListItem) {
        let pos = self.items.iter().position(|i| key(i) < key(&item)).unwrap_or(self.items.len());
        if pos == self.items.len() && !self.complete {
            // Older than the window's tail and the window is partial: the
            // item belongs to the part in storage only.
            return;
        }
        self.items.insert(pos, item);
        if self.items.len() > self.cap {
            self.items.pop_back();
            self.complete = false;
        }
    }

    pub fn remove(&mut self, item: ListItem) {
        if let Some(pos) = self.items.iter().position(|i| *i == item) {
            self.items.remove(pos);
        }
    }

    /// The page after `after`, if the window can answer it alone.
    pub fn page(&self, after: Option<PageCursor>, limit: usize) -> Option<Vec<ListItem>> {
        let start = match after {
            None => 0,
            Some(c) => {
                let tail = self.items.back().map(key);
                // A cursor older than the window's tail lies in storage.
                if !self.complete && tail.is_none_or(|t| (c.mtime, c.id) <= t) {
                    return None;
                }
                self.items.iter().position(|i| key(i) < (c.mtime, c.id)).unwrap_or(self.items.len())
            }
        };
        let available = self.items.len() - start;
        if available < limit && !self.complete {
            return None;
        }
        Some(self.items.iter().skip(start).take(limit).copied().collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn item(mtime: u64, id: u64) -> ListItem {
        ListItem { id, mtime }
    }

    /// The reference: the full list, newest first.
    fn reference_page(all: &[ListItem], after: Option<PageCursor>, limit: usize) -> Vec<ListItem> {
        let mut v = all.to_vec();
        v.sort_by_key(|i| std::cmp::Reverse(key(i)));
        v.into_iter()
            .filter(|i| after.is_none_or(|c| key(i) < (c.mtime, c.id)))
            .take(limit)
            .collect()
    }

    proptest! {
        /// Whatever the window answers equals the full list's page.
        #[test]
        fn window_pages_match_the_full_list(
            n in 0usize..40, cap in 1usize..10, removes in proptest::collection::vec(0usize..40, 0..10),
            limit in 1usize..8, cursor_at in 0usize..40,
        ) {
            let mut all: Vec<ListItem> = (0..n).map(|i| item(i as u64 / 2, i as u64)).collect();
            // Load the window from the oldest half, then insert the rest as new likes.
            let half = n / 2;
            let mut stored: Vec<ListItem> = all[..half].to_vec();
            stored.sort_by_key(|i| std::cmp::Reverse(key(i)));
            let mut w = Recent::from_loaded(stored.into_iter().take(cap + 1).collect(), cap);
            for i in &all[half..] {
                w.insert(*i);
            }
            for r in removes {
                if r < all.len() {
                    let it = all.remove(r);
                    w.remove(it);
                }
            }
            let mut sorted = all.clone();
            sorted.sort_by_key(|i| std::cmp::Reverse(key(i)));
            let after = sorted.get(cursor_at).map(|i| PageCursor { mtime: i.mtime, id: i.id });
            for c in [None, after] {
                if let Some(page) = w.page(c, limit) {
                    prop_assert_eq!(page, reference_page(&all, c, limit));
                }
            }
            // A first page within a complete window is always answered.
            if w.complete {
                prop_assert!(w.page(None, limit).is_some());
            }
        }
    }

    #[test]
    fn partial_window_defers_to_storage_past_its_tail() {
        let stored: Vec<_> = (0..5).rev().map(|i| item(i, i)).collect();
        let w = Recent::from_loaded(stored, 3);
        assert_eq!(w.len(), 3);
        assert_eq!(w.page(None, 3).unwrap().len(), 3);
        assert!(w.page(None, 4).is_none());
        assert!(w.page(Some(PageCursor { mtime: 2, id: 2 }), 1).is_none());
    }
}
