#!/usr/bin/env bash
# Moving a hot board on a three-node cluster (RF=3), under load: how long
# its writes pause, and what the load sees.
#
# Runs `plaudit-bench hot` (Zipf 1.2 over a million entities, one board
# taking half of all scoring and of the top reads, 90% reads; the SDK's
# cache off) for DURATION. MOVE_AT into it, `plaudit admin move` sends the
# hot board to a shard led by another node and waits until the move is
# over. The node that ran the move logs how long the board took no events
# (from its freeze to its activation); the bench's score row shows what
# the load felt (its max is the event that waited longest).
#
# Every process shares this machine's cores, as in bench-cluster.sh.
#
# Environment (defaults in brackets):
#   DURATION [20s]  MOVE_AT [8]  CONNECTIONS [32]  PIPELINE [16]  SHARDS [6]
#   BASE_PORT [7750]  KEEP [0]  SKIP_BUILD [0]
#
# The last line reads:
#   board move: writes paused P ms (move M ms end to end), score p99 S ms, max X ms, errors E
set -euo pipefail

DURATION=${DURATION:-20s}
MOVE_AT=${MOVE_AT:-8}
CONNECTIONS=${CONNECTIONS:-32}
PIPELINE=${PIPELINE:-16}
SHARDS=${SHARDS:-6}
BASE_PORT=${BASE_PORT:-7750}
KEEP=${KEEP:-0}
SKIP_BUILD=${SKIP_BUILD:-0}

NAME=bench-move
# shellcheck source=scripts/lib/bench.sh
source "$(dirname "$0")/lib/bench.sh"
bench_init
if [[ $SKIP_BUILD != 1 ]]; then
    log "building release: plaudit-bench plaudit-node plaudit"
    cargo build --release --locked -p plaudit-bench -p plaudit-node -p plaudit-client
fi
CLI=$CARGO_TARGET_DIR/release/plaudit
RANK=953
BOARD=total:0_0

start_cluster3 --shards "$SHARDS" || exit 1
export PLAUDIT_ADDR=$CLUSTER_SEEDS
log "load for $DURATION; the hot board moves ${MOVE_AT}s in"
"$BENCH" hot --connections "$CONNECTIONS" --pipeline "$PIPELINE" --duration "$DURATION" \
    --warmup 0s --biz 53 --rank "$RANK" --cache-ttl 0s --addr "$CLUSTER_SEEDS" >"$WORK/hot.txt" &
load=$!
sleep "$MOVE_AT"

# The board's shard (the hot keys list it, by the top reads that name it),
# and a shard led by another node.
"$CLI" --json admin hotkeys --top 50 >"$WORK/hotkeys.json"
"$CLI" --json admin status >"$WORK/status.json"
target=$(python3 - "$WORK/hotkeys.json" "$WORK/status.json" "$RANK" "$BOARD" <<'EOF'
import json, sys
keys = json.load(open(sys.argv[1]))["keys"]
status = json.load(open(sys.argv[2]))
rank, board = int(sys.argv[3]), sys.argv[4]
shard = next(k["shard"] for k in keys if k["kind"] == "board" and k["rank"] == rank and k["key"] == board)
leaders = {g["shard"]: g["leader"] for g in status["shards"]}
src = leaders[shard]
print(min(s for s, l in leaders.items() if l is not None and l != src))
EOF
)
log "moving board $RANK:$BOARD to shard $target"
"$CLI" --json admin move --board "$RANK:$BOARD" --to-shard "$target" >"$WORK/move.json"
wait "$load"

cat "$WORK/hot.txt"
echo "move: $(cat "$WORK/move.json")"
paused=$(grep -ho 'writes paused for [0-9]* ms' "$WORK"/n*.log | tail -1 | grep -o '[0-9]*' || echo "?")
moved=$(grep -o '"ms":[0-9]*' "$WORK/move.json" | cut -d: -f2)
score=$(grep -E '^ *score ' "$WORK/hot.txt" | head -1)
p99=$(awk '{print $5}' <<<"$score")
max=$(awk '{print $7}' <<<"$score")
errors=$(awk '{print $8}' <<<"$score")
awk -v p="$paused" -v m="$moved" -v p99="$p99" -v max="$max" -v e="$errors" 'BEGIN {
    printf "board move: writes paused %s ms (move %s ms end to end), score p99 %.1f ms, max %.1f ms, errors %s\n",
        p, m, p99 / 1000, max / 1000, e }'
