#!/usr/bin/env bash
# KV through the local API (docs/services.md): a sandboxed python3 function runs a loop of
# KV operations through funcd.kv and reports operations per second, on the memory store and
# on sqlite (--data-dir), next to the floor of the same loop: a local API call answered at
# once (a store that is not bound: 403, no store access), i.e. the HTTP round trip over the
# Unix socket alone.
#
#   bash bench/kv.sh [BUILD_DIR]      (default: build-rel; N=2000 operations per kind)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build-rel}
N=${N:-2000}
work=$(mktemp -d /tmp/fkv.XXXX)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done; rm -rf "$work"; }
trap cleanup EXIT
. bench/lib.sh
mkdir -p "$work/code"
cat >"$work/code/main.py" <<PY
import funcd, time
def handler(req):
    kv, n, out = funcd.kv('bench'), $N, {}
    t = time.perf_counter()
    for i in range(n):
        try:
            funcd.kv('unbound').get('k')
        except funcd.Error:
            pass
    out['floor'] = n / (time.perf_counter() - t)
    t = time.perf_counter()
    for i in range(n):
        kv.put('k%d' % (i % 100), 'value-%d' % i)
    out['put'] = n / (time.perf_counter() - t)
    t = time.perf_counter()
    for i in range(n):
        kv.get('k%d' % (i % 100))
    out['get'] = n / (time.perf_counter() - t)
    t = time.perf_counter()
    for i in range(n):
        kv.incr('counter')
    out['incr'] = n / (time.perf_counter() - t)
    return out
PY
run() { # label, then funcd flags
  local label=$1
  shift
  : >"$work/funcd.log"
  funcd_store=(--memory)
  [ "$label" = sqlite ] && funcd_store=(--data-dir "$work/data")
  start_funcd
  curl -sf -o /dev/null -H "Authorization: Bearer $token" -d '{"apiVersion":"funcd.dev/v1","kind":"KVStore","metadata":{"name":"bench"},"spec":{}}' \
    "$api/apis/funcd.dev/v1/namespaces/default/kvstores"
  create kvbench python3 main.handler "$work/code" '{"minReplicas":1}' '{}' none '"bindings":{"kv":["bench"]},"timeout":"5m"'
  wait_ok "$dp/fn/default/kvbench/" >/dev/null 2>&1 || true
  out=$(curl -s -m 300 -X POST "$dp/fn/default/kvbench/")
  python3 - "$label" "$out" <<'PYR'
import json, sys
d = json.loads(sys.argv[2])
print(f"{sys.argv[1]:>7}: put {d['put']:8.0f}/s  get {d['get']:8.0f}/s  incr {d['incr']:8.0f}/s"
      f"   floor (a call answered at once) {d['floor']:8.0f}/s   get/floor {d['get']/d['floor']:.2f}")
PYR
  kill "$funcd_pid"; wait "$funcd_pid" 2>/dev/null || true
}
echo "load: $(cut -d' ' -f1-3 /proc/loadavg)  cpus: $(nproc)  N=$N per kind"
run memory
run sqlite
