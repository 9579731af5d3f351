//! Coalescing a leader's batch before it is proposed: the scoring events of
//! one member of one sub-board become one `Score` command, placed where the
//! member's first event was. A hot board then costs one command, one rank
//! move and one stored write per member per batch, not per event, and the
//! Raft entry shrinks with it.
//!
//! What it keeps: each member's events stay in arrival order, and the board
//! applies them exactly as one by one (`Board::run`), with per-event dedup,
//! overflow errors and outcomes. What it changes: a member's later events
//! move ahead of other members' events that arrived between them in the
//! same batch; those arrived concurrently, so their order was arbitrary
//! anyway, and the log records the order that was chosen.
//!
//! Pure: `coalesce` merges, `split` turns the merged commands' results back
//! into one result per proposed command.

use crate::command::{CmdResult, Command, ScoreCmd};
use plaudit_proto::keyed_hash::KeyedHash;
use std::collections::HashMap;
use std::hash::BuildHasher;

/// Whether two score commands are for one member of one sub-board under
/// one set of rules: the commands that may merge. (Aggregation and ties
/// never change within a ranking; the cap may, between two events of one
/// batch, and the dedup rules may if an edge's config changed.)
fn same_member(a: &ScoreCmd, b: &ScoreCmd) -> bool {
    (a.rank, a.item, a.aggregation, a.ties, a.cap, a.dedup)
        == (b.rank, b.item, b.aggregation, b.ties, b.cap, b.dedup)
        && a.type_key == b.type_key
}

/// What `same_member` compares, hashed.
fn member_hash(h: &KeyedHash, c: &ScoreCmd) -> u64 {
    h.hash_one((c.rank, &c.type_key, c.item, (c.aggregation, c.ties, c.cap, c.dedup)))
}

/// Where a proposed command's result comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// The whole result of merged command `cmd` (a command not merged).
    Whole { cmd: usize },
    /// Events `first..first + count` of merged score command `cmd`.
    Events { cmd: usize, first: usize, count: usize },
}

/// Merges score commands per (ranking, sub-board, member, rules); other
/// commands pass through in place. Returns the commands to propose and one
/// route per input command.
pub fn coalesce(cmds: Vec<Command>) -> (Vec<Command>, Vec<Route>) {
    // Score commands stay typed until the end, so merging needs no match.
    enum Slot {
        Score(ScoreCmd),
        Other(Command),
    }
    let mut out: Vec<Slot> = Vec::with_capacity(cmds.len());
    let mut routes = Vec::with_capacity(cmds.len());
    // Commands by the hash of their member: the first index with that hash,
    // and per index the next one with the same hash. Keyed by hash rather
    // than by the member itself, so no key (with its type key) is built and
    // freed per event (5% of hot scoring's CPU was this function).
    let hasher = KeyedHash::default();
    let mut first: HashMap<u64, usize, KeyedHash> = HashMap::default();
    let mut next: Vec<usize> = Vec::with_capacity(cmds.len());
    for cmd in cmds {
        let (Command::Score(c) | Command::ScoreV2(c)) = cmd else {
            routes.push(Route::Whole { cmd: out.len() });
            out.push(Slot::Other(cmd));
            next.push(usize::MAX);
            continue;
        };
        let h = member_hash(&hasher, &c);
        let count = c.events.len();
        let mut at = first.get(&h).copied().unwrap_or(usize::MAX);
        while at != usize::MAX {
            match &mut out[at] {
                Slot::Score(m) if same_member(m, &c) => break,
                _ => at = next[at],
            }
        }
        if let Some(Slot::Score(m)) = out.get_mut(at) {
            routes.push(Route::Events { cmd: at, first: m.events.len(), count });
            m.events.extend(c.events);
        } else {
            let here = out.len();
            next.push(first.insert(h, here).unwrap_or(usize::MAX));
            routes.push(Route::Events { cmd: here, first: 0, count });
            out.push(Slot::Score(c));
        }
    }
    let out = out
        .into_iter()
        .map(|s| match s {
            // What a build before `ScoreV2` logged reads with the dedup
            // rules it was applied under (`Dedup::LEGACY`), so one written
            // as `ScoreV2` now applies the same.
            Slot::Score(c) => Command::ScoreV2(c),
            Slot::Other(c) => c,
        })
        .collect();
    (out, routes)
}

