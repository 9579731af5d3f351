//! Export, install, verify and forget against real sled trees.

use super::*;
use crate::state::WriteSet;
use plaudit_proto::LikeState;

use crate::state::test_store as store;

#[test]
fn a_header_announcing_a_terabyte_string_fails_instead_of_aborting() {
    // A header that starts with a string of 2^40 bytes: without the
    // bound, decoding aborts the process on the failed allocation.
    let mut header = vec![253];
    header.extend_from_slice(&(1u64 << 40).to_le_bytes());
    header.extend_from_slice(b"10.0.0.1:7403");
    assert!(decode_header::<(String, u64)>(&header).is_err());
    let fine = codec::to_bytes(&("10.0.0.1:7403".to_string(), 7u64)).unwrap();
    assert_eq!(decode_header::<(String, u64)>(&fine).unwrap(), ("10.0.0.1:7403".into(), 7));
}

/// Every key of every tree, as the trees hold it after a checkpoint.
fn dump(s: &StateStore, shard: u32) -> Vec<(String, Vec<u8>, Vec<u8>)> {
    s.checkpoint(shard).unwrap();
    let mut trees: Vec<TreeRef> = vec![TreeRef::Registry];
    trees.extend(s.biz_ids().into_iter().map(TreeRef::Biz));
    trees.extend(s.rank_ids().into_iter().map(TreeRef::Rank));
    trees.extend(s.shards.read().unwrap().keys().map(|&id| TreeRef::Shard(id)));
    let mut out = Vec::new();
    for tree in trees {
        let name = match tree {
            TreeRef::Biz(b) => format!("biz/{b}"),
            TreeRef::Rank(r) => format!("rank/{r}"),
            TreeRef::Shard(id) => format!("shard/{id}/meta"),
            TreeRef::Registry => "registry".into(),
        };
        for (k, v) in s.tree(tree).scan((Bound::Unbounded, Bound::Unbounded), false) {
            out.push((name.clone(), k, v));
        }
    }
    out.sort();
    out
}

fn fill(s: &StateStore, shard: u32, n: u64) {
    let mut ws = WriteSet::new(shard);
    for i in 0..n {
        ws.put_state(1, shard, i, i * 7, LikeState::Like, 1000 + i);
        ws.add_user_item(1, shard, i, 1000 + i, i * 7);
        ws.put_board_member(5, shard, b"day", i, i as i64 * 3, i);
        // Long values, so the export spans several chunks.
        ws.put_board_events(5, shard, b"day", i, 1000 + i, &vec![i; 4000]);
    }
    ws.put_applied(shard, b"applied-at-n");
    ws.put_time_floor(shard, 77);
    ws.push_outbox(shard, 3, 1, b"delta");
    s.stage(ws);
}

#[test]
fn export_then_install_elsewhere_gives_the_same_state() {
    let (_a, src) = store();
    fill(&src, 2, 200);
    // Another shard's keys and a registry entry must stay out of shard 2's export.
    let mut other = WriteSet::new(4);
    other.put_state(1, 4, 1, 1, LikeState::Dislike, 5);
    src.stage(other);
    let mut reg = WriteSet::new(2);
    reg.put_registry(b"r1", b"def");
    src.stage(reg);

    let frozen = src.freeze(2).unwrap();
    let mut file = Vec::new();
    let stats = src.export(&frozen, true, b"hdr", &mut file).unwrap();
    drop(frozen);
    assert!(stats.bytes > 2 * CHUNK_BYTES as u64, "several chunks: {stats:?}");

    let (_b, dst) = store();
    // The destination had state of its own in shard 2, and in shard 4.
    let mut old = WriteSet::new(2);
    old.put_state(1, 2, 9999, 1, LikeState::Like, 1);
    dst.stage(old);
    let mut keep = WriteSet::new(4);
    keep.put_state(1, 4, 1, 1, LikeState::Like, 9);
    dst.stage(keep);

    let mut input = &file[..];
    assert_eq!(read_header(&mut input).unwrap(), b"hdr");
    let got = dst.install(2, true, &mut input).unwrap();
    assert_eq!(got.items, stats.items);
    assert!(!dst.is_incomplete(2));

    let shard2 = |d: Vec<(String, Vec<u8>, Vec<u8>)>| -> Vec<_> {
        d.into_iter()
            .filter(|(t, k, _)| {
                t == "registry"
                    || t == "shard/2/meta"
                    || (t.starts_with("biz/") || t.starts_with("rank/"))
                        && k.starts_with(&2u32.to_be_bytes())
            })
            .collect()
    };
    assert_eq!(shard2(dump(&dst, 2)), shard2(dump(&src, 2)));
    assert_eq!(dst.get_state(1, 2, 9999, 1).unwrap(), None, "the old state is gone");
    assert_eq!(dst.get_state(1, 4, 1, 1).unwrap(), Some((LikeState::Like, 9)), "shard 4 kept");
    assert_eq!(dst.time_floor(2).unwrap(), 77);
    assert_eq!(dst.outbox_len(2).unwrap(), 1);
}

