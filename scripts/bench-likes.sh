#!/usr/bin/env bash
# Like workload: one Plaudit node against a Redis baseline, same client settings.
#
# Builds release binaries, starts Redis (AOF everysec, 127.0.0.1 only) and a
# single plaudit-node in a temporary directory, runs `plaudit-bench likes`
# against each, prints both JSON results, a markdown table, Redis used_memory
# and the node's RSS, and stops both servers on exit. After the runs it also
# reports each server's data size on disk (Redis's AOF directory, the node's
# data dir) and, for the node, how long a restart on that data takes until
# /readyz answers 200 (RESTART=0 skips it).
#
# Environment (defaults in brackets):
#   DURATION [20s]  WARMUP [2s]  CONNECTIONS [32]  PIPELINE [16]  PRELOAD [0]
#   USERS [100000]  ENTITIES [100000]  ZIPF [0.99]  MIX [like=10,status=45,counts=45]
#   BIZ [1]  TARGETS ["redis plaudit"]  REDIS_PORT [6390]  NODE_PORT [7491]
#   ADMIN_PORT [7492]  BENCH_ARGS [extra flags for plaudit-bench]  KEEP [0: keep the temp dir]
#   SKIP_BUILD [0]  RESTART [1]
set -euo pipefail

DURATION=${DURATION:-20s}
WARMUP=${WARMUP:-2s}
CONNECTIONS=${CONNECTIONS:-32}
PIPELINE=${PIPELINE:-16}
PRELOAD=${PRELOAD:-0}
USERS=${USERS:-100000}
ENTITIES=${ENTITIES:-100000}
ZIPF=${ZIPF:-0.99}
MIX=${MIX:-like=10,status=45,counts=45}
BIZ=${BIZ:-1}
TARGETS=${TARGETS:-redis plaudit}
REDIS_PORT=${REDIS_PORT:-6390}
NODE_PORT=${NODE_PORT:-7491}
ADMIN_PORT=${ADMIN_PORT:-7492}
BENCH_ARGS=${BENCH_ARGS:-}
KEEP=${KEEP:-0}
SKIP_BUILD=${SKIP_BUILD:-0}
RESTART=${RESTART:-1}

NAME=bench-likes
# shellcheck source=scripts/lib/bench.sh
source "$(dirname "$0")/lib/bench.sh"
bench_init
wants() { [[ " $TARGETS " == *" $1 "* ]]; }

bench_build
wants redis && ensure_redis
require_free_ports "$REDIS_PORT" "$NODE_PORT" "$ADMIN_PORT"

common=(--connections "$CONNECTIONS" --pipeline "$PIPELINE" --duration "$DURATION"
    --warmup "$WARMUP" --users "$USERS" --entities "$ENTITIES" --zipf "$ZIPF" --mix "$MIX"
    --biz "$BIZ" --preload "$PRELOAD" --json)
# shellcheck disable=SC2206
extra=($BENCH_ARGS)

REDIS_MEM=""
NODE_RSS=""

if wants redis; then
    start_redis "$REDIS_PORT"
    log "running likes against redis"
    "$BENCH" likes --target redis --redis-addr "127.0.0.1:$REDIS_PORT" "${common[@]}" \
        "${extra[@]}" >"$WORK/redis.json"
    REDIS_MEM=$(redis_memory "$REDIS_PORT")
    stop_pid "$REDIS_PID"
    REDIS_DISK=$(du -sb "$WORK/redis" | cut -f1)
fi

if wants plaudit; then
    start_node "$NODE_PORT" "$ADMIN_PORT"
    log "running likes against plaudit"
    "$BENCH" likes --target plaudit --addr "127.0.0.1:$NODE_PORT" "${common[@]}" \
        "${extra[@]}" >"$WORK/plaudit.json"
    NODE_RSS=$(rss_of "$NODE_PID")
    stop_pid "$NODE_PID"
    NODE_DISK=$(du -sb "$WORK/node" | cut -f1)
    if [[ $RESTART == 1 ]]; then
        started=$(date +%s%N)
        start_node "$NODE_PORT" "$ADMIN_PORT"
        READY_MS=$((($(date +%s%N) - started) / 1000000))
        READY_RSS=$(rss_of "$NODE_PID")
        stop_pid "$NODE_PID"
    fi
fi

echo
echo "settings: connections=$CONNECTIONS pipeline=$PIPELINE duration=$DURATION warmup=$WARMUP" \
    "preload=$PRELOAD users=$USERS entities=$ENTITIES zipf=$ZIPF mix=$MIX"
for t in $TARGETS; do
    echo "$t: $(cat "$WORK/$t.json")"
done
[[ -n $REDIS_MEM ]] && echo "redis used_memory: $REDIS_MEM bytes ($(mib "$REDIS_MEM"))"
[[ -n $NODE_RSS ]] && echo "plaudit-node VmRSS: $NODE_RSS bytes ($(mib "$NODE_RSS"))"
[[ -n ${REDIS_DISK:-} ]] && echo "redis data on disk: $REDIS_DISK bytes ($(mib "$REDIS_DISK"))"
[[ -n ${NODE_DISK:-} ]] && echo "plaudit-node data dir: $NODE_DISK bytes ($(mib "$NODE_DISK"))"
[[ -n ${READY_MS:-} ]] && echo "plaudit-node restart to /readyz: $READY_MS ms (VmRSS then $(mib "$READY_RSS"))"
echo
echo "| target | conns x pipeline | total ops/s | like ops/s | like p99 us | status ops/s | status p99 us | counts ops/s | counts p99 us | errors | preload rec/s | memory |"
echo "|---|---|---|---|---|---|---|---|---|---|---|---|"
for t in $TARGETS; do
    f=$WORK/$t.json
    if [[ $t == redis ]]; then mem="$(mib "$REDIS_MEM") used_memory"; else mem="$(mib "$NODE_RSS") RSS"; fi
    preload_rate=$(grep -o '"preload":{[^}]*}' "$f" | grep -o '"per_s":[0-9.]*' | cut -d: -f2 || true)
    echo "| $t | ${CONNECTIONS}x${PIPELINE} | $(num "$f" total_ops_per_s)" \
        "| $(num "$f" like ops_per_s) | $(num "$f" like p99_us)" \
        "| $(num "$f" status ops_per_s) | $(num "$f" status p99_us)" \
        "| $(num "$f" counts ops_per_s) | $(num "$f" counts p99_us)" \
        "| $(num "$f" errors_total) | ${preload_rate:--} | $mem |"
done
