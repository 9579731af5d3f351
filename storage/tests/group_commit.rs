//! The group-commit flusher: it coalesces, it answers every callback, and it
//! goes away (releasing the `Db`) when its last handle does.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Barrier};
use std::time::Duration;

use plaudit_storage::group_commit::GroupCommit;

const THREADS: usize = 4;
const PER_THREAD: usize = 250;

#[test]
fn concurrent_submits_share_flushes_and_all_complete_ok() {
    let dir = tempfile::tempdir().unwrap();
    let db = sled::open(dir.path()).unwrap();
    let commit = GroupCommit::start(db.clone(), dir.path()).unwrap();
    let tree = db.open_tree("t").unwrap();
    let (done_tx, done_rx) = mpsc::channel();
    let start = Arc::new(Barrier::new(THREADS));

    let writers: Vec<_> = (0..THREADS)
        .map(|t| {
            let (commit, tree, done_tx, start) =
                (commit.clone(), tree.clone(), done_tx.clone(), start.clone());
            std::thread::spawn(move || {
                start.wait();
                for i in 0..PER_THREAD {
                    // Real dirty data per request, as an append would leave.
                    tree.insert(format!("{t}/{i}"), vec![0u8; 64]).unwrap();
                    let done_tx = done_tx.clone();
                    commit.submit(Box::new(move |result| done_tx.send(result).unwrap()));
                }
            })
        })
        .collect();
    drop(done_tx);
    for w in writers {
        w.join().unwrap();
    }

    let results: Vec<_> = done_rx.iter().collect();
    assert_eq!(results.len(), THREADS * PER_THREAD, "every callback completes exactly once");
    assert!(results.iter().all(|r| r.is_ok()), "{results:?}");

    let stats = commit.stats();
    assert_eq!(stats.callbacks_completed, (THREADS * PER_THREAD) as u64);
    assert_eq!(stats.flush_errors, 0);
    // Each flush round covers every request queued while the previous one ran.
    assert!(stats.flushes >= 1 && stats.flushes <= 250, "flushes: {}", stats.flushes);
    eprintln!("{} callbacks in {} flushes", stats.callbacks_completed, stats.flushes);
}

#[tokio::test]
async fn async_flush_covers_earlier_writes_and_counts_one_round() {
    let dir = tempfile::tempdir().unwrap();
    let db = sled::open(dir.path()).unwrap();
    let commit = GroupCommit::start(db.clone(), dir.path()).unwrap();
    db.insert("k", "v").unwrap();
    commit.flush().await.unwrap();
    let stats = commit.stats();
    assert_eq!((stats.flushes, stats.callbacks_completed), (1, 1));
    drop(commit);
    drop(db);
    // The flusher released its Db clone: the directory opens again and has the write.
    let db = sled::open(dir.path()).unwrap();
    assert_eq!(db.get("k").unwrap().as_deref(), Some(&b"v"[..]));
}

#[test]
fn queued_callbacks_complete_when_the_last_handle_drops() {
    let dir = tempfile::tempdir().unwrap();
    let db = sled::open(dir.path()).unwrap();
    let commit = GroupCommit::start(db.clone(), dir.path()).unwrap();
    let completed = Arc::new(AtomicU64::new(0));
    for _ in 0..100 {
        let completed = completed.clone();
        commit.submit(Box::new(move |result| {
            assert!(result.is_ok());
            completed.fetch_add(1, Ordering::SeqCst);
        }));
    }
    // Dropping the last handle waits for the thread, which drains first.
    drop(commit);
    assert_eq!(completed.load(Ordering::SeqCst), 100);
}

#[test]
fn flush_blocking_inside_a_callback_fails_instead_of_deadlocking() {
    let dir = tempfile::tempdir().unwrap();
    let db = sled::open(dir.path()).unwrap();
    let commit = GroupCommit::start(db, dir.path()).unwrap();
    let (tx, rx) = mpsc::channel();
    let inner = commit.clone();
    commit.submit(Box::new(move |_| tx.send(inner.flush_blocking()).unwrap()));
    let nested = rx.recv_timeout(Duration::from_secs(30)).expect("callback ran");
    assert!(nested.is_err());
    assert!(commit.flush_blocking().is_ok(), "the flusher is still serving");
}

#[test]
fn a_panicking_callback_does_not_stop_the_flusher() {
    let dir = tempfile::tempdir().unwrap();
    let db = sled::open(dir.path()).unwrap();
    let commit = GroupCommit::start(db, dir.path()).unwrap();
    commit.submit(Box::new(|_| panic!("callback bug")));
    assert!(commit.flush_blocking().is_ok());
}

#[test]
fn start_rejects_a_directory_without_sled_data() {
    let dir = tempfile::tempdir().unwrap();
    let db = sled::Config::new().temporary(true).open().unwrap();
    let err = GroupCommit::start(db, dir.path()).unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::NotFound);
}
