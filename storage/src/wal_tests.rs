//! The log's write buffer, and dropped groups: what a kill would leave
//! (the files as they are, page cache included) is read by opening a copy
//! of the directory.

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

/// Appends one record of `kind` for `group`.
fn record(wal: &Wal, group: u32, kind: u8, index: u64, payload: &[u8]) {
    wal.lock().append(group, &[Record { kind, index, payload }]).unwrap();
}

/// Segment sequence numbers, as the log lists them and as files on disk.
fn segment_seqs(wal: &Wal, dir: &Path) -> (Vec<u64>, Vec<u64>) {
    let listed = wal.lock().segments.iter().map(|s| s.seq).collect();
    let mut on_disk: Vec<u64> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| {
            let name = e.unwrap().file_name().into_string().unwrap();
            name.strip_prefix("wal-")?.strip_suffix(".log")?.parse().ok()
        })
        .collect();
    on_disk.sort_unstable();
    (listed, on_disk)
}

#[test]
fn a_dropped_group_is_gone_after_a_restart_and_other_groups_keep_theirs() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("log");
    let wal = Wal::open(&dir).unwrap();
    append(&wal, 1, 1..=10);
    record(&wal, 1, KIND_VOTE, 0, b"vote");
    record(&wal, 1, KIND_PURGE, 3, b"purged");
    record(&wal, 1, KIND_COMMITTED, 0, b"committed");
    append(&wal, 2, 1..=5);
    record(&wal, 2, KIND_VOTE, 0, b"vote 2");

    wal.drop_group(1).unwrap();
    assert_eq!(wal.group_ids(), vec![2]);
    assert!(!wal.lock().groups.contains_key(&1), "entries and hard state gone from memory");

    // `drop_group` wrote and synced its record: a kill right after keeps it.
    let copy = after_kill(&dir, &tmp.path().join("copy"), SEGMENT_BYTES);
    assert_eq!(copy.group_ids(), vec![2]);
    assert_eq!(entries(&copy, 2), expected(1..=5));
    assert_eq!(copy.lock().groups[&2].vote.as_deref(), Some(&b"vote 2"[..]));
}

#[test]
fn a_group_created_again_after_its_drop_has_only_its_new_records() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("log");
    let wal = Wal::open(&dir).unwrap();
    append(&wal, 1, 1..=10);
    record(&wal, 1, KIND_VOTE, 0, b"old vote");
    record(&wal, 1, KIND_PURGE, 2, b"old purge");
    wal.drop_group(1).unwrap();

    // Created again on this node: its log starts over, at low indexes.
    let new = |i: u64| format!("new {i}").into_bytes();
    for i in 1..=3 {
        record(&wal, 1, KIND_ENTRY, i, &new(i));
    }
    record(&wal, 1, KIND_COMMITTED, 0, b"new committed");
    wal.sync_round().unwrap();

    let want: Vec<_> = (1..=3).map(|i| (i, new(i))).collect();
    assert_eq!(entries(&wal, 1), want);
    let copy = after_kill(&dir, &tmp.path().join("copy"), SEGMENT_BYTES);
    assert_eq!(entries(&copy, 1), want, "the old entries 4..=10 stay dropped");
    let inner = copy.lock();
    let g = &inner.groups[&1];
    assert_eq!(g.vote, None, "the old vote stays dropped");
    assert_eq!(g.purged, None, "the old purge point stays dropped");
    assert_eq!(g.committed.as_deref(), Some(&b"new committed"[..]));
}

#[test]
fn a_dropped_groups_segments_are_deleted_at_the_next_rotation() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("log");
    // Small segments: group 1's log spans several.
    let wal = Wal::open_with_segment_bytes(&dir, 4096).unwrap();
    append(&wal, 1, 1..=200);
    record(&wal, 1, KIND_VOTE, 0, b"vote");
    let (held, _) = segment_seqs(&wal, &dir);
    assert!(held.len() >= 3, "group 1 spans segments: {held:?}");

    wal.drop_group(1).unwrap();
    let dropped_in = *segment_seqs(&wal, &dir).0.last().unwrap();
    // Group 2's appends rotate: every segment before the one with the drop
    // record has nothing live left, and goes (that one too, if a spare
    // made ready meanwhile rotated before group 2's first append).
    append(&wal, 2, 1..=100);
    let (listed, on_disk) = segment_seqs(&wal, &dir);
    assert!(listed[0] >= dropped_in, "the segments only group 1 kept are deleted: {listed:?}");
    assert_eq!(listed, on_disk);

    // Once group 2's entries in it are purged, the segment with the drop
    // record goes too: then only rotations' hard state could bring
    // group 1 back, and they record none for it.
    record(&wal, 2, KIND_PURGE, 100, b"purged");
    append(&wal, 2, 101..=200);
    let (listed, on_disk) = segment_seqs(&wal, &dir);
    assert!(listed[0] > dropped_in, "the drop record's segment went: {listed:?}");
    assert_eq!(listed, on_disk);
    wal.sync_round().unwrap();

    let copy = after_kill(&dir, &tmp.path().join("copy"), 4096);
    assert_eq!(copy.group_ids(), vec![2]);
    assert_eq!(entries(&copy, 2), expected(101..=200));
}

#[test]
fn dropping_a_group_the_log_lacks_writes_nothing_but_reports_a_poisoned_log() {
    let tmp = tempfile::tempdir().unwrap();
    let wal = Wal::open(&tmp.path().join("log")).unwrap();
    append(&wal, 1, 1..=3);
    wal.write_out().unwrap();
    let len = wal.lock().segments[0].len;
    wal.drop_group(9).unwrap();
    assert_eq!(wal.lock().segments[0].len, len, "no record for a group never held");
    assert_eq!(wal.group_ids(), vec![1]);

    // A retry after a failed sync must not report the drop durable.
    wal.drop_group(1).unwrap();
    wal.poison_on(&Err(io::Error::other("EIO")));
    assert!(wal.drop_group(1).is_err());
    assert!(wal.drop_group(9).is_err());
}
