//! `plaudit admin move --board` and `plaudit admin placements`: moving one
//! sub-board to another shard, and the boards that live off their hash
//! shard with the moves under way (`proto::placement`). Entities' moves
//! and placements are `entity_placement.rs`; `admin placements` shows
//! both.
//!
//! `admin move --board RANK:TYPE_ID --to-shard S` sends `MoveBoard`, which
//! is answered once the move is recorded, then (unless `--no-wait`) reads
//! the placements every 50 ms until the move is gone and the board lives on
//! `S`, for at most 30 s. `--json` prints
//!
//! ```text
//! {"rank":7,"board":"total:0","to_shard":3,"ms":84}          ("ms":null with --no-wait)
//! {"epoch":5,"placed":[{"rank":7,"board":"total:0","shard":3}],
//!  "moves":[{"rank":9,"board":"day:1713052800","from":1,"to":2,"step":"copy"}],
//!  "entities":{"epoch":2,"placed":[{"biz":1,"entity":42,"shard":3}],
//!   "moves":[{"biz":1,"entity":43,"from":1,"to":2,"step":"copy"}]}}
//! ```
//!
//! (`admin move --json` for the first; `admin placements --json` for the
//! second, whose `epoch`, `placed` and `moves` are the boards' and
//! `entities` the entities', `EntityPlacements`, with their own epoch.)
//!
//! A type id is printed as `TypeId::format` spells it, or as the hex of
//! its binary key if that key is none a type id could have.

use super::entity_placement::{self, EntityPlacementsJson};
use super::human::{table, Align};
use super::json;
use super::Output;
use crate::{Client, ClientError};
use plaudit_proto::ids::ShardId;
use plaudit_proto::placement::{
    BoardKey, BoardMove, EntityPlacements, MoveBoard, Placements, PlacementsOf,
};
use plaudit_proto::rankings::RankId;
use plaudit_proto::window::TypeId;
use plaudit_proto::{Request, Response, WireError};
use serde::Serialize;
use std::fmt::Write;
use std::time::{Duration, Instant};

/// How long `admin move` waits for the move to end.
pub const MOVE_WAIT: Duration = Duration::from_secs(30);
/// How often it looks meanwhile.
pub const MOVE_POLL: Duration = Duration::from_millis(50);

/// A sub-board as `--board` names it: `RANK:TYPE_ID`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BoardName {
    pub rank: RankId,
    pub type_id: TypeId,
}

impl BoardName {
    /// The key placements are recorded under.
    pub fn key(&self) -> BoardKey {
        BoardKey { rank: self.rank, type_key: self.type_id.to_key() }
    }
}

impl std::fmt::Display for BoardName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.rank, self.type_id)
    }
}

/// `--board`: split at the first `:` (type ids have colons of their own).
/// The type id must be canonical, as queries name it.
pub fn parse_board(s: &str) -> Result<BoardName, String> {
    let (rank, type_id) =
        s.split_once(':').ok_or_else(|| format!("{s:?} is not RANK:TYPE_ID (e.g. 7:total:0)"))?;
    let rank = rank.parse::<RankId>().map_err(|_| format!("{rank:?} is not a ranking id"))?;
    let type_id = TypeId::parse(type_id).ok_or_else(|| {
        format!("{type_id:?} is not a type id (e.g. total:0, day:1713052800_110000260)")
    })?;
    Ok(BoardName { rank, type_id })
}

/// Sends `MoveBoard`: returns once the move is recorded.
pub async fn move_board(
    client: &Client,
    board: &BoardName,
    to_shard: ShardId,
) -> Result<(), ClientError> {
    let req =
        Request::MoveBoard(MoveBoard { rank: board.rank, board: board.type_id.format(), to_shard });
    match client.request(req).await? {
        Response::Done => Ok(()),
        other => Err(crate::api::unexpected("move_board", &other)),
    }
}

/// The placements, as the answering node knows them.
pub async fn placements(client: &Client) -> Result<Placements, ClientError> {
    match client.request(Request::Placements).await? {
        Response::Placements(p) => Ok(*p),
        other => Err(crate::api::unexpected("placements", &other)),
    }
}

