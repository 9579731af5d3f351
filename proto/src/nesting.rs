//! A bound on how deeply requests (and replies) may nest while they are
//! decoded.
//!
//! `Stale` and `Once` wrap another request, and a `Stale` reply another
//! reply; the decoder recurses once per level, one byte of input each. A
//! 500 KB frame of nested `Stale`s overflowed a node's stack and aborted
//! the process, before any check of who sent it. Decoding now fails past
//! [`MAX_NESTING`] levels, which the frame's sender gets as a `BadRequest`
//! like any malformed frame. Meaningful requests nest at most twice (a
//! `Once` or `Stale` around a plain request, forwarded as is).

use serde::de::{Deserialize, Deserializer, Error};
use std::cell::Cell;

/// Most wrapped levels a decoded request or reply may have.
pub const MAX_NESTING: u32 = 8;

thread_local! {
    /// Levels being decoded on this thread right now (decoding recurses on
    /// one thread and never yields).
    static DEPTH: Cell<u32> = const { Cell::new(0) };
}

/// Leaves one level, also when decoding it failed.
struct Level;

impl Drop for Level {
    fn drop(&mut self) {
        DEPTH.with(|d| d.set(d.get().saturating_sub(1)));
    }
}

/// `deserialize_with` for a boxed inner request or reply.
pub fn nested<'de, D, T>(d: D) -> Result<Box<T>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    let depth = DEPTH.with(|c| {
        let n = c.get() + 1;
        c.set(n);
        n
    });
    let _level = Level;
    if depth > MAX_NESTING {
        return Err(D::Error::custom(format!("requests nest more than {MAX_NESTING} levels deep")));
    }
    Box::<T>::deserialize(d)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec;
    use crate::message::{Request, Response};

    fn stale(levels: u32, inner: Request) -> Request {
        (0..levels).fold(inner, |r, _| Request::Stale(Box::new(r)))
    }

    #[test]
    fn nesting_up_to_the_bound_decodes_and_beyond_it_fails_cleanly() {
        let ok = stale(MAX_NESTING, Request::Ping);
        let bytes = codec::to_bytes(&ok).unwrap();
        assert_eq!(codec::from_bytes::<Request>(&bytes).unwrap(), ok);
        let deep = codec::to_bytes(&stale(MAX_NESTING + 1, Request::Ping)).unwrap();
        let err = codec::from_bytes::<Request>(&deep).unwrap_err();
        assert!(err.to_string().contains("nest"), "{err}");
        // The failure left no level behind: the next decode starts at 0.
        assert_eq!(DEPTH.with(Cell::get), 0);
        assert_eq!(codec::from_bytes::<Request>(&bytes).unwrap(), ok);
    }

    #[test]
    fn a_million_levels_fail_without_exhausting_the_stack() {
        // Stale's variant index repeated, then Ping: what an attacker sends.
        let stale_tag = codec::to_bytes(&Request::Stale(Box::new(Request::Ping))).unwrap()[0];
        let mut bytes = vec![stale_tag; 1_000_000];
        bytes.push(0);
        assert!(codec::from_bytes::<Request>(&bytes).is_err());
        let once = Request::Once { id: 1, req: Box::new(stale(MAX_NESTING, Request::Ping)) };
        assert!(codec::from_bytes::<Request>(&codec::to_bytes(&once).unwrap()).is_err());
    }

    #[test]
    fn stale_replies_are_bounded_too() {
        let reply = (0..=MAX_NESTING)
            .fold(Response::Pong, |r, _| Response::Stale { lag: 0, reply: Box::new(r) });
        assert!(codec::from_bytes::<Response>(&codec::to_bytes(&reply).unwrap()).is_err());
    }
}
