//! The merge of stored and staged entries that every scan of applied state
//! walks: the trees hold what the last checkpoint moved, the shard's overlay
//! (`pending.rs`) what was staged since, and a scan must see both as one
//! ordered state (see `StateStore::scan`).

use crate::state::Result;

/// Walks stored and staged entries together in key order (descending with
/// `rev`); a staged entry replaces the stored one of the same key, and a
/// staged deletion hides it.
pub(crate) fn merge<S, P>(
    mut stored: S,
    mut staged: P,
    rev: bool,
    mut f: impl FnMut(&[u8], &[u8]) -> Result<bool>,
) -> Result<()>
where
    S: Iterator<Item = (Vec<u8>, Vec<u8>)>,
    P: Iterator<Item = (Vec<u8>, Option<Vec<u8>>)>,
{
    use std::cmp::Ordering as O;
    let mut s = stored.next();
    let mut p = staged.next();
    loop {
        // Which comes first in walk order: the staged entry or the stored one?
        let staged_first = match (&s, &p) {
            (None, None) => return Ok(()),
            (None, Some(_)) => true,
            (Some(_), None) => false,
            (Some((sk, _)), Some((pk, _))) => {
                let o = pk.as_slice().cmp(sk.as_ref());
                let o = if rev { o.reverse() } else { o };
                if o == O::Equal {
                    s = stored.next(); // replaced by the staged entry
                }
                o != O::Greater
            }
        };
        let more = if staged_first {
            match p.take() {
                Some((k, Some(v))) => f(&k, &v)?,
                _ => true, // a staged deletion
            }
        } else {
            match s.take() {
                Some((k, v)) => f(&k, &v)?,
                None => true,
            }
        };
        if !more {
            return Ok(());
        }
        if staged_first {
            p = staged.next();
        } else {
            s = stored.next();
        }
    }
}
