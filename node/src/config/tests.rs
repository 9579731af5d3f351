//! The config's sources, precedence, validation and sample file.
use super::*;
use clap::Parser;

fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

fn args(flags: &[&str]) -> Args {
    Args::try_parse_from(std::iter::once("plaudit-node").chain(flags.iter().copied()))
        .expect("flags parse")
}

fn error_text(err: anyhow::Error) -> String {
    format!("{err:#}")
}

#[test]
fn no_sources_give_the_documented_defaults() {
    let config = Config::from_sources(None, &[], &Args::default()).unwrap();
    assert_eq!(config, Config::default());
    assert_eq!(config.listen.to_string(), "127.0.0.1:7401");
    assert_eq!(config.admin.to_string(), "127.0.0.1:7402");
    assert_eq!(config.shards, 6);
    assert_eq!(config.log, DEFAULT_LOG);
}

#[test]
fn flags_beat_env_and_env_beats_file() {
    let file = "shards = 8\nnode_id = 2\nlog = \"warn\"\nsled_cache_mb = 64\n";
    let vars = env(&[("PLAUDIT_SHARDS", "32"), ("PLAUDIT_NODE_ID", "3")]);

    let from_file = Config::from_sources(Some(file), &[], &Args::default()).unwrap();
    assert_eq!((from_file.shards, from_file.node_id), (8, 2));

    let with_env = Config::from_sources(Some(file), &vars, &Args::default()).unwrap();
    assert_eq!((with_env.shards, with_env.node_id), (32, 3));
    assert_eq!(with_env.log, "warn", "a field no env var sets keeps the file's value");
    assert_eq!(with_env.sled_cache_mb, 64);

    let flags = args(&["--shards", "64", "--log", "debug"]);
    let with_flags = Config::from_sources(Some(file), &vars, &flags).unwrap();
    assert_eq!((with_flags.shards, with_flags.node_id), (64, 3));
    assert_eq!(with_flags.log, "debug");
    assert_eq!(with_flags.raft_heartbeat_ms, DEFAULT_RAFT_HEARTBEAT_MS);
}

#[test]
fn every_flag_overrides_its_field() {
    let flags = args(&[
        "--node-id=7",
        "--data-dir=/var/lib/plaudit",
        "--listen=0.0.0.0:9000",
        "--admin=0.0.0.0:9001",
        "--advertise=plaudit-7.plaudit.ns.svc",
        "--shards=2",
        "--score-future-horizon-secs=60",
        "--log=plaudit_node=trace",
        "--insecure",
    ]);
    let config = Config::from_sources(None, &[], &flags).unwrap();
    assert_eq!(config.node_id, 7);
    assert_eq!(config.data_dir, PathBuf::from("/var/lib/plaudit"));
    assert_eq!(config.listen.to_string(), "0.0.0.0:9000");
    assert_eq!(config.admin.to_string(), "0.0.0.0:9001");
    assert_eq!(config.advertise.as_deref(), Some("plaudit-7.plaudit.ns.svc"));
    let (client, peer, admin) = config.advertised();
    assert_eq!(client, "plaudit-7.plaudit.ns.svc:9000");
    assert_eq!(peer, format!("plaudit-7.plaudit.ns.svc:{}", config.peer_listen.port()));
    assert_eq!(admin, "plaudit-7.plaudit.ns.svc:9001");
    assert_eq!(config.shards, 2);
    assert_eq!(config.score_future_horizon_secs, 60);
    assert_eq!(config.log, "plaudit_node=trace");
    assert!(config.insecure);
    let tokened = args(&[
        "--listen=0.0.0.0:9000",
        "--advertise=10.0.0.9",
        "--admin-token-file=/etc/plaudit/admin",
        "--tls-cert-file=/etc/plaudit/tls.crt",
        "--tls-key-file=/etc/plaudit/tls.key",
    ]);
    let config = Config::from_sources(None, &[], &tokened).unwrap();
    assert_eq!(config.admin_token_file, Some(PathBuf::from("/etc/plaudit/admin")));
    assert_eq!(config.tls_cert_file, Some(PathBuf::from("/etc/plaudit/tls.crt")));
}