/// Where the move of `board` to `to` stands in `p`: `None` once it is over
/// (no move of the board under way and, when the shard count is known, the
/// board on `to`: a node that has not applied the move yet shows neither),
/// else what it is waiting for.
pub fn move_left(p: &Placements, board: &BoardKey, to: ShardId, shards: u32) -> Option<String> {
    if let Some(m) = p.move_of(board) {
        return Some(format!("is still at step {}", m.step.as_str()));
    }
    if shards == 0 {
        return None;
    }
    match p.shard_of(board.rank, &board.type_key, shards) {
        s if s == to => None,
        s => Some(format!("is not under way, and the board is on shard {s}")),
    }
}

/// `admin move` without `--no-wait`: waits until the move is over;
/// `started` is when the move was asked for.
pub async fn watch_move(
    client: &Client,
    board: &BoardName,
    to_shard: ShardId,
    started: Instant,
) -> Result<Output, ClientError> {
    let key = board.key();
    let shards = client.routing_table().map.shards.len() as u32;
    let what = format!("board {board} to shard {to_shard}");
    wait_move_over(&what, started, || async {
        Ok(move_left(&placements(client).await?, &key, to_shard, shards))
    })
    .await?;
    Ok(moved(board, to_shard, Some(started.elapsed())))
}

/// Looks every `MOVE_POLL` until `left` says nothing is left of the move
/// of `what` (a board's or an entity's), for at most `MOVE_WAIT` from
/// `started`; then a timeout that says what it was waiting for.
pub async fn wait_move_over<F, Fut>(
    what: &str,
    started: Instant,
    mut left: F,
) -> Result<(), ClientError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<Option<String>, ClientError>>,
{
    loop {
        let Some(left) = left().await? else { return Ok(()) };
        if started.elapsed() >= MOVE_WAIT {
            return Err(ClientError::Server(WireError::timeout(format!(
                "the move of {what} {left} after {} s (admin placements shows it)",
                MOVE_WAIT.as_secs()
            ))));
        }
        tokio::time::sleep(MOVE_POLL).await;
    }
}

/// `Output::Moved` for `board`.
pub fn moved(board: &BoardName, to_shard: ShardId, took: Option<Duration>) -> Output {
    Output::Moved { rank: board.rank, board: board.type_id.format(), to_shard, took }
}

/// A binary type key as its type id, or as hex.
pub fn type_name(key: &[u8]) -> String {
    match TypeId::from_key(key) {
        Some(t) => t.format(),
        None => key.iter().fold(String::with_capacity(2 * key.len()), |mut s, b| {
            // Writing to a String cannot fail.
            let _ = write!(s, "{b:02x}");
            s
        }),
    }
}

#[derive(Serialize)]
struct MovedJson<'a> {
    rank: RankId,
    board: &'a str,
    to_shard: ShardId,
    ms: Option<u64>,
}

/// `admin move --json`.
pub fn moved_json(rank: RankId, board: &str, to_shard: ShardId, took: Option<Duration>) -> String {
    let ms = took.map(|d| d.as_millis() as u64);
    json::encode(&MovedJson { rank, board, to_shard, ms })
}

/// `admin move`, for people.
pub fn moved_human(rank: RankId, board: &str, to_shard: ShardId, took: Option<Duration>) -> String {
    match took {
        Some(d) => {
            format!("moved board {rank}:{board} to shard {to_shard} in {} ms\n", d.as_millis())
        }
        None => format!(
            "moving board {rank}:{board} to shard {to_shard} (admin placements shows its steps)\n"
        ),
    }
}

#[derive(Serialize)]
struct PlacementsJson {
    epoch: u64,
    placed: Vec<PlacedJson>,
    moves: Vec<MoveJson>,
    entities: EntityPlacementsJson,
}

#[derive(Serialize)]
struct PlacedJson {
    rank: RankId,
    board: String,
    shard: ShardId,
}

