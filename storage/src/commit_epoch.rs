//! A shard's commit epoch (`CountsCache::epoch`): odd while
//! `StateStore::stage` applies a write set, even between two. The read
//! caches of counts and states use it twice:
//!
//! - a read that missed installs what it read only if no commit of the
//!   shard ran meanwhile (`fill_counts`, `get_states`), so an older value
//!   never replaces a newer one;
//! - a read of the store itself runs between two commits
//!   ([`read_between`]): at an even epoch that is the same after the read.
//!
//! Why the second: `stage` writes the store first and the caches after it
//! (write-through), both inside its odd epoch. A store read inside that
//! window saw the commit while a cache hit still showed the value before
//! it, so a client's second read could go back: the counts cache's stress
//! test (`reads_beside_commits_never_go_back`) saw a count of 738 after 739
//! in about one run in 40 on a loaded CPU, and a `status` of fewer than
//! four entities (read from the store) could likewise be followed by an
//! older state from the states cache. Now every store read is wholly before
//! a commit or wholly after its write-through, and a hit during a commit
//! shows the value before it or, once written through, after it, never
//! after a reader already saw the newer one.

use std::sync::atomic::{fence, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// A commit in progress: the epoch is odd from `begin` until this is
/// dropped, also if the commit unwinds (a reader waiting for an even epoch
/// must not wait for ever).
pub(crate) struct Committing<'a>(&'a AtomicU64);

impl<'a> Committing<'a> {
    pub(crate) fn begin(epoch: &'a AtomicU64) -> Committing<'a> {
        // AcqRel: the commit's writes cannot move before the odd epoch.
        epoch.fetch_add(1, Ordering::AcqRel);
        Committing(epoch)
    }
}

impl Drop for Committing<'_> {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::AcqRel);
    }
}

/// The longest a read waits for a point between commits. A commit holds
/// the epoch odd for a few map writes (microseconds, or a descheduled
/// thread's few milliseconds); a snapshot install holds it for as long as
/// it loads the shard, and a read that comes then is answered from the
/// state as it is at that moment, uncached, rather than hold a runtime
/// thread for seconds.
const MAX_WAIT: Duration = Duration::from_millis(20);

