#!/usr/bin/env bash
# One node against a three-node cluster (RF=3), same workloads, back to back.
#
# Builds release binaries, then for each target (one plaudit-node; three
# plaudit-nodes formed into one cluster with a secret in the work
# directory) runs `plaudit-bench likes` (the step-1 mix) and `plaudit-bench
# rankings` (the rankings mix), and prints the JSON of every run and a
# markdown table. On the cluster it also reports elections that happened
# during the load (the sum of every shard's Raft term on every node, before
# and after): with the default timers there should be none.
#
# Every process (the nodes and the load generator) shares this machine's
# cores: the cluster's figures measure three replicas' work on the same CPUs
# as one node's, not a cluster of three machines.
#
# Environment (defaults in brackets):
#   DURATION [10s]  WARMUP [2s]  CONNECTIONS [32]  PIPELINE [16]  SHARDS [6, the node's default]
#   RAFT_GROUPS [the node's default, one Raft group per shard; N: the shards in N
#           groups, on the one node and on the cluster alike (`groups`)]
#   WORKERS [the node's default, one runtime thread per core; N: N on every
#           node, the one node and each cluster node alike (`worker_threads`)]
#   TARGETS ["single cluster"]  BASE_PORT [7600]  KEEP [0]  SKIP_BUILD [0]
#   SDK [batch: each connection's PIPELINE requests as one Client::pipeline;
#        calls: PIPELINE concurrent single calls per connection, the shape
#        of the figures measured before this setting existed (d349a50)]
#   NODE_ARGS [extra plaudit-node flags, every node]  BENCH_ARGS [extra plaudit-bench flags]
#   RATE [unset; e.g. like=15000,counts=15000: after the two mixes, an offered
#        load at those rates a second (`plaudit-bench likes --rate`), latency
#        counted from when each request was due]
#        (TLS everywhere: NODE_ARGS="--tls-cert-file C --tls-key-file K --tls-ca-file CA"
#         BENCH_ARGS="--tls-ca CA", a certificate for 127.0.0.1)
set -euo pipefail

DURATION=${DURATION:-10s}
WARMUP=${WARMUP:-2s}
CONNECTIONS=${CONNECTIONS:-32}
PIPELINE=${PIPELINE:-16}
SHARDS=${SHARDS:-6}
RAFT_GROUPS=${RAFT_GROUPS:-}
if [[ -n $RAFT_GROUPS ]]; then export PLAUDIT_GROUPS=$RAFT_GROUPS; fi
WORKERS=${WORKERS:-}
if [[ -n $WORKERS ]]; then export PLAUDIT_WORKER_THREADS=$WORKERS; fi
TARGETS=${TARGETS:-single cluster}
BASE_PORT=${BASE_PORT:-7600}
KEEP=${KEEP:-0}
SKIP_BUILD=${SKIP_BUILD:-0}
SDK=${SDK:-batch}
NODE_ARGS=${NODE_ARGS:-}
BENCH_ARGS=${BENCH_ARGS:-}
RATE=${RATE:-}

NAME=bench-cluster
# shellcheck source=scripts/lib/bench.sh
source "$(dirname "$0")/lib/bench.sh"
bench_init
bench_build

likes=(likes --connections "$CONNECTIONS" --pipeline "$PIPELINE" --sdk "$SDK" --duration "$DURATION"
    --warmup "$WARMUP" --users 100000 --entities 100000 --zipf 0.99
    --mix like=10,status=45,counts=45 --biz 1 --json)
rankings=(rankings --connections "$CONNECTIONS" --pipeline "$PIPELINE" --sdk "$SDK" --duration "$DURATION"
    --warmup "$WARMUP" --rank 904 --boards 1000 --members 10000 --hot-share 0.2 --json)
# shellcheck disable=SC2206 # word splitting is the point
bench_extra=($BENCH_ARGS)
# shellcheck disable=SC2206
node_extra=($NODE_ARGS)

