//! The command line, as clap derive types. Doc comments here are the
//! `--help` text.

use clap::{ArgGroup, Args, Parser, Subcommand};
use plaudit_proto::auth::TokenSecret;
use plaudit_proto::{BizConfig, BizId, EntityId, LikeAction, UserId};

/// Default seed address when neither `--addr` nor `PLAUDIT_ADDR` is set.
pub const DEFAULT_ADDR: &str = "127.0.0.1:7401";
/// Default page size of `user-likes` and `likers`.
pub const DEFAULT_LIMIT: u32 = 20;

/// Talk to a Plaudit cluster: manage businesses and rankings, like things,
/// score events, read counts, lists and leaderboards, see the cluster's state.
#[derive(Debug, Parser)]
#[command(
    name = "plaudit",
    version,
    after_help = "Any node of a cluster will do as --addr: the rest are found from it, \
                  and each request goes to the node that serves it.\n\
                  Exit status: 0 success, 1 the cluster refused or failed the request \
                  (or timed out), 2 bad usage, 3 no node could be reached.\n\
                  With --json, stdout holds exactly one JSON object, \
                  {\"error\":{\"code\":..,\"message\":..}} on failure."
)]
pub struct Cli {
    /// Seed node addresses, HOST:PORT, comma separated; one live seed is enough.
    #[arg(long, global = true, env = "PLAUDIT_ADDR", default_value = DEFAULT_ADDR, value_name = "HOST:PORT,..")]
    pub addr: String,
    /// Print exactly one JSON object on stdout instead of tables and sentences.
    #[arg(long, global = true)]
    pub json: bool,
    /// The admin token, or a business token (plt_N_...), sent on every
    /// connection; not needed for an open node. Prefer PLAUDIT_TOKEN: a flag
    /// shows in the process list.
    // `hide_env_values`: `--help` must not print the token it found.
    #[arg(long, global = true, env = "PLAUDIT_TOKEN", hide_env_values = true, value_name = "TOKEN", value_parser = parse_token)]
    pub token: Option<TokenSecret>,
    /// Speak TLS to the nodes and trust the CA certificates in this PEM
    /// file (for nodes with tls_cert_file).
    #[arg(long, global = true, env = "PLAUDIT_TLS_CA", value_name = "FILE")]
    pub tls_ca: Option<std::path::PathBuf>,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Manage businesses (tenants): create, get, list, update.
    #[command(subcommand)]
    Biz(BizCommand),
    /// Manage ranking definitions: create, get, list, update.
    #[command(subcommand)]
    Rank(super::rank::RankCommand),
    /// Operate the cluster: status, nodes, hotkeys, drain, decommission,
    /// recommission, rebalance, move (a sub-board or an entity), placements.
    #[command(subcommand)]
    Admin(super::admin::AdminCommand),
    /// Manage business tokens: create, list, revoke (needs the admin token).
    #[command(subcommand)]
    Token(super::token::TokenCommand),
    /// Like an entity as a user.
    Like(ActArgs),
    /// Withdraw a user's like of an entity.
    Unlike(ActArgs),
    /// Dislike an entity as a user (the business must allow dislikes).
    Dislike(ActArgs),
    /// Withdraw a user's dislike of an entity.
    Undislike(ActArgs),
    /// Show a user's state (none, like, dislike) on one or more entities.
    Status {
        /// Business id.
        #[arg(long)]
        biz: BizId,
        /// User id.
        #[arg(long)]
        user: UserId,
        /// Entity ids (up to 500).
        #[arg(required = true, value_name = "ENTITY")]
        entities: Vec<EntityId>,
    },
    /// Show like and dislike counts of one or more entities.
    Counts {
        /// Business id.
        #[arg(long)]
        biz: BizId,
        /// Entity ids (up to 500).
        #[arg(required = true, value_name = "ENTITY")]
        entities: Vec<EntityId>,
    },
    /// List the entities a user likes, newest first, one page at a time.
    UserLikes {
        /// Business id.
        #[arg(long)]
        biz: BizId,
        /// User id.
        #[arg(long)]
        user: UserId,
        #[command(flatten)]
        page: PageArgs,
    },
    /// List the users who like an entity, newest first, one page at a time.
    Likers {
        /// Business id.
        #[arg(long)]
        biz: BizId,
        /// Entity id.
        #[arg(long)]
        entity: EntityId,
        #[command(flatten)]
        page: PageArgs,
    },
    /// Show the total likes on every entity a user owns.
    Received {
        /// Business id.
        #[arg(long)]
        biz: BizId,
        /// User id (the owner).
        #[arg(long)]
        user: UserId,
    },
    /// Check that the cluster answers (any one node).
    Ping,
    /// Score one event on every sub-board of its ranking it lands on.
    Score(super::board::ScoreArgs),
    /// Show the top of a sub-board.
    Top {
        /// Ranking id.
        #[arg(long)]
        rank: u32,
        #[command(flatten)]
        board: super::board::BoardArgs,
        /// Rows to skip.
        #[arg(long, default_value_t = 0)]
        offset: u32,
        /// Rows to show (1 to 1000).
        #[arg(long, default_value_t = 10)]
        limit: u32,
    },
    /// Show a member's rank and score on a sub-board.
    RankOf {
        /// Ranking id.
        #[arg(long)]
        rank: u32,
        #[command(flatten)]
        board: super::board::BoardArgs,
        /// Member id.
        #[arg(long)]
        item: u64,
    },
    /// Show the members ranked around a member.
    Around {
        /// Ranking id.
        #[arg(long)]
        rank: u32,
        #[command(flatten)]
        board: super::board::BoardArgs,
        /// Member id.
        #[arg(long)]
        item: u64,
        /// Rows above and below (at most 100).
        #[arg(long, default_value_t = 5)]
        k: u32,
    },
    /// Show how many members a sub-board has.
    BoardSize {
        /// Ranking id.
        #[arg(long)]
        rank: u32,
        #[command(flatten)]
        board: super::board::BoardArgs,
    },
    /// List the sub-boards of a ranking, one page at a time.
    Boards {
        /// Ranking id.
        #[arg(long)]
        rank: u32,
        /// Boards per page (1 to 1000).
        #[arg(long, default_value_t = 100)]
        limit: u32,
        /// Continue after a previous page: the `next` cursor it printed.
        #[arg(long, value_name = "C")]
        cursor: Option<String>,
    },
}