/// Runs `read` until it ran between two commits, and returns what it read
/// with the epoch it ran at: an odd epoch if it gave up waiting after
/// [`MAX_WAIT`], which no fill accepts. A commit is a few map writes under
/// locks the reader does not hold, so the wait is short: a few spins, then
/// the CPU is given up (the committing thread may need it, on one core).
pub(crate) fn read_between<T, E>(
    epoch: &AtomicU64,
    mut read: impl FnMut() -> Result<T, E>,
) -> Result<(T, u64), E> {
    let mut tries = 0u32;
    let mut since: Option<Instant> = None;
    loop {
        let before = epoch.load(Ordering::Acquire);
        if before.is_multiple_of(2) {
            let out = read()?;
            // The read's loads stay before the second look (a seqlock's
            // reader): a commit's write it saw means an epoch past `before`.
            fence(Ordering::Acquire);
            if epoch.load(Ordering::Relaxed) == before {
                return Ok((out, before));
            }
        }
        let waited = since.get_or_insert_with(Instant::now).elapsed();
        if waited >= MAX_WAIT {
            return Ok((read()?, 1));
        }
        tries += 1;
        if tries < 64 {
            std::hint::spin_loop();
        } else {
            std::thread::yield_now();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::test_store as store;
    use crate::{CountsRec, StateStore, WriteSet};
    use plaudit_proto::LikeState;
    use std::sync::Arc;

    /// How long a read is given to (wrongly) finish inside a commit: less
    /// than it waits before it gives up.
    const INSIDE: Duration = Duration::from_millis(10);

    fn commit(s: &StateStore, likes: u64) {
        let mut ws = WriteSet::new(0);
        ws.put_counts(1, 0, 5, CountsRec { likes, dislikes: 0, owner: None });
        ws.put_state(1, 0, 7, 5, LikeState::Like, likes);
        ws.put_applied(0, b"x");
        s.stage(ws);
    }

    /// Starts `read` on a thread while shard 0 is inside a commit, checks
    /// that it has not returned after a while, ends the commit and returns
    /// what the read gave. A look that came after `MAX_WAIT` (this thread
    /// overslept on a loaded machine) proves nothing and is tried again.
    fn read_inside_a_commit<T: Send + 'static>(
        s: &Arc<StateStore>,
        read: impl Fn(&StateStore) -> T + Send + Sync + Clone + 'static,
    ) -> T {
        for _ in 0..20 {
            let committing = Committing::begin(s.counts_cache.epoch(0));
            let start = std::time::Instant::now();
            let reader = {
                let (s, read) = (s.clone(), read.clone());
                std::thread::spawn(move || read(&s))
            };
            std::thread::sleep(INSIDE);
            let finished = reader.is_finished();
            let in_time = start.elapsed() < MAX_WAIT;
            drop(committing);
            let got = reader.join().unwrap();
            if in_time {
                assert!(!finished, "a read of the store returned inside a commit of its shard");
                return got;
            }
        }
        panic!("never looked within {MAX_WAIT:?} of a commit's start");
    }

    #[test]
    fn a_counts_read_that_misses_waits_for_the_commit_to_end() {
        let (_d, s) = store();
        let s = Arc::new(s);
        commit(&s, 1);
        s.counts_cache.drop_shard(0);
        let got = read_inside_a_commit(&s, |s| s.get_counts(1, 0, 5).unwrap());
        assert_eq!(got.likes, 1);
        // What it read was installed: no commit ran during the read.
        assert_eq!(s.counts_cache.get((1, 0, 5)).map(|c| c.likes), Some(1));
    }

    #[test]
    fn a_state_read_from_the_store_waits_for_the_commit_to_end() {
        let (_d, s) = store();
        let s = Arc::new(s);
        commit(&s, 1);
        let one = read_inside_a_commit(&s, |s| s.get_state(1, 0, 7, 5).unwrap());
        assert_eq!(one, Some((LikeState::Like, 1)));
        // A status of four or more entities walks the user's states.
        let walked = read_inside_a_commit(&s, |s| s.get_states(1, 0, 7, &[5, 6, 8, 9]).unwrap());
        assert_eq!(walked[0], Some((LikeState::Like, 1)));
    }

    #[test]
    fn a_hit_does_not_wait_for_a_commit() {
        let (_d, s) = store();
        commit(&s, 1);
        assert_eq!(s.get_counts(1, 0, 5).unwrap().likes, 1); // cached by the write-through
        let _committing = Committing::begin(s.counts_cache.epoch(0));
        assert_eq!(s.get_counts(1, 0, 5).unwrap().likes, 1);
    }

    /// A snapshot install holds the epoch odd while it loads: a read then
    /// is answered after `MAX_WAIT` from the state as it is, and not cached.
    #[test]
    fn a_read_inside_a_long_hold_gives_up_waiting_and_caches_nothing() {
        let (_d, s) = store();
        commit(&s, 3);
        s.counts_cache.drop_shard(0);
        let _installing = Committing::begin(s.counts_cache.epoch(0));
        let start = std::time::Instant::now();
        assert_eq!(s.get_counts(1, 0, 5).unwrap().likes, 3);
        assert!(start.elapsed() >= MAX_WAIT);
        assert_eq!(s.counts_cache.get((1, 0, 5)), None, "an odd epoch is never filled");
    }

    #[test]
    fn an_unwinding_commit_still_ends() {
        let epoch = AtomicU64::new(0);
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _c = Committing::begin(&epoch);
            panic!("a commit fails half way");
        }));
        assert!(r.is_err());
        assert_eq!(epoch.load(Ordering::SeqCst), 2);
        let (v, at) = read_between(&epoch, || Ok::<_, ()>(7)).unwrap();
        assert_eq!((v, at), (7, 2));
    }

    #[test]
    fn a_read_that_a_commit_overlapped_is_run_again() {
        let epoch = AtomicU64::new(4);
        let mut runs = 0;
        let (v, at) = read_between(&epoch, || {
            runs += 1;
            if runs == 1 {
                // A whole commit lands during the first read.
                drop(Committing::begin(&epoch));
            }
            Ok::<_, ()>(runs)
        })
        .unwrap();
        assert_eq!((v, at), (2, 6));
    }
}
