//! `plaudit admin move --entity` and the entities' part of `plaudit admin
//! placements`: moving one entity's counts and likers to another shard, and
//! the entities that live off their hash shard with the moves under way
//! (`proto::placement`, `EntityPlacements`). The boards' side is
//! `placement.rs`, whose waiting and printing this mirrors.
//!
//! `admin move --entity BIZ:ENTITY --to-shard S` sends `MoveEntity`, which
//! is answered once the move is recorded, then (unless `--no-wait`) reads
//! the entity placements every 50 ms until the move is gone and the entity
//! lives on `S`, for at most 30 s. `--json` prints
//!
//! ```text
//! {"biz":1,"entity":42,"to_shard":3,"ms":84}                 ("ms":null with --no-wait)
//! ```
//!
//! and `admin placements --json` carries the entities as its `"entities"`
//! field:
//!
//! ```text
//! {"epoch":2,"placed":[{"biz":1,"entity":42,"shard":3}],
//!  "moves":[{"biz":1,"entity":43,"from":1,"to":2,"step":"copy"}]}
//! ```

use super::json;
use super::placement::{placements_table, wait_move_over};
use super::Output;
use crate::{Client, ClientError};
use plaudit_proto::ids::{BizId, EntityId, ShardId};
use plaudit_proto::placement::{EntityKey, EntityMove, EntityPlacements, MoveEntity};
use plaudit_proto::{Request, Response};
use serde::Serialize;
use std::time::{Duration, Instant};

/// An entity as `--entity` names it: `BIZ:ENTITY`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EntityName {
    pub biz: BizId,
    pub entity: EntityId,
}

impl EntityName {
    /// The key placements are recorded under.
    pub fn key(&self) -> EntityKey {
        EntityKey { biz: self.biz, entity: self.entity }
    }
}

impl std::fmt::Display for EntityName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.biz, self.entity)
    }
}

/// `--entity`: a business id, a colon, an entity id.
pub fn parse_entity(s: &str) -> Result<EntityName, String> {
    let (biz, entity) =
        s.split_once(':').ok_or_else(|| format!("{s:?} is not BIZ:ENTITY (e.g. 1:42)"))?;
    let biz = biz.parse::<BizId>().map_err(|_| format!("{biz:?} is not a business id"))?;
    let entity =
        entity.parse::<EntityId>().map_err(|_| format!("{entity:?} is not an entity id"))?;
    Ok(EntityName { biz, entity })
}

/// Sends `MoveEntity`: returns once the move is recorded.
pub async fn move_entity(
    client: &Client,
    entity: &EntityName,
    to_shard: ShardId,
) -> Result<(), ClientError> {
    let req = Request::MoveEntity(MoveEntity { biz: entity.biz, entity: entity.entity, to_shard });
    match client.request(req).await? {
        Response::Done => Ok(()),
        other => Err(crate::api::unexpected("move_entity", &other)),
    }
}

/// The entity placements, as the answering node knows them.
pub async fn entity_placements(client: &Client) -> Result<EntityPlacements, ClientError> {
    match client.request(Request::EntityPlacements).await? {
        Response::EntityPlacements(p) => Ok(*p),
        other => Err(crate::api::unexpected("entity_placements", &other)),
    }
}

/// Where the move of `entity` to `to` stands in `p`: `None` once it is
/// over (no move of the entity under way and, when the shard count is
/// known, the entity on `to`: a node that has not applied the move yet
/// shows neither), else what it is waiting for.
pub fn move_left(
    p: &EntityPlacements,
    entity: &EntityKey,
    to: ShardId,
    shards: u32,
) -> Option<String> {
    if let Some(m) = p.move_of(entity) {
        return Some(format!("is still at step {}", m.step.as_str()));
    }
    if shards == 0 {
        return None;
    }
    match p.entity_shard(entity.biz, entity.entity, shards) {
        s if s == to => None,
        s => Some(format!("is not under way, and the entity is on shard {s}")),
    }
}

/// `admin move --entity` without `--no-wait`: waits until the move is
/// over; `started` is when the move was asked for.
pub async fn watch_move(
    client: &Client,
    entity: &EntityName,
    to_shard: ShardId,
    started: Instant,
) -> Result<Output, ClientError> {
    let key = entity.key();
    let shards = client.routing_table().map.shards.len() as u32;
    let what = format!("entity {entity} to shard {to_shard}");
    wait_move_over(&what, started, || async {
        Ok(move_left(&entity_placements(client).await?, &key, to_shard, shards))
    })
    .await?;
    Ok(moved(entity, to_shard, Some(started.elapsed())))
}