#[derive(Debug, Subcommand)]
pub enum BizCommand {
    /// Register a new business.
    Create {
        /// Display name (1 to 64 bytes).
        #[arg(long)]
        name: String,
        /// Business id to use; by default the node assigns the next free id.
        #[arg(long)]
        id: Option<BizId>,
        /// Refuse dislike and undislike in this business.
        #[arg(long)]
        no_dislike: bool,
        /// Recent likes kept in memory per active user.
        #[arg(long, value_name = "N", default_value_t = BizConfig::default().user_list_memory)]
        user_list_memory: u32,
        /// Recent likers kept in memory per active entity.
        #[arg(long, value_name = "N", default_value_t = BizConfig::default().liker_list_memory)]
        liker_list_memory: u32,
    },
    /// Show one business.
    Get {
        /// Business id.
        id: BizId,
    },
    /// List all businesses (read page by page, however many there are).
    List,
    /// Change some of a business's settings; the others keep their values.
    #[command(group(
        ArgGroup::new("change")
            .required(true)
            .multiple(true)
            .args(["dislike", "user_list_memory", "liker_list_memory"])
    ))]
    Update {
        /// Business id.
        id: BizId,
        /// Whether dislike and undislike are accepted.
        #[arg(long, value_name = "true|false")]
        dislike: Option<bool>,
        /// Recent likes kept in memory per active user.
        #[arg(long, value_name = "N")]
        user_list_memory: Option<u32>,
        /// Recent likers kept in memory per active entity.
        #[arg(long, value_name = "N")]
        liker_list_memory: Option<u32>,
    },
}

/// Who does what to which entity.
#[derive(Debug, Args)]
pub struct ActArgs {
    /// Business id.
    #[arg(long)]
    pub biz: BizId,
    /// Entity id.
    #[arg(long)]
    pub entity: EntityId,
    /// The acting user's id.
    #[arg(long)]
    pub user: UserId,
    /// The entity's author, credited in `received` totals.
    #[arg(long)]
    pub owner: Option<UserId>,
}

