#!/usr/bin/env bash
# Rankings workload: one Plaudit node against a Redis baseline, same client
# settings, scenario by scenario. Builds release binaries, starts Redis (AOF
# everysec) and a plaudit-node (durable group commit) on 127.0.0.1 in a
# temporary directory, runs `plaudit-bench rankings` for every scenario
# against each, then prints the JSON results and a markdown table.
#
# Scenarios (each target runs them in this order, one server per target):
#   big       1 board, BIG members preloaded (one event each), then random
#             increments on it: the "ZINCRBY on random members of a 1M-member
#             zset" figure. Memory is read before and after the preload.
#   big-top   top-10 reads of that board  (ZREVRANGE 0 9 WITHSCORES)
#   big-rank  rank-of reads on that board (ZREVRANK)
#   cold      events over 10,000 boards of 1,000 members (no preload)
#   hot       every event on one board of 1,000 members, Zipf 0.99 skew
#   mixed     score=50,top=30,rank=20 over 1,000 boards, 20% on a hot one
#
# Environment (defaults in brackets):
#   DURATION [10s]  WARMUP [2s]  CONNECTIONS [32]  PIPELINE [16]  BIG [1000000]
#   SCENARIOS ["big big-top big-rank cold hot mixed"]  TARGETS ["redis plaudit"]
#   REDIS_PORT [6391]  NODE_PORT [7493]  ADMIN_PORT [7494]
#   NODE_ARGS [extra plaudit-node flags]  BENCH_ARGS [extra plaudit-bench flags]
#   KEEP [0: keep the temp dir]  SKIP_BUILD [0]
set -euo pipefail

DURATION=${DURATION:-10s}
WARMUP=${WARMUP:-2s}
CONNECTIONS=${CONNECTIONS:-32}
PIPELINE=${PIPELINE:-16}
BIG=${BIG:-1000000}
SCENARIOS=${SCENARIOS:-big big-top big-rank cold hot mixed}
TARGETS=${TARGETS:-redis plaudit}
REDIS_PORT=${REDIS_PORT:-6391}
NODE_PORT=${NODE_PORT:-7493}
ADMIN_PORT=${ADMIN_PORT:-7494}
NODE_ARGS=${NODE_ARGS:-}
BENCH_ARGS=${BENCH_ARGS:-}
KEEP=${KEEP:-0}

NAME=bench-rankings
# shellcheck source=scripts/lib/bench.sh
source "$(dirname "$0")/lib/bench.sh"
bench_init
wants() { [[ " $TARGETS " == *" $1 "* ]]; }

bench_build
wants redis && ensure_redis
require_free_ports "$REDIS_PORT" "$NODE_PORT" "$ADMIN_PORT"

# The flags of one scenario (each its own ranking id, so boards never mix).
scenario_args() {
    case $1 in
        big) echo "--rank 901 --boards 1 --members $BIG --preload $BIG --mix score=1" ;;
        big-top) echo "--rank 901 --boards 1 --members $BIG --mix top=1" ;;
        big-rank) echo "--rank 901 --boards 1 --members $BIG --mix rank=1" ;;
        cold) echo "--rank 902 --boards 10000 --members 1000 --mix score=1" ;;
        hot) echo "--rank 903 --boards 1 --members 1000 --member-zipf 0.99 --mix score=1" ;;
        mixed) echo "--rank 904 --boards 1000 --members 10000 --hot-share 0.2" ;;
        *) log "unknown scenario $1"; exit 2 ;;
    esac
}

common=(--connections "$CONNECTIONS" --pipeline "$PIPELINE" --duration "$DURATION"
    --warmup "$WARMUP" --json)
# shellcheck disable=SC2206
extra=($BENCH_ARGS)
# shellcheck disable=SC2206
node_extra=($NODE_ARGS)

# memory_<target>_before / _after: bytes around the big preload.
declare -A MEM