/// `Output::MovedEntity` for `entity`.
pub fn moved(entity: &EntityName, to_shard: ShardId, took: Option<Duration>) -> Output {
    Output::MovedEntity { biz: entity.biz, entity: entity.entity, to_shard, took }
}

#[derive(Serialize)]
struct MovedJson {
    biz: BizId,
    entity: EntityId,
    to_shard: ShardId,
    ms: Option<u64>,
}

/// `admin move --entity --json`.
pub fn moved_json(
    biz: BizId,
    entity: EntityId,
    to_shard: ShardId,
    took: Option<Duration>,
) -> String {
    let ms = took.map(|d| d.as_millis() as u64);
    json::encode(&MovedJson { biz, entity, to_shard, ms })
}

/// `admin move --entity`, for people.
pub fn moved_human(
    biz: BizId,
    entity: EntityId,
    to_shard: ShardId,
    took: Option<Duration>,
) -> String {
    match took {
        Some(d) => {
            format!("moved entity {biz}:{entity} to shard {to_shard} in {} ms\n", d.as_millis())
        }
        None => format!(
            "moving entity {biz}:{entity} to shard {to_shard} (admin placements shows its steps)\n"
        ),
    }
}

/// The `"entities"` field of `admin placements --json`.
#[derive(Serialize)]
pub struct EntityPlacementsJson {
    epoch: u64,
    placed: Vec<PlacedJson>,
    moves: Vec<MoveJson>,
}

#[derive(Serialize)]
struct PlacedJson {
    biz: BizId,
    entity: EntityId,
    shard: ShardId,
}

#[derive(Serialize)]
struct MoveJson {
    biz: BizId,
    entity: EntityId,
    from: ShardId,
    to: ShardId,
    step: &'static str,
}

fn move_json(m: &EntityMove) -> MoveJson {
    MoveJson { biz: m.key.biz, entity: m.key.entity, from: m.from, to: m.to, step: m.step.as_str() }
}

/// The entities' part of `admin placements --json`.
pub fn placements_json(p: &EntityPlacements) -> EntityPlacementsJson {
    EntityPlacementsJson {
        epoch: p.epoch,
        placed: p
            .placed
            .iter()
            .map(|(k, shard)| PlacedJson { biz: k.biz, entity: k.entity, shard: *shard })
            .collect(),
        moves: p.moves.iter().map(move_json).collect(),
    }
}

