#!/usr/bin/env bash
# Moving a hot board, or the hottest entity, on a three-node cluster
# (RF=3), under load: how long its writes are held back, and what the load
# sees.
#
# Runs `plaudit-bench hot` (Zipf 1.2 over a million entities, one board
# taking half of all scoring and of the top reads, 90% reads; the SDK's
# cache off) for DURATION. MOVE_AT into it, `plaudit admin move` sends the
# hot board (KIND=board) or the hottest entity (KIND=entity) to a shard
# led by another node and waits until the move is over. The node that ran
# the move logs how long the actor took no writes (from its freeze to its
# activation): a board's events wait that long (the bench's score row
# shows what the load felt, its max being the event that waited longest);
# an entity's likes never wait, its counts lag that long at most. The
# bench checks every answer (a count never below one read before), so
# `stale` must stay 0 across the move.
#
# With AGAIN=1 (entities only), 2 s after that move ends the entity moves
# on to a third shard, and 2 s later back home: each of those takes its
# home's Hold and Pass steps, its deltas held at its home from the Hold
# to the Pass.
#
# Every process shares this machine's cores, as in bench-cluster.sh.
#
# Environment (defaults in brackets):
#   KIND [board]  DURATION [20s]  MOVE_AT [8]  CONNECTIONS [32]  PIPELINE [16]
#   SHARDS [6]  BASE_PORT [7750]  KEEP [0]  SKIP_BUILD [0]  AGAIN [0]
#
# The last line reads:
#   board move: writes paused P ms (move M ms end to end), score p99 S ms, max X ms, errors E
#   entity move: deltas held H ms (move M ms end to end), counts p99 C ms, like p99 L ms, errors E, stale S
# (with AGAIN=1, `entity moves:` and each of the three moves' H and M, in order)
set -euo pipefail

KIND=${KIND:-board}
DURATION=${DURATION:-20s}
MOVE_AT=${MOVE_AT:-8}
CONNECTIONS=${CONNECTIONS:-32}
PIPELINE=${PIPELINE:-16}
SHARDS=${SHARDS:-6}
BASE_PORT=${BASE_PORT:-7750}
KEEP=${KEEP:-0}
SKIP_BUILD=${SKIP_BUILD:-0}
AGAIN=${AGAIN:-0}

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
log "load for $DURATION; the hot $KIND moves ${MOVE_AT}s in"
"$BENCH" hot --connections "$CONNECTIONS" --pipeline "$PIPELINE" --duration "$DURATION" \
    --warmup 0s --biz 53 --rank "$RANK" --cache-ttl 0s --addr "$CLUSTER_SEEDS" >"$WORK/hot.txt" 2>"$WORK/hot.err" &
load=$!
sleep "$MOVE_AT"

# The actor's shard (the hot keys list it: the board by the top reads
# that name it, the hottest entity of the bench's business first), and a
# shard led by another node.
"$CLI" --json admin hotkeys --top 50 >"$WORK/hotkeys.json"
"$CLI" --json admin status >"$WORK/status.json"
read -r name target home on < <(python3 - "$WORK/hotkeys.json" "$WORK/status.json" "$KIND" "$RANK" "$BOARD" <<'EOF'
import json, sys
keys = json.load(open(sys.argv[1]))["keys"]
status = json.load(open(sys.argv[2]))
kind, rank, board = sys.argv[3], int(sys.argv[4]), sys.argv[5]
if kind == "board":
    row = next(k for k in keys if k["kind"] == "board" and k["rank"] == rank and k["key"] == board)
    name = f"{rank}:{board}"
else:
    row = next(k for k in keys if k["kind"] == "entity" and k["biz"] == 53)
    name = f"53:{row['key']}"
leaders = {g["shard"]: g["leader"] for g in status["shards"]}
src = leaders[row["shard"]]
target = min(s for s, l in leaders.items() if l is not None and l != src)
# Then on: a third shard, led by yet another node if there is one.
others = [s for s in leaders if s not in (row["shard"], target)]
on = min(others, key=lambda s: (leaders[s] in (src, leaders[target]), s))
print(name, target, row["shard"], on)
EOF
)
log "moving $KIND $name to shard $target"
"$CLI" --json admin move "--$KIND" "$name" --to-shard "$target" >"$WORK/move.json"
if [[ $AGAIN == 1 && $KIND == entity ]]; then
    sleep 2
    log "moving $KIND $name on to shard $on"
    "$CLI" --json admin move "--$KIND" "$name" --to-shard "$on" >"$WORK/move2.json"
    sleep 2
    log "moving $KIND $name back home to shard $home"
    "$CLI" --json admin move "--$KIND" "$name" --to-shard "$home" >"$WORK/move3.json"
fi
wait "$load"

cat "$WORK/hot.err" "$WORK/hot.txt"
echo "move: $(cat "$WORK/move.json")"
held=$(grep -ho 'writes held back for [0-9]* ms' "$WORK"/n*.log | tail -1 | grep -o '[0-9]*' || echo "?")
moved=$(grep -o '"ms":[0-9]*' "$WORK/move.json" | cut -d: -f2)
row() { grep -E "^ *$1 " "$WORK/hot.txt" | head -1; }
col() { awk -v n="$1" '{print $n}'; }
if [[ $KIND == board ]]; then
    score=$(row score)
    awk -v p="$held" -v m="$moved" -v p99="$(col 5 <<<"$score")" -v max="$(col 7 <<<"$score")" \
        -v e="$(col 8 <<<"$score")" 'BEGIN {
        printf "board move: writes paused %s ms (move %s ms end to end), score p99 %.1f ms, max %.1f ms, errors %s\n",
            p, m, p99 / 1000, max / 1000, e }'
else
    counts=$(row counts) like=$(row like)
    stale=$(grep -o '[0-9]* stale' "$WORK/hot.err" | head -1 | cut -d' ' -f1 || true)
    errors=$(($(col 8 <<<"$counts") + $(col 8 <<<"$like")))
    if [[ $AGAIN == 1 ]]; then
        # Each move's hold, in order, and each one's end-to-end time.
        held=$(grep -ho 'writes held back for [0-9]* ms' "$WORK"/n*.log | grep -o '[0-9]*' | paste -sd, -)
        for f in move2 move3; do
            moved="$moved,$(grep -o '"ms":[0-9]*' "$WORK/$f.json" | cut -d: -f2)"
            echo "$f: $(cat "$WORK/$f.json")"
        done
    fi
    what=$([[ $AGAIN == 1 ]] && echo "entity moves" || echo "entity move")
    awk -v w="$what" -v h="$held" -v m="$moved" -v c="$(col 5 <<<"$counts")" -v l="$(col 5 <<<"$like")" \
        -v e="$errors" -v s="${stale:-?}" 'BEGIN {
        printf "%s: deltas held %s ms (move %s ms end to end), counts p99 %.1f ms, like p99 %.1f ms, errors %s, stale %s\n",
            w, h, m, c / 1000, l / 1000, e, s }'
fi
