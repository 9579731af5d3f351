//! Plaudit's wire contract: ids, requests and replies per command family,
//! stable error codes, request limits, and the frame codec.
//!
//! A request travels as one frame:
//!
//! ```text
//! [u32 big-endian payload length][u8 protocol version][bincode(Envelope<Request>)]
//! ```
//!
//! Requests are pipelined on one connection and replies may come back out of
//! order; `Envelope::req_id` pairs them. This crate is the only place bincode
//! is called (`codec`), so the storage format and the wire format share one
//! configuration.
//!
//! Modules:
//! - `addr`: the host of a `host:port` address;
//! - `ids`: the id types shared by every crate;
//! - `keyed_hash`: the hash for maps keyed by ids clients choose;
//! - `auth`: tokens, roles and what each role may send;
//! - `error`: `ErrorCode` and `WireError`, what every failure becomes at the edge;
//! - `limits`: the bounds every request is checked against;
//! - `business`, `likes`, `rankings`, `scoring`: one file per command family, types plus validation;
//! - `listing`: paged listings of the registry (businesses, rankings) that fit a frame;
//! - `window`: natural time windows and sub-board `type_id`s;
//! - `message`: the `Request` / `Response` enums and the `Envelope`;
//! - `codec`: bincode encode/decode of anything serde;
//! - `frame`: async length-prefixed frame reading and writing;
//! - `routing`: the stable key -> shard function;
//! - `cluster`: members, placement, leaders and status of a cluster;
//! - `membership`: members' identities and lifecycles, and replica moves;
//! - `hotkeys`: the keys that take the most requests, per node;
//! - `placement`: where moved sub-boards live, and the moves under way.

pub mod addr;
pub mod auth;
pub mod business;
mod client_codec;
pub mod cluster;
pub mod codec;
pub mod entity_routes;
pub mod error;
mod fast_decode;
pub mod fast_encode;
pub mod frame;
pub mod hotkeys;
pub mod ids;
pub mod keyed_hash;
pub mod likes;
pub mod limits;
pub mod listing;
pub mod membership;
pub mod message;
mod nesting;
pub mod placement;
pub mod prefetch;
pub mod rankings;
pub mod routing;
pub mod scoring;
mod varint;
pub mod window;

pub use business::{BizConfig, Business};
pub use error::{ErrorCode, WireError};
pub use ids::{BizId, EntityId, Millis, ShardId, UserId};
pub use likes::{LikeAction, LikeState};
pub use message::{Envelope, Request, Response};
