//! Mutual TLS between peers, on three real nodes: every node presents a
//! certificate of the cluster's CA to clients and peers, and checks its
//! peers' against the CA. The cluster forms, replicates a like and scoring
//! load through a `kill -9` of a node and its restart (nothing lost,
//! nothing applied twice: the history check), and its peer port answers
//! nobody who does not speak TLS.

use plaudit_tests::tls::certificates;
use plaudit_tests::Cluster;
use std::io::{Read, Write};
use std::time::Duration;

/// What the peer port at `addr` answers a plaintext data connection's
/// preamble and a made-up `Hello`: the bytes it sent before closing.
fn plaintext_probe(addr: &str) -> Vec<u8> {
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut hello = b"PLDT".to_vec();
    hello.push(1); // a data connection
    hello.extend_from_slice(&2u64.to_be_bytes());
    hello.extend_from_slice(&[0, 0, 0, 4, 4, 2, 1, 0]);
    let _ = s.write_all(&hello);
    let mut got = Vec::new();
    let _ = s.read_to_end(&mut got);
    got
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn peers_with_certificates_replicate_fail_over_and_refuse_plaintext() {
    let dir = tempfile::tempdir().unwrap();
    let (ca, cert, key) = certificates(dir.path(), "peers");
    let mut cluster = Cluster::builder(3).tls(&ca, &cert, &key).start();
    let (admin, mut load) = cluster.start_load(87).await;

    // The two survivors elect leaders and serve writes over TLS; the
    // victim comes back and catches up over TLS. Calls in flight at the
    // kill may end without an answer: the history check allows those
    // either way, and nothing else.
    let victim = cluster.most_leading();
    cluster.kill9(victim);
    load.wait_acks(200, Duration::from_secs(30), "writes after the kill").await;
    cluster.restart(victim);
    load.wait_acks(200, Duration::from_secs(30), "writes after the restart").await;
    load.stop().await;
    cluster.wait_converged().await;
    load.check(&admin).await;

    // A plaintext peer gets no handshake message: a TLS alert at most
    // (a record of type 21), never the secret handshake's greeting.
    let got = plaintext_probe(&cluster.node(victim).peer_addr());
    assert!(got.is_empty() || got[0] == 21, "the peer port answered plaintext: {got:?}");
}
