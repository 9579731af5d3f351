//! TLS on the client listener: a node with a certificate speaks only TLS;
//! the SDK and the CLI given the cluster's CA reach it and work as over
//! plaintext, while a plaintext client and a client that trusts another CA
//! are turned away.

use plaudit_client::proto::BizConfig;
use plaudit_client::{Client, ClientOptions, Tls};
use plaudit_tests::tls::certificates;
use plaudit_tests::{wait_until, Node};
use std::time::Duration;

const ADMIN: &str = "t85-admin-token-0123456789";

async fn connect(node: &Node, tls: Option<Tls>) -> Result<Client, plaudit_client::ClientError> {
    let timeout = Duration::from_secs(3);
    let opts = ClientOptions { token: Some(ADMIN.into()), tls, timeout, ..Default::default() };
    Client::connect_with(&node.addr(), opts).await
}

#[tokio::test]
async fn a_node_with_a_certificate_serves_the_clients_that_trust_its_ca_only() {
    let dir = tempfile::tempdir().unwrap();
    let (ca, cert, key) = certificates(dir.path(), "ours");
    let (other_ca, _, _) = certificates(dir.path(), "theirs");
    let mut node = Node::builder()
        .env("PLAUDIT_ADMIN_TOKEN", ADMIN)
        .env("PLAUDIT_TLS_CERT_FILE", cert.display())
        .env("PLAUDIT_TLS_KEY_FILE", key.display())
        .start();

    let client = connect(&node, Some(Tls::from_ca_file(&ca).unwrap())).await.expect("over TLS");
    let biz = client.create_biz(None, "tls", BizConfig::default()).await.unwrap().id;
    let reply = client.like(biz, 7, 1, None).await.unwrap();
    assert!(reply.changed, "{reply:?}");
    // Counts are derived a moment after the like.
    wait_until(Duration::from_secs(10), "the like counted", || async {
        client.counts(biz, &[7]).await.is_ok_and(|c| c[0].likes == 1)
    })
    .await;

    // Plaintext is not spoken, and another CA's client does not trust it.
    assert!(connect(&node, None).await.is_err(), "a plaintext client");
    let theirs = Tls::from_ca_file(&other_ca).unwrap();
    let err = connect(&node, Some(theirs)).await.expect_err("a client trusting another CA");
    assert!(err.to_string().contains("cannot connect"), "{err}");
    // The TLS client is unharmed by both.
    assert_eq!(client.counts(biz, &[7]).await.unwrap()[0].likes, 1);

    // The CLI with --tls-ca.
    node.set_token(ADMIN);
    let ca_arg = ca.display().to_string();
    let (code, out) = node.cli_lines(&["--tls-ca", &ca_arg, "ping"]);
    assert_eq!((code, &out[0]["ok"]), (0, &serde_json::Value::Bool(true)), "{out:?}");
    let (code, out) =
        node.cli_lines(&["--tls-ca", &ca_arg, "counts", "--biz", &biz.to_string(), "7"]);
    assert_eq!(code, 0, "{out:?}");
    assert_eq!(out[0]["counts"][0]["likes"], 1, "{out:?}");
    let (code, out) = node.cli_lines(&["ping"]);
    assert_ne!(code, 0, "a plaintext ping: {out:?}");

    // The certificate is read at start: a restart serves what was written.
    node.restart();
    let client = connect(&node, Some(Tls::from_ca_file(&ca).unwrap())).await.unwrap();
    assert_eq!(client.counts(biz, &[7]).await.unwrap()[0].likes, 1);
}