/// What the reads of `shard` answer, caches included: the state of
/// user 3, the states of user 3 through the walk that fills the states
/// cache, entity 21's counts, the meta tree and a board.
#[allow(clippy::type_complexity)]
fn reads(
    s: &StateStore,
    shard: u32,
) -> (
    Option<(LikeState, u64)>,
    Vec<Option<(LikeState, u64)>>,
    crate::CountsRec,
    Option<Vec<u8>>,
    u64,
    usize,
    Vec<(u64, i64, u64)>,
) {
    (
        s.get_state(1, shard, 3, 21).unwrap(),
        s.get_states(1, shard, 3, &[21, 22, 23, 24]).unwrap(),
        s.get_counts(1, shard, 21).unwrap(),
        s.applied(shard).unwrap(),
        s.time_floor(shard).unwrap(),
        s.outbox_len(shard).unwrap(),
        s.board_members(5, shard, b"day").unwrap(),
    )
}

/// `shard`'s state partly in its trees and partly staged, with counts
/// and states in the caches.
fn fill_stored_and_staged(s: &StateStore, shard: u32) {
    fill(s, shard, 20);
    s.checkpoint(shard).unwrap();
    let mut ws = WriteSet::new(shard);
    ws.put_state(1, shard, 3, 22, LikeState::Dislike, 2000);
    ws.put_counts(1, shard, 21, crate::CountsRec { likes: 5, dislikes: 1, owner: None });
    s.stage(ws);
}

#[test]
fn forget_empties_one_shard_and_leaves_the_others_and_the_registry() {
    let (_a, s) = store();
    fill_stored_and_staged(&s, 2);
    fill_stored_and_staged(&s, 4);
    let mut reg = WriteSet::new(2);
    reg.put_registry(b"r1", b"def");
    s.stage(reg);
    let shard4 = reads(&s, 4);
    assert_ne!(reads(&s, 2).2, crate::CountsRec::default(), "counts cached");

    s.forget(2).unwrap();
    let (_b, fresh) = store();
    assert_eq!(reads(&s, 2), reads(&fresh, 2), "reads as a shard never held");
    // Nothing staged is left to come back with a checkpoint.
    assert_eq!(s.digest(2, false).unwrap(), fresh.digest(2, false).unwrap());
    assert_eq!(reads(&s, 4), shard4);
    assert_eq!(s.registry_entries().unwrap(), vec![(b"r1".to_vec(), b"def".to_vec())]);
    assert_eq!(s.registry_get(2, b"r1").unwrap().as_deref(), Some(&b"def"[..]));
}

