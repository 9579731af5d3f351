#!/usr/bin/env bash
# Per-core comparison: Redis (AOF everysec) against one Plaudit node, each
# server pinned to one core and driven by one single-threaded plaudit-bench
# pinned to another, workload by workload, back to back. Prints the JSON of
# every run and a markdown table: throughput, latency, server CPU µs per op
# and the bench's own CPU, and the Plaudit/Redis throughput ratio.
#
# Why pinned: on a shared machine a server can borrow the client's core, so
# throughput alone says little about what an op costs. Here the server owns
# SERVER_CPU and the client owns CLIENT_CPU; plaudit-bench --server-pid reads
# both processes' CPU time over exactly the measured window (never preload
# or warm-up). The node is started under taskset, so Tokio sizes its worker
# pool for the one core it may use.
#
# Why each workload gets fresh servers (Redis started, measured and stopped,
# then the node, on empty data directories): only one server is alive at any
# time, so nothing idle shares SERVER_CPU with the server being measured (the
# node's background flushes after its run, Redis's AOF), and a workload's
# numbers do not depend on which workloads ran before it (WORKLOADS=top gives
# the same board as the full matrix). The price is a server start per run and
# preloading the big board twice (top, rank), both outside the measured window.
#
# Workloads (each its own ranking id, as in bench-rankings.sh):
#   likes  likes --users 100000 --entities 100000 --zipf 0.99
#          --mix like=10,status=45,counts=45
#   hot    rankings --rank 903 --boards 1 --members 1000 --member-zipf 0.99 --mix score=1
#   cold   rankings --rank 902 --boards 10000 --members 1000 --mix score=1
#   top    rankings --rank 901 --boards 1 --members 100000 --mix top=1, after an
#          unmeasured run that preloads the 100,000 members
#   rank   the same board, --mix rank=1
#   mixed  rankings --rank 904 --boards 1000 --members 10000 --hot-share 0.2
#          --mix score=50,top=30,rank=20
#
# Table: a row per workload; for a mix, the row's p50/p99 are those of its
# slowest op (named), and a row per op follows (the `like` row is the like
# p99 the issue compares). "server µs/op" is the server's user+system CPU over
# the window divided by the successful ops, with the share of its core in
# brackets; "client CPU" is the bench's, where 100% means the client's core
# was saturated and the throughput is a client limit, not a server one. Not
# counted: a Redis AOF rewrite runs in a forked child, a separate process.
#
# With REPEAT above 1, a summary follows the last table: per workload, each
# run's Plaudit/Redis throughput ratio, their median and range, and how many
# runs reached 1.0x; and each run's like p99 ratio (Plaudit's over Redis's,
# at most 1.0 is "no worse"). Why: Redis and Plaudit each swing by up to 20%
# between runs on this shared host, so one run's pass or fail on a ratio
# near 1.0 says little; the median of a series says how they compare.
#
# Environment (defaults in brackets):
#   DURATION [10s]  WARMUP [2s]  CONNECTIONS [32]  PIPELINE [16]
#   WORKLOADS ["likes hot cold top rank mixed"]  REPEAT [1: run the matrix N
#   times, a table each, to show run-to-run variance]  SERVER_CPU [0]
#   CLIENT_CPU [1]  REDIS_PORT [6392]  NODE_PORT [7495]  ADMIN_PORT [7496]
#   NODE_ARGS [extra plaudit-node flags]  BENCH_ARGS [extra plaudit-bench flags]
#   KEEP [0: keep the temp dir]  SKIP_BUILD [0]
set -euo pipefail

DURATION=${DURATION:-10s}
WARMUP=${WARMUP:-2s}
CONNECTIONS=${CONNECTIONS:-32}
PIPELINE=${PIPELINE:-16}
WORKLOADS=${WORKLOADS:-likes hot cold top rank mixed}
REPEAT=${REPEAT:-1}
SERVER_CPU=${SERVER_CPU:-0}
CLIENT_CPU=${CLIENT_CPU:-1}
REDIS_PORT=${REDIS_PORT:-6392}
NODE_PORT=${NODE_PORT:-7495}
ADMIN_PORT=${ADMIN_PORT:-7496}
NODE_ARGS=${NODE_ARGS:-}
BENCH_ARGS=${BENCH_ARGS:-}
KEEP=${KEEP:-0}
SKIP_BUILD=${SKIP_BUILD:-0}

