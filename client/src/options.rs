//! `ClientOptions`: how a `Client` connects, waits, authenticates and
//! caches.

use std::time::Duration;

/// How a `Client` connects and waits. `Debug` shows whether a token is
/// set, never the token.
#[derive(Clone)]
pub struct ClientOptions {
    /// Connections kept open to each node and used round robin. Default 2;
    /// 0 counts as 1.
    pub pool_size: usize,
    /// How long one call may take, including its redirects, retries and
    /// re-dials, before it fails (with `ClientError::Timeout` if no node
    /// answered, else the last error). Also bounds each dial, together with
    /// a 2 s cap so a dead host cannot eat a whole call. Default 5 s.
    pub timeout: Duration,
    /// The admin token or a business token (`plt_<id>_<secret>`), sent as
    /// `Auth` on every connection right after its hello. A node that
    /// refuses it fails the call (or `connect`) with
    /// `ErrorCode::Unauthorized`, which is not retried. Default `None`: for
    /// an open node (no admin token configured, loopback only).
    pub token: Option<String>,
    /// Speak TLS to the nodes, verifying them with this (`Tls::from_ca_file`).
    /// Default `None`: plaintext, for nodes without `tls_cert_file`.
    pub tls: Option<crate::Tls>,
    /// Send each shard's part of a read that spans shards (counts) straight
    /// to a node that serves that shard, and merge the answers here.
    /// Default `true`. `false` sends the read whole to one node, which
    /// fans it out: a hop more per part, kept for comparing the two.
    pub split_reads: bool,
    /// How long an answer about a hot key (an entity's counts, a board's
    /// page or rank) is served from this client's own memory. The nodes say
    /// which keys are hot (`hot_cache_min_rps`); the client asks them once
    /// a second. A like or score this client sends drops what it
    /// touches, so the client always reads its own writes; other clients'
    /// writes show within the TTL. `Client::uncached` reads around the
    /// cache; `Duration::ZERO` turns it off. Default 250 ms.
    pub cache_ttl: Duration,
    /// Send the reads of hot keys that the cache does not answer to any
    /// replica of their shard (`Request::Replica`: a follower asks the
    /// leader for its read index, so still linearizable), spreading their
    /// refreshes over the replicas. Default `false`: a follower read costs a
    /// round trip to the leader and a wait for the entries in flight, which
    /// on nodes that share cores costs more than it spreads
    /// (docs/benchmarks.md, "Hot keys").
    pub spread_hot_reads: bool,
    /// Send every linearizable read (status, counts, lists, received
    /// totals, board queries) to any replica of its shard, in turn, not to
    /// its leader (`Request::Replica`): the leaders' read load is spread
    /// over every replica, each read still sees every write acknowledged
    /// before it was sent. Default `false`, for the same reason as
    /// `spread_hot_reads`: each read then waits for a read-index round
    /// trip to the leader, dearer than the leader's own lease read when
    /// the nodes share cores.
    pub spread_reads: bool,
    /// Report every sub-board's scoring outcome as the node gave it. By
    /// default, a `duplicate` answered to a retry of `score` after an
    /// attempt that may have applied the event (a lost answer, a timeout)
    /// is reported `applied`: the caller sent the event once and it counted
    /// once. An auditor that re-sends events it sent before, to learn
    /// whether each was kept, needs the node's word. Default `false`.
    pub raw_score_outcomes: bool,
}

impl std::fmt::Debug for ClientOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientOptions")
            .field("pool_size", &self.pool_size)
            .field("timeout", &self.timeout)
            .field("token", &self.token.as_ref().map(|_| "(redacted)"))
            .field("tls", &self.tls.is_some())
            .field("split_reads", &self.split_reads)
            .field("cache_ttl", &self.cache_ttl)
            .field("spread_hot_reads", &self.spread_hot_reads)
            .field("spread_reads", &self.spread_reads)
            .field("raw_score_outcomes", &self.raw_score_outcomes)
            .finish()
    }
}

impl ClientOptions {
    pub const DEFAULT_POOL_SIZE: usize = 2;
    pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);
    pub const DEFAULT_CACHE_TTL: Duration = Duration::from_millis(250);
}

impl Default for ClientOptions {
    fn default() -> Self {
        ClientOptions {
            pool_size: Self::DEFAULT_POOL_SIZE,
            timeout: Self::DEFAULT_TIMEOUT,
            token: None,
            tls: None,
            split_reads: true,
            cache_ttl: Self::DEFAULT_CACHE_TTL,
            spread_hot_reads: false,
            spread_reads: false,
            raw_score_outcomes: false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_never_show_the_token() {
        let secret = "plt_7_abcdefghijklmnopqrstuvwxyzABCDEFGHIJ0123-_5";
        let opts = ClientOptions { token: Some(secret.into()), ..ClientOptions::default() };
        let shown = format!("{opts:?}");
        assert!(!shown.contains(secret), "{shown}");
        assert!(!shown.contains("abcdefghij"), "{shown}");
        assert!(shown.contains("token: Some(\"(redacted)\")"), "{shown}");
        assert!(shown.contains("pool_size: 2"), "{shown}");
        let none = format!("{:?}", ClientOptions::default());
        assert!(none.contains("token: None"), "{none}");
    }
}
