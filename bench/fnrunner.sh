#!/usr/bin/env bash
# Function runner benchmarks (issue 4), each figure next to its peer from the same run:
#   1. exec path: EvaluateFunction latency p50/p99 (sequential calls on one HTTP/2
#      connection) next to running the same binary directly with the same input
#      (fork/exec, the ResourceList to stdin, stdout read to EOF, wait), and the difference,
#      interleaved call by call so that other load on the machine hits both alike;
#   2. warm-worker path (FunctionConfig podExecutor) latency p50/p99, same function;
#   3. evaluations/s with 64 concurrent callers (64 streams on one connection, h2load
#      -c1 -m64) for both paths, cross-checked by krm-bench, which counts only calls that
#      came back grpc-status 0 with the ResourceList intact (h2load cannot see trailers);
#      the exec figure's peer is the binary run directly, 64 copies at a time.
# The function is bench/krm-cat (stdin to stdout); the input a 3-item ResourceList of ~2 KiB.
# Usage: bench/fnrunner.sh [BUILD_DIR]   (make bench)
# Env: BENCH_FN_CALLS (500 timed rounds for the latency figures), BENCH_SECONDS (5, per
#      throughput figure), BENCH_FN_STREAMS (64), BENCH_FN_WORKERS (the podExecutor's
#      maxParallelExecutions, 1), BENCH_FN_PER_WORKER (its preferredMaxQueueLength, 64).
set -euo pipefail
cd "$(dirname "$0")/.."
build=$(realpath "${1:-build}") # absolute: workers start in their own directory
calls=${BENCH_FN_CALLS:-500}
warmup=50
duration=${BENCH_SECONDS:-5}
streams=${BENCH_FN_STREAMS:-64}
workers=${BENCH_FN_WORKERS:-1}
per_worker=${BENCH_FN_PER_WORKER:-64}
token=funcd-dev-token
krm="$build/bench/krm-bench"
work=$(mktemp -d /tmp/fnb.XXXX) # short: worker socket paths must fit in 108 bytes
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
  [ -n "${BENCH_KEEP:-}" ] || rm -rf "$work"
}
trap cleanup EXIT

for f in "$build/bin/funcd/funcd" "$krm" "$build/bench/krm-cat" "$build/shims/funcd-exec"; do
  [ -x "$f" ] || { echo "fnrunner.sh: $f is missing: meson compile -C $build" >&2; exit 1; }
done
if ! command -v h2load >/dev/null; then
  echo "bench: installing nghttp2-client (h2load)" >&2
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo=sudo
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends nghttp2-client >/dev/null
fi

# The function twice: as a binaryExecutor path and as a worker image directory
# (FUNCTIONS_DIR/<image name>/function, see lib/fnrunner/worker.c).
fns="$work/fns"
mkdir -p "$fns/catw"
cp "$build/bench/krm-cat" "$fns/cat"
cp "$build/bench/krm-cat" "$fns/catw/function"

rl="$work/rl.yaml"
cat >"$rl" <<'YAML'
apiVersion: config.kubernetes.io/v1
kind: ResourceList
items:
- apiVersion: apps/v1
  kind: Deployment
  metadata:
    name: frontend
    namespace: shop
    labels: {app.kubernetes.io/name: frontend, app.kubernetes.io/part-of: shop, tier: web}
    annotations: {config.kubernetes.io/index: '0', internal.config.kubernetes.io/path: frontend.yaml}
  spec:
    replicas: 3
    selector:
      matchLabels: {app.kubernetes.io/name: frontend}
    template:
      metadata:
        labels: {app.kubernetes.io/name: frontend, tier: web}
      spec:
        containers:
        - name: frontend
          image: registry.example.com/shop/frontend:1.8.2
          ports: [{containerPort: 8080, name: http}]
          env: [{name: CART_URL, value: 'http://cart.shop.svc:8080'}, {name: LOG_LEVEL, value: info}]
          resources: {requests: {cpu: 100m, memory: 128Mi}, limits: {memory: 256Mi}}
          readinessProbe: {httpGet: {path: /healthz, port: http}, periodSeconds: 5}
