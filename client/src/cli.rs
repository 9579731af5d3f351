//! The `plaudit` command line, built on the SDK. The binary only parses
//! arguments and prints; everything else is here, split so the parts that
//! decide what is printed are pure and unit-tested:
//!
//! ```text
//! args::Cli ─► run (connect, execute) ─► Result<Output, Failure> ─► render ─► json | human
//! ```
//!
//! - `args`: the clap definitions (their doc comments are `--help`);
//! - `json`: one JSON object per command, for scripts;
//! - `human`: aligned tables and sentences, for people;
//! - `rank`, `board`, `admin`, `token`: one command family each (flags,
//!   output); `hotkeys`, `members`, `placement` (boards) and
//!   `entity_placement` (entities) are `admin` commands' output and
//!   watching.
//!
//! `--addr` is a comma-separated seed list: the SDK finds the rest of the
//! cluster from any seed that answers, and routes each request itself.
//! `--token` (or `PLAUDIT_TOKEN`) goes into `ClientOptions::token`; it is
//! never printed, and only `token create` prints a token (the new one).

pub mod admin;
pub mod args;
pub mod board;
pub mod entity_placement;
pub mod hotkeys;
pub mod human;
pub mod json;
pub mod members;
pub mod placement;
pub mod rank;
pub mod token;

pub use args::Cli;

use crate::{Client, ClientError, ClientOptions};
use args::{ActArgs, BizCommand, Command};
use plaudit_proto::auth::{TokenInfo, TokenSecret};
use plaudit_proto::cluster::ClusterStatus;
use plaudit_proto::likes::{EntityCounts, EntityState, LikeReply, Page, ReceivedReply};
use plaudit_proto::rankings::RankDef;
use plaudit_proto::scoring::{BoardQuery, BoardsPage, RankedItem, ScoreReply};
use plaudit_proto::{BizConfig, Business, EntityId, LikeAction};
use std::time::{Duration, Instant};

/// Exit status when the cluster refused, failed or timed out the request.
pub const EXIT_FAILED: u8 = 1;
/// Exit status for bad usage (clap's own).
pub const EXIT_USAGE: u8 = 2;
/// Exit status when no node could be reached or the connection dropped.
pub const EXIT_UNAVAILABLE: u8 = 3;

/// What a command produced, before it is rendered.
#[derive(Debug, Clone, PartialEq)]
pub enum Output {
    Biz {
        verb: BizVerb,
        biz: Business,
    },
    BizList(Vec<Business>),
    Act {
        action: LikeAction,
        entity: EntityId,
        reply: LikeReply,
    },
    Status(Vec<EntityState>),
    Counts(Vec<EntityCounts>),
    UserLikes(Page),
    Likers(Page),
    Received(ReceivedReply),
    Pong {
        addr: String,
        rtt: Duration,
    },
    Rank {
        verb: BizVerb,
        def: RankDef,
        /// Its business; `None`: shared.
        owner: Option<plaudit_proto::BizId>,
    },
    RankList(Vec<RankDef>),
    /// `rank limit` and `rank usage`.
    BoardUsage(plaudit_proto::rankings::BoardUsage),
    Score(ScoreReply),
    /// Rows of one sub-board (`top`, `around`).
    Items {
        type_id: String,
        items: Vec<RankedItem>,
    },
    RankOf {
        item: u64,
        row: Option<RankedItem>,
    },
    Size(u64),
    Boards(BoardsPage),
    ClusterStatus(ClusterStatus),
    /// `token create`: the full token (its one showing) and its record.
    TokenCreated {
        token: TokenSecret,
        info: TokenInfo,
    },
    TokenRevoked(TokenInfo),
    TokenList(Vec<TokenInfo>),
    Nodes(Vec<plaudit_proto::membership::NodeRow>),
    HotKeys(Vec<plaudit_proto::hotkeys::HotKeyRow>),
    /// `admin drain`: the node, and whether it leads nothing now (known
    /// only with `--wait`).
    Drained {
        node: u64,
        done: bool,
    },
    /// `admin decommission`, `recommission`, `rebalance`: the change, and
    /// whether it is over (known only with `--wait`).
    Members {
        op: plaudit_proto::membership::MemberOp,
        done: bool,
    },
    /// `admin move --board`: the board (its type id), its new shard, and
    /// how long the move took (known only when waited for: not with
    /// `--no-wait`).
    Moved {
        rank: plaudit_proto::rankings::RankId,
        board: String,
        to_shard: u32,
        took: Option<Duration>,
    },
    /// `admin move --entity`: the entity, its new shard, and how long the
    /// move took (as for `Moved`).
    MovedEntity {
        biz: plaudit_proto::BizId,
        entity: EntityId,
        to_shard: u32,
        took: Option<Duration>,
    },
    /// `admin placements`: the boards' placements, then the entities'.
    Placements {
        boards: Box<plaudit_proto::placement::Placements>,
        entities: Box<plaudit_proto::placement::EntityPlacements>,
    },
}

