//! How one request of a read pass starts: refused, answered inline, staged
//! with the pass's other writes, or run as a future of the connection.

use super::super::admission::{Kind, Offer, Seat};
use super::super::done::{error_code, Done, Ended, Granted};
use super::super::Server;
use super::Conn;
use plaudit_cluster::cpu_meter::Metered;
use plaudit_cluster::score_route::with_routes;
use plaudit_cluster::staged::{Answer, Stage};
use plaudit_proto::auth::Role;
use plaudit_proto::cluster::Routing;
use plaudit_proto::frame::FrameError;
use plaudit_proto::{Envelope, ErrorCode, Request, Response, WireError};
use std::sync::Arc;
use std::time::{Duration, Instant};

impl<S: super::Socket> Conn<S> {
    pub(super) fn request(&mut self, env: Result<Envelope<Request>, FrameError>, now: Instant) {
        let env = match env {
            Ok(env) => env,
            Err(e) => {
                let req_id = match &e {
                    FrameError::Malformed { req_id, .. } => req_id.unwrap_or(0),
                    _ => 0,
                };
                self.observe("other", Duration::ZERO, Some(ErrorCode::BadRequest));
                self.push_reply(req_id, Response::Error(WireError::bad_request(e.to_string())));
                return;
            }
        };
        let Envelope { req_id, body } = env;
        let was_granted = self.access.is_granted();
        let checked = self.access.check(&self.server.engine, &body);
        if was_granted && !self.access.is_granted() {
            // Its token was revoked: a fresh window to authenticate again.
            self.opened = now;
        }
        self.greeted = self.access.is_granted();
        if let Err(e) = checked {
            self.observe(body.op(), Duration::ZERO, Some(e.code));
            self.push_reply(req_id, Response::Error(e));
            return;
        }
        // One request in `hot_keys::SAMPLE` is sampled: its CPU time here is
        // charged to its keys (`admin hotkeys --by cpu`).
        let sampled = self.server.engine.hot.record(&body);
        let started = sampled.as_ref().map(|_| Instant::now());
        let charge = |engine: &plaudit_cluster::engine::Engine, sampled| {
            if let (Some(s), Some(t0)) = (sampled, started) {
                engine.hot.add_cpu(s, t0.elapsed().as_nanos() as u64);
            }
        };
        if let (Request::EntityRoutes, Some(biz)) = (&body, self.access.biz()) {
            // A business is told where its own moved entities live, not
            // another tenant's.
            let routes = self.server.engine.entity_routes(Some(biz));
            self.observe("entity_routes", Duration::ZERO, None);
            self.push_reply(req_id, Response::EntityRoutes(routes));
            return;
        }
        if let (Request::EntityRoutesPage(r), Some(biz)) = (&body, self.access.biz()) {
            let (reply, code) = match self.server.engine.entity_routes_page(Some(biz), r) {
                Ok(page) => (Response::EntityRoutesPage(page), None),
                Err(e) => {
                    let code = Some(e.code);
                    (Response::Error(e), code)
                }
            };
            self.observe("entity_routes_page", Duration::ZERO, code);
            self.push_reply(req_id, reply);
            return;
        }
        if let Some(resp) = self.server.engine.answer_now(&body) {
            charge(&self.server.engine, sampled);
            // A read this node answers at once (`cluster/inline.rs`): no
            // future, timer or slot to hold, so no in-flight cap applies.
            let code = error_code(body.op(), &resp);
            self.seen.push(&self.server.metrics, now, body.op(), code);
            self.push_reply(req_id, resp);
            return;
        }
        // Staged writes that lose their leader answer `NotLeader` (their
        // entry was never appended): a redirecting client (the SDK) retries
        // it; a forwarding one is served by `handle_as`, which forwards.
        let staged = match self.routing {
            Routing::Redirect => {
                let (engine, secs) = (&self.server.engine, self.pass_secs);
                with_routes(|routes| engine.stage_write(&body, routes, secs))
            }
            Routing::Forward => None,
        };
        if let Some(stage) = staged {
            // The part of a staged write's cost that is this request's alone.
            charge(&self.server.engine, sampled);
            self.stage(req_id, body.op(), now, stage);
            return;
        }
        match body {
            Request::Hello(h) => {
                // Here, in order, so it applies to every later request.
                self.routing = h.routing;
                self.observe("hello", Duration::ZERO, None);
                self.push_reply(req_id, Response::Hello);
            }
            Request::Ping => {
                self.observe("ping", Duration::ZERO, None);
                self.push_reply(req_id, Response::Pong);
            }
            Request::Auth(a) => {
                let server = self.server.clone();
                let seated = self.seat.kind;
                let timeout = self.server.limits.request_timeout;
                self.authing = true;
                self.in_flight.push(Box::pin(async move {
                    let engine = &server.engine;
                    // The revision before the check: a revocation racing it
                    // moves the revision, and the next request looks again.
                    let revision = engine.tokens_revision();
                    let checked = engine.authenticate(&a.token.0, server.admin_hash.as_ref());
                    let (resp, auth) = match tokio::time::timeout(timeout, checked).await {
                        Ok(Ok(role)) => match seat_for(&server, seated, &role).await {
                            Ok(seat) => {
                                let granted = Granted { role: role.clone(), revision, seat };
                                (Response::Auth(role), Some(granted))
                            }
                            Err(why) => (Response::Error(WireError::overloaded(why)), None),
                        },
                        Ok(Err(e)) => (Response::Error(e), None),
                        Err(_) => (Response::Error(WireError::timeout("auth took too long")), None),
                    };
                    let auth = auth.map(Box::new);
                    Ended::One(Done {
                        req_id,
                        op: "auth",
                        started: now,
                        resp: Answer::Full(resp),
                        is_auth: true,
                        auth,
                    })
                }));
            }
            body if self.requests >= self.server.limits.max_in_flight_per_connection => {
                self.observe(body.op(), Duration::ZERO, Some(ErrorCode::Overloaded));
                let err = WireError::overloaded("too many requests in flight on this connection");
                self.push_reply(req_id, Response::Error(err));
            }
            body => {
                // The node-wide cap bounds the results all connections hold
                // at once; released when this request's reply is taken.
                let Ok(slot) = self.server.requests.clone().try_acquire_owned() else {
                    self.observe(body.op(), Duration::ZERO, Some(ErrorCode::Overloaded));
                    let err = WireError::overloaded("the node has too many requests in flight");
                    self.push_reply(req_id, Response::Error(err));
                    return;
                };
                let engine = self.server.engine.clone();
                let timeout = self.server.limits.request_timeout;
                let routing = self.routing;
                self.requests += 1;
                self.in_flight.push(Box::pin(async move {
                    let op = body.op();
                    let handled = tokio::time::timeout(timeout, engine.handle_as(body, routing));
                    let handled = match sampled {
                        None => handled.await,
                        Some(s) => {
                            let (r, ns) = Metered::new(handled).await;
                            engine.hot.add_cpu(s, ns);
                            r
                        }
                    };
                    let resp = match handled {
                        Ok(r) => r,
                        Err(_) => Response::Error(WireError::timeout(format!(
                            "no result within {} ms; the request may still apply",
                            timeout.as_millis()
                        ))),
                    };
                    drop(slot);
                    Ended::One(Done::of(req_id, op, now, resp))
                }));
            }
        }
    }