#[test]
fn every_field_can_be_set_from_the_environment() {
    // Serialise a config whose every field differs from the default, feed
    // each field back as PLAUDIT_<FIELD>, and expect the same config.
    let wanted = Config {
        node_id: 9,
        node_id_from_hostname: false,
        data_dir: PathBuf::from("/d"),
        listen: "10.0.0.1:1".parse().unwrap(),
        admin: "10.0.0.1:2".parse().unwrap(),
        peer_listen: "10.0.0.1:3".parse().unwrap(),
        join: vec!["10.0.0.2:3".into(), "plaudit-1.plaudit.ns.svc:3".into()],
        advertise: Some("plaudit-9.plaudit.ns.svc".into()),
        bootstrap_expect: 2,
        replication_factor: 2,
        zone: Some("rack-7".into()),
        cluster_secret: Secret("0123456789abcdef-secret".into()),
        cluster_secret_file: Some(PathBuf::from("/etc/plaudit/secret")),
        admin_token: Secret("an-admin-token-of-some-length".into()),
        admin_token_file: Some(PathBuf::from("/etc/plaudit/admin")),
        metrics_token_file: Some(PathBuf::from("/etc/plaudit/metrics")),
        tls_cert_file: Some(PathBuf::from("/etc/plaudit/tls.crt")),
        tls_key_file: Some(PathBuf::from("/etc/plaudit/tls.key")),
        tls_ca_file: Some(PathBuf::from("/etc/plaudit/ca.crt")),
        insecure: true,
        fault_injection: true,
        shards: 3,
        groups: 2,
        worker_threads: 3,
        max_connections: 400,
        max_unauthenticated_connections: 35,
        max_unauthenticated_per_address: 36,
        admin_reserved_connections: 37,
        max_in_flight_per_connection: 5,
        max_requests_in_flight: 28,
        client_idle_timeout_secs: 23,
        client_auth_timeout_secs: 24,
        client_write_timeout_secs: 25,
        client_frame_timeout_secs: 26,
        client_frame_budget_mb: 27,
        max_pending_per_shard: 6,
        batch_max_commands: 7,
        max_proposals_in_flight: 8,
        actor_budget: 32,
        actor_budget_per_shard: Some(9),
        actor_idle_secs: 10,
        retention_sweep_secs: 19,
        score_future_horizon_secs: 23,
        max_boards_per_ranking: 38,
        hot_cache_min_rps: 41,
        hot_move_min_rps: 42,
        hot_move_after_secs: 43,
        event_id_window_secs: 33,
        event_ids_per_board: 34,
        sled_cache_mb: 11,
        min_free_disk_mb: 29,
        max_memory_mb: 31,
        request_timeout_ms: 12,
        shutdown_grace_ms: 13,
        raft_heartbeat_ms: 14,
        raft_election_min_ms: 15,
        raft_election_max_ms: 16,
        raft_read_lease_ms: Some(12),
        peer_timeout_ms: 600,
        dead_node_timeout_secs: 38,
        moves_per_node: 39,
        snapshot_send_mib_per_sec: 40,
        snapshot_every_entries: 17,
        snapshot_logs_to_keep: 22,
        checkpoint_keys: 20,
        checkpoint_ms: 21,
        outbox_batch: 18,
        log: "debug".to_string(),
    };
    let table = toml::Table::try_from(&wanted).unwrap();
    let vars: Vec<(String, String)> = table
        .iter()
        .map(|(key, value)| {
            let text = match value {
                toml::Value::String(s) => s.clone(),
                // Lists are comma separated in a variable.
                toml::Value::Array(items) => items
                    .iter()
                    .map(|i| i.as_str().map(str::to_string).unwrap_or_else(|| i.to_string()))
                    .collect::<Vec<_>>()
                    .join(","),
                other => other.to_string(),
            };
            (format!("PLAUDIT_{}", key.to_ascii_uppercase()), text)
        })
        .collect();
    let got = Config::from_sources(None, &vars, &Args::default()).unwrap();
    assert_eq!(got, wanted);
}