- apiVersion: v1
  kind: Service
  metadata:
    name: frontend
    namespace: shop
    labels: {app.kubernetes.io/name: frontend, app.kubernetes.io/part-of: shop}
    annotations: {config.kubernetes.io/index: '1', internal.config.kubernetes.io/path: frontend.yaml}
  spec:
    type: ClusterIP
    selector: {app.kubernetes.io/name: frontend}
    ports: [{name: http, port: 80, targetPort: http, protocol: TCP}]
- apiVersion: v1
  kind: ConfigMap
  metadata:
    name: frontend-settings
    namespace: shop
    labels: {app.kubernetes.io/name: frontend, app.kubernetes.io/part-of: shop}
    annotations: {config.kubernetes.io/index: '0', internal.config.kubernetes.io/path: settings.yaml}
  data:
    currency: EUR
    catalog-page-size: '48'
    feature-flags: 'new-checkout=true,recommendations=true,reviews=false,gift-cards=true'
    banner: 'Free shipping on orders over 50 EUR. Returns are free for 30 days after delivery.'
    support-email: support@shop.example.com
functionConfig:
  apiVersion: v1
  kind: ConfigMap
  metadata: {name: cat-config}
  data: {mode: passthrough}
YAML
rl_bytes=$(wc -c <"$rl")

load_before=$(cut -d' ' -f1 /proc/loadavg) # other work on the machine skews every figure
"$build/bin/funcd/funcd" --memory --dev --listen 127.0.0.1:0 --data-plane-listen 127.0.0.1:0 \
  --fn-runner-listen 127.0.0.1:0 --functions-dir "$fns" --shims "$build/shims" \
  --state-dir "$work/s" 2>"$work/funcd.log" &
pids+=($!)
for _ in $(seq 200); do grep -q 'function runner listening' "$work/funcd.log" && break; sleep 0.05; done
api="http://$(sed -n 's/.*control plane listening on //p' "$work/funcd.log")"
runner=$(sed -n 's/.*function runner listening on //p' "$work/funcd.log")
[ -n "$runner" ] || { echo "fnrunner.sh: funcd did not start:" >&2; cat "$work/funcd.log" >&2; exit 1; }

config() { # name json-spec
  curl -sf -o /dev/null -H "Authorization: Bearer $token" -H 'Content-Type: application/json' \
    -d "{\"apiVersion\":\"funcd.dev/v1\",\"kind\":\"FunctionConfig\",\"metadata\":{\"name\":\"$1\"},\"spec\":$2}" \
    "$api/apis/funcd.dev/v1/namespaces/default/functionconfigs"
}
config cat '{"image":"cat","binaryExecutor":{"tags":["v1"],"path":"cat"}}'
config catw "{\"image\":\"catw\",\"podExecutor\":{\"tags\":[\"v1\"],\"timeToLive\":\"30m\",
  \"maxParallelExecutions\":$workers,\"preferredMaxQueueLength\":$per_worker}}"

# The warm worker: its socket appears once the runner started it from the FunctionConfig.
for _ in $(seq 400); do compgen -G "$work/s/fnrun/w*/worker.sock" >/dev/null && break; sleep 0.025; done
compgen -G "$work/s/fnrun/w*/worker.sock" >/dev/null ||
  { echo "fnrunner.sh: no warm worker for catw:" >&2; cat "$work/funcd.log" >&2; exit 1; }

field() { sed -n "s/.*$1=\([^ ]*\).*/\1/p"; }
# ---- 1 and 2: latency -----------------------------------------------------------------
# Interleaved: each round runs the binary directly, then calls cat:v1, then catw:v1.
lat=$("$krm" latency "$calls" "$warmup" "$rl" "$fns/cat" "$runner" cat:v1 catw:v1)