/// Which registry command produced an `Output::Biz` or `Output::Rank`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BizVerb {
    Created,
    Shown,
    Updated,
}

/// A command that failed, ready to print.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// A stable wire code name (`NotFound`, ...), or `Unavailable` when the
    /// node could not be reached, or `Protocol` when its reply made no sense.
    pub code: &'static str,
    pub message: String,
    pub exit: u8,
}

impl Failure {
    /// A failure while talking to `addr` with the given per-call timeout.
    pub fn from_client(addr: &str, timeout: Duration, e: &ClientError) -> Failure {
        match e {
            ClientError::Server(w) => {
                let mut message = w.message.clone();
                if let Some(h) = &w.leader {
                    match h.leader {
                        Some(node) => {
                            message += &format!(" (shard {} is led by node {node})", h.shard)
                        }
                        None => message += &format!(" (shard {} has no known leader)", h.shard),
                    }
                }
                Failure { code: w.code.as_str(), message, exit: EXIT_FAILED }
            }
            ClientError::Timeout => Failure {
                code: "Timeout",
                message: format!("no reply from {addr} within {timeout:?}"),
                exit: EXIT_FAILED,
            },
            ClientError::Io(io) => {
                Failure { code: "Unavailable", message: io.to_string(), exit: EXIT_UNAVAILABLE }
            }
            ClientError::Closed => Failure {
                code: "Unavailable",
                message: format!("connection to {addr} closed before the reply arrived"),
                exit: EXIT_UNAVAILABLE,
            },
            ClientError::Protocol(m) => {
                Failure { code: "Protocol", message: m.clone(), exit: EXIT_FAILED }
            }
        }
    }

    /// A failure to open the connection at all. A node that answered and
    /// refused (`Overloaded` at its connection limit) was reached: its own
    /// code is reported, with exit status 1, not `Unavailable`.
    pub fn cannot_connect(addr: &str, e: &ClientError) -> Failure {
        if let ClientError::Server(w) = e {
            return Failure {
                code: w.code.as_str(),
                message: format!("{addr}: {}", w.message),
                exit: EXIT_FAILED,
            };
        }
        let message = match e {
            // Dial errors already say "cannot connect to <addr>: ...".
            ClientError::Io(io) => io.to_string(),
            other => format!("cannot connect to {addr}: {other}"),
        };
        Failure { code: "Unavailable", message, exit: EXIT_UNAVAILABLE }
    }

    /// A command line clap rejected, for `--json` callers.
    pub fn usage(e: &clap::Error) -> Failure {
        // clap's text is a paragraph (possibly over several lines: "required
        // arguments were not provided:\n  <ENTITY>...") then a usage block.
        let text = e.to_string();
        let para: Vec<&str> = text.lines().map(str::trim).take_while(|l| !l.is_empty()).collect();
        let joined = para.join(" ");
        let message = joined.strip_prefix("error: ").unwrap_or(&joined).to_string();
        Failure { code: "BadRequest", message, exit: EXIT_USAGE }
    }
}

/// What to print, and the exit status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rendered {
    pub stdout: String,
    pub stderr: String,
    pub exit: u8,
}

