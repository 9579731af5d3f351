//! Reads sent to any replica of their shard (`Request::Replica`) instead
//! of its leader: a follower asks the leader for its read index once per
//! batch of reads, waits until it has applied that far and reads its own
//! state, so the read stays linearizable (`cluster/src/follower_read.rs`)
//! while the leaders' CPU is spread over every replica.
//!
//! Used for every read with `ClientOptions::spread_reads`, and for hot
//! keys' reads the cache does not answer with
//! `ClientOptions::spread_hot_reads`. Pure.

use plaudit_proto::Request;

/// `req` as a read any replica serves, if it is a read a replica may
/// serve (the node's list in `Request::validate`); anything else as it is.
pub(crate) fn to_any_replica(req: Request) -> Request {
    match req {
        Request::Status(_)
        | Request::Counts(_)
        | Request::UserLikes(_)
        | Request::Likers(_)
        | Request::Received(_)
        | Request::Query(_) => Request::Replica(Box::new(req)),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use plaudit_proto::likes::{CountsRequest, LikeRequest, ReceivedRequest, StatusRequest};
    use plaudit_proto::LikeAction;

    #[test]
    fn reads_a_replica_may_serve_are_wrapped_and_pass_the_nodes_check() {
        let reads = [
            Request::Counts(CountsRequest { biz: 1, entities: vec![1, 2] }),
            Request::Status(StatusRequest { biz: 1, user: 3, entities: vec![1] }),
            Request::Received(ReceivedRequest { biz: 1, user: 3 }),
        ];
        for r in reads {
            let sent = to_any_replica(r.clone());
            assert_eq!(sent, Request::Replica(Box::new(r)));
            assert!(sent.validate().is_ok(), "{sent:?}");
        }
    }

    #[test]
    fn writes_and_other_requests_go_as_they_are() {
        let like = Request::Like(LikeRequest {
            biz: 1,
            user: 3,
            entity: 1,
            owner: None,
            action: LikeAction::Like,
        });
        for r in [like, Request::Ping, Request::Routing] {
            assert_eq!(to_any_replica(r.clone()), r);
        }
        // Not wrapped twice.
        let once = to_any_replica(Request::Received(ReceivedRequest { biz: 1, user: 3 }));
        assert_eq!(to_any_replica(once.clone()), once);
    }
}