#[test]
fn forget_refuses_a_frozen_shard_and_makes_a_failed_install_whole() {
    let (_a, s) = store();
    fill_stored_and_staged(&s, 2);
    let before = reads(&s, 2);
    let frozen = s.freeze(2).unwrap();
    assert!(s.forget(2).is_err(), "an export reads the trees");
    assert_eq!(reads(&s, 2), before, "nothing changed");
    drop(frozen);

    let file = s.snapshot_bytes(2);
    let mut cut = &file[..file.len() - 3];
    read_header(&mut cut).unwrap();
    assert!(s.install(2, false, &mut cut).is_err());
    assert!(s.is_incomplete(2));
    s.forget(2).unwrap();
    assert!(!s.is_incomplete(2), "empty is a whole state");
    let (_b, fresh) = store();
    assert_eq!(reads(&s, 2), reads(&fresh, 2));
}

#[test]
fn a_frozen_shard_keeps_applying_while_its_trees_hold_still() {
    let (_d, s) = store();
    fill(&s, 1, 3);
    let frozen = s.freeze(1).unwrap();
    let mut ws = WriteSet::new(1);
    ws.put_state(1, 1, 500, 500, LikeState::Dislike, 9);
    ws.put_applied(1, b"later");
    s.stage(ws);
    s.checkpoint(1).unwrap(); // skipped while frozen
    assert_eq!(s.get_state(1, 1, 500, 500).unwrap(), Some((LikeState::Dislike, 9)));
    let mut file = Vec::new();
    s.export(&frozen, false, b"", &mut file).unwrap();
    drop(frozen);
    assert!(!s.is_frozen(1));

    let (_e, dst) = store();
    let mut input = &file[..];
    read_header(&mut input).unwrap();
    dst.install(1, false, &mut input).unwrap();
    assert_eq!(dst.get_state(1, 1, 500, 500).unwrap(), None, "applied after the freeze");
    assert_eq!(dst.applied(1).unwrap().as_deref(), Some(&b"applied-at-n"[..]));
    // Once thawed, the next checkpoint writes what was staged meanwhile.
    s.checkpoint(1).unwrap();
    assert_eq!(s.applied(1).unwrap().as_deref(), Some(&b"later"[..]));
}

#[test]
fn verify_finds_a_cut_a_damaged_and_a_padded_file_and_passes_a_good_one() {
    let (_a, src) = store();
    fill(&src, 0, 20);
    let frozen = src.freeze(0).unwrap();
    let mut file = Vec::new();
    let stats = src.export(&frozen, false, b"h", &mut file).unwrap();
    drop(frozen);
    assert_eq!(verify(&[0], false, &mut &file[..]).unwrap().items, stats.items);
    assert!(verify(&[1], false, &mut &file[..]).is_err(), "another shard's");
    for cut in [1, 3, file.len() / 2, file.len() - 20] {
        assert!(verify(&[0], false, &mut &file[..file.len() - cut]).is_err(), "cut by {cut}");
    }
    // One flipped bit inside a chunk's values: it still decodes, and
    // only the checksum tells.
    let mut damaged = file.clone();
    let at = file.len() / 2;
    damaged[at] ^= 0x10;
    let err = verify(&[0], false, &mut &damaged[..]).unwrap_err().to_string();
    assert!(err.contains("checksum") || err.contains("decode"), "{err}");
    let (_b, dst) = store();
    let mut input = &damaged[..];
    read_header(&mut input).unwrap();
    assert!(dst.install(0, false, &mut input).is_err(), "install checks it too");
    let mut padded = file.clone();
    padded.push(0);
    assert!(verify(&[0], false, &mut &padded[..]).is_err());
}

