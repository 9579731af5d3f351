//! The like state machine end to end: every transition's reply, status,
//! counts moving with each transition, repeats as no-ops, dislike switches,
//! businesses without dislikes, and the status/counts batch limits.

use plaudit_client::proto::likes::LikeReply;
use plaudit_client::proto::limits::MAX_BATCH;
use plaudit_client::proto::{BizConfig, ErrorCode, LikeAction, LikeState};
use plaudit_client::{Client, ClientError};
use plaudit_tests::{wait_converged, Node};

use LikeAction::{Dislike, Like, Undislike, Unlike};
use LikeState::{Dislike as D, Like as L, None as N};

/// `(likes, dislikes)` one user in `state` contributes.
fn weight(state: LikeState) -> (u64, u64) {
    match state {
        N => (0, 0),
        L => (1, 0),
        D => (0, 1),
    }
}

async fn new_biz(c: &Client, config: BizConfig) -> u32 {
    c.create_biz(None, "likes", config).await.expect("create business").id
}

async fn counts_of(c: &Client, biz: u32, entity: u64) -> (u64, u64) {
    let got = c.counts(biz, &[entity]).await.expect("counts");
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].entity, entity);
    (got[0].likes, got[0].dislikes)
}

/// Puts `user` in `state` on `entity` (from None).
async fn reach(c: &Client, biz: u32, entity: u64, user: u64, state: LikeState) {
    let action = match state {
        N => return,
        L => Like,
        D => Dislike,
    };
    let r = c.act(biz, entity, user, Some(9), action).await.expect("setup action");
    assert_eq!((r.prev, r.now, r.changed), (N, state, true));
}

#[tokio::test]
async fn every_transition_reports_prev_now_changed_and_moves_counts() {
    // (prev, action, now): the whole table, none/like/dislike x the four actions.
    let table = [
        (N, Like, L),
        (N, Unlike, N),
        (N, Dislike, D),
        (N, Undislike, N),
        (L, Like, L),
        (L, Unlike, N),
        (L, Dislike, D),
        (L, Undislike, L),
        (D, Like, L),
        (D, Unlike, D),
        (D, Dislike, D),
        (D, Undislike, N),
    ];
    let node = Node::start();
    let c = node.client().await;
    let biz = new_biz(&c, BizConfig::default()).await;
    // One entity per row, so each row's counts are its own. Two background
    // users keep a like and a dislike on every entity, so a count moving
    // below them (or above) shows.
    let user = 1;
    for (i, &(prev, _, _)) in table.iter().enumerate() {
        let entity = 100 + i as u64;
        reach(&c, biz, entity, 50, L).await;
        reach(&c, biz, entity, 51, D).await;
        reach(&c, biz, entity, user, prev).await;
    }
    wait_converged(&node).await;
    for (i, &(prev, _, _)) in table.iter().enumerate() {
        let (l, d) = weight(prev);
        assert_eq!(counts_of(&c, biz, 100 + i as u64).await, (1 + l, 1 + d), "before, row {i}");
    }

    let mut replies = Vec::new();
    for (i, &(prev, action, now)) in table.iter().enumerate() {
        let entity = 100 + i as u64;
        let before = c.status(biz, user, &[entity]).await.expect("status")[0];
        assert_eq!(before.state, prev, "row {i}");
        let r = c.act(biz, entity, user, Some(9), action).await.expect("action");
        let row = format!("{prev:?} --{action:?}--> (row {i})");
        assert_eq!(r.prev, prev, "{row}");
        assert_eq!(r.now, now, "{row}");
        assert_eq!(r.changed, prev != now, "{row}");
        if r.changed {
            assert!(r.mtime >= before.mtime && r.mtime > 0, "{row}: {r:?} after {before:?}");
        } else {
            assert_eq!(r.mtime, before.mtime, "{row}: a no-op keeps the mtime");
        }
        let after = c.status(biz, user, &[entity]).await.expect("status")[0];
        assert_eq!(after.state, now, "{row}: read-your-writes");
        assert_eq!(after.mtime, r.mtime, "{row}: status shows the reply's mtime");
        replies.push(r);
    }
    wait_converged(&node).await;
    for (i, &(prev, action, now)) in table.iter().enumerate() {
        let (l, d) = weight(now);
        assert_eq!(
            counts_of(&c, biz, 100 + i as u64).await,
            (1 + l, 1 + d),
            "after {prev:?} --{action:?}--> {now:?} (row {i})"
        );
    }
}

