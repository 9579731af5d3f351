//! One client connection: a single task that reads frames, runs their
//! requests concurrently, and writes every reply that is ready in one
//! syscall, holding no more memory than its bounds allow.
//!
//! ```text
//!            ┌──────────────── one task ─────────────────────────────────┐
//! socket ──> │ InBuf ─frame─> Hello/Ping, reads in place: answered inline  │
//!            │               writes led here: one future per group ─────┤ │
//!            │               other: a future in `in_flight` (≤ cap) ─────┤ │
//!            │ out (≤ OUT_LIMIT + one future's replies) <── as they end ─┘ │ ──> socket
//!            └─────────────────────────────────────────────────────────────┘
//! ```
//!
//! What a client can make it hold, and what stops it:
//! - unread replies: past [`OUT_LIMIT`] bytes the connection stops reading
//!   requests and stops collecting results (so it holds at most the cap's
//!   worth of unfinished requests), and a client that reads nothing for
//!   `write_timeout` is disconnected;
//! - a long frame: room is reserved as bytes arrive ([`InBuf`]), room above
//!   [`FREE_ROOM`] comes from the node-wide frame budget (a connection that
//!   cannot get it stops being read), and a frame must arrive whole within
//!   `frame_timeout` (slow-loris);
//! - silence: a connection that has not authenticated within `auth_timeout`
//!   of connecting (on an open node: sent no request), or does nothing for
//!   `idle_timeout`, is closed, and an idle connection keeps no buffers.
//!
//! Who may do what is [`Access`]: checked here, before a request starts.
//! An `Auth` is checked by a future like any request, and no frame after it
//! is handled until it ends, so the requests behind it run with its result.
//!
//! Reads the node can answer at once (`Engine::answer_now`: a single
//! node's board queries, counts and states) are answered inline, in frame
//! order. The likes and scoring events of one read pass that this node can
//! propose at once (`Engine::stage_write`) are proposed together, one
//! proposal and one future per group (`batch.rs`); where this node is
//! their group's only voter, or the pass is all a pipeline's, the pass's
//! replies then wait for those writes and leave in one write (`hold.rs`).
//! Other requests run as futures polled by this task (no task, channel or
//! separate writer per request): the connection's work stays on the
//! thread that reads it (`conn/dispatch.rs` starts each request).

use super::access::Access;
use super::admission::Seat;
use super::batch::{Proposed, WriteBatch};
pub use super::close::Close;
use super::done::{error_code, Done, Ended, Granted};
use super::hold::PassHold;
use super::inbuf::{acquire, permits, InBuf, FREE_ROOM};
use super::seen::PassSeen;
use super::socket::Socket;
use super::Server;
use futures::stream::{FuturesUnordered, StreamExt};
use futures::FutureExt;
use plaudit_cluster::staged::Answer;
use plaudit_proto::cluster::Routing;
use plaudit_proto::{fast_encode, frame};
use plaudit_proto::{Envelope, ErrorCode, Response, WireError};
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::{watch, OwnedSemaphorePermit};

/// Reply bytes a connection holds unwritten before it stops reading
/// requests and collecting results. 64 KiB of replies is hundreds of them:
/// more per write buys nothing.
pub const OUT_LIMIT: usize = 64 * 1024;
/// Failed `Auth`s after which a connection is closed.
pub const MAX_FAILED_AUTHS: u32 = 3;
/// An idle connection keeps its buffers this long (a client between bursts
/// should not pay for reallocating them).
const KEEP_BUFFERS: Duration = Duration::from_secs(2);

type InFlight = Pin<Box<dyn Future<Output = Ended> + Send>>;

