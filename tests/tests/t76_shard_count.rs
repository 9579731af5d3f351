//! A data directory keeps the shard count it was made with: a node started
//! on it with another count refuses to start (and changes nothing), and
//! started with its own count serves what it held. Real node processes on
//! one data directory.

use plaudit_tests::{refused_start, Node};
use std::path::Path;

/// The error of a node started on `dir` with `shards`, which must refuse.
fn refused(dir: &Path, shards: u32) -> String {
    let shards = shards.to_string();
    refused_start(
        dir,
        &["--shards", &shards, "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0"],
        &[],
    )
}

fn liked(node: &Node, biz: &str, user: &str) -> String {
    let state = node.cli_json(&["status", "--biz", biz, "--user", user, "5"]);
    state.to_string()
}

#[test]
fn a_node_keeps_the_shard_count_its_data_was_made_with() {
    let mut node = Node::builder().shards(4).start();
    let dir = node.data_dir().to_path_buf();
    let biz = node.cli("biz create --name counted");
    let biz = biz["id"].as_u64().expect("a business id").to_string();
    for user in ["6", "7", "8"] {
        let out = node.cli_json(&["like", "--biz", &biz, "--entity", "5", "--user", user]);
        assert_eq!(out["now"], "like", "{out}");
    }
    let before: Vec<String> = ["6", "7", "8"].iter().map(|u| liked(&node, &biz, u)).collect();
    assert!(before.iter().all(|s| s.contains("\"like\"")), "{before:?}");
    node.terminate();
    assert_eq!(std::fs::read_to_string(dir.join("shards")).unwrap(), "4\n");

    for wrong in [2, 16] {
        let err = refused(&dir, wrong);
        assert!(err.contains("made with 4 shards") && err.contains("--shards 4"), "{err}");
    }
    assert_eq!(std::fs::read_to_string(dir.join("shards")).unwrap(), "4\n", "unchanged");

    // A directory from before the record: its log shows a smaller count
    // is wrong (the registry's group, 4, is above it).
    std::fs::remove_file(dir.join("shards")).unwrap();
    let err = refused(&dir, 3);
    assert!(err.contains("made with 4 shards"), "{err}");

    node.restart();
    assert_eq!(std::fs::read_to_string(dir.join("shards")).unwrap(), "4\n", "recorded again");
    let after: Vec<String> = ["6", "7", "8"].iter().map(|u| liked(&node, &biz, u)).collect();
    assert_eq!(after, before, "the node serves what it held");
}
