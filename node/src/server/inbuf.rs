//! A connection's read buffer: bytes in, whole frame payloads out, and never
//! more memory than the bytes that actually arrived.
//!
//! ```text
//! socket ─read─> [ consumed | frame | frame | partial frame | spare ]
//!                  ^start                                   ^len    ^capacity
//! ```
//!
//! A frame's length prefix is checked before anything is reserved for it, and
//! a long frame's room is reserved as its bytes arrive (`room_wanted`), not
//! when it is announced: 2,000 connections that each announce 1 MiB and
//! stall hold 2,000 read chunks, not 2 GiB. Room beyond [`FREE_ROOM`] is
//! what the connection must first get from the node-wide frame budget (see
//! `conn.rs`); the buffer itself only computes, so it is tested here without
//! a socket.

use plaudit_proto::frame::FrameError;
use plaudit_proto::limits::MAX_FRAME_LEN;
use std::sync::Arc;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Bytes one read asks the socket for (and the room an idle buffer keeps).
pub const READ_CHUNK: usize = 16 * 1024;
/// Room every connection may use without asking the node-wide budget.
pub const FREE_ROOM: usize = 64 * 1024;
/// The most room one connection can ever need: one whole frame and a chunk.
pub const MAX_ROOM: usize = 4 + MAX_FRAME_LEN + READ_CHUNK;

#[derive(Debug, Default)]
pub struct InBuf {
    buf: Vec<u8>,
    /// Bytes before this are frames already handed out.
    start: usize,
}

impl InBuf {
    pub fn new() -> Self {
        InBuf::default()
    }

    /// Bytes received and not yet handed out as frames.
    pub fn pending(&self) -> usize {
        self.buf.len() - self.start
    }

    /// The room (capacity) this buffer needs for its next read: a read chunk
    /// beyond what it holds; while a long frame arrives, room that doubles
    /// with what arrived (so its bytes are copied O(1) times each) up to the
    /// whole frame. Never more than twice the bytes received plus a chunk.
    pub fn room_wanted(&self) -> usize {
        let pending = self.pending();
        let chunk_ahead = pending + READ_CHUNK;
        let wanted = match self.frame_total() {
            Some(total) if total > chunk_ahead => total.min(2 * pending + READ_CHUNK),
            _ => chunk_ahead,
        };
        wanted.min(MAX_ROOM)
    }

    /// The length (prefix included) of the frame that begins at `start`,
    /// once its prefix has arrived and is in bounds.
    fn frame_total(&self) -> Option<usize> {
        let head = self.buf.get(self.start..self.start + 4)?;
        let len = u32::from_be_bytes([head[0], head[1], head[2], head[3]]) as usize;
        (1..=MAX_FRAME_LEN).contains(&len).then_some(4 + len)
    }

    /// The room it has now.
    pub fn room(&self) -> usize {
        self.buf.capacity()
    }

    /// Makes room for `room_wanted` bytes: drops frames already handed out
    /// (moving the partial frame to the front) and grows only if that is
    /// not enough. The caller has made sure it may use that much.
    pub fn make_room(&mut self) {
        if self.start > 0 {
            self.buf.drain(..self.start);
            self.start = 0;
        }
        let wanted = self.room_wanted();
        if self.buf.capacity() < wanted {
            self.buf.reserve_exact(wanted - self.buf.len());
        }
    }

    /// Where reads append (its spare capacity is the room made above).
    pub fn vec(&mut self) -> &mut Vec<u8> {
        &mut self.buf
    }

    /// The next whole frame's payload, if one has arrived; `Err` if the
    /// length prefix is out of bounds (the stream cannot be resynchronised).
    pub fn next_frame(&mut self) -> Result<Option<&[u8]>, FrameError> {
        let avail = &self.buf[self.start..];
        let Some(head) = avail.get(..4) else { return Ok(None) };
        let len = u32::from_be_bytes([head[0], head[1], head[2], head[3]]) as usize;
        if len == 0 || len > MAX_FRAME_LEN {
            return Err(FrameError::BadLength(len));
        }
        if avail.len() < 4 + len {
            return Ok(None);
        }
        let begin = self.start + 4;
        self.start = begin + len;
        Ok(Some(&self.buf[begin..begin + len]))
    }

    /// The next whole frame's payload without handing it out (`None` if it
    /// has not all arrived, or its length is out of bounds).
    pub fn peek_frame(&self) -> Option<&[u8]> {
        let avail = &self.buf[self.start..];
        let total = self.frame_total()?;
        avail.get(4..total)
    }

    /// After the frames that arrived were handed out: forgets them, and
    /// gives back room above `keep` if nothing (or little) is pending, so a
    /// connection that once sent a long frame does not keep its room.
    pub fn settle(&mut self, keep: usize) {
        if self.start == self.buf.len() {
            self.buf.clear();
            self.start = 0;
        }
        if self.buf.capacity() > keep && self.pending() + READ_CHUNK <= keep {
            self.make_room_exact(keep);
        }
    }

    /// Gives back all room (an idle connection keeps none).
    pub fn release(&mut self) {
        if self.pending() == 0 {
            self.buf = Vec::new();
            self.start = 0;
        }
    }

