//! The manifests in `deploy/kubernetes` are the ones a user applies: their
//! StatefulSet's pods run here as processes with exactly the container's
//! arguments and environment, the ConfigMap and the Secret as files, each
//! pod on its own IP under its DNS name (`pods.rs`). Under a like and
//! scoring load through the SDK, the cluster forms, is scaled from 3 to 5,
//! restarted pod by pod, decommissioned to 4 and then to 3, with no failed
//! request, and the history check holds at the end. Clients and peers
//! speak TLS with the Secret's certificate, as the manifests ship. The
//! pods' IPs are loopback addresses, so what a node does differently off
//! loopback (the admin port's bearer token) is tested elsewhere (t71).

use plaudit_tests::pods::Pods;
use plaudit_tests::tls::issue;
use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

/// The Secret's files, as `kustomization.yaml` says to make them: the TLS
/// certificate names every pod by a wildcard and the client Service, as the
/// documented `openssl` commands do, and the pods' IPs (the harness's SDK
/// clients and CLI dial pods by IP; a real client dials names).
fn secrets(ns: &str) -> BTreeMap<String, String> {
    let mut names = vec![
        format!("*.plaudit.{ns}.svc.cluster.local"),
        format!("plaudit-client.{ns}.svc.cluster.local"),
    ];
    names.extend((0..8).map(|ordinal| Pods::ip(ordinal).to_string()));
    let issued = issue(&names);
    [
        ("cluster-secret", "t83-cluster-secret-0123456789abcdef0123456789\n".to_string()),
        ("admin-token", "t83-admin-token-0123456789abcdef\n".to_string()),
        ("metrics-token", "t83-metrics-token-0123456789abcdef\n".to_string()),
        ("tls.crt", issued.cert),
        ("tls.key", issued.key),
        ("ca.crt", issued.ca),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect()
}

/// The documented scale-down: decommission the highest ordinal, wait, then
/// scale the StatefulSet to one pod fewer.
fn decommission_and_scale_down(pods: &mut Pods) {
    let last = pods.replicas() - 1;
    let node = (last + 1).to_string();
    let (code, lines) = pods.cluster.node(1).cli_lines(&["admin", "decommission", &node, "--wait"]);
    assert_eq!(code, 0, "{lines:?}");
    assert_eq!(lines.last().unwrap()["decommission"]["done"], true, "{lines:?}");
    let rows = pods.cluster.nodes(1);
    assert_eq!(rows[&(last + 1)]["state"], "decommissioned", "{rows:?}");
    assert_eq!(rows[&(last + 1)]["replicas"], 0, "{rows:?}");
    pods.scale(last);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_statefulset_forms_scales_restarts_and_shrinks_under_load() {
    // The checkout this run is in (cargo sets it when it runs the test),
    // not the one the binary was built in: a shared target directory can
    // hand a clone another clone's up-to-date binary.
    let manifest = std::env::var_os("CARGO_MANIFEST_DIR")
        .map_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).to_path_buf(), Into::into);
    let dir = manifest.join("../deploy/kubernetes");
    let ns = format!("t83-{}", std::process::id());
    let mut pods = Pods::apply(&dir, &ns, secrets(&ns));
    assert_eq!(pods.replicas(), 3, "the StatefulSet starts three pods");

    // Formed: one cluster of the three pods, known by their DNS names.
    let status = pods.cluster.status_via(1).expect("status");
    let shards = status["shards"].as_array().map_or(0, Vec::len) as u64;
    assert!(shards >= 3, "{status}");
    let rows = pods.cluster.nodes(1);
    assert_eq!(rows.len(), 3, "{rows:?}");
    for (id, row) in &rows {
        let name = pods.manifests.dns_name(id - 1, &ns);
        assert_eq!(row["addr"], format!("{name}:7401"), "{row}");
    }

    let (admin, w) = pods.cluster.start_load(831).await;
    let started = std::time::Instant::now();
    let phase = |what: &str| eprintln!("t83: {what} at {:.1} s", started.elapsed().as_secs_f64());

    pods.scale(5);
    let all: Vec<u64> = (1..=5).collect();
    pods.cluster.wait_balanced(1, &all, shards, Duration::from_secs(300)).await;
    w.wait_acks(200, Duration::from_secs(30), "writes on five pods").await;
    phase("scaled to 5 and balanced");

    pods.rolling_restart();
    w.wait_acks(200, Duration::from_secs(30), "writes after the rolling restart").await;
    phase("rolling restart done");

    decommission_and_scale_down(&mut pods);
    phase("decommissioned to 4");
    decommission_and_scale_down(&mut pods);
    phase("decommissioned to 3");
    let three: Vec<u64> = (1..=3).collect();
    pods.cluster.wait_balanced(1, &three, shards, Duration::from_secs(120)).await;
    w.wait_acks(200, Duration::from_secs(30), "writes on three pods").await;

    pods.cluster.finish_load(&admin, w).await;
}
