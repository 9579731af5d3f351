//! How a group that hosts several shards applies its entries: each shard's
//! actor gets the commands tagged with its id (`Batch::tagged`), and the
//! results go back to their places in the entries.
//!
//! - The group's own shard (its id, the first it hosts) gets every entry:
//!   it stores the group's applied log id and membership, which a snapshot
//!   and a restart read, and an untagged batch is all its own.
//! - Any other shard gets only the entries that hold commands of its own.
//!   Its stored applied id is then the last entry that changed it, the same
//!   on every replica whatever calls openraft groups the entries into, and
//!   an entry it has no part in costs it nothing (no wake-up).
//!
//! Pure: `split` and `Routes::merge` are the whole of it; the state
//! machine sends the parts to the actors concurrently (shards share no
//! state, and each shard sees its own commands in log order).

use plaudit_actors::{ApplyEntry, Batch, CmdResult, Command, Fatal};
use plaudit_proto::WireError;

/// What `split` gives: one list of entries per hosted shard (in the order
/// of `shards`), and where their results go.
pub(crate) struct Split {
    pub parts: Vec<Vec<ApplyEntry>>,
    pub routes: Routes,
}

/// Per entry, its command count and the results of commands no hosted
/// shard takes; per shard, for each entry it was given, that entry's index
/// and the indexes of its commands there.
pub(crate) struct Routes {
    entries: Vec<Vec<Option<CmdResult>>>,
    shards: Vec<Vec<(usize, Vec<usize>)>>,
}

/// Splits `entries` of the group `lead` among `shards` (`lead` first).
pub(crate) fn split(lead: u32, shards: &[u32], entries: Vec<ApplyEntry>) -> Split {
    debug_assert_eq!(shards.first(), Some(&lead));
    let mut parts: Vec<Vec<ApplyEntry>> = shards.iter().map(|_| Vec::new()).collect();
    let mut routes = Routes {
        entries: Vec::with_capacity(entries.len()),
        shards: shards.iter().map(|_| Vec::new()).collect(),
    };
    let index: std::collections::HashMap<u32, usize> =
        shards.iter().enumerate().map(|(i, &s)| (s, i)).collect();
    for (ei, entry) in entries.into_iter().enumerate() {
        let ApplyEntry { log_id, membership, batch } = entry;
        let Some(batch) = batch else {
            routes.entries.push(Vec::new());
            routes.shards[0].push((ei, Vec::new()));
            parts[0].push(ApplyEntry { log_id, membership, batch: None });
            continue;
        };
        let mut results: Vec<Option<CmdResult>> = vec![None; batch.cmds.len()];
        match &batch.shards {
            None => {
                routes.shards[0].push((ei, (0..batch.cmds.len()).collect()));
                parts[0].push(ApplyEntry { log_id, membership, batch: Some(batch) });
            }
            Some(tags) => {
                // Each command's place among the shards, in one pass.
                // Commands tagged with a shard the group does not host fail
                // (every replica has the same layout: the same results).
                let mut by_shard: Vec<Vec<usize>> = shards.iter().map(|_| Vec::new()).collect();
                for (i, tag) in tags.iter().enumerate() {
                    match index.get(tag) {
                        Some(&si) => by_shard[si].push(i),
                        None => {
                            results[i] = Some(CmdResult::Failed(WireError::internal(format!(
                                "shard {tag} is not hosted by group {lead}"
                            ))))
                        }
                    }
                }
                for (si, at) in by_shard.into_iter().enumerate() {
                    if si > 0 && at.is_empty() {
                        continue;
                    }
                    let cmds: Vec<Command> = at.iter().map(|&i| batch.cmds[i].clone()).collect();
                    parts[si].push(ApplyEntry {
                        log_id: log_id.clone(),
                        membership: if si == 0 { membership.clone() } else { None },
                        batch: Some(Batch::new(batch.now, cmds)),
                    });
                    routes.shards[si].push((ei, at));
                }
            }
        }
        routes.entries.push(results);
    }
    Split { parts, routes }
}

