# Shared by the bench-*.sh scripts (sourced, not run): building the release
# binaries, starting and stopping Redis and a plaudit-node on 127.0.0.1,
# waiting for them, and reading numbers back out of plaudit-bench's JSON.
#
# The sourcing script sets NAME (for log lines) and KEEP (1: keep the work
# directory), then calls bench_init. It may set SERVER_WRAP (below).

: "${CARGO_TARGET_DIR:=$HOME/.cache/plaudit-target}"
export CARGO_TARGET_DIR
BENCH=$CARGO_TARGET_DIR/release/plaudit-bench
NODE=$CARGO_TARGET_DIR/release/plaudit-node

log() { echo "[$NAME] $*" >&2; }

# Words put before the command of every server start_redis and start_node
# launch, e.g. (taskset -c 0) to pin it to one core from its first
# instruction. Pinning a running node (taskset -p) would be too late: Tokio
# sizes its worker pool from the cores the process may use when it starts.
SERVER_WRAP=()

# Builds the bench and the node (release) unless SKIP_BUILD=1.
bench_build() {
    if [[ ${SKIP_BUILD:-0} != 1 ]]; then
        log "building release: plaudit-bench plaudit-node"
        cargo build --release --locked -p plaudit-bench -p plaudit-node
    fi
}

# Installs redis-server from Debian if it is missing.
ensure_redis() {
    command -v redis-server >/dev/null && return 0
    log "installing redis-server"
    local sudo=""
    [[ $(id -u) -ne 0 ]] && sudo=sudo
    $sudo apt-get update -qq
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null
}

port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

require_free_ports() {
    local p
    for p in "$@"; do
        port_free "$p" || { log "port $p on 127.0.0.1 is already in use"; exit 1; }
    done
}

PIDS=()

# Stops a server: SIGTERM, up to 10 s to exit, then SIGKILL.
stop_pid() {
    local pid=$1
    [[ -n $pid ]] && kill -0 "$pid" 2>/dev/null || return 0
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
    kill -9 "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
}

bench_cleanup() {
    local rc=$?
    local pid
    for pid in "${PIDS[@]}"; do stop_pid "$pid"; done
    if [[ ${KEEP:-0} == 1 || $rc -ne 0 ]]; then
        log "logs and data kept in $WORK"
    else
        rm -rf "$WORK"
    fi
    exit $rc
}

# Makes the work directory and stops every started server on exit.
bench_init() {
    cd "$(dirname "${BASH_SOURCE[0]}")/../.."
    WORK=$(mktemp -d "/tmp/plaudit-$NAME.XXXXXX")
    trap bench_cleanup EXIT
    trap 'exit 130' INT TERM
}

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

node_ready() ( # admin port; a subshell, so a failed connect cannot end the script
    exec 3<>"/dev/tcp/127.0.0.1/$1" || exit 1
    printf 'GET /readyz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n' >&3
    read -r -t 2 status <&3 || exit 1
    [[ $status == *" 200 "* ]]
)

# start_redis PORT: AOF everysec, 127.0.0.1 only, data in $WORK/redis. Sets REDIS_PID.
start_redis() {
    local port=$1
    mkdir -p "$WORK/redis"
    log "starting redis-server on 127.0.0.1:$port (AOF everysec) in $WORK/redis"
    "${SERVER_WRAP[@]}" redis-server --port "$port" --bind 127.0.0.1 --protected-mode yes --save '' \
        --appendonly yes --appendfsync everysec --dir "$WORK/redis" \
        --logfile "$WORK/redis/redis.log" --daemonize no &
    REDIS_PID=$!
    PIDS+=("$REDIS_PID")
    wait_for "redis" 20 redis-cli -h 127.0.0.1 -p "$port" ping
}

# start_node PORT ADMIN_PORT [node flags...]: data in $WORK/node. Sets NODE_PID.
start_node() {
    local port=$1 admin=$2
    shift 2
    mkdir -p "$WORK/node"
    log "starting plaudit-node on 127.0.0.1:$port (admin $admin) in $WORK/node"
    "${SERVER_WRAP[@]}" "$NODE" --data-dir "$WORK/node" --listen "127.0.0.1:$port" --admin "127.0.0.1:$admin" \
        "$@" >"$WORK/node.log" 2>&1 &
    NODE_PID=$!
    PIDS+=("$NODE_PID")
    wait_for "plaudit-node /readyz" 60 node_ready "$admin" || { tail -20 "$WORK/node.log" >&2; exit 1; }
}

# Redis used_memory in bytes.
redis_memory() {
    redis-cli -h 127.0.0.1 -p "$1" info memory | tr -d '\r' | grep '^used_memory:' | cut -d: -f2
}

# A process's resident set in bytes.
rss_of() { awk '/^VmRSS:/ {print $2 * 1024}' "/proc/$1/status"; }

# One metric's value (summed over its label sets) from the node's /metrics.
node_metric() { # admin port, metric name
    local out
    out=$( (exec 3<>"/dev/tcp/127.0.0.1/$1" &&
        printf 'GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n' >&3 &&
        cat <&3) 2>/dev/null) || return 0
    awk -v m="$2" '$1 == m || index($1, m "{") == 1 { s += $2; n++ } END { if (n) printf "%.0f\n", s }' <<<"$out"
}

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

mib() {
    if [[ -n $1 ]]; then awk -v b="$1" 'BEGIN { printf "%.1f MiB", b / 1048576 }'; else echo "?"; fi
}

# Starts three nodes formed into one cluster (a secret in $WORK) on ports
# from BASE_PORT (node i: client BASE_PORT+10i+1, admin +2, peer +3) and
# waits for all three to be ready. Sets CLUSTER_SEEDS (client addresses,
# comma separated) and CLUSTER_ADMINS (admin ports); the nodes join PIDS.
# Arguments: extra plaudit-node flags for every node.
start_cluster3() {
    echo "$NAME-secret-$(date +%s%N)" >"$WORK/secret"
    local join="" i c a p
    for i in 1 2 3; do join+="${join:+,}127.0.0.1:$((BASE_PORT + 10 * i + 3))"; done
    CLUSTER_SEEDS=""
    CLUSTER_ADMINS=()
    for i in 1 2 3; do
        c=$((BASE_PORT + 10 * i + 1)); a=$((BASE_PORT + 10 * i + 2)); p=$((BASE_PORT + 10 * i + 3))
        require_free_ports "$c" "$a" "$p"
        mkdir -p "$WORK/n$i"
        log "starting cluster node $i on 127.0.0.1:$c (admin $a, peer $p)"
        "$NODE" --node-id "$i" --data-dir "$WORK/n$i" --listen "127.0.0.1:$c" \
            --admin "127.0.0.1:$a" --peer-listen "127.0.0.1:$p" --join "$join" \
            --bootstrap-expect 3 --cluster-secret-file "$WORK/secret" "$@" >"$WORK/n$i.log" 2>&1 &
        PIDS+=("$!")
        CLUSTER_SEEDS+="${CLUSTER_SEEDS:+,}127.0.0.1:$c"
        CLUSTER_ADMINS+=("$a")
    done
    for a in "${CLUSTER_ADMINS[@]}"; do
        wait_for "cluster node (admin $a) /readyz" 60 node_ready "$a" || return 1
    done
}