/// Paging of list commands.
#[derive(Debug, Args)]
pub struct PageArgs {
    /// Items per page (1 to 100).
    #[arg(long, value_name = "N", default_value_t = DEFAULT_LIMIT)]
    pub limit: u32,
    /// Continue after a previous page: the `next` cursor it printed.
    #[arg(long, value_name = "C")]
    pub cursor: Option<String>,
}

/// Keeps the token in a `TokenSecret`, whose `Debug` hides it (`Cli` is
/// `Debug`). Any text is taken: the node is the judge of tokens.
fn parse_token(s: &str) -> Result<TokenSecret, String> {
    Ok(TokenSecret(s.to_string()))
}

impl Command {
    /// The like action of `like`/`unlike`/`dislike`/`undislike`.
    pub fn action(&self) -> Option<(LikeAction, &ActArgs)> {
        match self {
            Command::Like(a) => Some((LikeAction::Like, a)),
            Command::Unlike(a) => Some((LikeAction::Unlike, a)),
            Command::Dislike(a) => Some((LikeAction::Dislike, a)),
            Command::Undislike(a) => Some((LikeAction::Undislike, a)),
            _ => None,
        }
    }
}

/// Applies the fields `biz update` was given to the current config.
pub fn apply_update(
    mut config: BizConfig,
    dislike: Option<bool>,
    user_list_memory: Option<u32>,
    liker_list_memory: Option<u32>,
) -> BizConfig {
    if let Some(d) = dislike {
        config.dislike_enabled = d;
    }
    if let Some(n) = user_list_memory {
        config.user_list_memory = n;
    }
    if let Some(n) = liker_list_memory {
        config.liker_list_memory = n;
    }
    config
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("plaudit").chain(args.iter().copied()))
    }

    #[test]
    fn the_command_line_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn like_takes_biz_entity_user_and_optional_owner() {
        let cli = parse(&["--json", "like", "--biz", "1", "--entity", "7", "--user", "3"]).unwrap();
        assert!(cli.json);
        let (action, a) = cli.command.action().unwrap();
        assert_eq!(action, LikeAction::Like);
        assert_eq!((a.biz, a.entity, a.user, a.owner), (1, 7, 3, None));
        let cli =
            parse(&["undislike", "--biz", "1", "--entity", "7", "--user", "3", "--owner", "9"])
                .unwrap();
        assert_eq!(cli.command.action().unwrap().0, LikeAction::Undislike);
        assert_eq!(cli.command.action().unwrap().1.owner, Some(9));
    }

    #[test]
    fn global_flags_work_after_the_subcommand() {
        let cli = parse(&["ping", "--addr", "10.0.0.1:9", "--json"]).unwrap();
        assert_eq!(cli.addr, "10.0.0.1:9");
        assert!(cli.json);
    }

    #[test]
    fn addr_takes_a_seed_list_and_admin_status_its_json_flag() {
        let cli = parse(&["--addr", "10.0.0.1:9,10.0.0.2:9", "admin", "status", "--json"]).unwrap();
        assert_eq!(cli.addr, "10.0.0.1:9,10.0.0.2:9");
        assert!(cli.json);
        assert!(matches!(cli.command, Command::Admin(super::super::admin::AdminCommand::Status)));
    }

    #[test]
    fn status_and_counts_need_at_least_one_entity() {
        assert!(parse(&["status", "--biz", "1", "--user", "2"]).is_err());
        assert!(parse(&["counts", "--biz", "1"]).is_err());
        match parse(&["counts", "--biz", "1", "4", "5"]).unwrap().command {
            Command::Counts { entities, .. } => assert_eq!(entities, vec![4, 5]),
            other => panic!("parsed as {other:?}"),
        }
    }

    #[test]
    fn biz_create_defaults_match_the_proto_defaults() {
        match parse(&["biz", "create", "--name", "video"]).unwrap().command {
            Command::Biz(BizCommand::Create {
                name,
                id,
                no_dislike,
                user_list_memory,
                liker_list_memory,
            }) => {
                assert_eq!((name.as_str(), id, no_dislike), ("video", None, false));
                let d = BizConfig::default();
                assert_eq!(
                    (user_list_memory, liker_list_memory),
                    (d.user_list_memory, d.liker_list_memory)
                );
            }
            other => panic!("parsed as {other:?}"),
        }
    }

    #[test]
    fn biz_update_needs_a_change_and_parses_booleans() {
        assert!(parse(&["biz", "update", "3"]).is_err());
        assert!(parse(&["biz", "update", "3", "--dislike", "maybe"]).is_err());
        match parse(&["biz", "update", "3", "--dislike", "false"]).unwrap().command {
            Command::Biz(BizCommand::Update { id, dislike, .. }) => {
                assert_eq!((id, dislike), (3, Some(false)))
            }
            other => panic!("parsed as {other:?}"),
        }
    }

    #[test]
    fn update_changes_only_the_given_fields() {
        let base = BizConfig { dislike_enabled: true, user_list_memory: 5, liker_list_memory: 6 };
        let c = apply_update(base.clone(), Some(false), None, Some(60));
        assert_eq!(
            c,
            BizConfig { dislike_enabled: false, user_list_memory: 5, liker_list_memory: 60 }
        );
        assert_eq!(apply_update(base.clone(), None, None, None), base);
    }

    #[test]
    fn the_token_is_a_global_flag_that_never_debug_prints() {
        let cli = parse(&["token", "list", "--token", "plt_1_secret-part"]).unwrap();
        assert_eq!(cli.token, Some(TokenSecret("plt_1_secret-part".into())));
        assert!(!format!("{cli:?}").contains("secret-part"));
        let cli = parse(&["--token", "admin-token-xyz", "ping"]).unwrap();
        assert_eq!(cli.token.map(|t| t.0), Some("admin-token-xyz".into()));
    }

    #[test]
    fn help_names_the_token_variable_but_never_its_value() {
        let cmd = Cli::command();
        let token = cmd.get_arguments().find(|a| a.get_id() == "token").unwrap();
        assert_eq!(token.get_env(), Some(std::ffi::OsStr::new("PLAUDIT_TOKEN")));
        assert!(token.is_hide_env_values_set());
    }

    #[test]
    fn token_create_takes_a_biz_repeated_ranks_and_read_only() {
        use super::super::token::TokenCommand;
        let cli = parse(&["token", "create", "--biz", "3", "--rank", "7", "--rank", "9"]).unwrap();
        match cli.command {
            Command::Token(TokenCommand::Create { biz, ranks, read_only }) => {
                assert_eq!((biz, ranks, read_only), (3, vec![7, 9], false))
            }
            other => panic!("parsed as {other:?}"),
        }
        match parse(&["token", "create", "--biz", "3", "--read-only", "--json"]).unwrap() {
            Cli {
                command: Command::Token(TokenCommand::Create { ranks, read_only, .. }),
                json,
                ..
            } => {
                assert_eq!((ranks, read_only, json), (vec![], true, true))
            }
            other => panic!("parsed as {other:?}"),
        }
        assert!(parse(&["token", "create"]).is_err());
        assert!(parse(&["token", "create", "--biz", "3", "--rank", "x"]).is_err());
    }

    #[test]
    fn token_list_and_revoke_parse() {
        use super::super::token::TokenCommand;
        assert!(matches!(
            parse(&["token", "list"]).unwrap().command,
            Command::Token(TokenCommand::List)
        ));
        match parse(&["token", "revoke", "12", "--json"]).unwrap().command {
            Command::Token(TokenCommand::Revoke { id }) => assert_eq!(id, 12),
            other => panic!("parsed as {other:?}"),
        }
        assert!(parse(&["token", "revoke"]).is_err());
        assert!(parse(&["token", "revoke", "-1"]).is_err());
    }

    #[test]
    fn admin_move_splits_the_board_at_its_first_colon_and_waits_by_default() {
        use super::super::admin::AdminCommand;
        let args = ["admin", "move", "--board", "7:day:1713052800_42", "--to-shard", "3"];
        match parse(&args).unwrap().command {
            Command::Admin(AdminCommand::Move {
                board: Some(board),
                entity,
                to_shard,
                no_wait,
            }) => {
                assert_eq!((board.rank, entity, to_shard, no_wait), (7, None, 3, false));
                assert_eq!(board.type_id.format(), "day:1713052800_42");
            }
            other => panic!("parsed as {other:?}"),
        }
        let args = ["admin", "move", "--board", "12:total:0", "--to-shard", "0", "--no-wait"];
        match parse(&args).unwrap() {
            Cli {
                command: Command::Admin(AdminCommand::Move { board: Some(board), no_wait, .. }),
                ..
            } => {
                assert_eq!(
                    (board.rank, board.type_id.format(), no_wait),
                    (12, "total:0".into(), true)
                )
            }
            other => panic!("parsed as {other:?}"),
        }
    }

    #[test]
    fn admin_move_takes_an_entity_as_biz_colon_entity() {
        use super::super::admin::AdminCommand;
        let args = ["admin", "move", "--entity", "1:42", "--to-shard", "3"];
        match parse(&args).unwrap().command {
            Command::Admin(AdminCommand::Move { board, entity: Some(e), to_shard, no_wait }) => {
                assert_eq!((board, e.biz, e.entity, to_shard, no_wait), (None, 1, 42, 3, false));
            }
            other => panic!("parsed as {other:?}"),
        }
        let args = ["admin", "move", "--entity=7:9", "--to-shard", "0", "--no-wait", "--json"];
        match parse(&args).unwrap() {
            Cli {
                command: Command::Admin(AdminCommand::Move { entity: Some(e), no_wait, .. }),
                json,
                ..
            } => assert_eq!((e.to_string(), no_wait, json), ("7:9".into(), true, true)),
            other => panic!("parsed as {other:?}"),
        }
    }

    #[test]
    fn admin_move_refuses_a_bad_entity() {
        let bad = |entity: &str| {
            let e = parse(&["admin", "move", "--entity", entity, "--to-shard", "1"]).unwrap_err();
            assert_eq!(e.kind(), clap::error::ErrorKind::ValueValidation, "{entity}");
            e.to_string()
        };
        assert!(bad("1").contains("\"1\" is not BIZ:ENTITY"));
        assert!(bad("x:2").contains("\"x\" is not a business id"));
        assert!(bad("1:").contains("\"\" is not an entity id"));
        assert!(bad("1:-3").contains("\"-3\" is not an entity id"));
        assert!(parse(&["admin", "move", "--entity", "1:2", "--to-shard", "-1"]).is_err());
        assert!(parse(&["admin", "move", "--entity", "1:2"]).is_err());
    }

    #[test]
    fn admin_move_takes_exactly_one_of_board_and_entity() {
        use clap::error::ErrorKind;
        let both = ["admin", "move", "--board", "7:total:0", "--entity", "1:2", "--to-shard", "1"];
        let e = parse(&both).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::ArgumentConflict);
        assert!(e.to_string().contains("cannot be used with"), "{e}");
        let e = parse(&["admin", "move", "--to-shard", "1"]).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::MissingRequiredArgument);
        assert!(e.to_string().contains("--board <RANK:TYPE_ID>|--entity <BIZ:ENTITY>"), "{e}");
    }

    #[test]
    fn admin_move_refuses_a_bad_board_or_shard() {
        let bad = |board: &str| {
            let e = parse(&["admin", "move", "--board", board, "--to-shard", "1"]).unwrap_err();
            assert_eq!(e.kind(), clap::error::ErrorKind::ValueValidation, "{board}");
            e.to_string()
        };
        assert!(bad("total:0").contains("\"total\" is not a ranking id"));
        assert!(bad("7").contains("is not RANK:TYPE_ID"));
        assert!(bad("7:total").contains("\"total\" is not a type id"));
        assert!(bad("7:day:01").contains("is not a type id"));
        assert!(parse(&["admin", "move", "--board", "7:total:0", "--to-shard", "-1"]).is_err());
        assert!(parse(&["admin", "move", "--board", "7:total:0"]).is_err());
        assert!(parse(&["admin", "move", "--to-shard", "1"]).is_err());
    }

    #[test]
    fn admin_placements_takes_no_argument_but_json() {
        use super::super::admin::AdminCommand;
        let cli = parse(&["admin", "placements", "--json"]).unwrap();
        assert!(cli.json);
        assert!(matches!(cli.command, Command::Admin(AdminCommand::Placements)));
        assert!(parse(&["admin", "placements", "7"]).is_err());
    }

    #[test]
    fn pages_default_to_twenty_items() {
        match parse(&["likers", "--biz", "1", "--entity", "2"]).unwrap().command {
            Command::Likers { page, .. } => {
                assert_eq!((page.limit, page.cursor), (DEFAULT_LIMIT, None))
            }
            other => panic!("parsed as {other:?}"),
        }
    }
}