#[derive(Serialize)]
struct MoveJson {
    rank: RankId,
    board: String,
    from: ShardId,
    to: ShardId,
    step: &'static str,
}

fn move_json(m: &BoardMove) -> MoveJson {
    MoveJson {
        rank: m.key.rank,
        board: type_name(&m.key.type_key),
        from: m.from,
        to: m.to,
        step: m.step.as_str(),
    }
}

/// `admin placements --json`: the boards' placements, with the entities'
/// as `entities`.
pub fn placements_json(p: &Placements, entities: &EntityPlacements) -> String {
    json::encode(&PlacementsJson {
        epoch: p.epoch,
        placed: p
            .placed
            .iter()
            .map(|(b, shard)| PlacedJson {
                rank: b.rank,
                board: type_name(&b.type_key),
                shard: *shard,
            })
            .collect(),
        moves: p.moves.iter().map(move_json).collect(),
        entities: entity_placement::placements_json(entities),
    })
}

/// `admin placements`, for people: the boards' part, then the entities'
/// (`entity_placement::placements_human`).
pub fn placements_human(p: &Placements, entities: &EntityPlacements) -> String {
    boards_human(p) + "\n" + &entity_placement::placements_human(entities)
}

/// The boards' part of `admin placements`, for people: the epoch, the
/// boards off their hash shard, then the moves under way (if any).
fn boards_human(p: &Placements) -> String {
    let name = |b: &BoardKey| format!("{}:{}", b.rank, type_name(&b.type_key));
    placements_table(p, ("placements", "BOARD", "every board"), name)
}

/// One kind's placements for people: `(title, key column, "every …")`
/// name the kind, `name` a key.
pub fn placements_table<K>(
    p: &PlacementsOf<K>,
    (title, column, every): (&str, &str, &str),
    name: impl Fn(&K) -> String,
) -> String {
    let mut out = format!("{title} epoch {}\n\n", p.epoch);
    if p.placed.is_empty() {
        out += &format!("{every} is on its hash shard\n");
    } else {
        let rows: Vec<Vec<String>> =
            p.placed.iter().map(|(k, s)| vec![name(k), s.to_string()]).collect();
        out += &table(&[(column, Align::Left), ("SHARD", Align::Right)], &rows);
    }
    if !p.moves.is_empty() {
        let rows: Vec<Vec<String>> = p
            .moves
            .iter()
            .map(|m| {
                vec![name(&m.key), m.from.to_string(), m.to.to_string(), m.step.as_str().into()]
            })
            .collect();
        out.push('\n');
        out += &table(
            &[
                ("MOVE", Align::Left),
                ("FROM", Align::Right),
                ("TO", Align::Right),
                ("STEP", Align::Left),
            ],
            &rows,
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use plaudit_proto::placement::{EntityKey, EntityMove, MoveStep};
    use plaudit_proto::routing::board_shard;

    fn key(s: &str) -> BoardKey {
        parse_board(s).unwrap().key()
    }

    fn placements() -> Placements {
        Placements {
            epoch: 5,
            placed: vec![(key("7:total:0"), 3)],
            moves: vec![BoardMove {
                id: 4,
                key: key("9:day:1713052800_42"),
                from: 1,
                to: 2,
                step: MoveStep::Copy,
                started_ms: 1,
            }],
        }
    }

    #[test]
    fn a_board_splits_at_the_first_colon() {
        let b = parse_board("7:day:1713052800_110000260").unwrap();
        assert_eq!(b.rank, 7);
        assert_eq!(b.type_id.format(), "day:1713052800_110000260");
        assert_eq!(b.to_string(), "7:day:1713052800_110000260");
        assert_eq!(b.key().type_key, b.type_id.to_key());
        for bad in ["total:0", "x:total:0", "7", "7:", "7:total", "7:day:01", "-1:total:0"] {
            assert!(parse_board(bad).is_err(), "{bad}");
        }
    }

    fn entities() -> EntityPlacements {
        let key = |entity| EntityKey { biz: 1, entity };
        EntityPlacements {
            epoch: 2,
            placed: vec![(key(42), 3)],
            moves: vec![EntityMove {
                id: 4,
                key: key(43),
                from: 1,
                to: 2,
                step: MoveStep::Copy,
                started_ms: 1,
            }],
        }
    }

    #[test]
    fn the_json_has_the_documented_shape() {
        let json = placements_json(&placements(), &entities());
        let v: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"epoch":5,
                "placed":[{"rank":7,"board":"total:0","shard":3}],
                "moves":[{"rank":9,"board":"day:1713052800_42","from":1,"to":2,"step":"copy"}],
                "entities":{"epoch":2,
                    "placed":[{"biz":1,"entity":42,"shard":3}],
                    "moves":[{"biz":1,"entity":43,"from":1,"to":2,"step":"copy"}]}})
        );
        assert_eq!(
            moved_json(7, "total:0", 3, Some(Duration::from_millis(84))),
            r#"{"rank":7,"board":"total:0","to_shard":3,"ms":84}"#
        );
        assert_eq!(
            moved_json(7, "total:0", 3, None),
            r#"{"rank":7,"board":"total:0","to_shard":3,"ms":null}"#
        );
    }

    /// How `placements()` reads for people, on its own or above entities.
    const BOARDS_HUMAN: &str = "\
placements epoch 5