# The sum of plaudit_raft_term over every running node (elections raise it).
terms() {
    local sum=0 a t
    for a in "$@"; do
        t=$(node_metric "$a" plaudit_raft_term)
        sum=$((sum + ${t:-0}))
    done
    echo "$sum"
}

run_target() { # name, seeds, admin ports...
    local name=$1 addr=$2
    shift 2
    local before after
    before=$(terms "$@")
    log "likes against $name"
    "$BENCH" "${likes[@]}" "${bench_extra[@]}" --target plaudit --addr "$addr" >"$WORK/$name-likes.json"
    log "rankings mix against $name"
    "$BENCH" "${rankings[@]}" "${bench_extra[@]}" --target plaudit --addr "$addr" \
        >"$WORK/$name-rankings.json"
    if [[ -n $RATE ]]; then
        log "offered load ($RATE a second) against $name"
        "$BENCH" likes --rate "$RATE" --mix like=1,status=1,counts=1 --connections "$CONNECTIONS" \
            --duration "$DURATION" --warmup "$WARMUP" --users 100000 --entities 100000 \
            --zipf 0.99 --biz 1 --json "${bench_extra[@]}" --target plaudit --addr "$addr" \
            >"$WORK/$name-offered.json"
    fi
    after=$(terms "$@")
    echo "$((after - before))" >"$WORK/$name-elections"
}

port() { echo $((BASE_PORT + $1)); }

if [[ " $TARGETS " == *" single "* ]]; then
    require_free_ports "$(port 1)" "$(port 2)"
    start_node "$(port 1)" "$(port 2)" --shards "$SHARDS" "${node_extra[@]}"
    run_target single "127.0.0.1:$(port 1)" "$(port 2)"
    stop_pid "$NODE_PID"
fi

if [[ " $TARGETS " == *" cluster "* ]]; then
    start_cluster3 --shards "$SHARDS" "${node_extra[@]}" || exit 1
    run_target cluster "$CLUSTER_SEEDS" "${CLUSTER_ADMINS[@]}"
fi

echo
echo "settings: connections=$CONNECTIONS pipeline=$PIPELINE sdk=$SDK duration=$DURATION warmup=$WARMUP shards=$SHARDS groups=${RAFT_GROUPS:-per shard} workers=${WORKERS:-per core}"
for t in $TARGETS; do
    echo "$t likes: $(cat "$WORK/$t-likes.json")"
    echo "$t rankings: $(cat "$WORK/$t-rankings.json")"
    if [[ -n $RATE ]]; then echo "$t offered ($RATE): $(cat "$WORK/$t-offered.json")"; fi
done
echo
echo "| target | likes ops/s | like p99 us | status p99 us | counts p99 us | rankings mix ops/s | score p99 us | top p99 us | rank p99 us | errors | elections during the load |"
echo "|---|---|---|---|---|---|---|---|---|---|---|"
for t in $TARGETS; do
    l=$WORK/$t-likes.json r=$WORK/$t-rankings.json
    errors=$(( $(num "$l" errors_total | cut -d. -f1) + $(num "$r" errors_total | cut -d. -f1) ))
    echo "| $t | $(num "$l" total_ops_per_s) | $(num "$l" like p99_us) | $(num "$l" status p99_us)" \
        "| $(num "$l" counts p99_us) | $(num "$r" total_ops_per_s) | $(num "$r" score p99_us)" \
        "| $(num "$r" top p99_us) | $(num "$r" rank p99_us) | $errors | $(cat "$WORK/$t-elections") |"
done
if [[ " $TARGETS " == *" single "* && " $TARGETS " == *" cluster "* ]]; then
    ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "n/a" }'; }
    echo
    echo "cluster / single: likes mix $(ratio "$(num "$WORK/cluster-likes.json" total_ops_per_s)" \
        "$(num "$WORK/single-likes.json" total_ops_per_s)")x, rankings mix $(ratio \
        "$(num "$WORK/cluster-rankings.json" total_ops_per_s)" \
        "$(num "$WORK/single-rankings.json" total_ops_per_s)")x"
fi