NAME=bench-percore
# shellcheck source=scripts/lib/bench.sh
source "$(dirname "$0")/lib/bench.sh"
bench_init
SERVER_WRAP=(taskset -c "$SERVER_CPU")
TARGETS="redis plaudit"

[[ $REPEAT =~ ^[1-9][0-9]*$ ]] || { log "REPEAT must be a positive integer"; exit 2; }
[[ $SERVER_CPU != "$CLIENT_CPU" ]] || { log "SERVER_CPU and CLIENT_CPU must differ"; exit 2; }
for cpu in "$SERVER_CPU" "$CLIENT_CPU"; do
    taskset -c "$cpu" true 2>/dev/null || { log "cannot run on CPU $cpu (nproc: $(nproc))"; exit 2; }
done

# The bench's command line of one workload (--rank ids as in bench-rankings.sh).
workload_args() {
    case $1 in
        likes) echo "likes --users 100000 --entities 100000 --zipf 0.99 --mix like=10,status=45,counts=45" ;;
        hot) echo "rankings --rank 903 --boards 1 --members 1000 --member-zipf 0.99 --mix score=1" ;;
        cold) echo "rankings --rank 902 --boards 10000 --members 1000 --mix score=1" ;;
        top) echo "rankings --rank 901 --boards 1 --members 100000 --mix top=1" ;;
        rank) echo "rankings --rank 901 --boards 1 --members 100000 --mix rank=1" ;;
        mixed) echo "rankings --rank 904 --boards 1000 --members 10000 --hot-share 0.2 --mix score=50,top=30,rank=20" ;;
        *) log "unknown workload $1 (likes hot cold top rank mixed)"; exit 2 ;;
    esac
}

# The ops a workload reports, in mix order.
workload_ops() {
    case $1 in
        likes) echo "like status counts" ;;
        hot | cold) echo "score" ;;
        top) echo "top" ;;
        rank) echo "rank" ;;
        mixed) echo "score top rank" ;;
    esac
}

# Unmeasured run before a workload: the 100,000-member board of top and rank.
preload_args() {
    case $1 in
        top | rank) echo "rankings --rank 901 --boards 1 --members 100000 --preload 100000 --mix score=1 --duration 1s --warmup 0s" ;;
    esac
}

for w in $WORKLOADS; do workload_args "$w" >/dev/null; done

bench_build
ensure_redis
require_free_ports "$REDIS_PORT" "$NODE_PORT" "$ADMIN_PORT"

common=(--connections "$CONNECTIONS" --pipeline "$PIPELINE" --threads 1 --json)
# shellcheck disable=SC2206
extra=($BENCH_ARGS)
# shellcheck disable=SC2206
node_extra=($NODE_ARGS)

# Fails unless every thread of PID may run on SERVER_CPU only.
check_pinned() {
    local pid=$1 task allowed
    for task in /proc/"$pid"/task/*; do
        allowed=$(awk '/^Cpus_allowed_list:/ {print $2}' "$task/status" 2>/dev/null) || continue
        [[ -z $allowed || $allowed == "$SERVER_CPU" ]] ||
            { log "server $pid thread ${task##*/} may run on CPUs $allowed"; exit 1; }
    done
}

# start_server TARGET: a fresh server on empty data. Sets SERVER_PID and TARGET_FLAGS.
start_server() {
    rm -rf "$WORK/redis" "$WORK/node"
    if [[ $1 == redis ]]; then
        start_redis "$REDIS_PORT"
        SERVER_PID=$REDIS_PID
        TARGET_FLAGS=(--target redis --redis-addr "127.0.0.1:$REDIS_PORT")
    else
        start_node "$NODE_PORT" "$ADMIN_PORT" "${node_extra[@]}"
        SERVER_PID=$NODE_PID
        TARGET_FLAGS=(--target plaudit --addr "127.0.0.1:$NODE_PORT")
    fi
    check_pinned "$SERVER_PID"
    log "$1: pid $SERVER_PID, $(find "/proc/$SERVER_PID/task" -mindepth 1 -maxdepth 1 | wc -l) threads, all on CPU $SERVER_CPU"
}

# client ARGS...: plaudit-bench on CLIENT_CPU, one Tokio worker.
client() { taskset -c "$CLIENT_CPU" "$BENCH" "$@"; }