/// `coalesce` for a group that hosts several shards: `tags[i]` is the
/// shard of `cmds[i]`, and each run of one shard's commands is merged on
/// its own (a command never merges with another shard's). Returns the
/// merged commands, their shards and one route per input command.
pub fn coalesce_tagged(
    cmds: Vec<Command>,
    tags: &[plaudit_proto::ShardId],
) -> (Vec<Command>, Vec<plaudit_proto::ShardId>, Vec<Route>) {
    debug_assert_eq!(cmds.len(), tags.len());
    let (mut out, mut out_tags, mut routes) = (Vec::new(), Vec::new(), Vec::new());
    let mut cmds = cmds.into_iter();
    let mut at = 0;
    while at < tags.len() {
        let shard = tags[at];
        let len = tags[at..].iter().take_while(|&&t| t == shard).count();
        let (merged, run) = coalesce(cmds.by_ref().take(len).collect());
        let offset = out.len();
        routes.extend(run.into_iter().map(|r| match r {
            Route::Whole { cmd } => Route::Whole { cmd: cmd + offset },
            Route::Events { cmd, first, count } => {
                Route::Events { cmd: cmd + offset, first, count }
            }
        }));
        out_tags.extend(std::iter::repeat_n(shard, merged.len()));
        out.extend(merged);
        at += len;
    }
    (out, out_tags, routes)
}

/// One result per proposed command, from the merged commands' results.
pub fn split(results: Vec<CmdResult>, routes: &[Route]) -> Vec<CmdResult> {
    let mut results: Vec<Option<CmdResult>> = results.into_iter().map(Some).collect();
    routes
        .iter()
        .map(|r| match *r {
            // Each merged command has exactly one `Whole` route: take it.
            Route::Whole { cmd } => {
                results.get_mut(cmd).and_then(Option::take).unwrap_or_else(lost)
            }
            Route::Events { cmd, first, count } => match results.get(cmd) {
                Some(Some(CmdResult::Scored(events))) => match events.get(first..first + count) {
                    Some(mine) => CmdResult::Scored(mine.to_vec()),
                    None => lost(),
                },
                // A command that failed as a whole fails each of its events.
                Some(Some(other)) => other.clone(),
                _ => lost(),
            },
        })
        .collect()
}