#[test]
fn a_file_ended_by_a_count_only_still_installs() {
    // Files written before `Sealed` end in `End { items }`.
    let (_a, src) = store();
    fill(&src, 0, 5);
    let frozen = src.freeze(0).unwrap();
    let mut file = Vec::new();
    let stats = src.export(&frozen, false, b"", &mut file).unwrap();
    drop(frozen);
    // Cut the file before its last record (the seal), by its length prefixes.
    let header_len = u32::from_be_bytes(file[12..16].try_into().unwrap()) as usize;
    let mut at = 16 + header_len;
    loop {
        let len = u32::from_be_bytes(file[at..at + 4].try_into().unwrap()) as usize;
        if at + 4 + len == file.len() {
            break;
        }
        at += 4 + len;
    }
    let mut old = file[..at].to_vec();
    write_record(&mut old, &Record::End { items: stats.items }, &mut crc32fast::Hasher::new())
        .unwrap();
    assert_eq!(verify(&[0], false, &mut &old[..]).unwrap().items, stats.items);
    let (_b, dst) = store();
    dst.install_bytes(0, &old);
    assert_eq!(dst.digest(0, false).unwrap(), src.digest(0, false).unwrap());
}

#[test]
fn a_truncated_or_foreign_snapshot_is_refused() {
    let (_a, src) = store();
    fill(&src, 0, 20);
    let frozen = src.freeze(0).unwrap();
    let mut file = Vec::new();
    src.export(&frozen, false, b"h", &mut file).unwrap();
    drop(frozen);

    let (_b, dst) = store();
    let cut = &file[..file.len() - 3];
    let mut input = cut;
    read_header(&mut input).unwrap();
    assert!(dst.install(0, false, &mut input).is_err());
    assert!(dst.is_incomplete(0), "a failed install leaves the shard marked");
    // A snapshot of shard 0 cannot be installed as shard 1.
    let mut input = &file[..];
    read_header(&mut input).unwrap();
    assert!(dst.install(1, false, &mut input).is_err());
    assert!(read_header(&mut &b"garbage that is long enough"[..]).is_err());
}

#[test]
fn a_groups_shards_export_and_install_together() {
    let (_a, src) = store();
    fill(&src, 1, 30);
    fill(&src, 4, 20);
    // Shard 7 is not in the group: it stays out of the file and, on the
    // destination, untouched.
    fill(&src, 7, 5);
    let frozen = vec![src.freeze(1).unwrap(), src.freeze(4).unwrap()];
    let mut file = Vec::new();
    let stats = src.export_many(frozen, false, b"hdr", &mut file).unwrap();
    assert!(!src.is_frozen(1) && !src.is_frozen(4), "each thaws once written");
    assert_eq!(verify(&[1, 4], false, &mut &file[..]).unwrap().items, stats.items);
    assert!(verify(&[1], false, &mut &file[..]).is_err(), "shard 4's chunks are foreign to 1");

    let (_b, dst) = store();
    fill(&dst, 4, 3);
    let mut stale = WriteSet::new(1);
    stale.put_state(1, 1, 9999, 1, LikeState::Like, 1);
    dst.stage(stale);
    fill(&dst, 7, 2);
    let before7: Vec<_> = dump(&dst, 7).into_iter().filter(|r| in_shard(r, 7)).collect();
    let mut input = &file[..];
    read_header(&mut input).unwrap();
    assert_eq!(dst.install_many(&[1, 4], false, &mut input).unwrap().items, stats.items);
    for shard in [1, 4] {
        let want: Vec<_> = dump(&src, shard).into_iter().filter(|r| in_shard(r, shard)).collect();
        let got: Vec<_> = dump(&dst, shard).into_iter().filter(|r| in_shard(r, shard)).collect();
        assert_eq!(got, want, "shard {shard}");
        assert!(!dst.is_incomplete(shard));
    }
    let after7: Vec<_> = dump(&dst, 7).into_iter().filter(|r| in_shard(r, 7)).collect();
    assert_eq!(after7, before7);
}

/// Whether a row of `dump` is `shard`'s (its meta tree, or its slice of a
/// data tree).
fn in_shard(row: &(String, Vec<u8>, Vec<u8>), shard: u32) -> bool {
    let (t, k, _) = row;
    *t == format!("shard/{shard}/meta")
        || (t.starts_with("biz/") || t.starts_with("rank/")) && k.starts_with(&shard.to_be_bytes())
}