/// Turns a command's result into text: one JSON object on stdout with
/// `json`, else tables on stdout and errors on stderr.
pub fn render(json: bool, result: &Result<Output, Failure>) -> Rendered {
    let (stdout, stderr, exit) = match (json, result) {
        (true, Ok(o)) => (json::output(o) + "\n", String::new(), 0),
        (true, Err(f)) => (json::failure(f) + "\n", String::new(), f.exit),
        (false, Ok(o)) => (human::output(o), String::new(), 0),
        (false, Err(f)) => (String::new(), human::failure(f), f.exit),
    };
    Rendered { stdout, stderr, exit }
}

/// Connects through the seeds of `cli.addr` and runs the command.
pub async fn run(cli: &Cli) -> Result<Output, Failure> {
    let tls = match &cli.tls_ca {
        Some(path) => Some(
            crate::Tls::from_ca_file(path).map_err(|e| Failure::cannot_connect(&cli.addr, &e))?,
        ),
        None => None,
    };
    if let Command::Ping = cli.command {
        // A ping needs no token and no routing table (`crate::ping`).
        let timeout = ClientOptions::default().timeout;
        return match crate::ping_with(&cli.addr, timeout, tls.as_ref()).await {
            Ok((addr, rtt)) => Ok(Output::Pong { addr, rtt }),
            Err(e @ (ClientError::Io(_) | ClientError::Closed)) => {
                Err(Failure::cannot_connect(&cli.addr, &e))
            }
            Err(e) => Err(Failure::from_client(&cli.addr, timeout, &e)),
        };
    }
    // One command is at most two sequential requests: one connection is plenty.
    // An empty token (`PLAUDIT_TOKEN=`) counts as none.
    let token = cli.token.as_ref().map(|t| t.0.clone()).filter(|t| !t.is_empty());
    let opts = ClientOptions { pool_size: 1, token, tls, ..ClientOptions::default() };
    let client = Client::connect_with(&cli.addr, opts)
        .await
        .map_err(|e| Failure::cannot_connect(&cli.addr, &e))?;
    let failed = |e: ClientError| Failure::from_client(client.addr(), client.timeout(), &e);
    let started = Instant::now();
    let out = execute(&client, &cli.command).await.map_err(failed)?;
    match (&cli.command, out) {
        (
            Command::Admin(admin::AdminCommand::Move { board, entity, to_shard, no_wait: false }),
            out,
        ) => {
            let watched = match (board, entity) {
                (Some(b), _) => placement::watch_move(&client, b, *to_shard, started).await,
                (None, Some(e)) => {
                    entity_placement::watch_move(&client, e, *to_shard, started).await
                }
                (None, None) => Ok(out),
            };
            watched.map_err(failed)
        }
        (Command::Admin(admin::AdminCommand::Drain { node, wait: true }), _) => {
            watch_drain(&client, *node, cli.json).await.map_err(failed)
        }
        (Command::Admin(a), out) => match a.member_op() {
            Some((op, true)) => {
                members::watch(&client, op, cli.json).await.map_err(failed)?;
                Ok(Output::Members { op, done: true })
            }
            _ => Ok(out),
        },
        (_, out) => Ok(out),
    }
}

