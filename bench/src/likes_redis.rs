//! The like workload against Redis, laid out the way the reference KV design
//! builds a like service on Redis:
//!
//! - `st:{biz}:{user}`   hash, field entity -> "1:ts" (like) / "2:ts" (dislike)
//! - `cnt:{biz}:{entity}` hash, fields `l` and `d`
//! - `ul:{biz}:{user}`   zset of liked entities, score ts, newest 1000 kept
//! - `lk:{biz}:{entity}` zset of likers, score ts, newest 1000 kept
//! - `rcv:{biz}:{owner}` received likes (only with `--owners`)
//!
//! A like action is one EVALSHA of `LIKE_SCRIPT` (atomic); status is one
//! `HMGET st:{biz}:{user} e1..e20`; counts is 20 pipelined `HMGET cnt:{biz}:{e} l d`
//! (one op). Pipeline N = N ops written in one batch, then N replies read.

use crate::likes::{Op, Worker, Workload};
use crate::redis::{Arg, Conn, Value};
use crate::redis_loop::{error_code, PipelinedOps};
use crate::report::Preload;
use anyhow::{bail, Context};
use std::sync::Arc;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// Newest entries kept in each liked / liker zset.
pub const LIST_CAP: i64 = 1000;

/// KEYS: st, cnt, ul, lk [, rcv]. ARGV: entity, user, action (1 like,
/// 2 unlike, 3 dislike, 4 undislike), ts ms, list cap.
/// Returns {prev, now, changed, mtime} with states 0 none, 1 like, 2 dislike.
pub const LIKE_SCRIPT: &str = r#"
local prev, mtime = 0, 0
local v = redis.call('HGET', KEYS[1], ARGV[1])
if v then
  local s, t = string.match(v, '^(%d):(%d+)$')
  prev = tonumber(s)
  mtime = tonumber(t)
end
local a = tonumber(ARGV[3])
local now = prev
if a == 1 then now = 1
elseif a == 2 then if prev == 1 then now = 0 end
elseif a == 3 then now = 2
elseif a == 4 then if prev == 2 then now = 0 end
end
if now == prev then return {prev, now, 0, mtime} end
local ts = ARGV[4]
if now == 0 then
  redis.call('HDEL', KEYS[1], ARGV[1])
else
  redis.call('HSET', KEYS[1], ARGV[1], now .. ':' .. ts)
end
if prev == 1 then
  redis.call('HINCRBY', KEYS[2], 'l', -1)
  redis.call('ZREM', KEYS[3], ARGV[1])
  redis.call('ZREM', KEYS[4], ARGV[2])
  if KEYS[5] then redis.call('INCRBY', KEYS[5], -1) end
elseif prev == 2 then
  redis.call('HINCRBY', KEYS[2], 'd', -1)
end
if now == 1 then
  local keep = -1 - tonumber(ARGV[5])
  redis.call('HINCRBY', KEYS[2], 'l', 1)
  redis.call('ZADD', KEYS[3], ts, ARGV[1])
  redis.call('ZREMRANGEBYRANK', KEYS[3], 0, keep)
  redis.call('ZADD', KEYS[4], ts, ARGV[2])
  redis.call('ZREMRANGEBYRANK', KEYS[4], 0, keep)
  if KEYS[5] then redis.call('INCRBY', KEYS[5], 1) end
elseif now == 2 then
  redis.call('HINCRBY', KEYS[2], 'd', 1)
end
return {prev, now, 1, tonumber(ts)}
"#;

pub const LIKE: i64 = 1;
pub const UNLIKE: i64 = 2;
pub const DISLIKE: i64 = 3;
pub const UNDISLIKE: i64 = 4;

fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0)
}

/// Loads the script once; returns its SHA1.
pub async fn load_script(conn: &mut Conn) -> anyhow::Result<String> {
    match conn.command(&["SCRIPT".into(), "LOAD".into(), LIKE_SCRIPT.into()]).await? {
        Value::Bulk(sha) => Ok(String::from_utf8(sha)?),
        other => bail!("unexpected SCRIPT LOAD reply {other:?}"),
    }
}

