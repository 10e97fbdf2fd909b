#!/usr/bin/env bash
# Serving benchmarks, each next to a peer measured in the same run:
#   1. warm path: requests/s and latency through funcd's gateway to a warm native
#      worker, through nginx proxy_pass (keepalive) to the same worker, and to the
#      worker directly (TCP). nginx and funcd are measured in BENCH_ROUNDS (5) rounds,
#      alternating which goes first, and the funcd / nginx ratio is given per round:
#      a background load that comes and goes hits both alike, and one lucky run
#      proves nothing. The load average and CPU count are printed with the figures;
#   2. cold start, zero -> first byte through the gateway, p50/p99 over N runs,
#      next to the floor (spawning the same worker and calling its socket);
#   3. funcd's RSS with 1,000 functions defined and 50 warm workers.
# Usage: bench/serving.sh [BUILD_DIR]   (make bench runs it after bench/run.sh)
#   BENCH_SECONDS (5) per wrk run, BENCH_CONNECTIONS (50), BENCH_ROUNDS (5), BENCH_COLD_RUNS (100),
#   BENCH_GATEWAY_THREADS (default: funcd's, one per usable CPU, at most 4; nginx gets as many
#   worker processes),
#   BENCH_WARM_ONLY=1 (part 1 only)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
duration=${BENCH_SECONDS:-5}
conns=${BENCH_CONNECTIONS:-50}
runs=${BENCH_COLD_RUNS:-100}
rounds=${BENCH_ROUNDS:-5}
work=$(mktemp -d /tmp/fb.XXXX) # short: worker socket paths must fit in 108 bytes
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
  [ -n "${BENCH_KEEP:-}" ] || rm -rf "$work"
}
trap cleanup EXIT
. bench/lib.sh
threads=$(bench_gateway_threads) # funcd's gateway threads = nginx's worker processes
export FUNCD_GATEWAY_THREADS=$threads
nginx_workers=$threads

command -v nginx >/dev/null || { echo "serving.sh: nginx is missing (bench/run.sh installs it)"; exit 1; }
start_funcd

# ---- 1. warm path ---------------------------------------------------------------
mkdir -p "$work/native"
cp "$build/bench/bench-worker" "$work/native/worker"
wport=$(free_port)
create warm native worker "$work/native" \
  '{"minReplicas":1,"maxReplicas":1,"concurrency":10000,"queueLength":10000,"idleTimeout":"1h"}' \
  "{\"BENCH_TCP_PORT\":\"$wport\"}" host
wait_ok "$dp/fn/default/warm/"
sock=$(first_worker_socket)

nport=$(free_port)
start_nginx "$work/nginx" "$nport" "$sock"

url_of() {
  case $1 in
    direct) echo "http://127.0.0.1:$wport/" ;;
    nginx) echo "http://127.0.0.1:$nport/" ;;
    funcd) echo "$dp/fn/default/warm/" ;;
  esac
}
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
declare -A R L
R[direct]=$(wrk -t1 -c"$conns" -d"${duration}s" "$(url_of direct)" | rps)
rounds_out=""
ratios=()
for r in $(seq "$rounds"); do
  if [ $((r % 2)) = 1 ]; then order="nginx funcd"; else order="funcd nginx"; fi
  declare -A X
  for target in $order; do X[$target]=$(wrk -t1 -c"$conns" -d"${duration}s" "$(url_of $target)" | rps); done
  q=$(ratio "${X[funcd]}" "${X[nginx]}")
  ratios+=("$q")
  rounds_out+=$(printf '%-58s %s' "round $r ($order): nginx / funcd requests/s, ratio" \
    "${X[nginx]} / ${X[funcd]}  $q")$'\n'
done
for target in direct nginx funcd; do
  L[$target]=$(wrk -t1 -c1 -d"${duration}s" --latency "$(url_of $target)" | lat)
