//! Paged lists (a user's likes, an entity's likers) across the boundary
//! between the in-memory window and sled, and received totals per owner.

use plaudit_client::proto::likes::{LikeReply, ListItem, Page};
use plaudit_client::proto::BizConfig;
use plaudit_client::{Client, ClientError};
use plaudit_tests::{wait_converged, Node};
use std::collections::HashSet;

const MEMORY: u32 = 5;
const N: u64 = 23;

/// Newest first: by `(mtime, id)` descending, the order cursors continue in.
fn newest_first(mut items: Vec<ListItem>) -> Vec<ListItem> {
    items.sort_by_key(|i| std::cmp::Reverse((i.mtime, i.id)));
    items
}

/// Pages through a whole list with `limit`, checking each page's shape.
async fn page_all<F, Fut>(limit: u32, mut fetch: F) -> Vec<ListItem>
where
    F: FnMut(Option<String>) -> Fut,
    Fut: std::future::Future<Output = Result<Page, ClientError>>,
{
    let mut all = Vec::new();
    let mut cursor = None;
    for _ in 0..1000 {
        let page = fetch(cursor.take()).await.expect("page");
        assert!(page.items.len() <= limit as usize, "page over the limit: {page:?}");
        all.extend(page.items.iter().copied());
        match page.next {
            Some(next) => {
                assert_eq!(page.items.len(), limit as usize, "a page before the end is full");
                cursor = Some(next);
            }
            None => return all,
        }
    }
    panic!("paging did not end");
}

/// Pages `user`'s likes and `entity`'s likers with limits 4, 7, exactly the
/// length, and 100, and checks each against the expected newest-first list.
async fn check_pages(
    c: &Client,
    biz: u32,
    user: u64,
    entity: u64,
    likes: &[ListItem],
    likers: &[ListItem],
    when: &str,
) {
    for limit in [4, 7, likes.len().max(1) as u32, 100] {
        let got =
            page_all(
                limit,
                |cur| async move { c.user_likes(biz, user, cur.as_deref(), limit).await },
            )
            .await;
        assert_eq!(got, likes, "user_likes, limit {limit}, {when}");
    }
    for limit in [4, 7, likers.len().max(1) as u32, 100] {
        let got =
            page_all(
                limit,
                |cur| async move { c.likers(biz, entity, cur.as_deref(), limit).await },
            )
            .await;
        assert_eq!(got, likers, "likers, limit {limit}, {when}");
    }
    let ids: HashSet<u64> = likes.iter().map(|i| i.id).collect();
    assert_eq!(ids.len(), likes.len(), "no duplicates expected in {when}");
}

fn item(id: u64, r: LikeReply) -> ListItem {
    assert!(r.changed, "{r:?}");
    ListItem { id, mtime: r.mtime }
}

#[tokio::test]
async fn pages_run_newest_first_across_memory_and_sled_and_after_restart() {
    let mut node = Node::start();
    let c = node.client().await;
    let config =
        BizConfig { dislike_enabled: true, user_list_memory: MEMORY, liker_list_memory: MEMORY };
    let biz = c.create_biz(None, "lists", config).await.unwrap().id;
    let (user, entity) = (1000, 5000);

    // One user likes 23 entities; 23 users like one entity.
    let mut likes = Vec::new();
    let mut likers = Vec::new();
    for i in 1..=N {
        likes.push(item(i, c.like(biz, i, user, None).await.unwrap()));
        likers.push(item(i, c.like(biz, entity, i, None).await.unwrap()));
    }
    let mut likes = newest_first(likes);
    let mut likers = newest_first(likers);
    assert_eq!(likes.len(), N as usize);
    wait_converged(&node).await;
    check_pages(&c, biz, user, entity, &likes, &likers, "after 23 likes").await;

    // Unlikes in the middle (in memory and beyond it), and dislike, which
    // also leaves the like lists.
    for id in [likes[2].id, likes[9].id, likes[10].id, likes[17].id] {
        c.unlike(biz, id, user, None).await.unwrap();
        likes.retain(|i| i.id != id);
    }
    let gone = likes[13].id;
    c.dislike(biz, gone, user, None).await.unwrap();
    likes.retain(|i| i.id != gone);
    for u in [likers[1].id, likers[12].id, likers[20].id] {
        c.unlike(biz, entity, u, None).await.unwrap();
        likers.retain(|i| i.id != u);
    }
    // Unliking the oldest and liking it again moves it to the front.
    let old = likes.pop().unwrap();
    c.unlike(biz, old.id, user, None).await.unwrap();
    let again = item(old.id, c.like(biz, old.id, user, None).await.unwrap());
    likes.insert(0, again);
    let likes = newest_first(likes);
    let likers = newest_first(likers);
    assert_eq!(likes[0], again);
    wait_converged(&node).await;
    check_pages(&c, biz, user, entity, &likes, &likers, "after unlikes").await;

    let counts = c.counts(biz, &[entity]).await.unwrap()[0];
    assert_eq!(counts.likes, likers.len() as u64);

    // After a restart every actor is loaded again from sled.
    drop(c);
    node.terminate();
    node.restart();
    let c = node.client().await;
    check_pages(&c, biz, user, entity, &likes, &likers, "after a restart").await;
}

