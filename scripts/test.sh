#!/usr/bin/env bash
# Runs every check and test of the workspace, the way CI does:
#   format, clippy (warnings are errors), build the binaries the end-to-end
#   tests spawn, then every test. Prints the total test count at the end; a
#   run that executes no test fails.
#
# Needs the Rust toolchain (cargo, rustfmt, clippy) and, for the tests that
# partition nodes with the kernel's packet filter (tests/src/partition.rs),
# root and iptables, which this script installs from Debian if missing. The
# tests start their own plaudit-node processes on 127.0.0.1 (the Kubernetes
# manifest test, t83, on 127.0.83.x under names it adds to /etc/hosts: root).
# The manifests in deploy/kubernetes are validated offline with
# kubernetes-validate (PyPI), installed into a virtualenv beside the target
# directory.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v cargo >/dev/null 2>&1; then
  echo "error: cargo not found; install Rust (https://rustup.rs) first" >&2
  exit 1
fi
for comp in rustfmt clippy; do
  if ! cargo "${comp/rustfmt/fmt}" --version >/dev/null 2>&1; then
    if command -v rustup >/dev/null 2>&1; then rustup component add "$comp"; fi
  fi
done

sudo=""
[ "$(id -u)" -ne 0 ] && sudo=sudo
missing=()
command -v iptables >/dev/null 2>&1 || missing+=(iptables)
python3 -c 'import venv, ensurepip' >/dev/null 2>&1 || missing+=(python3-venv)
if [ "${#missing[@]}" -gt 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "== installing ${missing[*]} (partition tests, manifest validation)"
  $sudo apt-get update -qq
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# Build outside the clone so repeated runs (and CI on the same machine) reuse it.
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/plaudit-target}"
export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"
mkdir -p "$CARGO_TARGET_DIR"
log="$(mktemp)"
trap 'rm -f "$log"' EXIT

echo "== cargo fmt --check"
cargo fmt --all -- --check
echo "== cargo clippy --all-targets -- -D warnings"
cargo clippy --workspace --all-targets --locked -- -D warnings
echo "== kubernetes-validate --strict deploy/kubernetes"
venv="$CARGO_TARGET_DIR/../plaudit-venv"
if [ ! -x "$venv/bin/kubernetes-validate" ]; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check kubernetes-validate==1.37.0
fi
# Every resource the kustomization lists (the Secret is generated from files
# a user makes; kustomization.yaml itself is no Kubernetes resource).
resources=$(sed -n '/^resources:/,/^[a-zA-Z]/s/^  - //p' deploy/kubernetes/kustomization.yaml)
(cd deploy/kubernetes && "$venv/bin/kubernetes-validate" --strict --quiet $resources)
echo "manifests valid: $(echo $resources | wc -w) resources"
echo "== cargo build --bins"
cargo build --workspace --bins --locked
echo "== cargo test"
set +e
cargo test --workspace --locked --no-fail-fast 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
set -e

# Only libtest's summaries count: a test's own output may say "N failed".
count() { grep -E '^test result: ' "$log" | grep -Eo "[0-9]+ $1" | awk '{s+=$1} END {print s+0}'; }
passed=$(count passed)
failed=$(count failed)
ignored=$(count ignored)
echo
echo "tests: $passed passed, $failed failed, $ignored skipped"
if [ "$status" -ne 0 ]; then
  exit "$status"
fi
if [ "$passed" -eq 0 ]; then
  echo "error: no test was executed" >&2
  exit 1
fi