#[test]
fn cluster_flags_parse_and_bootstrap_expect_defaults_by_join() {
    let dir = tempfile::tempdir().unwrap();
    let secret = dir.path().join("secret");
    std::fs::write(&secret, "  a-long-enough-cluster-secret\n").unwrap();
    let secret_flag = format!("--cluster-secret-file={}", secret.display());
    let flags = args(&[
        "--node-id=2",
        "--peer-listen=127.0.0.1:7413",
        "--join=127.0.0.1:7403,127.0.0.1:7413,127.0.0.1:7423",
        "--bootstrap-expect=3",
        &secret_flag,
    ]);
    let c = Config::from_sources(None, &[], &flags).unwrap();
    assert_eq!(c.peer_listen.to_string(), "127.0.0.1:7413");
    assert_eq!(c.join.len(), 3);
    assert_eq!(c.effective_bootstrap_expect(), 3);
    assert_eq!(c.secret().unwrap().unwrap(), b"a-long-enough-cluster-secret");

    let single = Config::default();
    assert_eq!(single.effective_bootstrap_expect(), 1, "no join: a one-node cluster");
    assert_eq!(single.secret().unwrap(), None);
    let joiner = Config { join: c.join.clone(), ..c.clone() };
    assert_eq!(Config { bootstrap_expect: 0, ..joiner }.effective_bootstrap_expect(), 0);
}

#[test]
fn a_pod_takes_its_node_id_from_its_ordinal() {
    let flags = args(&["--node-id-from-hostname", "--node-id=40"]);
    let host = |h: &str| vec![("HOSTNAME".to_string(), h.to_string())];
    let c = Config::from_sources(None, &host("plaudit-2"), &flags).unwrap();
    assert_eq!(c.node_id, 3, "pod plaudit-2 is node 3, whatever --node-id says");
    let fqdn = Config::from_sources(None, &host("my-db-0.plaudit.ns.svc"), &flags).unwrap();
    assert_eq!(fqdn.node_id, 1);
    let err = Config::from_sources(None, &host("plaudit"), &flags).unwrap_err();
    assert!(error_text(err).contains("does not end in"));
}

#[test]
fn seeds_and_the_advertised_host_are_names_or_ips() {
    let with = |extra: &str| {
        format!("join = [\"127.0.0.1:7403\"]\ncluster_secret = \"0123456789abcdef-x\"\n{extra}")
    };
    let names = "join = [\"plaudit-0.plaudit.default.svc:7403\", \"[::1]:7403\"]\n\
                 cluster_secret = \"0123456789abcdef-x\"";
    assert!(Config::from_sources(Some(names), &[], &Args::default()).is_ok());
    let bad_seeds = [
        "join = [\"no-port\"]",
        "join = [\"host:0\"]",
        "join = [\"bad_host:1\"]",
        "join = [\"fe80::1:7403\"]",
    ];
    for bad in bad_seeds {
        let text = invalid(&format!("{bad}\ncluster_secret = \"0123456789abcdef-x\""));
        assert!(text.contains("join"), "{bad}: {text}");
    }
    assert!(invalid(&with("advertise = \"-bad\"")).contains("advertise"));
    // Every address: the others must be told one they can reach.
    let any = with("peer_listen = \"0.0.0.0:7403\"");
    assert!(invalid(&any).contains("set advertise"), "{}", invalid(&any));
    let told = with("peer_listen = \"0.0.0.0:7403\"\nadvertise = \"fd00::7\"\ninsecure = true");
    let c = Config::from_sources(Some(&told), &[], &Args::default()).unwrap();
    assert_eq!(c.advertised().1, "[fd00::7]:7403");
}

#[test]
fn a_cluster_needs_a_secret_that_is_never_printed() {
    let text = invalid("join = [\"127.0.0.1:7403\"]");
    assert!(text.contains("cluster_secret_file"), "{text}");
    assert!(invalid("bootstrap_expect = 3").contains("needs join"));
    let short = "join = [\"127.0.0.1:7403\"]\ncluster_secret = \"short\"";
    assert!(invalid(short).contains("at least 16 bytes"));
    let ok = "join = [\"127.0.0.1:7403\"]\ncluster_secret = \"0123456789abcdef-x\"";
    let c = Config::from_sources(Some(ok), &[], &Args::default()).unwrap();
    let shown = format!("{c:?}");
    assert!(!shown.contains("0123456789abcdef"), "{shown}");
    assert!(shown.contains("(redacted)"), "{shown}");
}