#[tokio::test]
async fn empty_lists_have_one_empty_page() {
    let node = Node::start();
    let c = node.client().await;
    let biz = c.create_biz(None, "empty", BizConfig::default()).await.unwrap().id;
    let p = c.user_likes(biz, 1, None, 10).await.unwrap();
    assert_eq!(p, Page { items: vec![], next: None });
    let p = c.likers(biz, 1, None, 10).await.unwrap();
    assert_eq!(p, Page { items: vec![], next: None });
    // A cursor past the end is an empty last page, not an error.
    let p = c.user_likes(biz, 1, Some("0.0"), 10).await.unwrap();
    assert_eq!(p, Page { items: vec![], next: None });
}

#[tokio::test]
async fn received_totals_sum_likes_over_each_owners_entities() {
    let node = Node::start();
    let c = node.client().await;
    let biz = c.create_biz(None, "received", BizConfig::default()).await.unwrap().id;
    let (a, b) = (900, 901);
    let owner = |e: u64| if e == 4 { b } else { a };

    // A owns e1, e2, e3; B owns e4.
    for (e, u) in [(1, 1), (1, 2), (1, 3), (2, 1), (2, 2), (3, 4), (4, 1), (4, 2), (4, 3)] {
        c.like(biz, e, u, Some(owner(e))).await.unwrap();
    }
    wait_converged(&node).await;
    assert_eq!(c.received(biz, a).await.unwrap().likes, 6);
    assert_eq!(c.received(biz, b).await.unwrap().likes, 3);

    c.unlike(biz, 1, 2, Some(a)).await.unwrap(); // A: -1
    c.dislike(biz, 2, 1, Some(a)).await.unwrap(); // A: -1 (like -> dislike)
    c.dislike(biz, 3, 5, Some(a)).await.unwrap(); // A: dislikes are not credited
    c.unlike(biz, 4, 9, Some(b)).await.unwrap(); // B: no-op, never liked
    c.like(biz, 4, 1, Some(b)).await.unwrap(); // B: repeat, no-op
    c.undislike(biz, 4, 3, Some(b)).await.unwrap(); // B: no-op, it is a like
    wait_converged(&node).await;
    assert_eq!(c.received(biz, a).await.unwrap().likes, 4);
    assert_eq!(c.received(biz, b).await.unwrap().likes, 3);

    // The first owner an entity learns wins: a later, different owner (or
    // none) still credits the first.
    c.like(biz, 2, 6, Some(b)).await.unwrap();
    c.like(biz, 4, 7, Some(a)).await.unwrap();
    c.like(biz, 4, 8, None).await.unwrap();
    wait_converged(&node).await;
    assert_eq!(c.received(biz, a).await.unwrap().likes, 5);
    assert_eq!(c.received(biz, b).await.unwrap().likes, 5);

    // Received equals the like counts of the owner's entities.
    let counts = c.counts(biz, &[1, 2, 3, 4]).await.unwrap();
    let sum = |ids: &[u64]| -> u64 {
        counts.iter().filter(|k| ids.contains(&k.entity)).map(|k| k.likes).sum()
    };
    assert_eq!(sum(&[1, 2, 3]), 5);
    assert_eq!(sum(&[4]), 5);
    // Users who own nothing, and owners in another business, have nothing.
    assert_eq!(c.received(biz, 1).await.unwrap().likes, 0);
    let other = c.create_biz(None, "other", BizConfig::default()).await.unwrap().id;
    assert_eq!(c.received(other, a).await.unwrap().likes, 0);
}

/// Received totals must equal the likes on the owner's entities, also when
/// an entity learns its owner only after some likes were counted: the owner
/// is then credited with those at once, so their later unlikes never drive
/// the total below the entity's likes.
#[tokio::test]
async fn received_matches_owned_likes_when_the_owner_is_learned_late() {
    let node = Node::start();
    let c = node.client().await;
    let biz = c.create_biz(None, "late-owner", BizConfig::default()).await.unwrap().id;
    let (entity, owner) = (5, 77);
    c.like(biz, entity, 1, None).await.unwrap(); // no owner known yet
    c.like(biz, entity, 2, Some(owner)).await.unwrap(); // the entity learns its owner
    c.unlike(biz, entity, 1, None).await.unwrap();
    wait_converged(&node).await;
    let likes = c.counts(biz, &[entity]).await.unwrap()[0].likes;
    assert_eq!(likes, 1, "user 2 still likes it");
    assert_eq!(c.received(biz, owner).await.unwrap().likes, likes, "received vs owned likes");
}