impl Routes {
    /// The entries' results from each shard's (in the order of `split`'s
    /// parts; an empty list for a shard given nothing).
    pub(crate) fn merge(
        mut self,
        applied: Vec<Vec<Vec<CmdResult>>>,
    ) -> Result<Vec<Vec<CmdResult>>, Fatal> {
        let short = || Fatal::Invariant("a shard applied an entry with fewer results".into());
        for (routes, results) in self.shards.iter().zip(applied) {
            if results.len() != routes.len() {
                return Err(short());
            }
            for ((ei, at), res) in routes.iter().zip(results) {
                if res.len() != at.len() {
                    return Err(short());
                }
                for (i, r) in at.iter().zip(res) {
                    self.entries[*ei][*i] = Some(r);
                }
            }
        }
        self.entries
            .into_iter()
            .map(|e| e.into_iter().map(|r| r.ok_or_else(short)).collect())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ack(n: u64) -> Command {
        Command::Ack { target: 0, seqs: vec![n] }
    }

    fn entry(i: u8, batch: Option<Batch>) -> ApplyEntry {
        ApplyEntry { log_id: vec![i], membership: None, batch }
    }

    /// What a shard's actor would answer: one result per command, naming it.
    fn answer(part: &[ApplyEntry]) -> Vec<Vec<CmdResult>> {
        part.iter()
            .map(|e| {
                let cmds = e.batch.as_ref().map(|b| b.cmds.to_vec()).unwrap_or_default();
                cmds.iter()
                    .map(|c| match c {
                        Command::Ack { seqs, .. } => {
                            CmdResult::Failed(WireError::internal(format!("{}", seqs[0])))
                        }
                        _ => CmdResult::Done,
                    })
                    .collect()
            })
            .collect()
    }

    fn named(r: &CmdResult) -> String {
        match r {
            CmdResult::Failed(e) => e.message.clone(),
            other => format!("{other:?}"),
        }
    }

    #[test]
    fn each_shard_gets_its_commands_and_the_results_go_back_in_place() {
        let entries = vec![
            entry(1, Some(Batch::tagged(5, vec![ack(10), ack(11), ack(12)], vec![3, 0, 3]))),
            entry(2, None),
            entry(3, Some(Batch::tagged(6, vec![ack(20)], vec![0]))),
            entry(4, Some(Batch::tagged(7, vec![ack(30), ack(31)], vec![3, 9]))),
        ];
        let split = split(0, &[0, 3], entries);
        // The group's own shard: every entry; shard 3: entries 1 and 4.
        let logs = |p: &[ApplyEntry]| p.iter().map(|e| e.log_id[0]).collect::<Vec<_>>();
        assert_eq!(logs(&split.parts[0]), vec![1, 2, 3, 4]);
        assert_eq!(logs(&split.parts[1]), vec![1, 4]);
        assert_eq!(split.parts[1][0].batch.as_ref().unwrap().cmds[..], [ack(10), ack(12)]);
        assert_eq!(split.parts[1][0].batch.as_ref().unwrap().now, 5);
        assert!(split.parts[0][3].batch.as_ref().unwrap().cmds.is_empty());
        let applied = split.parts.iter().map(|p| answer(p)).collect();
        let merged = split.routes.merge(applied).unwrap();
        let names: Vec<Vec<String>> =
            merged.iter().map(|e| e.iter().map(named).collect()).collect();
        assert_eq!(names[0], vec!["10", "11", "12"]);
        assert!(names[1].is_empty());
        assert_eq!(names[2], vec!["20"]);
        assert_eq!(names[3][0], "30");
        assert!(names[3][1].contains("shard 9 is not hosted"), "{}", names[3][1]);
    }

    #[test]
    fn an_untagged_batch_and_the_membership_are_the_groups_own() {
        let mut e = entry(1, Some(Batch::new(5, vec![ack(1), ack(2)])));
        e.membership = Some(vec![42]);
        let tagged = ApplyEntry {
            log_id: vec![2],
            membership: Some(vec![43]),
            batch: Some(Batch::tagged(5, vec![ack(3)], vec![3])),
        };
        let split = split(0, &[0, 3], vec![e, tagged]);
        assert_eq!(split.parts[0].len(), 2);
        assert_eq!(split.parts[0][0].batch.as_ref().unwrap().cmds.len(), 2);
        assert_eq!(split.parts[0][1].membership, Some(vec![43]));
        assert_eq!(split.parts[1].len(), 1);
        assert_eq!(split.parts[1][0].membership, None);
    }

    #[test]
    fn a_shard_that_answers_short_is_an_error_not_a_shift() {
        let entries = vec![entry(1, Some(Batch::tagged(5, vec![ack(1), ack(2)], vec![0, 3])))];
        let split = split(0, &[0, 3], entries);
        let applied = vec![answer(&split.parts[0]), vec![Vec::new()]];
        assert!(split.routes.merge(applied).is_err());
    }
}
