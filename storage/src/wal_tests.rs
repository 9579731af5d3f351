//! The log's write buffer: what a kill would leave (the files as they are,
//! page cache included) is read by opening a copy of the directory.

use super::*;

fn payload(i: u64) -> Vec<u8> {
    format!("entry {i} ").repeat(1 + i as usize % 7).into_bytes()
}

fn append(wal: &Wal, group: u32, indexes: impl IntoIterator<Item = u64>) {
    let mut inner = wal.lock();
    for i in indexes {
        let p = payload(i);
        inner.append(group, &[Record { kind: KIND_ENTRY, index: i, payload: &p }]).unwrap();
    }
}

/// The indexes and payloads a log holds for `group`.
fn entries(wal: &Wal, group: u32) -> Vec<(u64, Vec<u8>)> {
    let inner = wal.lock();
    let Some(g) = inner.groups.get(&group) else { return Vec::new() };
    g.locs
        .iter()
        .map(|(&i, &loc)| {
            let mut buf = Vec::new();
            inner.read(loc, &mut buf).unwrap();
            (i, buf)
        })
        .collect()
}

/// A log opened on a copy of `dir` as it is now: what a restart after a
/// kill would find.
fn after_kill(dir: &Path, copy: &Path, segment_bytes: u64) -> Arc<Wal> {
    std::fs::create_dir_all(copy).unwrap();
    for e in std::fs::read_dir(dir).unwrap() {
        let path = e.unwrap().path();
        let name = path.file_name().unwrap().to_str().unwrap().to_owned();
        if name.starts_with("wal-") && name.ends_with(".log") {
            std::fs::copy(&path, copy.join(name)).unwrap();
        }
    }
    Wal::open_with_segment_bytes(copy, segment_bytes).unwrap()
}

fn expected(indexes: impl IntoIterator<Item = u64>) -> Vec<(u64, Vec<u8>)> {
    indexes.into_iter().map(|i| (i, payload(i))).collect()
}

#[test]
fn appends_are_readable_at_once_and_reach_the_file_at_write_out() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("log");
    let wal = Wal::open(&dir).unwrap();
    append(&wal, 1, 1..=5);
    append(&wal, 2, 1..=3);
    assert_eq!(entries(&wal, 1), expected(1..=5), "read back before any write");
    assert_eq!(entries(&wal, 2), expected(1..=3));
    let copy = after_kill(&dir, &tmp.path().join("before"), SEGMENT_BYTES);
    assert!(entries(&copy, 1).is_empty(), "nothing reached the file before write_out");

    wal.write_out().unwrap();
    let copy = after_kill(&dir, &tmp.path().join("after"), SEGMENT_BYTES);
    assert_eq!(entries(&copy, 1), expected(1..=5));
    assert_eq!(entries(&copy, 2), expected(1..=3));
    // Written entries are read from the file, later ones from memory.
    append(&wal, 1, 6..=7);
    assert_eq!(entries(&wal, 1), expected(1..=7));
}

#[test]
fn a_round_writes_then_syncs_and_rotation_writes_the_outgoing_segment_first() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("log");
    // Small segments: the appends below span several.
    let wal = Wal::open_with_segment_bytes(&dir, 4096).unwrap();
    append(&wal, 1, 1..=200);
    assert!(wal.segment_count() >= 2, "segments rotated: {}", wal.segment_count());
    wal.sync_round().unwrap();
    let copy = after_kill(&dir, &tmp.path().join("copy"), 4096);
    assert_eq!(entries(&copy, 1), expected(1..=200));
}

#[test]
fn the_buffer_is_written_once_it_passes_its_bound() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("log");
    let wal = Wal::open(&dir).unwrap();
    let big = vec![7u8; PENDING_MAX / 4];
    for i in 1..=4 {
        wal.lock().append(1, &[Record { kind: KIND_ENTRY, index: i, payload: &big }]).unwrap();
    }
    assert!(wal.lock().pending.is_empty(), "the buffer was written at its bound");
    let copy = after_kill(&dir, &tmp.path().join("copy"), SEGMENT_BYTES);
    assert_eq!(copy.lock().groups[&1].locs.len(), 4);
}

#[test]
fn a_poisoned_log_fails_its_rounds() {
    let tmp = tempfile::tempdir().unwrap();
    let wal = Wal::open(&tmp.path().join("log")).unwrap();
    append(&wal, 1, 1..=2);
    wal.poison_on(&Err(io::Error::other("EIO")));
    assert!(wal.sync_round().is_err(), "a round after a failed sync reports it");
}

#[test]
fn older_segments_read_while_a_large_buffer_waits() {
    let tmp = tempfile::tempdir().unwrap();
    let wal = Wal::open_with_segment_bytes(&tmp.path().join("log"), 4096).unwrap();
    append(&wal, 1, 1..=200);
    wal.sync_round().unwrap();
    assert!(wal.segment_count() >= 2);
    // More bytes wait than any older segment holds.
    let big = vec![9u8; 5 * 4096];
    wal.lock().append(1, &[Record { kind: KIND_ENTRY, index: 201, payload: &big }]).unwrap();
    let mut all = expected(1..=200);
    all.push((201, big));
    assert_eq!(entries(&wal, 1), all);
}
