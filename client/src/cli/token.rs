//! `plaudit token create|list|revoke`: the clap definitions, and how tokens
//! print. A new token is printed once, by `create`, and never again:
//!
//! ```text
//! $ plaudit token create --biz 3 --rank 7 --rank 9
//! plt_4_q1V7...(43 characters)
//! token 4: business 3, rankings 7,9, read-write (shown only now: keep it)
//!
//! $ plaudit token list
//! ID  BIZ  RANKS  READ_ONLY  CREATED                  REVOKED
//!  4    3  7,9    no         2026-12-03 17:13:19.000  -
//! ```
//!
//! The token goes on a line of its own so that a script can take it
//! (`| head -n1`); `--json` gives it as `token` instead.

use super::human::{table, time, Align};
use super::json;
use clap::Subcommand;
use plaudit_proto::auth::{TokenId, TokenInfo, TokenSecret};
use plaudit_proto::rankings::RankId;
use plaudit_proto::BizId;
use serde::Serialize;

#[derive(Debug, Subcommand)]
pub enum TokenCommand {
    /// Create a token for one business (and some of its rankings), and
    /// print it. It is shown only this once: the cluster keeps a hash.
    Create {
        /// The business whose likes the token may read and write.
        #[arg(long)]
        biz: BizId,
        /// A ranking the token may score and query (repeatable).
        #[arg(long = "rank", value_name = "R")]
        ranks: Vec<RankId>,
        /// Reads only: no like actions, no scores.
        #[arg(long)]
        read_only: bool,
    },
    /// List every token, revoked ones included (never their secrets).
    List,
    /// Revoke a token at once, on every node and connection.
    Revoke {
        /// Token id (the N of plt_N_...).
        id: TokenId,
    },
}

/// The `--json` shape of a new token: the token itself, then its record.
#[derive(Serialize)]
struct Created<'a> {
    token: &'a str,
    id: TokenId,
    biz: BizId,
    ranks: &'a [RankId],
    read_only: bool,
}

/// The `--json` shape of a listed or revoked token.
#[derive(Serialize)]
struct Info<'a> {
    id: TokenId,
    biz: BizId,
    ranks: &'a [RankId],
    read_only: bool,
    created_ms: u64,
    revoked_ms: Option<u64>,
}

#[derive(Serialize)]
struct List<'a> {
    tokens: Vec<Info<'a>>,
}

fn info(t: &TokenInfo) -> Info<'_> {
    Info {
        id: t.id,
        biz: t.biz,
        ranks: &t.ranks,
        read_only: t.read_only,
        created_ms: t.created_ms,
        revoked_ms: t.revoked_ms,
    }
}

pub fn created_json(token: &TokenSecret, t: &TokenInfo) -> String {
    json::encode(&Created {
        token: &token.0,
        id: t.id,
        biz: t.biz,
        ranks: &t.ranks,
        read_only: t.read_only,
    })
}

pub fn info_json(t: &TokenInfo) -> String {
    json::encode(&info(t))
}

pub fn list_json(list: &[TokenInfo]) -> String {
    json::encode(&List { tokens: list.iter().map(info).collect() })
}

/// The token on its own line, then what it may do.
pub fn created_human(token: &TokenSecret, t: &TokenInfo) -> String {
    let ranks = match t.ranks.as_slice() {
        [] => "no rankings".to_string(),
        [one] => format!("ranking {one}"),
        many => format!("rankings {}", joined(many)),
    };
    let mode = if t.read_only { "read-only" } else { "read-write" };
    format!(
        "{}\ntoken {}: business {}, {ranks}, {mode} (shown only now: keep it)\n",
        token.0, t.id, t.biz
    )
}

/// A table of tokens, one per row.
pub fn table_human(list: &[TokenInfo]) -> String {
    let rows: Vec<Vec<String>> = list
        .iter()
        .map(|t| {
            vec![
                t.id.to_string(),
                t.biz.to_string(),
                if t.ranks.is_empty() { "-".to_string() } else { joined(&t.ranks) },
                if t.read_only { "yes" } else { "no" }.to_string(),
                time(t.created_ms),
                t.revoked_ms.map_or("-".to_string(), time),
            ]
        })
        .collect();
    table(
        &[
            ("ID", Align::Right),
            ("BIZ", Align::Right),
            ("RANKS", Align::Left),
            ("READ_ONLY", Align::Left),
            ("CREATED", Align::Left),
            ("REVOKED", Align::Left),
        ],
        &rows,
    )
}

fn joined(ranks: &[RankId]) -> String {
    ranks.iter().map(RankId::to_string).collect::<Vec<_>>().join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    const TOKEN: &str = "plt_4_abcdefghijklmnopqrstuvwxyzABCDEFGHIJ0123-_5";

    fn token(read_only: bool, ranks: Vec<RankId>, revoked_ms: Option<u64>) -> TokenInfo {
        TokenInfo { id: 4, biz: 3, ranks, read_only, created_ms: 1, revoked_ms }
    }

    #[test]
    fn a_new_token_prints_alone_on_its_first_line() {
        let out = created_human(&TokenSecret(TOKEN.into()), &token(false, vec![7, 9], None));
        assert_eq!(
            out,
            format!(
                "{TOKEN}\ntoken 4: business 3, rankings 7,9, read-write (shown only now: keep it)\n"
            )
        );
        let out = created_human(&TokenSecret(TOKEN.into()), &token(true, vec![], None));
        assert!(out.ends_with("business 3, no rankings, read-only (shown only now: keep it)\n"));
        let out = created_human(&TokenSecret(TOKEN.into()), &token(true, vec![7], None));
        assert!(out.contains(", ranking 7, "), "{out}");
    }

    #[test]
    fn a_new_token_in_json_is_the_token_then_its_record() {
        let out = created_json(&TokenSecret(TOKEN.into()), &token(true, vec![7, 9], None));
        assert_eq!(
            out,
            format!(r#"{{"token":"{TOKEN}","id":4,"biz":3,"ranks":[7,9],"read_only":true}}"#)
        );
    }

    #[test]
    fn listed_tokens_show_their_record_and_revocation() {
        let list = [token(false, vec![7, 9], None), token(true, vec![], Some(2))];
        assert_eq!(
            table_human(&list),
            "ID  BIZ  RANKS  READ_ONLY  CREATED                  REVOKED\n \
             4    3  7,9    no         1970-01-01 00:00:00.001  -\n \
             4    3  -      yes        1970-01-01 00:00:00.001  1970-01-01 00:00:00.002\n"
        );
        assert_eq!(
            list_json(&list[1..]),
            r#"{"tokens":[{"id":4,"biz":3,"ranks":[],"read_only":true,"created_ms":1,"revoked_ms":2}]}"#
        );
        assert_eq!(
            info_json(&list[0]),
            r#"{"id":4,"biz":3,"ranks":[7,9],"read_only":false,"created_ms":1,"revoked_ms":null}"#
        );
    }
}
