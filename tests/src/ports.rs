//! Ports for the nodes a test starts, each handed out once per process.

use std::net::{SocketAddr, TcpListener};
use std::sync::atomic::{AtomicU32, Ordering};

/// `127.0.0.1:port`.
pub fn localhost(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

/// Ports handed to nodes come from here, below Linux's ephemeral range
/// (32768 and up by default). A port bound at `:0` and released is an
/// ephemeral port: before the node binds it, the OS may give it to any
/// outgoing connection, or hand it to a concurrent test, and a node that
/// cannot bind its port never joins its cluster (a flaky start seen once,
/// `docs/notes.md`).
const PORT_LOW: u32 = 10_000;
const PORT_SPAN: u32 = 20_000;
/// Ports handed out by this process, counted; each test process starts
/// at a place of its own in the span.
static PORTS_GIVEN: AtomicU32 = AtomicU32::new(0);

/// `n` distinct free ports on 127.0.0.1.
pub fn free_ports(n: usize) -> Vec<u16> {
    (0..n).map(|_| free_port()).collect()
}

/// A port on 127.0.0.1 that no other caller in this process has been
/// given and that is free now (it binds).
pub fn free_port() -> u16 {
    let start = std::process::id().wrapping_mul(7919) % PORT_SPAN;
    loop {
        let n = PORTS_GIVEN.fetch_add(1, Ordering::Relaxed);
        assert!(n < PORT_SPAN, "this test process has used every port of its span");
        let port = (PORT_LOW + (start + n) % PORT_SPAN) as u16;
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
}