#[tokio::test]
async fn switching_between_like_and_dislike_moves_both_counts() {
    let node = Node::start();
    let c = node.client().await;
    let biz = new_biz(&c, BizConfig::default()).await;
    let e = 7;
    for u in 1..=5 {
        c.like(biz, e, u, None).await.unwrap();
    }
    wait_converged(&node).await;
    assert_eq!(counts_of(&c, biz, e).await, (5, 0));

    // like -> dislike: one step, likes down and dislikes up.
    for u in [1, 2] {
        let r = c.dislike(biz, e, u, None).await.unwrap();
        assert_eq!((r.prev, r.now, r.changed), (L, D, true));
    }
    wait_converged(&node).await;
    assert_eq!(counts_of(&c, biz, e).await, (3, 2));

    // dislike -> like: back again.
    let r = c.like(biz, e, 1, None).await.unwrap();
    assert_eq!((r.prev, r.now, r.changed), (D, L, true));
    wait_converged(&node).await;
    assert_eq!(counts_of(&c, biz, e).await, (4, 1));

    // Leaving entirely from either side.
    c.unlike(biz, e, 3, None).await.unwrap();
    c.undislike(biz, e, 2, None).await.unwrap();
    wait_converged(&node).await;
    assert_eq!(counts_of(&c, biz, e).await, (3, 0));
}

#[tokio::test]
async fn repeated_actions_report_unchanged_and_do_not_move_counts() {
    let node = Node::start();
    let c = node.client().await;
    let biz = new_biz(&c, BizConfig::default()).await;
    let (e, u) = (3, 4);

    let first = c.like(biz, e, u, None).await.unwrap();
    assert!(first.changed);
    for _ in 0..3 {
        let again = c.like(biz, e, u, None).await.unwrap();
        assert_eq!(again, LikeReply { prev: L, now: L, changed: false, mtime: first.mtime });
        let r = c.undislike(biz, e, u, None).await.unwrap();
        assert_eq!(r, LikeReply { prev: L, now: L, changed: false, mtime: first.mtime });
    }
    wait_converged(&node).await;
    assert_eq!(counts_of(&c, biz, e).await, (1, 0));

    let d = c.dislike(biz, e, u, None).await.unwrap();
    for _ in 0..3 {
        let again = c.dislike(biz, e, u, None).await.unwrap();
        assert_eq!(again, LikeReply { prev: D, now: D, changed: false, mtime: d.mtime });
    }
    wait_converged(&node).await;
    assert_eq!(counts_of(&c, biz, e).await, (0, 1));

    let gone = c.undislike(biz, e, u, None).await.unwrap();
    for _ in 0..3 {
        let r = c.undislike(biz, e, u, None).await.unwrap();
        assert_eq!(r, LikeReply { prev: N, now: N, changed: false, mtime: gone.mtime });
        let r = c.unlike(biz, e, u, None).await.unwrap();
        assert_eq!(r, LikeReply { prev: N, now: N, changed: false, mtime: gone.mtime });
    }
    wait_converged(&node).await;
    assert_eq!(counts_of(&c, biz, e).await, (0, 0));
}

#[tokio::test]
async fn unlike_after_dislike_is_a_no_op() {
    let node = Node::start();
    let c = node.client().await;
    let biz = new_biz(&c, BizConfig::default()).await;
    let d = c.dislike(biz, 1, 2, None).await.unwrap();
    let r = c.unlike(biz, 1, 2, None).await.unwrap();
    assert_eq!(r, LikeReply { prev: D, now: D, changed: false, mtime: d.mtime });
    let s = c.status(biz, 2, &[1]).await.unwrap()[0];
    assert_eq!((s.state, s.mtime), (D, d.mtime));
    wait_converged(&node).await;
    assert_eq!(counts_of(&c, biz, 1).await, (0, 1));
}

#[tokio::test]
async fn business_without_dislikes_rejects_dislike_and_undislike() {
    let node = Node::start();
    let c = node.client().await;
    let config = BizConfig { dislike_enabled: false, ..BizConfig::default() };
    let biz = new_biz(&c, config).await;
    let liked = c.like(biz, 1, 2, None).await.unwrap();
    for action in [Dislike, Undislike] {
        match c.act(biz, 1, 2, None, action).await {
            Err(ClientError::Server(e)) => assert_eq!(e.code, ErrorCode::BadRequest, "{action:?}"),
            other => panic!("{action:?} on a business without dislikes: {other:?}"),
        }
    }
    // The rejected actions changed nothing.
    let s = c.status(biz, 2, &[1]).await.unwrap()[0];
    assert_eq!((s.state, s.mtime), (L, liked.mtime));
    let r = c.unlike(biz, 1, 2, None).await.unwrap();
    assert_eq!((r.prev, r.now, r.changed), (L, N, true));
    wait_converged(&node).await;
    assert_eq!(counts_of(&c, biz, 1).await, (0, 0));
}