BOARD      SHARD
7:total:0      3

MOVE                 FROM  TO  STEP
9:day:1713052800_42     1   2  copy
";

    #[test]
    fn people_get_the_placed_boards_then_the_moves() {
        assert_eq!(boards_human(&placements()), BOARDS_HUMAN);
        assert_eq!(
            boards_human(&Placements::default()),
            "placements epoch 0\n\nevery board is on its hash shard\n"
        );
        assert_eq!(
            moved_human(7, "total:0", 3, Some(Duration::from_millis(84))),
            "moved board 7:total:0 to shard 3 in 84 ms\n"
        );
    }

    #[test]
    fn the_entities_keep_the_json_fields_of_the_boards_and_follow_them_for_people() {
        let none = placements_json(&Placements::default(), &EntityPlacements::default());
        assert_eq!(
            none,
            r#"{"epoch":0,"placed":[],"moves":[],"entities":{"epoch":0,"placed":[],"moves":[]}}"#
        );
        let want = BOARDS_HUMAN.to_string()
            + "
entity placements epoch 2

ENTITY  SHARD
1:42        3

MOVE  FROM  TO  STEP
1:43     1   2  copy
";
        assert_eq!(placements_human(&placements(), &entities()), want);
        let want = "\
placements epoch 0

every board is on its hash shard

entity placements epoch 0

every entity is on its hash shard
";
        assert_eq!(placements_human(&Placements::default(), &EntityPlacements::default()), want);
    }

    #[test]
    fn a_key_that_is_no_type_id_prints_as_hex() {
        assert_eq!(type_name(&[0xff, 0x01]), "ff01");
        assert_eq!(type_name(&key("7:week:0").type_key), "week:0");
    }

    #[test]
    fn a_move_is_over_when_it_is_gone_and_the_board_is_on_its_target() {
        let b = key("9:day:1713052800_42");
        let p = placements();
        assert_eq!(move_left(&p, &b, 2, 6).as_deref(), Some("is still at step copy"));
        // A node that has not applied the move yet: not over.
        let home = board_shard(9, &b.type_key, 6);
        let away = (home + 1) % 6;
        let before = Placements::default();
        let left = move_left(&before, &b, away, 6).unwrap();
        assert_eq!(left, format!("is not under way, and the board is on shard {home}"));
        assert_eq!(move_left(&before, &b, away, 0), None, "shard count unknown");
        let after = Placements { epoch: 9, placed: vec![(b.clone(), away)], moves: vec![] };
        assert_eq!(move_left(&after, &b, away, 6), None);
        assert_eq!(move_left(&before, &b, home, 6), None, "moved back home");
    }
}