    /// A write this node proposes with the others of its group in this
    /// read pass (`batch.rs`), under the same caps as any request.
    fn stage(&mut self, req_id: u64, op: &'static str, now: Instant, stage: Stage) {
        let staged = match stage {
            Stage::Now(resp) => {
                let code = error_code(op, &resp);
                self.seen.push(&self.server.metrics, now, op, code);
                self.push_reply(req_id, resp);
                return;
            }
            Stage::Staged(s) => s,
        };
        if self.requests >= self.server.limits.max_in_flight_per_connection {
            self.observe(op, Duration::ZERO, Some(ErrorCode::Overloaded));
            let err = WireError::overloaded("too many requests in flight on this connection");
            self.push_reply(req_id, Response::Error(err));
            return;
        }
        let Ok(slot) = self.server.requests.clone().try_acquire_owned() else {
            self.observe(op, Duration::ZERO, Some(ErrorCode::Overloaded));
            let err = WireError::overloaded("the node has too many requests in flight");
            self.push_reply(req_id, Response::Error(err));
            return;
        };
        self.requests += 1;
        self.staged.add(req_id, op, now, staged, slot);
    }
}

/// The seat a connection seated as `seated` takes once it holds `role`:
/// `None` to keep its own (an open node, or the same share).
async fn seat_for(server: &Arc<Server>, seated: Kind, role: &Role) -> Result<Option<Seat>, String> {
    let kind = match role {
        Role::Admin => Kind::Admin,
        Role::Biz { .. } => Kind::Client,
    };
    if !server.admission.is_secured() || kind == seated {
        return Ok(None);
    }
    let full = |share: &str| format!("the node is at its limit of {share} connections");
    match server.admission.authenticated(kind) {
        Ok(Offer::Now(seat)) => Ok(Some(seat)),
        Ok(Offer::After(pending)) => match pending.seat().await {
            Some(seat) => Ok(Some(seat)),
            None => Err(full("authenticated")),
        },
        Err(_) => Err(full("authenticated")),
    }
}
