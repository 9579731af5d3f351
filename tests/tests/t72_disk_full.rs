//! A nearly full disk, for real: the node's data directory sits on a
//! 160 MiB tmpfs that the test fills with a file. While free space is below
//! the node's reserve (`min_free_disk_mb`), writes fail with `Overloaded`
//! saying why, reads keep serving, and nothing already written is lost;
//! once the file is deleted, writes go through again without a restart.
//! (Before the reserve, sled's failed write stopped every shard, reads
//! included, until a restart.)
//!
//! Mounting a tmpfs needs root, as CI and the README's test command run.

use plaudit_client::proto::scoring::{BoardRef, ScoreRequest};
use plaudit_client::proto::window::Granularity;
use plaudit_client::proto::{BizConfig, ErrorCode};
use plaudit_client::{Client, ClientOptions};
use plaudit_tests::{http_get, metric_sum, total_ranking, wait_until, Node};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

const MIB: u64 = 1 << 20;
const RESERVE_MB: u64 = 48;

/// A tmpfs mounted for the test, unmounted when dropped.
struct Tmpfs {
    dir: tempfile::TempDir,
}

impl Tmpfs {
    fn mount(size_mb: u64) -> Tmpfs {
        let dir = tempfile::tempdir().expect("tempdir");
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size_mb}m"), "tmpfs"])
            .arg(dir.path())
            .output()
            .expect("run mount");
        assert!(
            out.status.success(),
            "mounting a tmpfs needs root: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Tmpfs { dir }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    fn free(&self) -> u64 {
        let out = Command::new("df").args(["-B1", "--output=avail"]).arg(self.path()).output();
        let text = String::from_utf8_lossy(&out.expect("run df").stdout).to_string();
        text.lines().nth(1).and_then(|l| l.trim().parse().ok()).expect("df avail")
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(self.dir.path()).status();
    }
}

/// Writes a file until `fs` has about `leave` bytes free.
fn fill(fs: &Tmpfs, leave: u64) -> PathBuf {
    let path = fs.path().join("filler");
    let mut f = std::fs::File::create(&path).unwrap();
    let chunk = vec![0xa5u8; MIB as usize];
    while fs.free() > leave + MIB {
        f.write_all(&chunk).unwrap();
    }
    f.sync_all().unwrap();
    path
}

fn now() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs() as i64
}

fn total() -> BoardRef {
    BoardRef::At { dims: vec![], granularity: Granularity::Total, ts: now() }
}

fn score(event_id: u64) -> ScoreRequest {
    ScoreRequest { rank: 5, item: 1, score: 10, sub: None, dims: vec![], ts: now(), event_id }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_refuses_writes_serves_reads_and_recovers_by_itself() {
    let fs = Tmpfs::mount(160);
    let data = fs.path().join("data");
    let node = Node::builder()
        .data_dir(&data)
        .env("PLAUDIT_MIN_FREE_DISK_MB", RESERVE_MB)
        .env("PLAUDIT_SLED_CACHE_MB", 16)
        .start();
    // One try per call: the refusal itself is what this test looks at.
    let c = node
        .client_with(ClientOptions { timeout: Duration::from_secs(3), ..Default::default() })
        .await;
    let biz = c.create_biz(None, "full", BizConfig::default()).await.unwrap().id;
    c.create_rank(total_ranking(5, "full")).await.unwrap();
    for e in 1..=50 {
        c.like(biz, e, 7, None).await.unwrap();
    }
    c.score(score(1)).await.unwrap();
    // Counts follow likes by delivery, itself a write that a full disk
    // refuses: let it land first, so the reads below have it.
    wait_until(Duration::from_secs(10), "the likes are delivered to their counts", || async {
        c.counts(biz, &[1, 2, 3]).await.is_ok_and(|cs| cs.iter().all(|e| e.likes == 1))
    })
    .await;

    // Leave less than the reserve.
    let filler = fill(&fs, (RESERVE_MB - 16) * MIB);
    let refused = |c: Client| async move {
        match c.like(biz, 1000, 8, None).await {
            Err(e) => e.code() == Some(ErrorCode::Overloaded) && e.to_string().contains("disk"),
            Ok(_) => false,
        }
    };
    wait_until(Duration::from_secs(10), "writes are refused on a full disk", || refused(c.clone()))
        .await;
    let err = c.score(score(2)).await.expect_err("a score on a full disk");
    assert!(err.to_string().contains("min_free_disk_mb"), "{err}");
    let err = c.create_biz(None, "more", BizConfig::default()).await.expect_err("a new business");
    assert_eq!(err.code(), Some(ErrorCode::Overloaded), "{err}");

    // Reads serve, with everything written before.
    let states = c.status(biz, 7, &(1..=50).collect::<Vec<_>>()).await.expect("status");
    assert!(states.iter().all(|s| s.state == plaudit_client::proto::LikeState::Like));
    let counts = c.counts(biz, &[1, 2, 3]).await.expect("counts");
    assert!(counts.iter().all(|e| e.likes == 1), "{counts:?}");
    let top = c.top(5, total(), 0, 10).await.expect("top");
    assert_eq!(top.len(), 1);
    assert_eq!(http_get(node.admin_addr(), "/readyz").expect("readyz").0, 200);
    let metrics = node.metrics_text();
    assert_eq!(metric_sum(&metrics, "plaudit_disk_writes_refused"), Some(1.0));

    // Space back: writes resume, no restart.
    std::fs::remove_file(&filler).unwrap();
    wait_until(Duration::from_secs(10), "writes resume once space is freed", || async {
        c.like(biz, 1000, 8, None).await.is_ok()
    })
    .await;
    c.score(score(2)).await.expect("scoring resumes");
    assert_eq!(metric_sum(&node.metrics_text(), "plaudit_disk_writes_refused"), Some(0.0));
    let top = c.top(5, total(), 0, 10).await.unwrap();
    assert_eq!(top[0].score, 20, "both events count once: {top:?}");
    drop(node);
}
