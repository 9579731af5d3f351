//! The Plaudit Rust SDK, and the library half of the `plaudit` CLI.
//!
//! A `Client` talks to a cluster: given one or more seed addresses it fetches
//! the routing table (members, the replicas of each shard, their leaders) and
//! sends each call straight to the node that serves it: a shard's leader
//! for likes and single-shard reads, the metadata group's leader for the
//! registry, any node for fan-outs. Every connection says `Hello(Redirect)`,
//! so a node that is not the leader answers `NotLeader` with a hint instead
//! of forwarding; the client follows the hint, waits out elections, steps
//! around dead nodes and refreshes its table, all within the call's timeout,
//! and retries only what is safe to repeat. With `ClientOptions::token` set,
//! every connection then says `Auth`, so all of them carry the same role; a
//! refused token fails the call with `Unauthorized` at once.
//!
//! Each node gets a small pool of TCP connections (round robin, two by
//! default), dialled on first use. Each connection is multiplexed: any number
//! of calls are in flight at once, frames queued by many tasks go out in one
//! write, and replies are matched to their calls by `req_id` in whatever
//! order they come.
//!
//! ```text
//! Client::like(..) ─► api (build Request)
//!                   ─► cluster::call (wrap registry changes in Once; the retry loop)
//!                        ├─ route: request ─► shard ─► node, hints, fallbacks (pure)
//!                        └─ retry: what an answer means, backoff, bounds (pure)
//!                   ─► pool of that node (pick a connection, dial / re-dial)
//!                   ─► connection (writer task ─► socket ─► reader task ─► oneshot)
//! ```
//!
//! Modules:
//! - `api`: `Client` and one typed method per command;
//! - `options`: `ClientOptions`;
//! - `hot_cache`: the cache of hot keys (pure); `cluster/cached.rs` calls through it;
//! - `rankings`: the ranking and leaderboard methods of `Client`;
//! - `tokens`: the token methods of `Client` (create, list, revoke), and the
//!   secret a new token is made with;
//! - `cluster`: pools per node, the cached routing view and the background
//!   refresher; `cluster/call.rs`, one call's retry loop;
//! - `route`: which node a request goes to, and what a `NotLeader` hint
//!   teaches (pure); `entity_routes`: where moved entities live;
//! - `retry`: which answers are retried, how long to back off, and when to
//!   stop (pure);
//! - `pool`: the round-robin set of connections to one node, and dialling
//!   (hello, then `Auth` with `ClientOptions::token`);
//! - `connection`: one pipelined socket with its writer and reader tasks;
//! - `error`: `ClientError`, which keeps the node's stable error codes;
//! - `cli`: argument parsing, command execution and output rendering for the
//!   `plaudit` binary, kept here so it is unit-tested like the rest.
//!
//! ```no_run
//! # async fn demo() -> Result<(), plaudit_client::ClientError> {
//! use plaudit_client::Client;
//! let client = Client::connect("10.0.0.1:7401,10.0.0.2:7401").await?;
//! let reply = client.like(1, 42, 7, Some(99)).await?;
//! assert!(reply.changed || reply.now == plaudit_client::proto::LikeState::Like);
//! # Ok(()) }
//! ```

mod api;
pub mod cli;
mod cluster;
mod connection;
mod entity_routes;
mod error;
mod hot_cache;
mod options;
mod placed;
mod pool;
mod rank_shapes;
mod rankings;
mod retry;
mod route;
mod split;
mod spread;
mod tls;
mod tokens;

pub use api::{ping, ping_with, Cached, Client, ClientOptions};
pub use error::ClientError;
/// The wire types, so users need only this crate as a dependency.
pub use plaudit_proto as proto;
pub use tls::Tls;
