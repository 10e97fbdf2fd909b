#!/usr/bin/env bash
# Workflow engine overhead (issue 17, docs/workflows.md), each figure next to
# its peer in the same run, with the memory store and with sqlite (--data-dir):
#   (a) a run of BENCH_STEPS (100) sequential trivial steps against the same
#       number of direct synchronous invocations of the same function (one
#       keep-alive connection to the data plane): per-step overhead =
#       (run time - direct time) / steps;
#   (b) runs started per second: BENCH_RUNS (200) one-step runs posted back to
#       back, until every one Succeeded.
# Usage: bash bench/workflow.sh [BUILD_DIR]   (a release build: buildtype=release,
# no sanitizers; e.g. build-rel). Prints one "workflow: ..." line per figure.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
steps=${BENCH_STEPS:-100}
nruns=${BENCH_RUNS:-200}
work=$(mktemp -d /tmp/fwf.XXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
  [ -n "${BENCH_KEEP:-}" ] || rm -rf "$work"
}
trap cleanup EXIT
# shellcheck source=lib.sh
. bench/lib.sh
[ -x "$build/bin/funcd/funcd" ] && [ -x "$build/bench/bench-worker" ] ||
  { echo "workflow.sh: build $build first (meson compile -C $build)"; exit 1; }
mkdir -p "$work/native"
cp "$build/bench/bench-worker" "$work/native/worker"
now_ms() { date +%s%3N; }
auth=(-H "Authorization: Bearer $token")

# The JSON of a workflow of $1 sequential steps calling function "echo".
chain() {
  local n=$1 s out='{"apiVersion":"funcd.dev/v1","kind":"Workflow","metadata":{"name":"chain'$n'"},"spec":{"steps":['
  for ((s = 0; s < n; s++)); do
    [ $s -gt 0 ] && out+=','
    out+='{"name":"s'$s'","function":"echo"'
    [ $s -gt 0 ] && out+=',"dependsOn":["s'$((s - 1))'"]'
    out+='}'
  done
  echo "$out]}}"
}

# succeeded RUN_ID: whether the run Succeeded (a run's status starts with its phase).
succeeded() {
  curl -sf "${auth[@]}" "$api/apis/funcd.dev/v1/namespaces/default/workflowruns/$1" |
    grep -q '"status":{"phase":"Succeeded"'
}

bench_store() { # label funcd-store-flags...
  local label=$1; shift
  funcd_store=("$@")
  start_funcd --log-level warn
  create echo native worker "$work/native" '{"minReplicas":1,"maxReplicas":1}'
  for n in "$steps" 1; do
    curl -sf -o /dev/null "${auth[@]}" -d "$(chain "$n")" "$api/apis/funcd.dev/v1/namespaces/default/workflows"
  done
  # warm the worker and the engine
  for _ in 1 2 3; do curl -sf -o /dev/null -d '{}' "$dp/fn/default/echo"; done
  # (a) direct: $steps POSTs on one connection
  local urls=() i
  for ((i = 0; i < steps; i++)); do urls+=("$dp/fn/default/echo"); done
  local t0 t1 direct run id
  # one curl, one keep-alive connection; -d applies to every URL
  t0=$(now_ms); curl -sf -d '{}' "${urls[@]}" >/dev/null; t1=$(now_ms); direct=$((t1 - t0))
  id=$(curl -sf "${auth[@]}" -d '{}' "$api/apis/funcd.dev/v1/namespaces/default/workflows/chain$steps/runs" |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["metadata"]["name"])')
  t0=$(now_ms)
  until succeeded "$id"; do sleep 0.005; done
  t1=$(now_ms); run=$((t1 - t0))
  echo "workflow ($label): a run of $steps steps ${run} ms, $steps direct invocations ${direct} ms:" \
    "$(awk -v r="$run" -v d="$direct" -v n="$steps" 'BEGIN{printf "%.2f ms per step (engine overhead %.2f ms per step)", r/n, (r-d)/n}')"
  # (b) runs/s of the one-step workflow
  local posts=()
  for ((i = 0; i < nruns; i++)); do posts+=("$api/apis/funcd.dev/v1/namespaces/default/workflows/chain1/runs"); done
  t0=$(now_ms)
  curl -sf "${auth[@]}" -d '{}' "${posts[@]}" >/dev/null
  local posted=$(( $(now_ms) - t0 )) done=0
  until [ "$done" -ge "$nruns" ]; do
    done=$(curl -sf "${auth[@]}" "$api/apis/funcd.dev/v1/namespaces/default/workflowruns" |
      grep -o '"status":{"phase":"Succeeded"' | wc -l || true)
    done=$((done > 0 ? done - 1 : 0)) # the chain run above
    sleep 0.05
  done
  t1=$(now_ms)
  echo "workflow ($label): $nruns one-step runs posted in ${posted} ms, all Succeeded after $((t1 - t0)) ms:" \
    "$(awk -v n="$nruns" -v t="$((t1 - t0))" 'BEGIN{printf "%.0f runs/s", n*1000/t}')"
  kill -TERM "$funcd_pid"; wait "$funcd_pid" || true
}

bench_store memory --memory
bench_store sqlite --data-dir "$work/data"