#[tokio::test]
async fn status_reports_each_state_with_its_mtime() {
    let node = Node::start();
    let c = node.client().await;
    let biz = new_biz(&c, BizConfig::default()).await;
    let u = 42;
    let liked = c.like(biz, 1, u, None).await.unwrap();
    let disliked = c.dislike(biz, 2, u, None).await.unwrap();
    c.like(biz, 3, u, None).await.unwrap();
    let unliked = c.unlike(biz, 3, u, None).await.unwrap();
    let s = c.status(biz, u, &[4, 2, 1, 1]).await.unwrap();
    let got: Vec<_> = s.iter().map(|s| (s.entity, s.state, s.mtime)).collect();
    assert_eq!(
        got,
        vec![
            (4, N, 0), // never set
            (2, D, disliked.mtime),
            (1, L, liked.mtime),
            (1, L, liked.mtime),
        ]
    );
    assert!(liked.mtime > 0 && unliked.mtime >= liked.mtime);
    // Liked then unliked: none again, stamped with the time it was cleared.
    let cleared = c.status(biz, u, &[3]).await.unwrap()[0];
    assert_eq!((cleared.state, cleared.mtime), (N, unliked.mtime));
    // Another user sees none of it.
    let other = c.status(biz, u + 1, &[1, 2, 3]).await.unwrap();
    assert!(other.iter().all(|s| s.state == N && s.mtime == 0), "{other:?}");
}

#[tokio::test]
async fn status_and_counts_take_1_to_500_entities() {
    let node = Node::start();
    let c = node.client().await;
    let biz = new_biz(&c, BizConfig::default()).await;
    let u = 5;
    c.like(biz, 250, u, None).await.unwrap();
    c.dislike(biz, 499, u, None).await.unwrap();
    wait_converged(&node).await;

    // Exactly MAX_BATCH, in reverse order: answered in request order.
    let entities: Vec<u64> = (0..MAX_BATCH as u64).rev().collect();
    let states = c.status(biz, u, &entities).await.expect("status of 500");
    assert_eq!(states.len(), MAX_BATCH);
    for (s, &e) in states.iter().zip(&entities) {
        assert_eq!(s.entity, e);
        let want = match e {
            250 => L,
            499 => D,
            _ => N,
        };
        assert_eq!(s.state, want, "entity {e}");
    }
    let counts = c.counts(biz, &entities).await.expect("counts of 500");
    assert_eq!(counts.len(), MAX_BATCH);
    for (k, &e) in counts.iter().zip(&entities) {
        assert_eq!(k.entity, e);
        let want = match e {
            250 => (1, 0),
            499 => (0, 1),
            _ => (0, 0),
        };
        assert_eq!((k.likes, k.dislikes), want, "entity {e}");
    }

    let too_many: Vec<u64> = (0..=MAX_BATCH as u64).collect();
    for (what, entities) in [("501 entities", &too_many[..]), ("no entity", &[][..])] {
        let err = c.status(biz, u, entities).await.expect_err(what);
        assert_eq!(err.code(), Some(ErrorCode::BadRequest), "status with {what}: {err}");
        let err = c.counts(biz, entities).await.expect_err(what);
        assert_eq!(err.code(), Some(ErrorCode::BadRequest), "counts with {what}: {err}");
    }
    // The connection and node are fine afterwards.
    assert_eq!(c.status(biz, u, &[250]).await.unwrap()[0].state, L);
}

/// The contract (`EntityState::mtime`: "0 when the state is `None` and was
/// never set"; `LikeReply::mtime`: "unchanged on a no-op") says a state
/// cleared by unlike/undislike keeps the clearing action's mtime, in status
/// and in repeat replies, also after a restart (when the user's actor is
/// re-activated from storage).
#[tokio::test]
async fn a_cleared_state_keeps_its_mtime_in_status_and_after_restart() {
    let mut node = Node::start();
    let c = node.client().await;
    let biz = new_biz(&c, BizConfig::default()).await;
    c.like(biz, 1, 1, None).await.unwrap();
    let cleared = c.unlike(biz, 1, 1, None).await.unwrap();
    assert!(cleared.changed && cleared.mtime > 0);
    let s = c.status(biz, 1, &[1]).await.unwrap()[0];
    assert_eq!((s.state, s.mtime), (N, cleared.mtime), "status after unlike");
    let again = c.unlike(biz, 1, 1, None).await.unwrap();
    assert_eq!(again.mtime, cleared.mtime, "no-op before restart");
    drop(c);
    node.terminate();
    node.restart();
    let c = node.client().await;
    let again = c.unlike(biz, 1, 1, None).await.unwrap();
    assert_eq!(again.mtime, cleared.mtime, "the same no-op after a restart");
}