fn lost() -> CmdResult {
    CmdResult::Failed(plaudit_proto::WireError::internal("a coalesced result went missing"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::command::ScoreEvent;
    use plaudit_proto::rankings::{Aggregation, TieMode};
    use plaudit_proto::scoring::Outcome;
    use plaudit_proto::WireError;
    use proptest::prelude::*;

    #[test]
    fn tagged_commands_merge_only_within_their_shard() {
        // The same member of the same board under two shard tags (a board
        // moved between them): two commands, one per shard.
        let cmds = vec![score(1, 7, 1), score(1, 7, 2), score(1, 7, 3), score(1, 7, 4)];
        let (out, tags, routes) = coalesce_tagged(cmds, &[2, 2, 5, 5]);
        assert_eq!(out.len(), 2);
        assert_eq!(tags, vec![2, 5]);
        assert_eq!(
            routes,
            vec![
                Route::Events { cmd: 0, first: 0, count: 1 },
                Route::Events { cmd: 0, first: 1, count: 1 },
                Route::Events { cmd: 1, first: 0, count: 1 },
                Route::Events { cmd: 1, first: 1, count: 1 },
            ]
        );
        let ack = Command::Ack { target: 0, seqs: vec![] };
        let (out, tags, routes) = coalesce_tagged(vec![ack.clone(), score(1, 7, 1)], &[0, 3]);
        assert_eq!((out.len(), tags), (2, vec![0, 3]));
        assert_eq!(routes[1], Route::Events { cmd: 1, first: 0, count: 1 });
    }

    fn score(board: u8, item: u64, id: u64) -> Command {
        Command::ScoreV2(ScoreCmd {
            rank: 1,
            type_key: vec![board],
            item,
            aggregation: Aggregation::Incr,
            ties: TieMode::EarlierFirst,
            cap: 10,
            events: vec![ScoreEvent { score: id as i64, sub: None, event_id: id }],
            dedup: crate::command::Dedup::DEFAULT,
        })
    }

    fn ack(n: u64) -> Command {
        Command::Ack { target: 0, seqs: vec![n] }
    }

    fn event_ids(c: &Command) -> Vec<u64> {
        c.score().map(|s| s.events.iter().map(|e| e.event_id).collect()).unwrap_or_default()
    }

    #[test]
    fn a_members_events_merge_at_its_first_place() {
        let (out, routes) =
            coalesce(vec![score(1, 7, 1), ack(1), score(1, 8, 2), score(1, 7, 3), score(2, 7, 4)]);
        assert_eq!(out.len(), 4);
        assert_eq!(event_ids(&out[0]), vec![1, 3]);
        assert!(matches!(out[1], Command::Ack { .. }));
        assert_eq!(event_ids(&out[2]), vec![2]);
        assert_eq!(event_ids(&out[3]), vec![4], "another board is another member");
        assert_eq!(routes[3], Route::Events { cmd: 0, first: 1, count: 1 });
        assert_eq!(routes[1], Route::Whole { cmd: 1 });
    }

    #[test]
    fn different_caps_or_dedup_rules_do_not_merge() {
        let mut b = score(1, 7, 2);
        if let Command::ScoreV2(c) = &mut b {
            c.cap = 11;
        }
        assert_eq!(coalesce(vec![score(1, 7, 1), b]).0.len(), 2);
        let mut c = score(1, 7, 3);
        if let Command::ScoreV2(s) = &mut c {
            s.dedup.window_s = 5;
        }
        assert_eq!(coalesce(vec![score(1, 7, 1), c]).0.len(), 2);
    }

    #[test]
    fn a_failed_merged_command_fails_every_event() {
        let (_, routes) = coalesce(vec![score(1, 7, 1), score(1, 7, 2)]);
        let failed = CmdResult::Failed(WireError::not_found("ranking 1 is unknown"));
        let got = split(vec![failed.clone()], &routes);
        assert_eq!(got, vec![failed.clone(), failed]);
    }

    proptest! {
        /// Splitting the merged results gives every proposed command the
        /// result of exactly its own events, whatever the interleaving.
        #[test]
        fn every_command_gets_its_own_results(
            cmds in prop::collection::vec((0u8..3, 0u64..4, any::<bool>()), 1..40)
        ) {
            let input: Vec<Command> = cmds
                .iter()
                .enumerate()
                .map(|(i, &(b, item, is_ack))| if is_ack { ack(i as u64) } else { score(b, item, i as u64) })
                .collect();
            let (merged, routes) = coalesce(input.clone());
            prop_assert_eq!(routes.len(), input.len());
            // "Apply": each event's result names its event id; acks echo themselves.
            let results: Vec<CmdResult> = merged
                .iter()
                .map(|c| match c {
                    Command::ScoreV2(s) => CmdResult::Scored(
                        s.events.iter().map(|e| Ok((Outcome::Applied, Some(e.event_id as i64)))).collect(),
                    ),
                    Command::Ack { seqs, .. } => CmdResult::Failed(WireError::internal(seqs[0].to_string())),
                    _ => CmdResult::Done,
                })
                .collect();
            let got = split(results, &routes);
            for (i, (cmd, res)) in input.iter().zip(got).enumerate() {
                match cmd {
                    Command::ScoreV2(_) => prop_assert_eq!(
                        res,
                        CmdResult::Scored(vec![Ok((Outcome::Applied, Some(i as i64)))])
                    ),
                    _ => prop_assert_eq!(res, CmdResult::Failed(WireError::internal(i.to_string()))),
                }
            }
            // Within a member, events keep their arrival order.
            for c in &merged {
                let ids = event_ids(c);
                prop_assert!(ids.windows(2).all(|w| w[0] < w[1]));
            }
            // One command per member, holding that member's events only.
            let members: std::collections::HashSet<(u8, u64)> =
                cmds.iter().filter(|c| !c.2).map(|c| (c.0, c.1)).collect();
            let mut seen = std::collections::HashSet::new();
            for c in &merged {
                if let Some(s) = c.score() {
                    prop_assert!(seen.insert((s.type_key[0], s.item)));
                    for e in &s.events {
                        let (b, item, _) = cmds[e.event_id as usize];
                        prop_assert_eq!((b, item), (s.type_key[0], s.item));
                    }
                }
            }
            prop_assert_eq!(seen, members);
        }
    }
}