#[test]
fn tokens_off_loopback_need_tls_or_insecure() {
    let open = "listen = \"10.1.2.3:7401\"\nadmin_token = \"an-admin-token-long-enough\"";
    let text = invalid(open);
    assert!(text.contains("tls_cert_file") && text.contains("--insecure"), "{text}");
    let tls = format!("{open}\ntls_cert_file = \"/c.pem\"\ntls_key_file = \"/k.pem\"");
    assert!(Config::from_sources(Some(&tls), &[], &Args::default()).is_ok());
    assert!(Config::from_sources(Some(&format!("{open}\ninsecure = true")), &[], &Args::default())
        .is_ok());
    let scrape_only = "metrics_token_file = \"/m\"";
    assert!(invalid(scrape_only).contains("needs an admin token"), "{}", invalid(scrape_only));
    let half = "tls_cert_file = \"/c.pem\"";
    assert!(invalid(half).contains("go together"), "{}", invalid(half));
    // On loopback, plaintext is fine: nothing crosses a network.
    let local = "admin_token = \"an-admin-token-long-enough\"";
    assert!(Config::from_sources(Some(local), &[], &Args::default()).is_ok());
    let flags = args(&["--tls-cert-file=/a.pem", "--tls-key-file=/b.pem"]);
    let c = Config::from_sources(None, &[], &flags).unwrap();
    assert_eq!(c.tls_key_file, Some(PathBuf::from("/b.pem")));
}

#[test]
fn peers_off_loopback_need_mutual_tls_or_insecure() {
    let peers = "join = [\"10.1.2.4:7403\"]\ncluster_secret = \"0123456789abcdef-x\"\n\
                 peer_listen = \"10.1.2.3:7403\"";
    let text = invalid(peers);
    assert!(text.contains("tls_ca_file") && text.contains("--insecure"), "{text}");
    let files = "tls_cert_file = \"/c.pem\"\ntls_key_file = \"/k.pem\"\ntls_ca_file = \"/ca.pem\"";
    let with_tls = format!("{peers}\n{files}");
    let c = Config::from_sources(Some(&with_tls), &[], &Args::default()).unwrap();
    assert_eq!(c.tls_ca_file, Some(PathBuf::from("/ca.pem")));
    assert!(Config::from_sources(
        Some(&format!("{peers}\ninsecure = true")),
        &[],
        &Args::default()
    )
    .is_ok());
    let ca_alone = "tls_ca_file = \"/ca.pem\"";
    assert!(invalid(ca_alone).contains("needs tls_cert_file"), "{}", invalid(ca_alone));
    let flags = args(&["--tls-ca-file=/x.pem"]);
    let err = Config::from_sources(None, &[], &flags).unwrap_err().to_string();
    assert!(err.contains("needs tls_cert_file"), "{err}");
}

#[test]
fn a_node_off_loopback_needs_an_admin_token_or_insecure() {
    let open = "listen = \"0.0.0.0:7401\"\nadvertise = \"10.1.2.3\"";
    let text = invalid(open);
    assert!(text.contains("admin_token_file") && text.contains("--insecure"), "{text}");
    let admin_only = "admin = \"10.1.2.3:7402\"";
    assert!(invalid(admin_only).contains("admin_token_file"));
    let insecure = format!("{open}\ninsecure = true");
    assert!(Config::from_sources(Some(&insecure), &[], &Args::default()).is_ok());
    let tls = "tls_cert_file = \"/c.pem\"\ntls_key_file = \"/k.pem\"";
    let tokened = format!("{open}\nadmin_token = \"an-admin-token-long-enough\"\n{tls}");
    let c = Config::from_sources(Some(&tokened), &[], &Args::default()).unwrap();
    assert!(c.has_admin_token());
    assert_eq!(c.admin_token().unwrap().as_deref(), Some("an-admin-token-long-enough"));
    let shown = format!("{c:?}");
    assert!(!shown.contains("an-admin-token"), "{shown}");
    // Loopback without a token runs open: the README's quick start.
    let local = Config::from_sources(None, &[], &Args::default()).unwrap();
    assert!(!local.has_admin_token() && local.admin_token().unwrap().is_none());
    assert!(invalid("admin_token = \"short\"").contains("16 to 256 bytes"));
    assert!(invalid("admin_token = \"plt_1_abcdefghijklmnopq\"").contains("must not start"));
}