/// `admin drain --wait`: a line a second until `node` leads no group.
async fn watch_drain(client: &Client, node: u64, json: bool) -> Result<Output, ClientError> {
    let started = Instant::now();
    loop {
        let left = admin::leading(&client.cluster_status().await?, node);
        let line = admin::drain_progress(node, left, started.elapsed(), json);
        if json {
            println!("{line}");
        } else {
            eprintln!("{line}");
        }
        if left == 0 {
            return Ok(Output::Drained { node, done: true });
        }
        if started.elapsed() >= admin::DRAIN_WAIT {
            return Err(ClientError::Server(plaudit_proto::WireError::timeout(format!(
                "node {node} still leads {left} group(s) after {:?}",
                admin::DRAIN_WAIT
            ))));
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// Runs one command against a connected client.
pub async fn execute(client: &Client, cmd: &Command) -> Result<Output, ClientError> {
    Ok(match cmd {
        Command::Biz(b) => execute_biz(client, b).await?,
        Command::Rank(r) => execute_rank(client, r).await?,
        Command::Token(t) => execute_token(client, t).await?,
        Command::Admin(admin::AdminCommand::Status) => {
            Output::ClusterStatus(client.cluster_status().await?)
        }
        Command::Admin(admin::AdminCommand::Nodes) => Output::Nodes(client.nodes().await?),
        Command::Admin(admin::AdminCommand::Hotkeys { top, by }) => {
            Output::HotKeys(hotkeys::ranked(client.hot_keys(*top).await?, *by, *top))
        }
        Command::Admin(admin::AdminCommand::Drain { node, .. }) => {
            client.drain_node(*node).await?;
            Output::Drained { node: *node, done: false }
        }
        Command::Admin(
            a @ (admin::AdminCommand::Decommission { .. }
            | admin::AdminCommand::Recommission { .. }
            | admin::AdminCommand::Rebalance { .. }),
        ) => {
            let (op, _) = a.member_op().expect("a membership command");
            client.members(op).await?;
            Output::Members { op, done: false }
        }
        Command::Admin(admin::AdminCommand::Move { board: Some(board), to_shard, .. }) => {
            placement::move_board(client, board, *to_shard).await?;
            placement::moved(board, *to_shard, None)
        }
        Command::Admin(admin::AdminCommand::Move { entity: Some(entity), to_shard, .. }) => {
            entity_placement::move_entity(client, entity, *to_shard).await?;
            entity_placement::moved(entity, *to_shard, None)
        }
        Command::Admin(admin::AdminCommand::Move { .. }) => {
            // clap requires exactly one of the two.
            return Err(ClientError::Protocol("admin move needs --board or --entity".into()));
        }
        Command::Admin(admin::AdminCommand::Placements) => Output::Placements {
            boards: Box::new(placement::placements(client).await?),
            entities: Box::new(entity_placement::entity_placements(client).await?),
        },
        Command::Score(a) => Output::Score(client.score(a.request()).await?),
        Command::Top { rank, board, offset, limit } => {
            let q = BoardQuery::Top { offset: *offset, limit: *limit };
            board::items(client.query(*rank, board.to_ref(), q).await?)?
        }
        Command::RankOf { rank, board, item } => {
            board::rank_of(client, *rank, board, *item).await?
        }
        Command::Around { rank, board, item, k } => {
            let q = BoardQuery::Around { item: *item, k: *k };
            board::items(client.query(*rank, board.to_ref(), q).await?)?
        }
        Command::BoardSize { rank, board } => {
            Output::Size(client.board_size(*rank, board.to_ref()).await?)
        }
        Command::Boards { rank, limit, cursor } => {
            Output::Boards(client.boards(*rank, cursor.as_deref(), *limit).await?)
        }
        Command::Like(a) => act(client, LikeAction::Like, a).await?,
        Command::Unlike(a) => act(client, LikeAction::Unlike, a).await?,
        Command::Dislike(a) => act(client, LikeAction::Dislike, a).await?,
        Command::Undislike(a) => act(client, LikeAction::Undislike, a).await?,
        Command::Status { biz, user, entities } => {
            Output::Status(client.status(*biz, *user, entities).await?)
        }
        Command::Counts { biz, entities } => Output::Counts(client.counts(*biz, entities).await?),
        Command::UserLikes { biz, user, page } => Output::UserLikes(
            client.user_likes(*biz, *user, page.cursor.as_deref(), page.limit).await?,
        ),
        Command::Likers { biz, entity, page } => {
            Output::Likers(client.likers(*biz, *entity, page.cursor.as_deref(), page.limit).await?)
        }
        Command::Received { biz, user } => Output::Received(client.received(*biz, *user).await?),
        Command::Ping => {
            let start = Instant::now();
            client.ping().await?;
            Output::Pong { addr: client.addr().to_string(), rtt: start.elapsed() }
        }
    })
}

async fn act(client: &Client, action: LikeAction, a: &ActArgs) -> Result<Output, ClientError> {
    let reply = client.act(a.biz, a.entity, a.user, a.owner, action).await?;
    Ok(Output::Act { action, entity: a.entity, reply })
}

async fn execute_biz(client: &Client, cmd: &BizCommand) -> Result<Output, ClientError> {
    Ok(match cmd {
        BizCommand::Create { name, id, no_dislike, user_list_memory, liker_list_memory } => {
            let config = BizConfig {
                dislike_enabled: !no_dislike,
                user_list_memory: *user_list_memory,
                liker_list_memory: *liker_list_memory,
            };
            let biz = client.create_biz(*id, name, config).await?;
            Output::Biz { verb: BizVerb::Created, biz }
        }
        BizCommand::Get { id } => {
            Output::Biz { verb: BizVerb::Shown, biz: client.get_biz(*id).await? }
        }
        BizCommand::List => Output::BizList(client.list_biz().await?),
        BizCommand::Update { id, dislike, user_list_memory, liker_list_memory } => {
            let current = client.get_biz(*id).await?;
            let config =
                args::apply_update(current.config, *dislike, *user_list_memory, *liker_list_memory);
            let biz = client.update_biz(*id, config).await?;
            Output::Biz { verb: BizVerb::Updated, biz }
        }
    })
}

async fn execute_rank(client: &Client, cmd: &rank::RankCommand) -> Result<Output, ClientError> {
    use rank::RankCommand;
    Ok(match cmd {
        RankCommand::Create { .. } => {
            // `definition` is Some for every Create: it only destructures it.
            let def = rank::definition(cmd)
                .ok_or_else(|| ClientError::Protocol("rank create without a definition".into()))?;
            let owner = match cmd {
                RankCommand::Create { biz, .. } => *biz,
                _ => None,
            };
            // Without an owner, the request every node build knows.
            let info = match owner {
                Some(_) => client.create_rank_for(def, owner).await?,
                None => plaudit_proto::rankings::RankInfo {
                    def: client.create_rank(def).await?,
                    owner: None,
                },
            };
            Output::Rank { verb: BizVerb::Created, def: info.def, owner: info.owner }
        }
        RankCommand::Get { id } => {
            let info = client.get_rank_info(*id).await?;
            Output::Rank { verb: BizVerb::Shown, def: info.def, owner: info.owner }
        }
        RankCommand::List => Output::RankList(client.list_ranks().await?),
        RankCommand::Limit { id, max_boards, .. } => {
            Output::BoardUsage(client.set_board_limit(*id, *max_boards).await?)
        }
        RankCommand::Usage { id } => Output::BoardUsage(client.board_usage(*id).await?),
        RankCommand::Update { id, .. } => {
            let current = client.get_rank_info(*id).await?;
            let settings = rank::updated_settings(current.def.settings, cmd);
            let def = client.update_rank(*id, settings).await?;
            Output::Rank { verb: BizVerb::Updated, def, owner: current.owner }
        }
    })
}

async fn execute_token(client: &Client, cmd: &token::TokenCommand) -> Result<Output, ClientError> {
    use token::TokenCommand;
    Ok(match cmd {
        TokenCommand::Create { biz, ranks, read_only } => {
            let (token, info) = client.create_token(*biz, ranks, *read_only).await?;
            Output::TokenCreated { token: TokenSecret(token), info }
        }
        TokenCommand::List => Output::TokenList(client.list_tokens().await?),
        TokenCommand::Revoke { id } => Output::TokenRevoked(client.revoke_token(*id).await?),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;
    use plaudit_proto::error::LeaderHint;
    use plaudit_proto::{ErrorCode, WireError};

    const ADDR: &str = "127.0.0.1:7401";
    const T: Duration = Duration::from_secs(5);

    #[test]
    fn server_errors_exit_1_with_their_code() {
        let e = ClientError::Server(WireError::not_found("no business 9"));
        let f = Failure::from_client(ADDR, T, &e);
        assert_eq!((f.code, f.message.as_str(), f.exit), ("NotFound", "no business 9", 1));
    }

    #[test]
    fn not_leader_mentions_the_hint() {
        let mut w = WireError::new(ErrorCode::NotLeader, "not the leader");
        w.leader = Some(LeaderHint { shard: 4, leader: Some(2), epoch: 1 });
        let f = Failure::from_client(ADDR, T, &ClientError::Server(w));
        assert_eq!(f.message, "not the leader (shard 4 is led by node 2)");
    }

    #[test]
    fn connection_failures_are_unavailable_and_exit_3() {
        let io = std::io::Error::new(
            std::io::ErrorKind::ConnectionRefused,
            "cannot connect to 127.0.0.1:7401: Connection refused",
        );
        let f = Failure::cannot_connect(ADDR, &ClientError::Io(io));
        assert_eq!(f.code, "Unavailable");
        assert_eq!(f.message, "cannot connect to 127.0.0.1:7401: Connection refused");
        assert_eq!(f.exit, EXIT_UNAVAILABLE);
        let f = Failure::from_client(ADDR, T, &ClientError::Closed);
        assert_eq!((f.code, f.exit), ("Unavailable", EXIT_UNAVAILABLE));
    }

    #[test]
    fn a_node_refusing_the_connection_is_reported_with_its_own_code() {
        let e = ClientError::Server(WireError::overloaded("the node is at its connection limit"));
        let f = Failure::cannot_connect(ADDR, &e);
        assert_eq!((f.code, f.exit), ("Overloaded", EXIT_FAILED));
        assert_eq!(f.message, "127.0.0.1:7401: the node is at its connection limit");
    }

    #[test]
    fn a_refused_token_exits_1_with_code_unauthorized() {
        let e = ClientError::Server(WireError::unauthorized("the node refused the token: revoked"));
        let f = Failure::cannot_connect(ADDR, &e);
        assert_eq!((f.code, f.exit), ("Unauthorized", EXIT_FAILED));
        assert_eq!(f.message, "127.0.0.1:7401: the node refused the token: revoked");
    }

    #[test]
    fn a_new_tokens_debug_form_hides_it() {
        let o = Output::TokenCreated {
            token: TokenSecret("plt_1_very-secret".into()),
            info: TokenInfo {
                id: 1,
                biz: 2,
                ranks: vec![],
                read_only: false,
                created_ms: 1,
                revoked_ms: None,
            },
        };
        assert!(!format!("{o:?}").contains("very-secret"));
        assert!(render(false, &Ok(o)).stdout.starts_with("plt_1_very-secret\n"));
    }

    #[test]
    fn timeouts_exit_1_with_code_timeout() {
        let f = Failure::from_client(ADDR, T, &ClientError::Timeout);
        assert_eq!((f.code, f.exit), ("Timeout", EXIT_FAILED));
        assert_eq!(f.message, "no reply from 127.0.0.1:7401 within 5s");
    }

    #[test]
    fn json_mode_prints_everything_on_stdout() {
        let f = Failure { code: "NotFound", message: "no business 9".into(), exit: 1 };
        let r = render(true, &Err(f.clone()));
        assert_eq!(r.stdout, "{\"error\":{\"code\":\"NotFound\",\"message\":\"no business 9\"}}\n");
        assert_eq!((r.stderr.as_str(), r.exit), ("", 1));
        let r = render(false, &Err(f));
        assert_eq!(
            (r.stdout.as_str(), r.stderr.as_str()),
            ("", "error: NotFound: no business 9\n")
        );
    }

    #[test]
    fn usage_errors_become_one_line_bad_requests() {
        let e = Cli::try_parse_from(["plaudit", "counts"]).unwrap_err();
        let f = Failure::usage(&e);
        assert_eq!((f.code, f.exit), ("BadRequest", EXIT_USAGE));
        assert_eq!(
            f.message,
            "the following required arguments were not provided: --biz <BIZ> <ENTITY>..."
        );
        assert!(!f.message.starts_with("error:"));
    }
}
