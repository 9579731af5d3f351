//! At-most-once registry changes. A client that lost the answer to "create
//! business X" cannot tell whether it applied; retrying could create a
//! second business or fail with "already exists". So a registry change may
//! carry a random `id` (`Command::Once`): the metadata group remembers the
//! result of each id, and a repeat gets that result without applying again.
//!
//! The memory is replicated state in the registry tree, bounded to the
//! newest `ONCE_MEMORY` ids (evicted in order, deterministically):
//!
//! | key | value |
//! | --- | --- |
//! | `q` + id (9 bytes) | `v1, bincode((seq, CmdResult))` |
//! | `Q` + seq (9 bytes) | id (8 bytes) |
//! | `once-seq` (8 bytes) | `v1, bincode(next seq)` |
//!
//! Within one apply call, results are also kept in a per-batch memo, since
//! the batch's own writes are not readable until they are staged.

use super::registry;
use super::ShardActor;
use crate::command::{CmdResult, Command};
use crate::error::Fatal;
use plaudit_proto::{codec, WireError};
use plaudit_storage::keys::VALUE_V1;
use plaudit_storage::WriteSet;
use std::collections::HashMap;

/// Request ids remembered. Registry changes are rare (a tenant or a
/// ranking created now and then), so this covers far more than any retry.
pub const ONCE_MEMORY: u64 = 100_000;

const SEQ_KEY: &[u8] = b"once-seq";

fn record_key(id: u64) -> [u8; 9] {
    let mut k = [b'q'; 9];
    k[1..].copy_from_slice(&id.to_be_bytes());
    k
}

fn order_key(seq: u64) -> [u8; 9] {
    let mut k = [b'Q'; 9];
    k[1..].copy_from_slice(&seq.to_be_bytes());
    k
}

fn encode<T: serde::Serialize>(x: &T) -> Result<Vec<u8>, Fatal> {
    let mut v = vec![VALUE_V1];
    codec::encode_into(x, &mut v)?;
    Ok(v)
}

fn decode<T: serde::de::DeserializeOwned>(v: &[u8]) -> Result<T, Fatal> {
    match v.split_first() {
        Some((&VALUE_V1, rest)) => Ok(codec::from_bytes(rest)?),
        _ => Err(Fatal::Invariant(format!("an at-most-once record of unknown format {v:?}"))),
    }
}

/// What one apply call learnt about ids and the next seq.
#[derive(Default)]
pub(super) struct OnceMemo {
    results: HashMap<u64, CmdResult>,
    next_seq: Option<u64>,
}

impl ShardActor {
    /// Applies `cmd` unless `id` was applied before; either way returns the
    /// result of its first application.
    pub(super) fn apply_once(
        &self,
        memo: &mut OnceMemo,
        id: u64,
        cmd: &Command,
        now: u64,
        ws: &mut WriteSet,
    ) -> Result<CmdResult, Fatal> {
        let shard = self.cfg.shard;
        if let Some(r) = memo.results.get(&id) {
            return Ok(r.clone());
        }
        if let Some(v) = self.store.registry_get(shard, &record_key(id))? {
            let (_, r): (u64, CmdResult) = decode(&v)?;
            return Ok(r);
        }
        let r = match cmd {
            Command::CreateBiz(_)
            | Command::CreateBizV2(_)
            | Command::UpdateBiz(_)
            | Command::CreateRank(_)
            | Command::CreateRankInfo(_)
            | Command::UpdateRank(_)
            | Command::CreateToken(_)
            | Command::RevokeToken { .. }
            | Command::SetBoardLimit(_) => {
                registry::apply(&self.directory, self.cfg.is_meta, cmd, now, ws)
            }
            _ => CmdResult::Failed(WireError::bad_request(
                "only registry changes may be applied at most once",
            )),
        };
        let seq = match memo.next_seq {
            Some(s) => s,
            None => match self.store.registry_get(shard, SEQ_KEY)? {
                Some(v) => decode(&v)?,
                None => 0,
            },
        };
        ws.put_registry(&record_key(id), &encode(&(seq, &r))?);
        ws.put_registry(&order_key(seq), &id.to_be_bytes());
        if let Some(old) = seq.checked_sub(ONCE_MEMORY) {
            if let Some(v) = self.store.registry_get(shard, &order_key(old))? {
                let old_id = u64::from_be_bytes(
                    v.as_slice().try_into().map_err(|_| Fatal::Invariant("once order".into()))?,
                );
                ws.del_registry(&record_key(old_id));
            }
            ws.del_registry(&order_key(old));
        }
        ws.put_registry(SEQ_KEY, &encode(&(seq + 1))?);
        memo.next_seq = Some(seq + 1);
        memo.results.insert(id, r.clone());
        Ok(r)
    }
}
