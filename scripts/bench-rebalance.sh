#!/usr/bin/env bash
# What adding a node costs: a three-node cluster (RF=3) holding PRELOAD like
# records and MEMBERS board members gets a fourth node; printed are the time
# until the cluster is balanced again (no move under way, every node within
# one replica and one leadership of its share) and the likes mix before and
# during the rebalance.
#
# ```text
# 3 nodes ─ preload likes and board members ─ likes mix (BEFORE, the baseline)
#   ─ start node 4 (--join, --bootstrap-expect 0) ─ likes mix in CHUNK runs, back to back,
#     until `admin status` shows no move and `admin nodes` is balanced
#   ─ print: seconds to balance, replicas moved, and per chunk ops/s and like p99
# ```
#
# Run once per snapshot rate: RATE=32 (the default) and RATE=0 (unpaced).
# Every process shares this machine's cores (see bench-cluster.sh).
#
# Environment (defaults in brackets):
#   RATE [32] (snapshot_send_mib_per_sec)  PRELOAD [2000000]  MEMBERS [100000]
#   SHARDS [16]  BEFORE [10s]  CHUNK [5s]  CONNECTIONS [32]  PIPELINE [16]
#   BASE_PORT [7700]  KEEP [0]  SKIP_BUILD [0]
set -euo pipefail

RATE=${RATE:-32}
PRELOAD=${PRELOAD:-2000000}
MEMBERS=${MEMBERS:-100000}
SHARDS=${SHARDS:-16}
BEFORE=${BEFORE:-10s}
CHUNK=${CHUNK:-5s}
CONNECTIONS=${CONNECTIONS:-32}
PIPELINE=${PIPELINE:-16}
BASE_PORT=${BASE_PORT:-7700}
KEEP=${KEEP:-0}
SKIP_BUILD=${SKIP_BUILD:-0}

NAME=bench-rebalance
# shellcheck source=scripts/lib/bench.sh
source "$(dirname "$0")/lib/bench.sh"
bench_init
bench_build
CLI=$CARGO_TARGET_DIR/release/plaudit
if [[ $SKIP_BUILD != 1 ]]; then cargo build --release --locked -p plaudit-client --bin plaudit; fi

port() { echo $((BASE_PORT + $1)); }
echo "bench-rebalance-secret-$(date +%s%N)" >"$WORK/secret"
join=""
for i in 1 2 3; do join+="${join:+,}127.0.0.1:$(port $((10 * i + 3)))"; done

start_member() { # id, bootstrap-expect
    local i=$1 c a p
    c=$(port $((10 * i + 1))); a=$(port $((10 * i + 2))); p=$(port $((10 * i + 3)))
    require_free_ports "$c" "$a" "$p"
    mkdir -p "$WORK/n$i"
    log "starting node $i on 127.0.0.1:$c (admin $a, peer $p)"
    PLAUDIT_SNAPSHOT_SEND_MIB_PER_SEC=$RATE "$NODE" --node-id "$i" --data-dir "$WORK/n$i" \
        --listen "127.0.0.1:$c" --admin "127.0.0.1:$a" --peer-listen "127.0.0.1:$p" \
        --join "$join" --bootstrap-expect "$2" --cluster-secret-file "$WORK/secret" \
        --shards "$SHARDS" >"$WORK/n$i.log" 2>&1 &
    PIDS+=("$!")
}

for i in 1 2 3; do start_member "$i" 3; done
for i in 1 2 3; do wait_for "node $i /readyz" 60 node_ready "$(port $((10 * i + 2)))" || exit 1; done
seeds="127.0.0.1:$(port 11),127.0.0.1:$(port 21),127.0.0.1:$(port 31)"

likes=(likes --connections "$CONNECTIONS" --pipeline "$PIPELINE" --users 100000 --entities 100000
    --zipf 0.99 --mix like=10,status=45,counts=45 --biz 1 --json --addr "$seeds")
log "preloading $PRELOAD like records"
"$BENCH" "${likes[@]}" --preload "$PRELOAD" --duration 1s --warmup 0s >"$WORK/preload-likes.json"
log "preloading $MEMBERS board members"
"$BENCH" rankings --connections "$CONNECTIONS" --pipeline "$PIPELINE" --rank 905 --boards 1 \
    --members "$MEMBERS" --preload "$MEMBERS" --mix score=100 --duration 1s --warmup 0s --json \
    --addr "$seeds" >"$WORK/preload-rankings.json"
log "likes mix before ($BEFORE)"
"$BENCH" "${likes[@]}" --duration "$BEFORE" --warmup 2s >"$WORK/before.json"

# Whether no move is under way and nodes 1..4 each hold and lead their share ±1.
balanced() {
    "$CLI" --addr "$seeds" --json admin status >"$WORK/status.json" 2>/dev/null || return 1
    "$CLI" --addr "$seeds" --json admin nodes >"$WORK/nodes.json" 2>/dev/null || return 1
    python3 - "$WORK/status.json" "$WORK/nodes.json" "$SHARDS" <<'PY'
import json, sys
status = json.load(open(sys.argv[1])); nodes = json.load(open(sys.argv[2]))["nodes"]
shards = int(sys.argv[3]); n = len(nodes)
if status.get("moves") or n < 4:
    sys.exit(1)
rep, lead = shards * 3 / n, shards / n
ok = all(abs(x["replicas"] - rep) <= 1 and abs(x["leaders"] - lead) <= 1 for x in nodes)
sys.exit(0 if ok else 1)
PY
}

log "starting node 4 (joins)"
t0=$(date +%s.%N)
start_member 4 0
chunks=0
while true; do
    chunks=$((chunks + 1))
    "$BENCH" "${likes[@]}" --duration "$CHUNK" --warmup 0s >"$WORK/during-$chunks.json"
    if balanced; then break; fi
    if ((chunks > 200)); then log "not balanced after $chunks chunks"; exit 1; fi
done
t1=$(date +%s.%N)
secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')
moved=$(cat "$WORK"/n*.log | grep -c "replica moved" || true)
log "likes mix after, on four nodes ($BEFORE)"
"$BENCH" "${likes[@]}" --duration "$BEFORE" --warmup 2s >"$WORK/after.json"

echo
echo "rate=${RATE} MiB/s preload=$PRELOAD members=$MEMBERS shards=$SHARDS"
echo "balanced after at most ${secs} s (checked every $CHUNK); replica moves logged: $moved"
echo "before: $(num "$WORK/before.json" total_ops_per_s) ops/s, like p99 $(num "$WORK/before.json" like p99_us) us"
for i in $(seq "$chunks"); do
    f=$WORK/during-$i.json
    echo "during $i: $(num "$f" total_ops_per_s) ops/s, like p99 $(num "$f" like p99_us) us, errors $(num "$f" errors_total)"
done
echo "after (four nodes): $(num "$WORK/after.json" total_ops_per_s) ops/s, like p99 $(num "$WORK/after.json" like p99_us) us"
du -sh "$WORK"/n1 "$WORK"/n4 | sed 's/^/data: /'
