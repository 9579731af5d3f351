//! The like state machine of one `(user, entity)` pair.
//!
//! ```text
//!            like               dislike
//!   None ───────────> Like <──────────────> Dislike   (like/dislike switch in one step)
//!    ^  <───────────   │                      │  ^
//!    │     unlike      │                      │  │
//!    └────────────────────── undislike ───────┘  │
//!    └─────────────────────── dislike ───────────┘
//! ```
//! Every other action is a repeat and a no-op.

use plaudit_proto::{LikeAction, LikeState};

/// The state after `action` from `prev`.
pub fn next(prev: LikeState, action: LikeAction) -> LikeState {
    match (action, prev) {
        (LikeAction::Like, _) => LikeState::Like,
        (LikeAction::Dislike, _) => LikeState::Dislike,
        (LikeAction::Unlike, LikeState::Like) => LikeState::None,
        (LikeAction::Undislike, LikeState::Dislike) => LikeState::None,
        (LikeAction::Unlike | LikeAction::Undislike, p) => p,
    }
}

/// How a transition moves the counts: `(Δlikes, Δdislikes)`.
pub fn count_delta(prev: LikeState, now: LikeState) -> (i64, i64) {
    let weight = |s: LikeState| match s {
        LikeState::None => (0, 0),
        LikeState::Like => (1, 0),
        LikeState::Dislike => (0, 1),
    };
    let (pl, pd) = weight(prev);
    let (nl, nd) = weight(now);
    (nl - pl, nd - pd)
}

#[cfg(test)]
mod tests {
    use super::*;
    use LikeAction::*;
    use LikeState::{Dislike as D, Like as L, None as N};

    #[test]
    fn full_table() {
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
        for (prev, action, want) in table {
            assert_eq!(next(prev, action), want, "{prev:?} --{action:?}-->");
        }
    }

    #[test]
    fn switching_moves_both_counts() {
        assert_eq!(count_delta(L, D), (-1, 1));
        assert_eq!(count_delta(D, L), (1, -1));
        assert_eq!(count_delta(L, L), (0, 0));
        assert_eq!(count_delta(N, L), (1, 0));
    }
}