done
load_after=$(cut -d' ' -f1-3 /proc/loadavg)
ratio_summary=$(printf '%s\n' "${ratios[@]}" | sort -n | awk '{v[NR]=$1} $1>=1 {k++}
  END {printf "min %s, median %s, max %s; %d of %d rounds >= 1.00", v[1], v[int((NR+1)/2)], v[NR], k, NR}')
if [ -n "${BENCH_WARM_ONLY:-}" ]; then
  printf '\n%-58s %s\n' "warm path (wrk -t1, loopback, one native worker)" "result"
  printf '%-58s %s\n' "CPUs; load average before / after" "$(nproc); $load_before / $load_after"
  printf '%-58s %s\n' "gateway threads (FUNCD_GATEWAY_THREADS)" "$threads (nginx worker processes: $nginx_workers)"
  printf '%-58s %s\n' "requests/s -c$conns: worker direct (TCP)" "${R[direct]}"
  printf '%s' "$rounds_out"
  printf '%-58s %s\n' "ratio funcd / nginx over $rounds rounds" "$ratio_summary"
  printf '%-58s %s\n' "latency p50 / p99 -c1: worker direct" "${L[direct]}"
  printf '%-58s %s\n' "latency p50 / p99 -c1: nginx" "${L[nginx]}"
  printf '%-58s %s\n' "latency p50 / p99 -c1: funcd" "${L[funcd]}"
  exit 0
fi

# ---- 2. cold starts ---------------------------------------------------------------
mkdir -p "$work/py" "$work/node" "$work/floor"
cat >"$work/py/main.py" <<'PY'
def handler(req):
    return "hello\n"
PY
cat >"$work/node/index.js" <<'JS'
exports.handler = async () => "hello\n";
JS
cold='{"minReplicas":0,"maxReplicas":1,"concurrency":10,"idleTimeout":"10ms"}'
create cold-native native worker "$work/native" "$cold"
create cold-python python3 main.handler "$work/py" "$cold"
have_node=0
if command -v node >/dev/null; then
  have_node=1
  create cold-node node index.js#handler "$work/node" "$cold"
fi
cs="$build/bench/bench-coldstart"
cold_out=$("$cs" floor "$runs" "$work/floor" -- "$work/native/worker")$'\n'
cold_out+=$("$cs" gateway "$runs" "$api" "$dp" cold-native "$token")$'\n'
cold_out+=$("$cs" floor "$runs" "$work/floor" -e FUNCD_HANDLER=main.handler -e "FUNCD_CODE_DIR=$work/py" \
  -e PYTHONDONTWRITEBYTECODE=1 -- /usr/bin/python3 "$build/shims/funcd-python.py")$'\n'
cold_out+=$("$cs" gateway "$runs" "$api" "$dp" cold-python "$token")$'\n'
if [ $have_node = 1 ]; then
  cold_out+=$("$cs" floor "$runs" "$work/floor" -e FUNCD_HANDLER=index.js#handler -e "FUNCD_CODE_DIR=$work/node" \
    -- "$(command -v node)" "$build/shims/funcd-node.js")$'\n'
  cold_out+=$("$cs" gateway "$runs" "$api" "$dp" cold-node "$token")$'\n'
fi

# ---- 3. memory with 1,000 functions and 50 warm workers ---------------------------
python3 - "$api" "$token" "$work/native" <<'PY'
import http.client, json, sys
api, token, code = sys.argv[1], sys.argv[2], sys.argv[3]
host = api.split("//")[1]
c = http.client.HTTPConnection(host)
for i in range(1000):
    fn = {"apiVersion": "funcd.dev/v1", "kind": "Function", "metadata": {"name": f"m{i}"},
          "spec": {"runtime": "native", "handler": "worker", "source": {"path": code},
                   "scaling": {"minReplicas": 0, "maxReplicas": 1, "idleTimeout": "1h"}}}
    c.request("POST", "/apis/funcd.dev/v1/namespaces/default/functions", json.dumps(fn),
              {"Authorization": "Bearer " + token, "Content-Type": "application/json"})
    r = c.getresponse(); r.read()
    assert r.status == 201, r.status
PY
sleep 1
for i in $(seq 0 49); do curl -sf -o /dev/null "$dp/fn/default/m$i/"; done
sleep 0.5
rss_kib=$(awk '/VmRSS/ {print $2}' /proc/$funcd_pid/status)
workers=$(ls -d "$work"/s/run/w* | wc -l)

printf '\n%-58s %s\n' "warm path (wrk -t1, loopback, one native worker)" "result"
printf '%-58s %s\n' "CPUs; load average before / after" "$(nproc); $load_before / $load_after"
printf '%-58s %s\n' "gateway threads (FUNCD_GATEWAY_THREADS)" "$threads (nginx worker processes: $nginx_workers)"
printf '%-58s %s\n' "requests/s -c$conns: worker direct (TCP)" "${R[direct]}"
printf '%s' "$rounds_out"
printf '%-58s %s\n' "ratio funcd / nginx over $rounds rounds" "$ratio_summary"
printf '%-58s %s\n' "latency p50 / p99 -c1: worker direct" "${L[direct]}"
printf '%-58s %s\n' "latency p50 / p99 -c1: nginx" "${L[nginx]}"
printf '%-58s %s\n' "latency p50 / p99 -c1: funcd" "${L[funcd]}"
printf '\ncold starts (%s runs each)\n%s' "$runs" "$cold_out"
printf '\n%-58s %s\n' "funcd RSS, 1,000 functions + $workers warm workers" "$((rss_kib / 1024)) MiB"
