#!/usr/bin/env bash
# Like workload: one Plaudit node against a Redis baseline, same client settings.
#
# Builds release binaries, starts Redis (AOF everysec, 127.0.0.1 only) and a
# single plaudit-node in a temporary directory, runs `plaudit-bench likes`
# against each, prints both JSON results, a markdown table, Redis used_memory
# and the node's RSS, and stops both servers on exit.
#
# Environment (defaults in brackets):
#   DURATION [20s]  WARMUP [2s]  CONNECTIONS [32]  PIPELINE [16]  PRELOAD [0]
#   USERS [100000]  ENTITIES [100000]  ZIPF [0.99]  MIX [like=10,status=45,counts=45]
#   BIZ [1]  TARGETS ["redis plaudit"]  REDIS_PORT [6390]  NODE_PORT [7491]
#   ADMIN_PORT [7492]  BENCH_ARGS [extra flags for plaudit-bench]  KEEP [0: keep the temp dir]
#   SKIP_BUILD [0]
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

cd "$(dirname "$0")/.."
ROOT=$(pwd)
BENCH=${CARGO_TARGET_DIR:-$ROOT/target}/release/plaudit-bench
NODE=${CARGO_TARGET_DIR:-$ROOT/target}/release/plaudit-node

log() { echo "[bench-likes] $*" >&2; }
wants() { [[ " $TARGETS " == *" $1 "* ]]; }

if [[ $SKIP_BUILD != 1 ]]; then
    packages=(-p plaudit-bench)
    wants plaudit && packages+=(-p plaudit-node)
    log "building release: ${packages[*]}"
    cargo build --release "${packages[@]}"
fi

if wants redis && ! command -v redis-server >/dev/null; then
    log "installing redis-server"
    SUDO=""
    [[ $(id -u) -ne 0 ]] && SUDO=sudo
    $SUDO apt-get update -qq
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null
fi

port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
for p in $REDIS_PORT $NODE_PORT $ADMIN_PORT; do
    port_free "$p" || { log "port $p on 127.0.0.1 is already in use"; exit 1; }
done

WORK=$(mktemp -d /tmp/plaudit-bench-likes.XXXXXX)
REDIS_PID=""
NODE_PID=""
cleanup() {
    local rc=$?
    if [[ -n $NODE_PID ]] && kill -0 "$NODE_PID" 2>/dev/null; then
        kill "$NODE_PID" 2>/dev/null || true
        for _ in $(seq 50); do kill -0 "$NODE_PID" 2>/dev/null || break; sleep 0.2; done
        kill -9 "$NODE_PID" 2>/dev/null || true
    fi
    if [[ -n $REDIS_PID ]] && kill -0 "$REDIS_PID" 2>/dev/null; then
        kill "$REDIS_PID" 2>/dev/null || true
        for _ in $(seq 50); do kill -0 "$REDIS_PID" 2>/dev/null || break; sleep 0.2; done
        kill -9 "$REDIS_PID" 2>/dev/null || true
    fi
    if [[ $KEEP == 1 || $rc -ne 0 ]]; then
        log "logs and data kept in $WORK"
    else
        rm -rf "$WORK"
    fi
    exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

wait_for() { # description, timeout seconds, command...
    local what=$1 secs=$2
    shift 2
    for _ in $(seq $((secs * 5))); do
        if "$@" >/dev/null 2>&1; then return 0; fi
        sleep 0.2
    done
    log "timed out waiting for $what"
    return 1
}

node_ready() ( # a subshell, so a failed connect cannot end the script
    exec 3<>"/dev/tcp/127.0.0.1/$ADMIN_PORT" || exit 1
    printf 'GET /readyz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n' >&3
    read -r -t 2 status <&3 || exit 1
    [[ $status == *" 200 "* ]]
)

common=(--connections "$CONNECTIONS" --pipeline "$PIPELINE" --duration "$DURATION"
    --warmup "$WARMUP" --users "$USERS" --entities "$ENTITIES" --zipf "$ZIPF" --mix "$MIX"
    --biz "$BIZ" --preload "$PRELOAD" --json)
# shellcheck disable=SC2206
extra=($BENCH_ARGS)

# Pulls one number out of the bench's JSON: `num FILE total_ops_per_s` or
# `num FILE like p99_us` (op objects hold no nested braces).
num() {
    local file=$1
    if [[ $# -eq 2 ]]; then
        grep -o "\"$2\":[0-9.e+-]*" "$file" | head -1 | cut -d: -f2
    else
        grep -o "\"$2\":{[^}]*}" "$file" | head -1 | grep -o "\"$3\":[0-9.e+-]*" | cut -d: -f2
    fi
}

REDIS_MEM=""
NODE_RSS=""

if wants redis; then
    mkdir -p "$WORK/redis"
    log "starting redis-server on 127.0.0.1:$REDIS_PORT (AOF everysec) in $WORK/redis"
    redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --protected-mode yes --save '' \
        --appendonly yes --appendfsync everysec --dir "$WORK/redis" \
        --logfile "$WORK/redis/redis.log" --daemonize no &
    REDIS_PID=$!
    wait_for "redis" 20 redis-cli -h 127.0.0.1 -p "$REDIS_PORT" ping
    log "running likes against redis"
    "$BENCH" likes --target redis --redis-addr "127.0.0.1:$REDIS_PORT" "${common[@]}" \
        "${extra[@]}" >"$WORK/redis.json"
    REDIS_MEM=$(redis-cli -h 127.0.0.1 -p "$REDIS_PORT" info memory |
        tr -d '\r' | grep '^used_memory:' | cut -d: -f2)
    kill "$REDIS_PID" 2>/dev/null || true
    wait "$REDIS_PID" 2>/dev/null || true
    REDIS_PID=""
fi

if wants plaudit; then
    mkdir -p "$WORK/node"
    log "starting plaudit-node on 127.0.0.1:$NODE_PORT (admin $ADMIN_PORT) in $WORK/node"
    "$NODE" --data-dir "$WORK/node" --listen "127.0.0.1:$NODE_PORT" \
        --admin "127.0.0.1:$ADMIN_PORT" >"$WORK/node.log" 2>&1 &
    NODE_PID=$!
    wait_for "plaudit-node /readyz" 60 node_ready || { tail -20 "$WORK/node.log" >&2; exit 1; }
    log "running likes against plaudit"
    "$BENCH" likes --target plaudit --addr "127.0.0.1:$NODE_PORT" "${common[@]}" \
        "${extra[@]}" >"$WORK/plaudit.json"
    NODE_RSS=$(awk '/^VmRSS:/ {print $2 * 1024}' "/proc/$NODE_PID/status")
fi

mib() {
    if [[ -n $1 ]]; then awk -v b="$1" 'BEGIN { printf "%.1f MiB", b / 1048576 }'; else echo "?"; fi
}

echo
echo "settings: connections=$CONNECTIONS pipeline=$PIPELINE duration=$DURATION warmup=$WARMUP" \
    "preload=$PRELOAD users=$USERS entities=$ENTITIES zipf=$ZIPF mix=$MIX"
for t in $TARGETS; do
    echo "$t: $(cat "$WORK/$t.json")"
done
[[ -n $REDIS_MEM ]] && echo "redis used_memory: $REDIS_MEM bytes ($(mib "$REDIS_MEM"))"
[[ -n $NODE_RSS ]] && echo "plaudit-node VmRSS: $NODE_RSS bytes ($(mib "$NODE_RSS"))"
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