/// Queues one EVALSHA of the like script.
pub fn queue_act(
    conn: &mut Conn,
    sha: &str,
    wl: &Workload,
    user: u64,
    entity: u64,
    action: i64,
    ts: i64,
) {
    let b = wl.biz;
    let st = format!("st:{b}:{user}");
    let cnt = format!("cnt:{b}:{entity}");
    let ul = format!("ul:{b}:{user}");
    let lk = format!("lk:{b}:{entity}");
    let e = entity as i64;
    let u = user as i64;
    if wl.owners {
        let rcv = format!("rcv:{b}:{}", wl.owner_of(entity));
        conn.queue(&[
            "EVALSHA".into(),
            sha.into(),
            Arg::Int(5),
            st.as_str().into(),
            cnt.as_str().into(),
            ul.as_str().into(),
            lk.as_str().into(),
            rcv.as_str().into(),
            Arg::Int(e),
            Arg::Int(u),
            Arg::Int(action),
            Arg::Int(ts),
            Arg::Int(LIST_CAP),
        ]);
    } else {
        conn.queue(&[
            "EVALSHA".into(),
            sha.into(),
            Arg::Int(4),
            st.as_str().into(),
            cnt.as_str().into(),
            ul.as_str().into(),
            lk.as_str().into(),
            Arg::Int(e),
            Arg::Int(u),
            Arg::Int(action),
            Arg::Int(ts),
            Arg::Int(LIST_CAP),
        ]);
    }
}

/// `(prev, now, changed, mtime)` from a script reply.
pub fn act_reply(v: &Value) -> Result<(i64, i64, bool, i64), String> {
    match v {
        Value::Array(items) if items.len() == 4 => {
            let n: Vec<i64> = items.iter().filter_map(Value::as_int).collect();
            if n.len() != 4 {
                return Err("Protocol".into());
            }
            Ok((n[0], n[1], n[2] != 0, n[3]))
        }
        Value::Error(e) => Err(error_code(e)),
        _ => Err("Protocol".into()),
    }
}

fn queue_op(conn: &mut Conn, sha: &str, wl: &Workload, op: &Op, ts: i64) {
    let b = wl.biz;
    match op {
        Op::Toggle { user, entity, unlike } => {
            let action = if *unlike { UNLIKE } else { LIKE };
            queue_act(conn, sha, wl, *user, *entity, action, ts);
        }
        Op::Status { user, entities } => {
            let key = format!("st:{b}:{user}");
            let mut args: Vec<Arg<'_>> = Vec::with_capacity(entities.len() + 2);
            args.push("HMGET".into());
            args.push(key.as_str().into());
            args.extend(entities.iter().map(|e| Arg::Int(*e as i64)));
            conn.queue(&args);
        }
        Op::Counts { entities } => {
            for e in entities {
                let key = format!("cnt:{b}:{e}");
                conn.queue(&["HMGET".into(), key.as_str().into(), "l".into(), "d".into()]);
            }
        }
    }
}

/// Reads the replies of one op; `Err(code)` when any of them is an error.
async fn read_op(
    conn: &mut Conn,
    op: &Op,
    worker: &mut Worker,
) -> anyhow::Result<Result<(), String>> {
    match op {
        Op::Toggle { user, entity, .. } => {
            let v = conn.read_reply().await?;
            Ok(act_reply(&v).map(|(_, now, _, _)| worker.learn(*user, *entity, now == 1)))
        }
        Op::Status { entities, .. } => Ok(match conn.read_reply().await? {
            Value::Array(items) if items.len() == entities.len() => Ok(()),
            Value::Error(e) => Err(error_code(&e)),
            _ => Err("Protocol".into()),
        }),
        Op::Counts { entities } => {
            let mut result = Ok(());
            for _ in entities {
                let r = match conn.read_reply().await? {
                    Value::Array(items) if items.len() == 2 => Ok(()),
                    Value::Error(e) => Err(error_code(&e)),
                    _ => Err("Protocol".into()),
                };
                if result.is_ok() {
                    result = r;
                }
            }
            Ok(result)
        }
    }
}

pub struct Setup {
    pub sha: String,
}