#[test]
fn the_admin_token_file_is_read_trimmed_and_checked() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("admin");
    std::fs::write(&path, "  an-admin-token-from-a-file\n").unwrap();
    let c = Config { admin_token_file: Some(path.clone()), ..Config::default() };
    assert_eq!(c.admin_token().unwrap().as_deref(), Some("an-admin-token-from-a-file"));
    std::fs::write(&path, "short\n").unwrap();
    let text = error_text(c.admin_token().unwrap_err());
    assert!(text.contains("16 to 256 bytes") && !text.contains("short"), "{text}");
    let missing = Config { admin_token_file: Some(dir.path().join("nope")), ..Config::default() };
    assert!(error_text(missing.admin_token().unwrap_err()).contains("nope"));
}

#[test]
fn unknown_field_in_file_is_rejected() {
    let err = Config::from_sources(Some("shard = 4\n"), &[], &Args::default()).unwrap_err();
    let text = error_text(err);
    assert!(text.contains("unknown field") && text.contains("shard"), "{text}");
}

#[test]
fn wrongly_typed_field_in_file_is_rejected() {
    let err = Config::from_sources(Some("shards = \"many\"\n"), &[], &Args::default()).unwrap_err();
    assert!(error_text(err).contains("shards"));
}

#[test]
fn bad_env_value_names_the_variable() {
    let vars = env(&[("PLAUDIT_SHARDS", "lots")]);
    let text = error_text(Config::from_sources(None, &vars, &Args::default()).unwrap_err());
    assert!(text.contains("PLAUDIT_SHARDS"), "{text}");

    let vars = env(&[("PLAUDIT_LISTEN", "localhost")]);
    let text = error_text(Config::from_sources(None, &vars, &Args::default()).unwrap_err());
    assert!(text.contains("PLAUDIT_LISTEN"), "{text}");
}

#[test]
fn env_names_are_case_insensitive_after_the_prefix_and_values_are_trimmed() {
    let vars = env(&[("PLAUDIT_Shards", " 4 ")]);
    assert_eq!(Config::from_sources(None, &vars, &Args::default()).unwrap().shards, 4);
}

#[test]
fn unrelated_and_kubernetes_service_variables_are_ignored() {
    let vars = env(&[
        ("HOME", "/root"),
        ("PLAUDIT_SERVICE_HOST", "10.0.0.1"),
        ("PLAUDIT_PORT_7401_TCP", "tcp://10.0.0.1:7401"),
        ("PLAUDIT_CONFIG", "/etc/plaudit.toml"),
    ]);
    assert_eq!(Config::from_sources(None, &vars, &Args::default()).unwrap(), Config::default());
}

fn invalid(file: &str) -> String {
    error_text(Config::from_sources(Some(file), &[], &Args::default()).unwrap_err())
}

#[test]
fn shards_must_be_in_range() {
    assert!(invalid("shards = 0").contains("shards must be in 1..=1024"));
    assert!(invalid("shards = 1025").contains("got 1025"));
    assert!(Config::from_sources(Some("shards = 1024"), &[], &Args::default()).is_ok());
    assert!(Config::from_sources(Some("shards = 1"), &[], &Args::default()).is_ok());
}

#[test]
fn groups_are_at_most_the_shards() {
    assert!(invalid("shards = 6\ngroups = 7").contains("groups must be at most shards (6)"));
    for ok in ["shards = 6\ngroups = 6", "shards = 6\ngroups = 1", "shards = 6\ngroups = 0"] {
        assert!(Config::from_sources(Some(ok), &[], &Args::default()).is_ok(), "{ok}");
    }
}

#[test]
fn raft_timers_must_be_ordered() {
    let text = invalid("raft_election_min_ms = 2000\nraft_election_max_ms = 2000");
    assert!(text.contains("raft_election_min_ms (2000) must be less than"), "{text}");
    let text = invalid("raft_read_lease_ms = 450");
    assert!(text.contains("raft_read_lease_ms (450) must be less than"), "{text}");
    let text = invalid("raft_heartbeat_ms = 1000");
    assert!(text.contains("raft_heartbeat_ms (1000) must be less than"), "{text}");
}

