//! How a node's actor budget (`actor_budget`, per kind) is shared among
//! its shards. The share itself is one `plaudit_actors::active::Budget`
//! every shard of the node reads; the engine sets it again as it starts
//! replicas.

/// Each shard's share of a node's actor budget: the node's budget divided
/// among the data groups it holds a replica of, rounded up (the node keeps
/// at least its budget), unless a share per shard is set.
///
/// Why by the groups held, not by the cluster's shard count: a node of a
/// cluster with more nodes than replicas holds only some shards (12 nodes
/// of 12 shards, three replicas each: 3), and each of them may keep more.
pub(crate) fn shard_share(budget: usize, per_shard: Option<usize>, held: usize) -> usize {
    per_shard.unwrap_or_else(|| budget.div_ceil(held.max(1)))
}

#[cfg(test)]
mod tests {
    use super::shard_share;

    #[test]
    fn a_nodes_budget_is_shared_among_the_groups_it_holds() {
        assert_eq!(shard_share(16_384, None, 6), 2731, "rounded up: the node keeps its budget");
        assert_eq!(shard_share(16_384, None, 16), 1024);
        // 12 nodes of 12 shards, three replicas each: a node holds 3.
        assert_eq!(shard_share(16_384, None, 3), 5462);
        assert_eq!(shard_share(16_384, None, 0), 16_384, "before any group starts");
        assert_eq!(shard_share(16_384, Some(77), 6), 77, "a share per shard wins");
    }
}
