#!/usr/bin/env bash
# Durable-substrate benchmarks (issue 6), each next to its peer in the same run:
#   (a) create throughput through the API: `funcd --memory` vs `funcd --data-dir`
#       (sqlite store, synchronous=FULL), BENCH_CREATES Secrets over
#       BENCH_CONNECTIONS keep-alive connections (bench/create_bench.c);
#   (b) restart time with BENCH_FUNCTIONS stored Functions: from exec to the first
#       200 on GET /healthz, and to the full list answering.
# Usage: bench/durable.sh [BUILD_DIR]   (a release build: buildtype=release, no sanitizers)
# Prints one "durable: ..." summary line per figure.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
creates=${BENCH_CREATES:-5000}
conns=${BENCH_CONNECTIONS:-16}
nfns=${BENCH_FUNCTIONS:-10000}
token=funcd-dev-token
funcd="$build/bin/funcd/funcd"
bench="$build/bench/create-bench"
work=$(mktemp -d /tmp/fdur.XXXX)
pid=
cleanup() {
  if [ -n "$pid" ]; then kill -9 "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
  [ -n "${BENCH_KEEP:-}" ] || rm -rf "$work"
}
trap cleanup EXIT
for f in "$funcd" "$bench"; do
  [ -x "$f" ] || { echo "durable.sh: $f is missing (meson compile -C $build)"; exit 1; }
done
now_ms() { date +%s%3N; }

# start LOG ARGS...: starts funcd in the background, sets pid and api.
start() {
  local log=$1; shift
  "$funcd" --listen 127.0.0.1:0 --data-plane-listen 127.0.0.1:0 --fn-runner-listen 127.0.0.1:0 \
    --dev --log-level warn --namespace-object-quota -1 "$@" 2>"$log" &
  pid=$!
  for _ in $(seq 2000); do grep -q 'control plane listening' "$log" && break; sleep 0.005; done
  api="http://$(sed -n 's/.*control plane listening on //p' "$log")"
}
stop() { kill -TERM "$pid"; wait "$pid" || true; pid=; }

# (a) creates/s, memory vs sqlite
declare -A rate
for mode in memory data-dir; do
  if [ $mode = memory ]; then start "$work/a-$mode.log" --memory
  else start "$work/a-$mode.log" --data-dir "$work/a-data"; fi
  out=$("$bench" "$api" "$token" secrets "$creates" "$conns" s)
  echo "  $mode: $out"
  rate[$mode]=$(sed -n 's/.*: \([0-9]*\)\/s.*/\1/p' <<<"$out")
  stop
done
echo "durable: creates through the API: memory ${rate[memory]}/s, sqlite ${rate[data-dir]}/s" \
  "($(awk -v a="${rate[data-dir]}" -v b="${rate[memory]}" 'BEGIN{printf "%.2f", a/b}')x of memory;" \
  "$creates Secrets, $conns connections)"

# (b) restart with $nfns Functions
mkdir -p "$work/fn"
cp "$build/tests/e2e/serving-fixture-worker" "$work/fn/worker" 2>/dev/null || : >"$work/fn/worker"
start "$work/b1.log" --data-dir "$work/b-data"
echo "  $("$bench" "$api" "$token" functions "$nfns" "$conns" f "$work/fn")"
# let the controller write every status before the restart is timed
sleep 2
stop
du -sh "$work/b-data/store.db"* | sed 's/^/  /'
t0=$(now_ms)
start "$work/b2.log" --data-dir "$work/b-data"
until curl -sf -o /dev/null "$api/healthz"; do sleep 0.002; done
t_health=$(( $(now_ms) - t0 ))
list="$api/apis/funcd.dev/v1/namespaces/default/functions"
n=0
until [ "$n" = "$nfns" ]; do
  n=$(curl -sf -H "Authorization: Bearer $token" "$list" | grep -o '"kind":"Function"' | wc -l || true)
done
t_list=$(( $(now_ms) - t0 ))
stop
echo "durable: restart with $nfns functions: ${t_health} ms to the first /healthz 200," \
  "${t_list} ms to the list of $nfns (exec to answer)"