#[test]
fn limits_must_be_non_zero() {
    for field in [
        "max_connections",
        "max_in_flight_per_connection",
        "max_requests_in_flight",
        "client_idle_timeout_secs",
        "client_auth_timeout_secs",
        "client_write_timeout_secs",
        "client_frame_timeout_secs",
        "max_pending_per_shard",
        "batch_max_commands",
        "max_proposals_in_flight",
        "actor_budget",
        "actor_budget_per_shard",
        "request_timeout_ms",
        "snapshot_every_entries",
        "outbox_batch",
    ] {
        let text = invalid(&format!("{field} = 0"));
        assert!(text.contains(&format!("{field} must be greater than 0")), "{text}");
    }
    assert!(invalid("node_id = 0").contains("node_id"));
}

#[test]
fn the_actor_budget_is_per_node_and_a_share_per_shard_wins() {
    let from = |file: Option<&str>, vars: &[(&str, &str)]| {
        let c = Config::from_sources(file, &env(vars), &Args::default()).unwrap();
        (c.actor_budget, c.actor_budget_per_shard)
    };
    assert_eq!(from(None, &[]), (16_384, None));
    assert_eq!(from(None, &[("PLAUDIT_ACTOR_BUDGET", "1000")]), (1000, None));
    let both = [("PLAUDIT_ACTOR_BUDGET", "1000"), ("PLAUDIT_ACTOR_BUDGET_PER_SHARD", "77")];
    assert_eq!(from(None, &both), (1000, Some(77)));
    // An old file keeps its meaning, whatever the environment's budget.
    let old = Some("actor_budget_per_shard = 2731\n");
    assert_eq!(from(old, &[("PLAUDIT_ACTOR_BUDGET", "1000")]), (1000, Some(2731)));
}

#[test]
fn the_future_horizon_defaults_to_a_day_and_must_fit_a_timestamp() {
    let config = Config::from_sources(None, &[], &Args::default()).unwrap();
    assert_eq!(config.score_future_horizon_secs, 86_400);
    let huge = env(&[("PLAUDIT_SCORE_FUTURE_HORIZON_SECS", "18446744073709551615")]);
    let err = Config::from_sources(None, &huge, &Args::default()).unwrap_err();
    assert!(error_text(err).contains("score_future_horizon_secs must be at most"));
    let none = env(&[("PLAUDIT_SCORE_FUTURE_HORIZON_SECS", "0")]);
    let strict = Config::from_sources(None, &none, &Args::default()).unwrap();
    assert_eq!(strict.score_future_horizon_secs, 0, "0: no event after the node's clock");
}

#[test]
fn listen_and_admin_must_differ_and_log_must_parse() {
    let text = invalid("listen = \"127.0.0.1:9000\"\nadmin = \"127.0.0.1:9000\"");
    assert!(text.contains("listen and admin"), "{text}");
    // Port 0 asks the OS for a fresh port each time, so it may repeat.
    let both_zero = "listen = \"127.0.0.1:0\"\nadmin = \"127.0.0.1:0\"";
    assert!(Config::from_sources(Some(both_zero), &[], &Args::default()).is_ok());
    assert!(invalid("log = \"info,[\"").contains("log"));
}

#[test]
fn the_sample_file_lists_every_field_at_its_default() {
    let sample = include_str!("../../../deploy/plaudit.toml");
    let parsed = Config::from_sources(Some(sample), &[], &Args::default()).unwrap();
    assert_eq!(parsed, Config::default());
    let sample_keys: Vec<String> =
        toml::from_str::<toml::Table>(sample).unwrap().keys().cloned().collect();
    let field_keys: Vec<String> =
        toml::Table::try_from(Config::default()).unwrap().keys().cloned().collect();
    assert_eq!(sample_keys.len(), field_keys.len());
    for key in field_keys {
        assert!(sample_keys.contains(&key), "deploy/plaudit.toml lacks {key}");
    }
}

#[test]
fn load_reads_the_file_named_by_the_flag() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("plaudit.toml");
    std::fs::write(&path, "shards = 5\n").unwrap();
    let flags = Args { config: Some(path.clone()), ..Args::default() };
    assert_eq!(Config::load(&flags).unwrap().shards, 5);

    std::fs::write(&path, "shards = 5000\n").unwrap();
    let text = error_text(Config::load(&flags).unwrap_err());
    assert!(text.contains(&path.display().to_string()) && text.contains("shards"), "{text}");

    let missing = Args { config: Some(dir.path().join("nope.toml")), ..Args::default() };
    assert!(error_text(Config::load(&missing).unwrap_err()).contains("nope.toml"));
}