pub(super) struct Conn<S> {
    server: Arc<Server>,
    stream: S,
    /// Its slot of the connection cap, and its entry in that share's table.
    seat: Seat,
    inbuf: InBuf,
    /// Node-wide frame budget this connection holds: room above `FREE_ROOM`.
    budget: Option<OwnedSemaphorePermit>,
    out: Vec<u8>,
    written: usize,
    in_flight: FuturesUnordered<InFlight>,
    /// Requests in `in_flight` (a future may carry several), for the cap.
    requests: usize,
    /// Writes of the read pass under way, proposed when it ends.
    staged: WriteBatch,
    /// The wall clock (epoch seconds) when the read pass under way began.
    pass_secs: i64,
    /// Answers the pass gave at once, timed together when it ends.
    seen: PassSeen,
    routing: Routing,
    access: Access,
    /// An `Auth` is being checked: later frames wait for it.
    authing: bool,
    /// Chosen to be closed for a newcomer while its `Auth` had already
    /// arrived: it answers that first (`evict.rs`).
    spared: bool,
    /// Authenticated (on an open node: sent a request); the auth timeout
    /// no longer applies.
    greeted: bool,
    failed_auths: u32,
    /// Too many failed `Auth`s: answered, then closed.
    auth_refused: bool,
    busy: bool,
    /// The client sent all it will (half-closed): what it sent is answered.
    eof: bool,
    /// The node is stopping: no new request is started.
    stopping: bool,
    /// A frame had an impossible length: nothing after it can be read.
    broken: bool,
    opened: Instant,
    last_active: Instant,
    frame_started: Option<Instant>,
    /// Since when unwritten replies have waited without the socket taking
    /// any of them.
    write_stalled: Option<Instant>,
    /// Replies wait for the writes of their read pass.
    hold: PassHold,
    /// Every request of the read pass under way came in a pipeline
    /// (`PIPELINED`): its replicated writes hold its replies too.
    pass_pipelined: bool,
}

mod dispatch;
mod evict;

impl<S: Socket> Conn<S> {
    pub(super) fn new(server: Arc<Server>, stream: S, seat: Seat) -> Conn<S> {
        let now = Instant::now();
        Conn {
            access: Access::initial(server.admin_hash.is_none()),
            server,
            stream,
            seat,
            inbuf: InBuf::new(),
            budget: None,
            out: Vec::new(),
            written: 0,
            in_flight: FuturesUnordered::new(),
            requests: 0,
            staged: WriteBatch::default(),
            pass_secs: 0,
            seen: PassSeen::default(),
            routing: Routing::Forward,
            authing: false,
            spared: false,
            greeted: false,
            failed_auths: 0,
            auth_refused: false,
            busy: false,
            eof: false,
            stopping: false,
            broken: false,
            opened: now,
            last_active: now,
            frame_started: None,
            write_stalled: None,
            hold: PassHold::default(),
            pass_pipelined: false,
        }
    }

    /// Serves the connection until it ends, and says why it ended.
    pub(super) async fn run(mut self, stop: watch::Receiver<bool>) -> Close {
        self.serve(stop).await
    }

    /// `run`, keeping the connection's seat: a TLS connection's proxy
    /// outlives the connection, and still counts against the cap until it
    /// ends (`tls.rs`).
    pub(super) async fn run_keeping_seat(mut self, stop: watch::Receiver<bool>) -> (Close, Seat) {
        let why = self.serve(stop).await;
        // Everything else, the socket included, closes here.
        (why, self.seat)
    }

