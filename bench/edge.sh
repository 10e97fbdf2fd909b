#!/usr/bin/env bash
# What the edge costs (issue 14): requests/s and latency p50/p99 through funcd's
# gateway to a warm native worker that answers BENCH_BODY_BYTES (2048) of JSON,
#   funcd-edge   a Function with every edge feature on: limits (high enough never
#                to reject), CORS, a header set and one removed, gzip;
#   funcd-plain  the same worker code with none (spec.edge absent);
#   nginx-edge   nginx proxy_pass (keep-alive) to funcd-edge's own worker socket with
#                limit_req + gzip + add_header/proxy_hide_header doing the same work.
# wrk sends Accept-Encoding: gzip and an allowed Origin to all three. They run in
# BENCH_ROUNDS (5) rounds, the order rotated each round, with the ratios
# funcd-edge / funcd-plain (the edge's cost) and funcd-edge / nginx-edge per round;
# CPUs and the load average are printed with the figures.
# Usage: bench/edge.sh [BUILD_DIR]   e.g. bash bench/edge.sh build-rel
#   BENCH_SECONDS (5) per wrk run, BENCH_CONNECTIONS (50), BENCH_ROUNDS (5),
#   BENCH_BODY_BYTES (2048), BENCH_GATEWAY_THREADS (default: funcd's)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
duration=${BENCH_SECONDS:-5}
conns=${BENCH_CONNECTIONS:-50}
rounds=${BENCH_ROUNDS:-5}
body=${BENCH_BODY_BYTES:-2048}
[ -n "${BENCH_GATEWAY_THREADS:-}" ] && export FUNCD_GATEWAY_THREADS=$BENCH_GATEWAY_THREADS
work=$(mktemp -d /tmp/fe.XXXX) # short: worker socket paths must fit in 108 bytes
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
  [ -n "${BENCH_KEEP:-}" ] || rm -rf "$work"
}
trap cleanup EXIT
. bench/lib.sh

command -v nginx >/dev/null || { echo "edge.sh: nginx is missing (bench/run.sh installs it)"; exit 1; }
command -v wrk >/dev/null || { echo "edge.sh: wrk is missing"; exit 1; }
start_funcd

origin=https://app.example
warm='{"minReplicas":1,"maxReplicas":1,"concurrency":10000,"queueLength":10000,"idleTimeout":"1h"}'
edge='"edge":{"limits":{"rps":100000000,"burst":100000000,"maxBodyBytes":"1Mi","maxInFlight":1000000},
  "cors":{"allowOrigins":["'$origin'"],"allowMethods":["GET","POST"],"allowHeaders":["content-type"],"maxAge":600},
  "headers":{"set":{"X-Frame-Options":"DENY"},"remove":["X-Powered-By"]},"compress":true}'
mkdir -p "$work/native"
cp "$build/bench/bench-worker" "$work/native/worker"
create edge native worker "$work/native" "$warm" "{\"BENCH_BODY_BYTES\":\"$body\"}" none "$edge" ||
  { echo "edge.sh: funcd refused the edge Function"; exit 1; }
wait_ok "$dp/fn/default/edge/"
sock=$(first_worker_socket) # the only worker so far: funcd-edge's
create plain native worker "$work/native" "$warm" "{\"BENCH_BODY_BYTES\":\"$body\"}"
wait_ok "$dp/fn/default/plain/"

nport=$(free_port)
start_nginx "$work/nginx" "$nport" "$sock" \
  "limit_req_zone \$server_name zone=fn:1m rate=100000000r/s;
   gzip on; gzip_types application/json; gzip_min_length 256; gzip_comp_level 1; gzip_proxied any; gzip_vary on;" \
  "limit_req zone=fn burst=100000000 nodelay;
   add_header X-Frame-Options DENY always; proxy_hide_header X-Powered-By;
   add_header Access-Control-Allow-Origin \$http_origin always; add_header Vary Origin always;"

url_of() {
  case $1 in
    funcd-edge) echo "$dp/fn/default/edge/" ;;
    funcd-plain) echo "$dp/fn/default/plain/" ;;
    nginx-edge) echo "http://127.0.0.1:$nport/" ;;
  esac
}
# Each answers as configured: gzip where the edge is on, not where it is off.
for t in funcd-edge funcd-plain nginx-edge; do
  enc=$(curl -s -o /dev/null -D - -H 'Accept-Encoding: gzip' -H "Origin: $origin" "$(url_of $t)" |
    tr -d '\r' | awk -F': ' 'tolower($1)=="content-encoding" {print $2}')
  want=gzip; [ $t = funcd-plain ] && want=""
  [ "$enc" = "$want" ] || { echo "edge.sh: $t answered Content-Encoding '$enc', not '$want'"; exit 1; }
done

load_before=$(cut -d' ' -f1-3 /proc/loadavg)
targets=(funcd-edge funcd-plain nginx-edge)
out=""
cost=() vs_nginx=()
for r in $(seq "$rounds"); do
  k=$(( (r - 1) % 3 ))
  order=("${targets[@]:$k}" "${targets[@]:0:$k}")
  declare -A X P
  for t in "${order[@]}"; do
    res=$(wrk -t1 -c"$conns" -d"${duration}s" --latency -H 'Accept-Encoding: gzip' -H "Origin: $origin" "$(url_of $t)")
    X[$t]=$(rps <<<"$res")
    P[$t]=$(lat <<<"$res")
  done
  c=$(ratio "${X[funcd-edge]}" "${X[funcd-plain]}")
  n=$(ratio "${X[funcd-edge]}" "${X[nginx-edge]}")
  cost+=("$c")
  vs_nginx+=("$n")
  out+=$(printf 'round %d (%s)\n' "$r" "${order[*]}")$'\n'
  for t in "${targets[@]}"; do
    out+=$(printf '  %-12s %10s requests/s   p50 / p99 %s' "$t" "${X[$t]}" "${P[$t]}")$'\n'
  done
  out+=$(printf '  ratios: funcd-edge / funcd-plain %s, funcd-edge / nginx-edge %s' "$c" "$n")$'\n'
done
load_after=$(cut -d' ' -f1-3 /proc/loadavg)
summary() { printf '%s\n' "$@" | sort -n | awk '{v[NR]=$1} END {printf "min %s, median %s, max %s", v[1], v[int((NR+1)/2)], v[NR]}'; }

printf '\n%s\n' "edge cost (wrk -t1 -c$conns, ${duration}s per run, loopback, $body-byte JSON answers, gzip)"
printf '%-44s %s\n' "CPUs; load average before / after" "$(nproc); $load_before / $load_after"
printf '%-44s %s\n' "gateway threads (FUNCD_GATEWAY_THREADS)" "${FUNCD_GATEWAY_THREADS:-default}"
printf '%s' "$out"
printf '%-44s %s\n' "funcd-edge / funcd-plain over $rounds rounds" "$(summary "${cost[@]}")"
printf '%-44s %s\n' "funcd-edge / nginx-edge over $rounds rounds" "$(summary "${vs_nginx[@]}")"
