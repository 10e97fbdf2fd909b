#!/usr/bin/env bash
# Async invocation (issue 16, docs/eventing.md) next to synchronous invocation
# of the same function, in one run, with the memory store and with sqlite
# (--data-dir):
#   (a) accepted per second: BENCH_N (500) POSTs to /async/fn/... on one
#       keep-alive connection, against BENCH_N POSTs to /fn/... the same way;
#   (b) end-to-end completion latency p50/p99 of those async invocations
#       (status.latencyMs from the API: submitted to final, in milliseconds),
#       against the p50/p99 of synchronous requests made one at a time.
# Usage: bash bench/async.sh [BUILD_DIR]   (a release build: buildtype=release,
# no sanitizers; e.g. build-rel). Prints one "async: ..." line per figure.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
n=${BENCH_N:-500}
work=$(mktemp -d /tmp/fasync.XXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
  [ -n "${BENCH_KEEP:-}" ] || rm -rf "$work"
}
trap cleanup EXIT
# shellcheck source=lib.sh
. bench/lib.sh
[ -x "$build/bin/funcd/funcd" ] && [ -x "$build/bench/bench-worker" ] ||
  { echo "async.sh: build $build first (meson compile -C $build)"; exit 1; }
mkdir -p "$work/native"
cp "$build/bench/bench-worker" "$work/native/worker"
now_ms() { date +%s%3N; }
auth=(-H "Authorization: Bearer $token")

bench_store() { # label funcd-store-flags...
  local label=$1; shift
  rm -rf "$work/s" "$work/data"
  funcd_store=("$@")
  start_funcd --log-level warn
  create echo native worker "$work/native" '{"minReplicas":1,"maxReplicas":4}'
  for _ in 1 2 3; do curl -sf -o /dev/null -d '{}' "$dp/fn/default/echo"; done
  local urls=() i t0 sync_ms async_ms
  for ((i = 0; i < n; i++)); do urls+=("$dp/fn/default/echo"); done
  t0=$(now_ms); curl -sf -d '{}' "${urls[@]}" >/dev/null; sync_ms=$(( $(now_ms) - t0 ))
  urls=()
  for ((i = 0; i < n; i++)); do urls+=("$dp/async/fn/default/echo"); done
  t0=$(now_ms); curl -sf -d '{}' "${urls[@]}" >/dev/null; async_ms=$(( $(now_ms) - t0 ))
  echo "async ($label): $n accepted in ${async_ms} ms, $n synchronous in ${sync_ms} ms:" \
    "$(awk -v a="$async_ms" -v s="$sync_ms" -v n="$n" 'BEGIN{printf "%.0f accepted/s against %.0f synchronous/s", n*1000/a, n*1000/s}')"
  # wait until every one is final, then read the times
  local left=1
  for _ in $(seq 1200); do
    left=$(curl -sf "${auth[@]}" "$api/apis/funcd.dev/v1/namespaces/default/invocations" |
      python3 -c 'import json,sys; print(sum(1 for i in json.load(sys.stdin)["items"] if i["status"]["state"] not in ("Succeeded","Failed","DeadLettered")))')
    [ "$left" = 0 ] && break
    sleep 0.1
  done
  curl -sf "${auth[@]}" "$api/apis/funcd.dev/v1/namespaces/default/invocations" >"$work/inv.json"
  # synchronous latency, one request at a time
  for ((i = 0; i < 200; i++)); do
    curl -sf -o /dev/null -w '%{time_total}\n' -d '{}' "$dp/fn/default/echo"
  done >"$work/sync.txt"
  python3 - "$work/inv.json" "$work/sync.txt" "$label" "$left" <<'PY'
import json, sys
def pct(v, p): v = sorted(v); return v[min(len(v) - 1, int(len(v) * p))]
items = json.load(open(sys.argv[1]))["items"]
lat = [i["status"]["latencyMs"] for i in items if "latencyMs" in i["status"]]
sync = [float(l) * 1000 for l in open(sys.argv[2]) if l.strip()]
print(f"async ({sys.argv[3]}): end-to-end p50 {pct(lat, .5):.1f} ms p99 {pct(lat, .99):.1f} ms "
      f"({len(lat)} done, {sys.argv[4]} not final); synchronous p50 {pct(sync, .5):.2f} ms "
      f"p99 {pct(sync, .99):.2f} ms")
PY
  kill -TERM "$funcd_pid"; wait "$funcd_pid" || true
}

bench_store memory --memory
bench_store sqlite --data-dir "$work/data"