    async fn serve(&mut self, mut stop: watch::Receiver<bool>) -> Close {
        let limits = self.server.limits.clone();
        let mut tick = tokio::time::interval(limits.tick());
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            if !self.stopping && !self.broken && !self.auth_refused {
                // Frames left in the buffer while replies did not fit.
                self.frames();
            }
            if self.spared_in_vain() {
                return Close::Evicted;
            }
            let backlog = self.backlog();
            let ending = self.eof || self.stopping || self.broken || self.auth_refused;
            if ending && self.in_flight.is_empty() && backlog == 0 {
                // (With nothing left to write, `frames` took every whole
                // frame: what remains is a partial one that cannot finish.)
                return if self.broken {
                    Close::BadFrame
                } else if self.auth_refused {
                    Close::AuthFailed
                } else {
                    Close::Client
                };
            }
            let room_short = self.room_short();
            let want_read = !ending && !self.authing && backlog < OUT_LIMIT && room_short == 0;
            let want_results = !self.in_flight.is_empty() && backlog < OUT_LIMIT;
            let budget = self.server.frame_budget.clone();
            // Only a hold still on wakes the loop at its end (one past its
            // end would wake it at once, again and again).
            let hold_end = self.hold.deadline().filter(|_| self.holding());
            tokio::select! {
                biased;
                () = self.seat.entry.kill.notified() => {
                    if !self.auth_arrived() {
                        return Close::Evicted;
                    }
                    self.spared = true;
                }
                _ = stop.changed(), if !self.stopping => self.stopping = true,
                Some(ended) = self.in_flight.next(), if want_results => {
                    self.ended(ended);
                    self.collect_ready();
                    if !self.in_flight.is_empty() {
                        // Results of other groups of the same round are
                        // usually a task away: one yield lets them land, so
                        // one write carries them all.
                        tokio::task::yield_now().await;
                        self.collect_ready();
                    }
                }
                r = self.stream.readable(), if want_read => {
                    if r.is_err() {
                        return Close::Error;
                    }
                    if let Err(why) = self.read() {
                        return why;
                    }
                }
                r = self.stream.writable(), if backlog > 0 && !self.holding() => {
                    if r.is_err() {
                        return Close::Error;
                    }
                }
                p = acquire(budget, room_short), if room_short > 0 && !ending => {
                    self.add_budget(p);
                }
                // A hold past its bound: write what is ready (`hold.rs`).
                () = sleep_until_hold(hold_end), if hold_end.is_some() && backlog > 0 => {}
                _ = tick.tick() => {
                    if let Some(why) = self.expired(&limits) {
                        return why;
                    }
                }
            }
            // One write per pass, for every reply that became ready in it.
            if self.write().is_err() {
                return Close::Error;
            }
            self.publish();
        }
    }

    fn backlog(&self) -> usize {
        self.out.len() - self.written
    }

    /// Whether replies wait for the writes of their read pass (`hold.rs`);
    /// never once they fill `OUT_LIMIT`, which stops the collecting of
    /// the results they wait for.
    fn holding(&self) -> bool {
        self.hold.holds(Instant::now) && self.backlog() < OUT_LIMIT
    }

    /// Bytes of node-wide budget the next read needs first (0: none).
    fn room_short(&self) -> usize {
        let allowed = FREE_ROOM + self.budget.as_ref().map_or(0, |p| p.num_permits());
        self.inbuf.room_wanted().saturating_sub(allowed)
    }

    fn add_budget(&mut self, p: OwnedSemaphorePermit) {
        match &mut self.budget {
            Some(held) => held.merge(p),
            None => self.budget = Some(p),
        }
    }

    /// Reads what the socket has and handles every whole frame in it.
    fn read(&mut self) -> Result<(), Close> {
        let short = self.room_short();
        if short > 0 {
            // The budget may have room right now: no need to wait a pass.
            match self.server.frame_budget.clone().try_acquire_many_owned(permits(short)) {
                Ok(p) => self.add_budget(p),
                Err(_) => return Ok(()),
            }
        }
        self.inbuf.make_room();
        match self.stream.read_draining(self.inbuf.vec()) {
            // The client sent all it will; what it asked is still answered.
            Ok(0) => self.eof = true,
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(_) => return Err(Close::Error),
        }
        Ok(())
    }

    /// Handles the whole frames in the buffer (while replies fit).
    fn frames(&mut self) {
        let now = Instant::now();
        self.hold.next_pass();
        self.pass_secs = plaudit_cluster::staged::wall_secs();
        let mut read_any = false;
        self.pass_pipelined = true;
        while self.backlog() < OUT_LIMIT && !self.authing {
            let env = match self.inbuf.next_frame() {
                Ok(Some(payload)) => frame::decode_request(payload),
                Ok(None) => break,
                Err(e) => {
                    self.pass_pipelined = false;
                    // The stream cannot be resynchronised after a bad length.
                    self.observe("other", Duration::ZERO, Some(ErrorCode::BadRequest));
                    self.push_reply(0, Response::Error(WireError::bad_request(e.to_string())));
                    self.broken = true;
                    self.frame_started = None;
                    if read_any {
                        self.touch(now);
                    }
                    // What came before the bad frame is still answered.
                    self.submit_staged();
                    self.seen.flush(&self.server.metrics, now);
                    return;
                }
            };
            self.frame_started = None;
            self.last_active = now;
            read_any = true;
            self.pass_pipelined &= env.as_ref().is_ok_and(Envelope::pipelined);
            self.request(env, now);
        }
        if read_any {
            self.touch(now);
        }
        if !self.staged.is_empty() {
            self.submit_staged();
        }
        self.seen.flush(&self.server.metrics, now);
        if self.inbuf.pending() > 0 {
            self.frame_started.get_or_insert(now);
        }
        self.inbuf.settle(FREE_ROOM);
        self.give_back_budget();
    }

    /// Returns the frame budget the buffer neither uses nor wants for its
    /// next read.
    fn give_back_budget(&mut self) {
        let used = self.inbuf.room().max(self.inbuf.room_wanted()).saturating_sub(FREE_ROOM);
        if let Some(held) = &mut self.budget {
            let spare = held.num_permits().saturating_sub(used);
            if spare > 0 && spare < held.num_permits() {
                drop(held.split(spare));
            } else if used == 0 {
                self.budget = None;
            }
        }
    }

    /// Takes every other result that is ready now, so they share a write.
    fn collect_ready(&mut self) {
        while self.backlog() < OUT_LIMIT {
            // Polling with a no-op waker is safe here: the loop polls
            // `in_flight` again with the task's waker before it sleeps.
            match self.in_flight.next().now_or_never() {
                Some(Some(ended)) => self.ended(ended),
                _ => break,
            }
        }
    }

    /// Proposes the read pass's staged writes, one future per group.
    fn submit_staged(&mut self) {
        for share in self.staged.submit(self.server.limits.request_timeout) {
            match share {
                Ok(Proposed { answers: fut, local }) => {
                    // A write this node makes durable alone holds the
                    // pass's replies, and so does a replicated one when the
                    // pass is all a pipeline's (`hold.rs`); pass 0 holds
                    // nothing. The pass's own time (its frames were read
                    // just now): no clock read per write share.
                    let pass = if local || self.pass_pipelined {
                        self.hold.submitted(self.last_active)
                    } else {
                        0
                    };
                    self.in_flight
                        .push(Box::pin(async move { Ended::Many { pass, done: fut.await } }))
                }
                // Not proposed (not leading any more, a full queue, a full
                // disk): answered now.
                Err(done) => self.ended(Ended::Many { pass: 0, done }),
            }
        }
    }

    fn ended(&mut self, ended: Ended) {
        // One clock read for a group's whole share, not one per reply.
        let now = Instant::now();
        match ended {
            Ended::One(done) => self.reply(done, now),
            Ended::Many { pass, done } => {
                self.hold.ended(pass);
                done.into_iter().for_each(|d| self.reply(d, now))
            }
        }
    }

    fn reply(&mut self, d: Done, now: Instant) {
        if !d.is_auth {
            self.requests -= 1;
        }
        if d.is_auth {
            self.authing = false;
            let refused_token = matches!(
                &d.resp,
                Answer::Full(Response::Error(e)) if e.code == ErrorCode::Unauthorized
            );
            match d.auth.map(|a| *a) {
                Some(Granted { role, revision, seat }) => {
                    self.access = Access::Granted { role, revision };
                    self.greeted = true;
                    if let Some(seat) = seat {
                        // The unauthenticated seat (and its count against
                        // the client's address) goes back as this drops.
                        self.seat = seat;
                    }
                }
                // Not a refused token (no seat for it, a timeout): no
                // reason to hold it against the client.
                None if !refused_token => {}
                None => {
                    // Tokens have 256 random bits, so retries buy nothing;
                    // but an unknown token id costs the node a registry
                    // catch-up, which a client should not repeat at will.
                    self.failed_auths += 1;
                    if self.failed_auths >= MAX_FAILED_AUTHS {
                        self.auth_refused = true;
                    }
                }
            }
        }
        let code = match &d.resp {
            Answer::Full(resp) => error_code(d.op, resp),
            Answer::Scored { .. } => None,
        };
        self.observe(d.op, now.saturating_duration_since(d.started), code);
        match d.resp {
            Answer::Full(resp) => self.push_reply(d.req_id, resp),
            Answer::Scored { type_id, outcome, score } => {
                let out = &mut self.out;
                if fast_encode::encode_score_reply(d.req_id, &type_id, outcome, score, out).is_err()
                {
                    // Only past the frame limit; say so as for any reply.
                    let scored = Answer::Scored { type_id, outcome, score };
                    self.push_reply(d.req_id, scored.into_response());
                }
            }
        }
    }

    fn observe(&self, op: &str, elapsed: Duration, code: Option<ErrorCode>) {
        self.server.metrics.observe(op, elapsed, code);
    }

    fn push_reply(&mut self, req_id: u64, body: Response) {
        if frame::encode_reply(&Envelope { req_id, body }, &mut self.out).is_err() {
            // Only an oversized reply can fail to encode; tell the caller so.
            let msg = "the reply exceeds the frame limit; ask for less (a smaller page or batch)";
            let err = Response::Error(WireError::internal(msg));
            let _ = frame::encode_frame(&Envelope { req_id, body: err }, &mut self.out);
        }
    }

    /// Writes as much of the backlog as the socket takes now.
    fn write(&mut self) -> io::Result<()> {
        if self.holding() {
            // A hold is not the client's stall: its clock waits too (holds
            // end below `OUT_LIMIT`, which a client that never reads fills).
            if self.write_stalled.is_some() {
                self.write_stalled = Some(Instant::now());
            }
            return Ok(());
        }
        let before = self.written;
        while self.written < self.out.len() {
            match self.stream.try_write(&self.out[self.written..]) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => self.written += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) => return Err(e),
            }
        }
        let now = Instant::now();
        if self.written == self.out.len() {
            self.out.clear();
            self.written = 0;
            self.write_stalled = None;
        } else if self.written > before || self.write_stalled.is_none() {
            self.write_stalled = Some(now);
        }
        if self.written > before {
            self.last_active = now;
            if self.written >= OUT_LIMIT {
                self.out.drain(..self.written);
                self.written = 0;
            }
        }
        Ok(())
    }

    /// Tells the connection table whether this connection may be evicted.
    fn publish(&mut self) {
        let busy = !self.in_flight.is_empty() || self.backlog() > 0;
        if busy != self.busy {
            self.busy = busy;
            self.seat.entry.set_busy(busy);
        }
        if self.greeted {
            self.seat.entry.set_greeted();
        }
    }

    /// Marks the connection active, for eviction: only once it may do
    /// something. An unauthenticated connection's pings do not keep its
    /// seat (`admission.rs`): of those, the one open longest goes first.
    fn touch(&self, now: Instant) {
        if self.access.is_granted() {
            self.seat.entry.touch(now);
        }
    }

    /// Whether a bound on time has run out; also lets an idle connection's
    /// buffers go.
    fn expired(&mut self, limits: &super::Limits) -> Option<Close> {
        let now = Instant::now();
        if !self.greeted && now.duration_since(self.opened) >= limits.auth_timeout {
            return Some(Close::AuthTimeout);
        }
        if self.frame_started.is_some_and(|t| now.duration_since(t) >= limits.frame_timeout) {
            return Some(Close::FrameTimeout);
        }
        if self.write_stalled.is_some_and(|t| now.duration_since(t) >= limits.write_timeout) {
            return Some(Close::WriteTimeout);
        }
        let quiet = self.in_flight.is_empty() && self.backlog() == 0 && self.inbuf.pending() == 0;
        let idle = now.duration_since(self.last_active);
        if quiet && idle >= limits.idle_timeout {
            return Some(Close::Idle);
        }
        if quiet && idle >= KEEP_BUFFERS {
            self.inbuf.release();
            self.seen.release();
            self.give_back_budget();
            self.out = Vec::new();
        }
        None
    }
}

/// Sleeps until `end` (a hold's bound); never resolves without one.
async fn sleep_until_hold(end: Option<Instant>) {
    match end {
        Some(end) => tokio::time::sleep_until(end.into()).await,
        None => std::future::pending().await,
    }
}