# ---- 3: throughput, 64 streams on one connection --------------------------------------
url="http://$runner/evaluator.FunctionEvaluator/EvaluateFunction"
h2rate() { # image -> req/s, or a note when any request failed at the HTTP level
  "$krm" body "$rl" "$1" "$work/body.$1"
  local out
  out=$(h2load -c1 -m"$streams" -D"$duration" --warm-up-time=1 -d "$work/body.$1" \
    -H 'content-type: application/grpc' -H 'te: trailers' "$url")
  local done ok
  done=$(echo "$out" | sed -n 's/^requests: .* \([0-9]*\) done.*/\1/p')
  ok=$(echo "$out" | sed -n 's/^status codes: \([0-9]*\) 2xx.*/\1/p')
  if [ "$done" != "$ok" ] || [ "${done:-0}" -eq 0 ]; then
    echo "fnrunner.sh: h2load for $1: $ok of $done requests got 2xx:" >&2; echo "$out" >&2
  fi
  echo "$out" | sed -n 's/^finished in [^,]*, \([0-9.]*\) req\/s.*/\1/p'
}
exec_h2=$(h2rate cat:v1)
worker_h2=$(h2rate catw:v1)
direct_load=$("$krm" direct-load "$duration" "$streams" "$rl" "$fns/cat")
exec_load=$("$krm" load "$duration" "$streams" "$rl" "$runner" cat:v1) || true
worker_load=$("$krm" load "$duration" "$streams" "$rl" "$runner" catw:v1) || true
live_workers=$(compgen -G "$work/s/fnrun/w*/worker.sock" | wc -l)

sub() { python3 -c "print(f'{float($1)-float($2):.3f}')"; }
pct() { echo "$lat" | grep "^$1 " | field "$2"; }
d50=$(pct direct p50_ms); d99=$(pct direct p99_ms)
e50=$(pct cat:v1 p50_ms); e99=$(pct cat:v1 p99_ms)
w50=$(pct catw:v1 p50_ms); w99=$(pct catw:v1 p99_ms)
checked() { echo "$1 ($(echo "$2" | field ok) ok, $(echo "$2" | field failed) failed)"; }

printf '\nfunction runner: krm-cat, a %s-byte ResourceList of 3 items, loopback, %s cores, load %s -> %s\n' \
  "$rl_bytes" "$(nproc)" "$load_before" "$(cut -d' ' -f1 /proc/loadavg)"
printf '%-62s %s\n' "latency, $calls rounds (after $warmup), sequential, one connection" "p50 / p99 ms"
printf '%-62s %s / %s\n' "exec: the binary run directly (fork/exec, stdin, stdout, wait)" "$d50" "$d99"
printf '%-62s %s / %s\n' "exec: funcd EvaluateFunction (binaryExecutor cat:v1)" "$e50" "$e99"
printf '%-62s %s / %s\n' "exec: added by funcd" "$(sub "$e50" "$d50")" "$(sub "$e99" "$d99")"
printf '%-62s %s / %s\n' "warm worker: funcd EvaluateFunction (podExecutor catw:v1)" "$w50" "$w99"
printf '%-62s %s / %s\n' "warm worker: added over the direct run" "$(sub "$w50" "$d50")" "$(sub "$w99" "$d99")"
printf '\n%-62s %s\n' "evaluations/s, $streams concurrent streams on one connection" "h2load -c1 -m$streams -D$duration"
printf '%-62s %s\n' "exec (cat:v1)" "$exec_h2"
printf '%-62s %s\n' "  peer: the binary run directly, $streams at a time" "$(echo "$direct_load" | field rate)"
printf '%-62s %s\n' "warm worker (catw:v1; maxParallelExecutions $workers, per worker $per_worker)" "$worker_h2"
printf '%-62s %s\n' "  krm-bench, grpc-status checked: exec" "$(checked "$(echo "$exec_load" | field rate)" "$exec_load")"
printf '%-62s %s\n' "  krm-bench, grpc-status checked: warm worker" "$(checked "$(echo "$worker_load" | field rate)" "$worker_load")"
printf '%-62s %s\n' "warm workers of catw at the end" "$live_workers"