    fn make_room_exact(&mut self, cap: usize) {
        let mut fresh = Vec::with_capacity(cap);
        fresh.extend_from_slice(&self.buf[self.start..]);
        self.buf = fresh;
        self.start = 0;
    }
}

/// Waits for `n` bytes of the node-wide frame budget.
pub(super) async fn acquire(budget: Arc<Semaphore>, n: usize) -> OwnedSemaphorePermit {
    match budget.acquire_many_owned(permits(n)).await {
        Ok(p) => p,
        // The budget is never closed; if it were, wait for the timeouts.
        Err(_) => std::future::pending().await,
    }
}

pub(super) fn permits(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(payload: &[u8]) -> Vec<u8> {
        let mut f = (payload.len() as u32).to_be_bytes().to_vec();
        f.extend_from_slice(payload);
        f
    }

    #[test]
    fn a_peeked_frame_is_still_handed_out() {
        let mut b = InBuf::new();
        b.make_room();
        let mut bytes = frame(b"first");
        bytes.extend_from_slice(&frame(b"second")[..5]);
        b.vec().extend_from_slice(&bytes);
        assert_eq!(b.peek_frame(), Some(&b"first"[..]));
        assert_eq!(b.peek_frame(), Some(&b"first"[..]), "peeking takes nothing");
        assert_eq!(b.next_frame().unwrap(), Some(&b"first"[..]));
        assert_eq!(b.peek_frame(), None, "the second has not all arrived");
        b.vec().extend_from_slice(&frame(b"second")[5..]);
        assert_eq!(b.peek_frame(), Some(&b"second"[..]));
    }

    /// Feeds `bytes` in reads of at most `chunk`, as the connection does,
    /// collecting every frame; also checks the room never runs ahead of the
    /// bytes that arrived by more than a chunk.
    fn feed(b: &mut InBuf, bytes: &[u8], chunk: usize) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        let mut at = 0;
        while at < bytes.len() {
            b.make_room();
            let bound = FREE_ROOM.max(2 * b.pending() + READ_CHUNK + 64);
            assert!(b.room() <= bound, "room {} runs ahead of {} bytes", b.room(), b.pending());
            let spare = b.room() - b.vec().len();
            let n = chunk.min(spare).min(bytes.len() - at);
            assert!(n > 0, "no room to read into");
            b.vec().extend_from_slice(&bytes[at..at + n]);
            at += n;
            while let Some(p) = b.next_frame().unwrap() {
                out.push(p.to_vec());
            }
            b.settle(FREE_ROOM);
        }
        out
    }

    #[test]
    fn frames_split_anywhere_come_out_whole_and_in_order() {
        let payloads: Vec<Vec<u8>> =
            (1..40u32).map(|i| (0..i * 97).map(|j| (i + j) as u8).collect()).collect();
        let stream: Vec<u8> = payloads.iter().flat_map(|p| frame(p)).collect();
        for chunk in [1, 3, 4, 5, 7, 100, 4096, READ_CHUNK] {
            let mut b = InBuf::new();
            assert_eq!(feed(&mut b, &stream, chunk), payloads, "chunk {chunk}");
            assert_eq!(b.pending(), 0);
        }
    }

    #[test]
    fn an_announced_megabyte_reserves_only_what_arrived() {
        let mut b = InBuf::new();
        let mut head = (MAX_FRAME_LEN as u32).to_be_bytes().to_vec();
        head.extend_from_slice(&[7; 100]);
        feed(&mut b, &head, READ_CHUNK);
        assert!(b.room() <= FREE_ROOM, "room {} for 104 bytes", b.room());
        assert_eq!(b.room_wanted(), 2 * 104 + READ_CHUNK);
    }

    #[test]
    fn a_whole_maximal_frame_fits_and_room_is_given_back_after_it() {
        let mut b = InBuf::new();
        let payload = vec![9u8; MAX_FRAME_LEN];
        let got = feed(&mut b, &frame(&payload), READ_CHUNK);
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].len(), MAX_FRAME_LEN);
        assert!(b.room() <= FREE_ROOM, "kept {} bytes of room", b.room());
        b.release();
        assert_eq!(b.room(), 0);
    }

    #[test]
    fn bad_lengths_are_refused_before_anything_is_reserved() {
        for len in [0u32, MAX_FRAME_LEN as u32 + 1, u32::MAX] {
            let mut b = InBuf::new();
            b.make_room();
            b.vec().extend_from_slice(&len.to_be_bytes());
            assert!(matches!(b.next_frame(), Err(FrameError::BadLength(_))), "{len}");
            assert!(b.room() <= READ_CHUNK);
        }
    }

    #[test]
    fn release_keeps_a_partial_frame() {
        let mut b = InBuf::new();
        b.make_room();
        b.vec().extend_from_slice(&frame(b"hello")[..6]);
        b.release();
        assert_eq!(b.pending(), 6);
        b.vec().extend_from_slice(b"llo");
        assert_eq!(b.next_frame().unwrap(), Some(&b"hello"[..]));
    }
}
