//! `check-redis`: runs the like script's transition table against a real
//! Redis and checks every key it maintains. A manual test (it needs a running
//! redis-server), deliberately outside `cargo test`.

use crate::likes::{OpKind, Workload};
use crate::likes_redis::{self, act_reply, DISLIKE, LIKE, LIST_CAP, UNDISLIKE, UNLIKE};
use crate::redis::{Arg, Conn, Value};
use crate::zipf::Zipf;
use anyhow::{bail, ensure};

/// A like-only workload for one business: the script's keys need only `biz`.
fn mix_free_workload(biz: u32) -> Workload {
    Workload {
        biz,
        users: 1,
        entities: Zipf::new(1, 0.0).expect("valid"),
        mix: OpKind::parse_mix("like=1").expect("valid"),
        owners: false,
    }
}

async fn act(
    conn: &mut Conn,
    sha: &str,
    biz: u32,
    user: u64,
    entity: u64,
    action: i64,
    ts: i64,
) -> anyhow::Result<(i64, i64, bool, i64)> {
    let wl = mix_free_workload(biz);
    likes_redis::queue_act(conn, sha, &wl, user, entity, action, ts);
    conn.flush().await?;
    act_reply(&conn.read_reply().await?).map_err(anyhow::Error::msg)
}

async fn int(conn: &mut Conn, args: &[Arg<'_>]) -> anyhow::Result<Option<i64>> {
    Ok(match conn.command(args).await? {
        Value::Nil => None,
        v => Some(v.as_int().ok_or_else(|| anyhow::anyhow!("not an integer: {v:?}"))?),
    })
}

async fn delete_biz(conn: &mut Conn, biz: u32) -> anyhow::Result<u64> {
    let mut cursor = "0".to_string();
    let mut deleted = 0;
    let pattern = format!("*:{biz}:*");
    loop {
        let reply = conn
            .command(&[
                "SCAN".into(),
                cursor.as_str().into(),
                "MATCH".into(),
                pattern.as_str().into(),
                "COUNT".into(),
                Arg::Int(1000),
            ])
            .await?;
        let Value::Array(mut parts) = reply else { bail!("bad SCAN reply") };
        let Some(Value::Array(keys)) = parts.pop() else { bail!("bad SCAN reply") };
        let Some(Value::Bulk(next)) = parts.pop() else { bail!("bad SCAN reply") };
        for k in keys {
            if let Value::Bulk(k) = k {
                deleted += int(conn, &["DEL".into(), Arg::Bytes(&k)]).await?.unwrap_or(0) as u64;
            }
        }
        cursor = String::from_utf8(next)?;
        if cursor == "0" {
            return Ok(deleted);
        }
    }
}

pub async fn check_redis(addr: &str, biz: u32) -> anyhow::Result<()> {
    let setup = likes_redis::setup(addr).await?;
    let sha = setup.sha.as_str();
    let mut c = Conn::connect(addr).await?;
    delete_biz(&mut c, biz).await?;
    let (u, e) = (7u64, 42u64);
    let cnt = format!("cnt:{biz}:{e}");
    let st = format!("st:{biz}:{u}");
    let ul = format!("ul:{biz}:{u}");
    let lk = format!("lk:{biz}:{e}");

    // (action, ts, expected prev, now, changed, mtime, likes, dislikes)
    let table = [
        (LIKE, 100, 0, 1, true, 100, 1, 0),
        (LIKE, 101, 1, 1, false, 100, 1, 0),
        (UNDISLIKE, 102, 1, 1, false, 100, 1, 0),
        (DISLIKE, 103, 1, 2, true, 103, 0, 1),
        (DISLIKE, 104, 2, 2, false, 103, 0, 1),
        (UNLIKE, 105, 2, 2, false, 103, 0, 1),
        (LIKE, 106, 2, 1, true, 106, 1, 0),
        (UNLIKE, 107, 1, 0, true, 107, 0, 0),
        (UNLIKE, 108, 0, 0, false, 0, 0, 0),
        (UNDISLIKE, 109, 0, 0, false, 0, 0, 0),
        (DISLIKE, 110, 0, 2, true, 110, 0, 1),
        (UNDISLIKE, 111, 2, 0, true, 111, 0, 0),
        (LIKE, 112, 0, 1, true, 112, 1, 0),
    ];
    for (i, &(action, ts, prev, now, changed, mtime, l, d)) in table.iter().enumerate() {
        let got = act(&mut c, sha, biz, u, e, action, ts).await?;
        ensure!(got == (prev, now, changed, mtime), "step {i}: got {got:?}");
        let likes = int(&mut c, &["HGET".into(), cnt.as_str().into(), "l".into()]).await?;
        let dislikes = int(&mut c, &["HGET".into(), cnt.as_str().into(), "d".into()]).await?;
        ensure!(likes.unwrap_or(0) == l && dislikes.unwrap_or(0) == d, "step {i}: counts");
        let in_ul = int(&mut c, &["ZSCORE".into(), ul.as_str().into(), Arg::Int(e as i64)]).await?;
        let in_lk = int(&mut c, &["ZSCORE".into(), lk.as_str().into(), Arg::Int(u as i64)]).await?;
        let liked = now == 1;
        ensure!(in_ul.is_some() == liked && in_lk.is_some() == liked, "step {i}: zsets");
        let state = c.command(&["HGET".into(), st.as_str().into(), Arg::Int(e as i64)]).await?;
        let want_state =
            if now == 0 { Value::Nil } else { Value::Bulk(format!("{now}:{mtime}").into_bytes()) };
        ensure!(state == want_state, "step {i}: state field {state:?}");
    }

    // Both zsets keep only the newest LIST_CAP members.
    let extra = 5;
    for k in 0..(LIST_CAP as u64 + extra) {
        act(&mut c, sha, biz, 9, 1000 + k, LIKE, 1000 + k as i64).await?;
        act(&mut c, sha, biz, 10_000 + k, 5, LIKE, 1000 + k as i64).await?;
    }
    let ul9 = format!("ul:{biz}:9");
    let lk5 = format!("lk:{biz}:5");
    ensure!(int(&mut c, &["ZCARD".into(), ul9.as_str().into()]).await? == Some(LIST_CAP));
    ensure!(int(&mut c, &["ZCARD".into(), lk5.as_str().into()]).await? == Some(LIST_CAP));
    let oldest = c.command(&["ZRANGE".into(), ul9.as_str().into(), "0".into(), "0".into()]).await?;
    ensure!(oldest == Value::Array(vec![Value::Bulk(format!("{}", 1000 + extra).into_bytes())]));
    let cnt5 = format!("cnt:{biz}:5");
    let l5 = int(&mut c, &["HGET".into(), cnt5.as_str().into(), "l".into()]).await?;
    ensure!(l5 == Some(LIST_CAP + extra as i64), "counts are not trimmed");

    let deleted = delete_biz(&mut c, biz).await?;
    println!(
        "redis like script OK ({} transitions, trim to {LIST_CAP}; {deleted} keys cleaned up)",
        table.len()
    );
    Ok(())
}