pub async fn setup(addr: &str) -> anyhow::Result<Setup> {
    let mut conn = Conn::connect(addr).await?;
    match conn.command(&["PING".into()]).await? {
        Value::Simple(s) if s == "PONG" => {}
        other => bail!("unexpected PING reply {other:?}"),
    }
    let sha = load_script(&mut conn).await.context("SCRIPT LOAD")?;
    Ok(Setup { sha })
}

/// Writes `quota` new likes from this worker, `pipeline` per batch.
pub async fn preload_worker(
    conn: &mut Conn,
    sha: &str,
    wl: &Workload,
    worker: &mut Worker,
    quota: u64,
    pipeline: usize,
) -> anyhow::Result<u64> {
    let mut done = 0;
    let mut errors = 0;
    let mut batch = Vec::with_capacity(pipeline);
    while done < quota {
        batch.clear();
        let ts = now_ms();
        while batch.len() < pipeline && done + (batch.len() as u64) < quota {
            let (user, entity) = worker.next_preload(wl);
            queue_act(conn, sha, wl, user, entity, LIKE, ts);
            batch.push((user, entity));
        }
        conn.flush().await?;
        for &(user, entity) in &batch {
            match act_reply(&conn.read_reply().await?) {
                Ok((_, now, _, _)) => worker.learn(user, entity, now == 1),
                Err(_) => errors += 1,
            }
        }
        done += batch.len() as u64;
    }
    Ok(errors)
}

/// Preloads `records` likes over `conns`, split evenly across the workers.
pub async fn preload(
    conns: Vec<(Conn, Worker)>,
    sha: Arc<str>,
    wl: Arc<Workload>,
    records: u64,
    pipeline: usize,
) -> anyhow::Result<(Vec<(Conn, Worker)>, Preload)> {
    let n = conns.len() as u64;
    let started = Instant::now();
    let mut tasks = Vec::new();
    for (i, (mut conn, mut worker)) in conns.into_iter().enumerate() {
        let quota = records / n + u64::from((i as u64) < records % n);
        let (sha, wl) = (sha.clone(), wl.clone());
        tasks.push(tokio::spawn(async move {
            let errors = preload_worker(&mut conn, &sha, &wl, &mut worker, quota, pipeline).await?;
            anyhow::Ok((conn, worker, errors))
        }));
    }
    let mut out = Vec::new();
    let mut errors = 0;
    for t in tasks {
        let (c, w, e) = t.await??;
        errors += e;
        out.push((c, w));
    }
    let seconds = started.elapsed().as_secs_f64();
    let per_s = (records as f64 / seconds.max(1e-9)).round();
    Ok((out, Preload { records, seconds: (seconds * 1000.0).round() / 1000.0, per_s, errors }))
}

/// The like workload as pipelined Redis commands for `redis_loop::run`.
pub struct LikeOps {
    pub sha: Arc<str>,
    pub wl: Arc<Workload>,
    pub worker: Worker,
}

impl PipelinedOps for LikeOps {
    type Op = Op;

    fn ops(&self) -> usize {
        self.wl.mix.ops()
    }

    fn next_op(&mut self) -> Op {
        self.worker.next_op(&self.wl)
    }

    fn kind(op: &Op) -> usize {
        op.kind().index()
    }

    fn queue(&mut self, conn: &mut Conn, op: &Op) {
        queue_op(conn, &self.sha, &self.wl, op, now_ms());
    }

    async fn read(&mut self, conn: &mut Conn, op: &Op) -> anyhow::Result<Result<(), String>> {
        read_op(conn, op, &mut self.worker).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn act_replies_are_decoded() {
        let ok = Value::Array(vec![Value::Int(0), Value::Int(1), Value::Int(1), Value::Int(9)]);
        assert_eq!(act_reply(&ok), Ok((0, 1, true, 9)));
        assert_eq!(act_reply(&Value::Error("NOSCRIPT x".into())), Err("NOSCRIPT".into()));
        assert_eq!(act_reply(&Value::Int(3)), Err("Protocol".into()));
        assert_eq!(act_reply(&Value::Array(vec![Value::Nil; 4])), Err("Protocol".into()));
    }
}
