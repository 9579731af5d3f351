#!/usr/bin/env bash
# Quick start: builds Plaudit, starts one node on its embedded store (a
# write-ahead log and snapshot files in a fresh data directory), waits until
# its /readyz says ready, and walks through likes and rankings with the CLI.
# The node keeps running afterwards if KEEP=1; otherwise it is stopped.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v cargo >/dev/null 2>&1; then
  echo "error: cargo not found; install Rust (https://rustup.rs) first" >&2
  exit 1
fi
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/plaudit-target}"
LISTEN="${LISTEN:-127.0.0.1:7401}"
ADMIN="${ADMIN:-127.0.0.1:7402}"
DATA="${DATA:-$(mktemp -d /tmp/plaudit-demo.XXXXXX)}"

echo "== building (release)"
cargo build --release --locked -p plaudit-node -p plaudit-client
bin="$CARGO_TARGET_DIR/release"

echo "== starting plaudit-node on $LISTEN (admin $ADMIN), data in $DATA"
"$bin/plaudit-node" --data-dir "$DATA" --listen "$LISTEN" --admin "$ADMIN" --log warn &
node=$!
stop() { if [ "${KEEP:-0}" != 1 ]; then kill -TERM "$node" 2>/dev/null || true; wait "$node" 2>/dev/null || true; fi; }
trap stop EXIT
# `GET /readyz` with bash alone (no curl on a fresh machine): true on 200.
ready() {
  (
    exec 3<>"/dev/tcp/${ADMIN%:*}/${ADMIN#*:}" || exit 1
    printf 'GET /readyz HTTP/1.0\r\nHost: plaudit\r\n\r\n' >&3
    IFS= read -r -t 2 status <&3 || exit 1
    [[ "$status" == *" 200 "* ]]
  ) 2>/dev/null
}
echo "== waiting for /readyz"
for i in $(seq 1 300); do
  ready && break
  kill -0 "$node" 2>/dev/null || { echo "error: plaudit-node exited" >&2; exit 1; }
  if [ "$i" = 300 ]; then echo "error: plaudit-node not ready after 30 s" >&2; exit 1; fi
  sleep 0.1
done

p() { echo "\$ plaudit $*"; "$bin/plaudit" --addr "$LISTEN" "$@"; echo; }
p biz create --name video --id 1
p like --biz 1 --entity 1001 --user 7 --owner 42
p like --biz 1 --entity 1002 --user 7 --owner 42
p like --biz 1 --entity 1001 --user 8
p like --biz 1 --entity 1001 --user 8
p dislike --biz 1 --entity 1002 --user 9
# Counts, likers and received totals are derived (an outbox between shards):
# they converge within milliseconds. Wait for the owner's total to reach 3.
for _ in $(seq 1 100); do
  "$bin/plaudit" --addr "$LISTEN" --json received --biz 1 --user 42 | grep -q '"likes":3' && break
  sleep 0.02
done
p status --biz 1 --user 7 1001 1002 1003
p counts --biz 1 1001 1002
p user-likes --biz 1 --user 7
p likers --biz 1 --entity 1001
p received --biz 1 --user 42
p --json counts --biz 1 1001 1002
# Rankings: a gift leaderboard per streamer, daily and monthly, at +08:00.
p rank create --id 1 --name gifts --dims ruid --granularity day,month --utc-offset +08:00
p score --rank 1 --item 501 --score 30 --dim ruid=42 --event-id 1
p score --rank 1 --item 502 --score 50 --dim ruid=42 --event-id 2
p score --rank 1 --item 501 --score 30 --dim ruid=42 --event-id 3
p score --rank 1 --item 501 --score 30 --dim ruid=42 --event-id 3
p top --rank 1 --dim ruid=42 --granularity day
p rank-of --rank 1 --dim ruid=42 --granularity month --item 502
p boards --rank 1
p admin status
echo "$ plaudit like --biz 99 --entity 1 --user 1   # unknown business"
"$bin/plaudit" --addr "$LISTEN" like --biz 99 --entity 1 --user 1 2>&1 || true
echo
if [ "${KEEP:-0}" = 1 ]; then
  echo "node is running (pid $node); stop it with: kill $node"
  trap - EXIT
else
  echo "demo done; stopping the node (KEEP=1 keeps it running)"
fi