# run_one REP WORKLOAD TARGET: start, preload, measure, stop.
run_one() {
    local rep=$1 w=$2 t=$3 pre
    start_server "$t"
    pre=$(preload_args "$w")
    if [[ -n $pre ]]; then
        log "r$rep $w $t: preload ($pre)"
        # shellcheck disable=SC2086
        client $pre "${TARGET_FLAGS[@]}" "${common[@]}" "${extra[@]}" >"$WORK/r$rep-$w-$t.preload.json"
    fi
    log "r$rep $w $t: $(workload_args "$w") (server pid $SERVER_PID on CPU $SERVER_CPU)"
    # shellcheck disable=SC2046
    client $(workload_args "$w") "${TARGET_FLAGS[@]}" "${common[@]}" --duration "$DURATION" \
        --warmup "$WARMUP" --server-pid "$SERVER_PID" "${extra[@]}" >"$WORK/r$rep-$w-$t.json"
    stop_pid "$SERVER_PID"
    [[ $t == plaudit ]] && mv "$WORK/node.log" "$WORK/r$rep-$w-node.log"
    return 0
}

# Formatting helpers over one JSON file.
fmt_lat() { # file op
    local p50 p99
    p50=$(num "$1" "$2" p50_us) p99=$(num "$1" "$2" p99_us)
    echo "${p50:-?}/${p99:-?}"
}
fmt_cpu() { # file
    local us cores
    us=$(num "$1" cpu server_us_per_op) cores=$(num "$1" cpu server_cores)
    [[ -n $us ]] || { echo "-"; return; }
    awk -v u="$us" -v c="$cores" 'BEGIN { printf "%.2f (%.0f%%)", u, c * 100 }'
}
fmt_client() { # file
    local c
    c=$(num "$1" cpu client_cores)
    [[ -n $c ]] || { echo "-"; return; }
    awk -v c="$c" 'BEGIN { printf "%.0f%%", c * 100 }'
}
ratio() { awk -v p="${1:-0}" -v r="${2:-0}" 'BEGIN { if (r > 0 && p > 0) printf "%.2fx", p / r; else print "-" }'; }

# The op of a workload with the highest p99 in FILE.
slowest_op() { # file ops...
    local f=$1 op best="" worst=-1 p
    shift
    for op in "$@"; do
        p=$(num "$f" "$op" p99_us)
        if [[ -n $p ]] && awk -v a="$p" -v b="$worst" 'BEGIN { exit !(a > b) }'; then
            best=$op worst=$p
        fi
    done
    echo "$best"
}