# run_target TARGET: every scenario against one freshly started server.
run_target() {
    local t=$1 s args mem
    if [[ $t == redis ]]; then
        start_redis "$REDIS_PORT"
        target_flags=(--target redis --redis-addr "127.0.0.1:$REDIS_PORT")
        mem() { redis_memory "$REDIS_PORT"; }
    else
        start_node "$NODE_PORT" "$ADMIN_PORT" "${node_extra[@]}"
        target_flags=(--target plaudit --addr "127.0.0.1:$NODE_PORT")
        mem() { rss_of "$NODE_PID"; }
    fi
    for s in $SCENARIOS; do
        args=$(scenario_args "$s")
        [[ $s == big ]] && MEM[${t}_before]=$(mem)
        log "$t: $s ($args)"
        # shellcheck disable=SC2086
        "$BENCH" rankings "${target_flags[@]}" "${common[@]}" $args "${extra[@]}" \
            >"$WORK/$t-$s.json"
        [[ $s == big ]] && MEM[${t}_after]=$(mem)
    done
    if [[ $t == plaudit ]]; then
        MEM[plaudit_board_bytes]=$(node_metric "$ADMIN_PORT" plaudit_board_heap_bytes)
        MEM[plaudit_board_members]=$(node_metric "$ADMIN_PORT" plaudit_board_members)
        stop_pid "$NODE_PID"
    else
        stop_pid "$REDIS_PID"
    fi
}

for t in $TARGETS; do run_target "$t"; done

echo
echo "settings: connections=$CONNECTIONS pipeline=$PIPELINE duration=$DURATION warmup=$WARMUP big=$BIG"
for t in $TARGETS; do
    for s in $SCENARIOS; do echo "$t $s: $(cat "$WORK/$t-$s.json")"; done
done
echo
echo "| scenario | op | redis ops/s | redis p99 us | plaudit ops/s | plaudit p99 us | plaudit / redis | errors (r / p) |"
echo "|---|---|---|---|---|---|---|---|"
for s in $SCENARIOS; do
    case $s in big-top) ops="top" ;; big-rank) ops="rank" ;; mixed) ops="score top rank" ;; *) ops="score" ;; esac
    for op in $ops; do
        r=""; rp=""; p=""; pp=""; re=""; pe=""
        if wants redis; then
            f=$WORK/redis-$s.json
            r=$(num "$f" "$op" ops_per_s); rp=$(num "$f" "$op" p99_us); re=$(num "$f" errors_total)
        fi
        if wants plaudit; then
            f=$WORK/plaudit-$s.json
            p=$(num "$f" "$op" ops_per_s); pp=$(num "$f" "$op" p99_us); pe=$(num "$f" errors_total)
        fi
        ratio=$(awk -v p="${p:-0}" -v r="${r:-0}" 'BEGIN { if (r > 0 && p > 0) printf "%.2fx", p / r; else print "-" }')
        echo "| $s | $op | ${r:--} | ${rp:--} | ${p:--} | ${pp:--} | $ratio | ${re:--} / ${pe:--} |"
    done
done
if [[ " $SCENARIOS " == *" big "* ]]; then
    echo
    for t in $TARGETS; do
        b=${MEM[${t}_before]:-} a=${MEM[${t}_after]:-}
        [[ -n $b && -n $a ]] || continue
        what="used_memory"; [[ $t == plaudit ]] && what="RSS"
        per=$(awk -v a="$a" -v b="$b" -v n="$BIG" 'BEGIN { printf "%.1f", (a - b) / n }')
        pre=$(grep -o '"preload":{[^}]*}' "$WORK/$t-big.json" | grep -o '"per_s":[0-9.]*' | cut -d: -f2 || true)
        echo "$t: $what $(mib "$b") before, $(mib "$a") after $BIG members = $per B/member (preload ${pre:-?} members/s)"
    done
    if [[ -n ${MEM[plaudit_board_bytes]:-} && -n ${MEM[plaudit_board_members]:-} ]]; then
        echo "plaudit active boards at the end: ${MEM[plaudit_board_members]} members in $(mib "${MEM[plaudit_board_bytes]}")" \
            "($(awk -v a="${MEM[plaudit_board_bytes]}" -v n="${MEM[plaudit_board_members]}" 'BEGIN { if (n) printf "%.1f", a / n }') B/member, estimated from the structures)"
    fi
fi
