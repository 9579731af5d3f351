//! plaudit-node: one process of a Plaudit cluster.
//!
//! ```text
//! main: Config::load ─> Engine::open (sled, groups, actors) ─┬─> server (client TCP)
//!                                                            └─> admin (HTTP: health, metrics)
//! SIGTERM/SIGINT ─> stop accepting ─> drain connections ─> Engine::shutdown (raft, actors, flush)
//! ```
//!
//! Modules: `config` (TOML + env + flags), `server` (client listener),
//! `admin` (HTTP endpoints), `metrics` (Prometheus text), `status` (what the
//! admin endpoint reads from the engine), `lag` (a probe that logs late
//! wake-ups, to tell a blocked runtime from a paused machine).

pub mod admin;
pub mod config;
pub mod lag;
pub mod metrics;
pub mod server;
pub mod status;
