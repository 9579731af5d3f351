//! Likes decided with and without their actors agree. A like for a user
//! (or a delivery for an entity) whose actor is not active is decided by
//! the shard from the stored state; an active actor decides from its
//! cache. With an actor budget of one per shard and pages read between
//! likes, actors are started (by a page) and passivated (by the next
//! page) all the time, so the two ways interleave on the same users and
//! entities. After every like, the reply must match a model; at the end
//! every state, count, list and received total must match it too.

use plaudit_client::proto::likes::ListItem;
use plaudit_client::proto::{BizConfig, LikeAction, LikeState};
use plaudit_client::Client;
use plaudit_tests::{wait_until, Node};
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

const USERS: u64 = 6;
const ENTITIES: u64 = 6;

fn owner_of(entity: u64) -> u64 {
    100 + entity % 3
}

/// Every item of a paged list, small pages so that several are read.
async fn all_pages<F, Fut>(mut page: F) -> Vec<ListItem>
where
    F: FnMut(Option<String>) -> Fut,
    Fut: std::future::Future<Output = plaudit_client::proto::likes::Page>,
{
    let mut items = Vec::new();
    let mut cursor = None;
    loop {
        let p = page(cursor).await;
        items.extend(p.items);
        match p.next {
            Some(n) => cursor = Some(n),
            None => return items,
        }
    }
}

async fn liked_by(client: &Client, biz: u32, user: u64) -> BTreeSet<u64> {
    let items =
        all_pages(|c| async move { client.user_likes(biz, user, c.as_deref(), 2).await.unwrap() })
            .await;
    items.iter().map(|i| i.id).collect()
}

async fn likers_of(client: &Client, biz: u32, entity: u64) -> BTreeSet<u64> {
    let items =
        all_pages(|c| async move { client.likers(biz, entity, c.as_deref(), 2).await.unwrap() })
            .await;
    items.iter().map(|i| i.id).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn likes_decided_with_and_without_actors_agree() {
    let node = Node::builder().shards(2).env("PLAUDIT_ACTOR_BUDGET_PER_SHARD", 1).start();
    let client = node.client().await;
    let biz = 7;
    client.create_biz(Some(biz), "actors", BizConfig::default()).await.unwrap();
    let mut model: BTreeMap<(u64, u64), bool> = BTreeMap::new();
    let mut seed = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    for step in 0..240 {
        let (user, entity) = (next() % USERS, next() % ENTITIES);
        let was = model.get(&(user, entity)).copied().unwrap_or(false);
        let action = if next() % 3 == 0 || !was { LikeAction::Like } else { LikeAction::Unlike };
        let reply = client.act(biz, entity, user, Some(owner_of(entity)), action).await.unwrap();
        let now = action == LikeAction::Like;
        let expect = |liked| if liked { LikeState::Like } else { LikeState::None };
        assert_eq!((reply.prev, reply.now), (expect(was), expect(now)), "step {step}");
        model.insert((user, entity), now);
        if step % 7 == 0 {
            // A page starts the user's actor (and passivates another).
            let u = next() % USERS;
            let want: BTreeSet<u64> =
                (0..ENTITIES).filter(|&e| model.get(&(u, e)) == Some(&true)).collect();
            assert_eq!(liked_by(&client, biz, u).await, want, "user {u}'s likes, step {step}");
        }
    }
    // Counts, likers and received totals follow by delivery.
    let likes_of = |e: u64| (0..USERS).filter(|&u| model.get(&(u, e)) == Some(&true)).count();
    let entities: Vec<u64> = (0..ENTITIES).collect();
    wait_until(Duration::from_secs(20), "every like is counted", || async {
        let counts = client.counts(biz, &entities).await.unwrap();
        counts.iter().all(|c| c.likes as usize == likes_of(c.entity))
    })
    .await;
    for e in 0..ENTITIES {
        let want: BTreeSet<u64> =
            (0..USERS).filter(|&u| model.get(&(u, e)) == Some(&true)).collect();
        assert_eq!(likers_of(&client, biz, e).await, want, "likers of {e}");
    }
    for owner in 100..103 {
        let want: usize = (0..ENTITIES).filter(|&e| owner_of(e) == owner).map(likes_of).sum();
        wait_until(Duration::from_secs(20), "received totals are in", || async {
            client.received(biz, owner).await.unwrap().likes as usize == want
        })
        .await;
    }
    for u in 0..USERS {
        let want: BTreeSet<u64> =
            (0..ENTITIES).filter(|&e| model.get(&(u, e)) == Some(&true)).collect();
        assert_eq!(liked_by(&client, biz, u).await, want, "user {u}'s likes at the end");
        let states = client.status(biz, u, &entities).await.unwrap();
        for s in states {
            let liked = model.get(&(u, s.entity)) == Some(&true);
            assert_eq!(s.state == LikeState::Like, liked, "user {u}, entity {}", s.entity);
        }
    }
}
