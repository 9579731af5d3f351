#!/usr/bin/env bash
# Hot keys on a three-node cluster (RF=3): relief off against relief on,
# back to back on the same cluster.
#
# Runs `plaudit-bench hot` twice (Zipf 1.2 over a million entities, one
# board taking half of all scoring and of the top reads, 90% reads): first
# with the SDK's cache of hot keys off (--cache-ttl 0s), then on
# (CACHE_TTL), each on a business and ranking of its own. The bench checks
# every answer against what it sent and had acknowledged: a node's answer
# must be linearizable, a cached one true within its reported age (below
# the TTL); `stale` counts those that were not. It also times how long
# after the load starts `plaudit admin hotkeys` lists the hottest entity
# and the hot board.
#
# Every process shares this machine's cores, as in bench-cluster.sh.
#
# Environment (defaults in brackets):
#   DURATION [10s]  WARMUP [2s]  CONNECTIONS [32]  PIPELINE [16]  SHARDS [6]
#   CACHE_TTL [250ms]  BASE_PORT [7700]  KEEP [0]  SKIP_BUILD [0]
#   SDK [batch: each connection's PIPELINE ops sent and waited for together;
#        calls: PIPELINE independent callers per connection, one call each]
#   WORKERS [the node's default, one runtime thread per core; N: N on every node]
#   NODE_ARGS [extra plaudit-node flags, every node]  BENCH_ARGS [extra plaudit-bench flags]
#
# The last line reads:
#   hot relief: throughput ratio R (on X ops/s, off Y ops/s), p99 on P ms, off Q ms
set -euo pipefail

DURATION=${DURATION:-10s}
WARMUP=${WARMUP:-2s}
CONNECTIONS=${CONNECTIONS:-32}
PIPELINE=${PIPELINE:-16}
SHARDS=${SHARDS:-6}
CACHE_TTL=${CACHE_TTL:-250ms}
SDK=${SDK:-batch}
BASE_PORT=${BASE_PORT:-7700}
KEEP=${KEEP:-0}
SKIP_BUILD=${SKIP_BUILD:-0}
NODE_ARGS=${NODE_ARGS:-}
BENCH_ARGS=${BENCH_ARGS:-}
WORKERS=${WORKERS:-}
if [[ -n $WORKERS ]]; then export PLAUDIT_WORKER_THREADS=$WORKERS; fi

NAME=bench-hot
# shellcheck source=scripts/lib/bench.sh
source "$(dirname "$0")/lib/bench.sh"
bench_init
bench_build

# shellcheck disable=SC2206 # word splitting is the point
bench_extra=($BENCH_ARGS)
# shellcheck disable=SC2206
node_extra=($NODE_ARGS)
hot=(hot --connections "$CONNECTIONS" --pipeline "$PIPELINE" --sdk "$SDK" --duration "$DURATION"
    --warmup "$WARMUP" --json)

start_cluster3 --shards "$SHARDS" "${node_extra[@]}" || exit 1
log "relief off"
"$BENCH" "${hot[@]}" "${bench_extra[@]}" --biz 51 --rank 951 --cache-ttl 0s \
    --addr "$CLUSTER_SEEDS" >"$WORK/off.json"
log "relief on (client cache, TTL $CACHE_TTL)"
"$BENCH" "${hot[@]}" "${bench_extra[@]}" --biz 52 --rank 952 --cache-ttl "$CACHE_TTL" \
    --addr "$CLUSTER_SEEDS" >"$WORK/on.json"

echo
echo "settings: sdk=$SDK connections=$CONNECTIONS pipeline=$PIPELINE duration=$DURATION warmup=$WARMUP shards=$SHARDS cache_ttl=$CACHE_TTL workers=${WORKERS:-per core}"
echo "relief off: $(cat "$WORK/off.json")"
echo "relief on: $(cat "$WORK/on.json")"
echo
echo "| relief | ops/s | p99 all ops ms | counts p99 ms | top p99 ms | like p99 ms | score p99 ms | answers checked | from the cache | stale | errors | hottest keys listed after ms |"
echo "|---|---|---|---|---|---|---|---|---|---|---|---|"
ms() { awk -v u="${1:-0}" 'BEGIN { printf "%.1f", u / 1000 }'; }
for r in off on; do
    f=$WORK/$r.json
    listed=$(grep -o '"hot_listed_after_ms":[0-9a-z]*' "$f" | cut -d: -f2)
    echo "| $r | $(num "$f" total_ops_per_s) | $(ms "$(num "$f" p99_all_us)") | $(ms "$(num "$f" counts p99_us)")" \
        "| $(ms "$(num "$f" top p99_us)") | $(ms "$(num "$f" like p99_us)") | $(ms "$(num "$f" score p99_us)")" \
        "| $(num "$f" answers_checked) | $(num "$f" answers_cached) | $(num "$f" stale_answers)" \
        "| $(num "$f" errors_total) | $listed |"
done
echo
on=$(num "$WORK/on.json" total_ops_per_s) off=$(num "$WORK/off.json" total_ops_per_s)
awk -v on="$on" -v off="$off" -v pon="$(num "$WORK/on.json" p99_all_us)" \
    -v poff="$(num "$WORK/off.json" p99_all_us)" 'BEGIN {
    printf "hot relief: throughput ratio %.2f (on %.0f ops/s, off %.0f ops/s), p99 on %.1f ms, off %.1f ms\n",
        (off > 0 ? on / off : 0), on, off, pon / 1000, poff / 1000 }'