print_table() { # rep
    local rep=$1 w r p ops op rl pl errs=""
    echo
    echo "run $rep of $REPEAT: connections=$CONNECTIONS pipeline=$PIPELINE duration=$DURATION warmup=$WARMUP" \
        "server on CPU $SERVER_CPU, plaudit-bench --threads 1 on CPU $CLIENT_CPU"
    for w in $WORKLOADS; do
        for t in $TARGETS; do echo "r$rep $w $t: $(cat "$WORK/r$rep-$w-$t.json")"; done
    done
    echo
    echo "| workload | Redis ops/s | Redis p50/p99 µs | Redis server µs/op | Redis client CPU | Plaudit ops/s | Plaudit p50/p99 µs | Plaudit server µs/op | Plaudit client CPU | Plaudit/Redis |"
    echo "|---|---|---|---|---|---|---|---|---|---|"
    for w in $WORKLOADS; do
        r=$WORK/r$rep-$w-redis.json p=$WORK/r$rep-$w-plaudit.json
        read -ra ops <<<"$(workload_ops "$w")"
        if [[ ${#ops[@]} -eq 1 ]]; then
            rl=$(fmt_lat "$r" "${ops[0]}") pl=$(fmt_lat "$p" "${ops[0]}")
        else
            op=$(slowest_op "$r" "${ops[@]}"); rl="$(fmt_lat "$r" "$op") ($op)"
            op=$(slowest_op "$p" "${ops[@]}"); pl="$(fmt_lat "$p" "$op") ($op)"
        fi
        echo "| $w | $(num "$r" total_ops_per_s) | $rl | $(fmt_cpu "$r") | $(fmt_client "$r")" \
            "| $(num "$p" total_ops_per_s) | $pl | $(fmt_cpu "$p") | $(fmt_client "$p")" \
            "| $(ratio "$(num "$p" total_ops_per_s)" "$(num "$r" total_ops_per_s)") |"
        if [[ ${#ops[@]} -gt 1 ]]; then
            for op in "${ops[@]}"; do
                echo "| $w: $op | $(num "$r" "$op" ops_per_s) | $(fmt_lat "$r" "$op") | | " \
                    "| $(num "$p" "$op" ops_per_s) | $(fmt_lat "$p" "$op") | | " \
                    "| $(ratio "$(num "$p" "$op" ops_per_s)" "$(num "$r" "$op" ops_per_s)") |"
            done
        fi
        for t in $TARGETS; do
            f=$WORK/r$rep-$w-$t.json
            [[ $(num "$f" errors_total) == 0 ]] || errs+=" $w/$t: $(num "$f" errors_total)"
        done
    done
    [[ -z $errs ]] || echo "errors (by code in the JSON above):$errs"
    if [[ " $WORKLOADS " == *" likes "* ]]; then
        r=$(num "$WORK/r$rep-likes-redis.json" like p99_us) p=$(num "$WORK/r$rep-likes-plaudit.json" like p99_us)
        awk -v p="$p" -v r="$r" 'BEGIN { printf "like p99: Plaudit %s µs, Redis %s µs: %s\n", p, r,
            (p <= r ? "no worse than Redis" : "WORSE than Redis") }'
    fi
}

# median VALUES...: the middle value (the mean of the two middle ones).
median() {
    printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 }
        END { if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}

# ratio2 NUM DEN: NUM/DEN to two decimals, or "-" unless both are positive.
ratio2() { awk -v p="${1:-0}" -v r="${2:-0}" 'BEGIN { if (p > 0 && r > 0) printf "%.2f", p / r; else print "-" }'; }

# summary_row LABEL GOAL(at_least|at_most) RATIOS...: a row of the summary.
# A run without both figures shows "-" and counts neither way; "met" is
# judged on the ratio as shown (two decimals), so 1.00 meets either goal.
summary_row() {
    local label=$1 goal=$2 met=0 x valid=()
    shift 2
    for x in "$@"; do
        [[ $x == - ]] && continue
        valid+=("$x")
        awk -v x="$x" -v g="$goal" 'BEGIN { exit !(g == "at_least" ? x >= 1 : x <= 1) }' && met=$((met + 1))
    done
    if [[ ${#valid[@]} -eq 0 ]]; then
        echo "| $label | $* | - | - | no run with both figures |"
        return
    fi
    local sorted
    sorted=$(printf '%s\n' "${valid[@]}" | sort -g)
    echo "| $label | $* | $(printf '%.2f' "$(median "${valid[@]}")")" \
        "| $(head -1 <<<"$sorted")–$(tail -1 <<<"$sorted") | $met of ${#valid[@]} |"
}

print_summary() {
    local w rep r p ratios
    echo
    echo "summary of $REPEAT runs: Plaudit/Redis throughput per run, median, range, runs at or above 1.00x"
    echo "(like p99: Plaudit's p99 over Redis's, runs at or below 1.00)"
    echo
    echo "| workload | per run | median | range | runs met |"
    echo "|---|---|---|---|---|"
    for w in $WORKLOADS; do
        ratios=()
        for rep in $(seq "$REPEAT"); do
            r=$(num "$WORK/r$rep-$w-redis.json" total_ops_per_s) || r=""
            p=$(num "$WORK/r$rep-$w-plaudit.json" total_ops_per_s) || p=""
            ratios+=("$(ratio2 "$p" "$r")")
        done
        summary_row "$w" at_least "${ratios[@]}"
    done
    if [[ " $WORKLOADS " == *" likes "* ]]; then
        ratios=()
        for rep in $(seq "$REPEAT"); do
            r=$(num "$WORK/r$rep-likes-redis.json" like p99_us) || r=""
            p=$(num "$WORK/r$rep-likes-plaudit.json" like p99_us) || p=""
            ratios+=("$(ratio2 "$p" "$r")")
        done
        summary_row "like p99 (lower is better)" at_most "${ratios[@]}"
    fi
}

# Each run's table as soon as the run is done, so a long REPEAT shows progress.
for rep in $(seq "$REPEAT"); do
    for w in $WORKLOADS; do
        for t in $TARGETS; do run_one "$rep" "$w" "$t"; done
    done
    print_table "$rep"
done
[[ $REPEAT -eq 1 ]] || print_summary