/// The entities' part of `admin placements`, for people: the epoch, the
/// entities off their hash shard, then the moves under way (if any).
pub fn placements_human(p: &EntityPlacements) -> String {
    let name = |k: &EntityKey| format!("{}:{}", k.biz, k.entity);
    placements_table(p, ("entity placements", "ENTITY", "every entity"), name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use plaudit_proto::placement::MoveStep;
    use plaudit_proto::routing::shard_of;

    fn key(biz: BizId, entity: EntityId) -> EntityKey {
        EntityKey { biz, entity }
    }

    fn placements() -> EntityPlacements {
        EntityPlacements {
            epoch: 2,
            placed: vec![(key(1, 42), 3), (key(1, 1000), 0)],
            moves: vec![EntityMove {
                id: 4,
                key: key(1, 43),
                from: 1,
                to: 2,
                step: MoveStep::Copy,
                started_ms: 1,
            }],
        }
    }

    #[test]
    fn an_entity_is_a_business_a_colon_and_an_entity_id() {
        let e = parse_entity("1:42").unwrap();
        assert_eq!((e.biz, e.entity), (1, 42));
        assert_eq!(e.to_string(), "1:42");
        assert_eq!(e.key(), key(1, 42));
        let big = parse_entity(&format!("{}:{}", u32::MAX, u64::MAX)).unwrap();
        assert_eq!((big.biz, big.entity), (u32::MAX, u64::MAX));
    }

    #[test]
    fn a_bad_entity_says_what_is_wrong() {
        let err = |s: &str| parse_entity(s).unwrap_err();
        assert_eq!(err("1"), "\"1\" is not BIZ:ENTITY (e.g. 1:42)");
        assert_eq!(err(""), "\"\" is not BIZ:ENTITY (e.g. 1:42)");
        assert_eq!(err("x:2"), "\"x\" is not a business id");
        assert_eq!(err(":2"), "\"\" is not a business id");
        assert_eq!(err("-1:2"), "\"-1\" is not a business id");
        assert_eq!(err("4294967296:2"), "\"4294967296\" is not a business id");
        assert_eq!(err("1:"), "\"\" is not an entity id");
        assert_eq!(err("1:-3"), "\"-3\" is not an entity id");
        assert_eq!(err("1:2:3"), "\"2:3\" is not an entity id");
        assert_eq!(err("1:x"), "\"x\" is not an entity id");
    }

    #[test]
    fn the_entities_json_has_the_documented_shape() {
        let v = serde_json::to_value(placements_json(&placements())).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"epoch":2,
                "placed":[{"biz":1,"entity":42,"shard":3},{"biz":1,"entity":1000,"shard":0}],
                "moves":[{"biz":1,"entity":43,"from":1,"to":2,"step":"copy"}]})
        );
        assert_eq!(
            json::encode(&placements_json(&EntityPlacements::default())),
            r#"{"epoch":0,"placed":[],"moves":[]}"#
        );
        assert_eq!(
            moved_json(1, 42, 3, Some(Duration::from_millis(84))),
            r#"{"biz":1,"entity":42,"to_shard":3,"ms":84}"#
        );
        assert_eq!(moved_json(1, 42, 3, None), r#"{"biz":1,"entity":42,"to_shard":3,"ms":null}"#);
    }

    #[test]
    fn people_get_the_placed_entities_then_the_moves() {
        let want = "\
entity placements epoch 2

ENTITY  SHARD
1:42        3
1:1000      0

MOVE  FROM  TO  STEP
1:43     1   2  copy
";
        assert_eq!(placements_human(&placements()), want);
        assert_eq!(
            placements_human(&EntityPlacements::default()),
            "entity placements epoch 0\n\nevery entity is on its hash shard\n"
        );
        let only_moving = EntityPlacements { epoch: 1, placed: vec![], ..placements() };
        let want = "\
entity placements epoch 1

every entity is on its hash shard

MOVE  FROM  TO  STEP
1:43     1   2  copy
";
        assert_eq!(placements_human(&only_moving), want);
    }

    #[test]
    fn people_are_told_how_long_an_entity_move_took_or_where_to_watch_it() {
        assert_eq!(
            moved_human(1, 42, 3, Some(Duration::from_millis(84))),
            "moved entity 1:42 to shard 3 in 84 ms\n"
        );
        assert_eq!(
            moved_human(1, 42, 3, None),
            "moving entity 1:42 to shard 3 (admin placements shows its steps)\n"
        );
    }

    #[test]
    fn entity_moves_and_placements_render_for_scripts_and_people() {
        use super::super::render;
        let o = moved(&EntityName { biz: 1, entity: 42 }, 3, None);
        let json = render(true, &Ok(o.clone())).stdout;
        assert_eq!(json, "{\"biz\":1,\"entity\":42,\"to_shard\":3,\"ms\":null}\n");
        let human = render(false, &Ok(o)).stdout;
        assert_eq!(human, "moving entity 1:42 to shard 3 (admin placements shows its steps)\n");
        let p = Output::Placements { boards: Box::default(), entities: Box::new(placements()) };
        let v: serde_json::Value =
            serde_json::from_str(&render(true, &Ok(p.clone())).stdout).unwrap();
        assert_eq!(v["placed"], serde_json::json!([]));
        assert_eq!(v["entities"]["placed"][0], serde_json::json!({"biz":1,"entity":42,"shard":3}));
        let human = render(false, &Ok(p)).stdout;
        assert!(human.starts_with("placements epoch 0\n\nevery board is on its hash shard\n\n"));
        assert!(human.ends_with("MOVE  FROM  TO  STEP\n1:43     1   2  copy\n"), "{human}");
    }

    #[test]
    fn an_entity_move_is_over_when_it_is_gone_and_the_entity_is_on_its_target() {
        let e = key(1, 43);
        let p = placements();
        assert_eq!(move_left(&p, &e, 2, 6).as_deref(), Some("is still at step copy"));
        // A node that has not applied the move yet: not over.
        let home = shard_of(1, 43, 6);
        let away = (home + 1) % 6;
        let before = EntityPlacements::default();
        let left = move_left(&before, &e, away, 6).unwrap();
        assert_eq!(left, format!("is not under way, and the entity is on shard {home}"));
        assert_eq!(move_left(&before, &e, away, 0), None, "shard count unknown");
        let after = EntityPlacements { epoch: 9, placed: vec![(e, away)], moves: vec![] };
        assert_eq!(move_left(&after, &e, away, 6), None);
        // Another entity's placement says nothing about this one.
        let other = EntityPlacements { epoch: 9, placed: vec![(key(1, 44), away)], moves: vec![] };
        assert!(move_left(&other, &e, away, 6).is_some());
    }
}
