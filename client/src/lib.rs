//! The Plaudit Rust SDK, and the library half of the `plaudit` CLI.
//!
//! A `Client` holds a small pool of TCP connections to one node (round robin,
//! two by default). Each connection is multiplexed: any number of calls are in
//! flight at once, frames queued by many tasks go out in one write, and
//! replies are matched to their calls by `req_id` in whatever order they come.
//!
//! ```text
//! Client::like(..) ─► api (build Request, per-call timeout)
//!                   ─► pool (pick a connection, re-dial a dead one)
//!                   ─► connection (writer task ─► socket ─► reader task ─► oneshot)
//! ```
//!
//! Modules:
//! - `api`: `Client`, `ClientOptions` and one typed method per command;
//! - `pool`: the round-robin set of connections and re-dialling;
//! - `connection`: one pipelined socket with its writer and reader tasks;
//! - `error`: `ClientError`, which keeps the node's stable error codes;
//! - `cli`: argument parsing, command execution and output rendering for the
//!   `plaudit` binary, kept here so it is unit-tested like the rest.
//!
//! ```no_run
//! # async fn demo() -> Result<(), plaudit_client::ClientError> {
//! use plaudit_client::Client;
//! let client = Client::connect("127.0.0.1:7401").await?;
//! let reply = client.like(1, 42, 7, Some(99)).await?;
//! assert!(reply.changed || reply.now == plaudit_client::proto::LikeState::Like);
//! # Ok(()) }
//! ```

mod api;
pub mod cli;
mod connection;
mod error;
mod pool;
mod rankings;

pub use api::{Client, ClientOptions};
pub use error::ClientError;
/// The wire types, so users need only this crate as a dependency.
pub use plaudit_proto as proto;
