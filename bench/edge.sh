#!/usr/bin/env bash
# What the edge costs (issue 14): requests/s and latency p50/p99 through funcd's
# gateway to a warm native worker, for each answer size in BENCH_BODY_SIZES
# ("6 2048": the 6-byte "hello" answer, which gzip leaves alone as tiny, so the
# edge's fixed costs show; and 2048 bytes of JSON, which gzip compresses):
#   funcd-edge   a Function with every edge feature on: limits (high enough never
#                to reject), CORS, a header set and one removed, gzip;
#   funcd-plain  the same worker code with none (spec.edge absent);
#   nginx-edge   nginx proxy_pass (keep-alive) to funcd-edge's own worker socket with
#                limit_req + gzip + add_header/proxy_hide_header doing the same work,
#                with as many worker processes as funcd has gateway threads;
#   the floor    the same worker code called directly over TCP (no proxy, no edge),
#                once per size before the rounds: what no proxy can beat.
# wrk sends Accept-Encoding: gzip and an allowed Origin to all three. They run in
# BENCH_ROUNDS (5) rounds, the order rotated each round, with the ratios
# funcd-edge / funcd-plain (the edge's cost) and funcd-edge / nginx-edge per round,
# then each ratio of every round and their median; the CPU the whole machine spent per
# request in each run (bench/lib.sh cpu_us_per_request), and the edge's cost by it
# (funcd-plain's over funcd-edge's: the throughput ratio of a machine kept busy, without the
# turns of the scheduler that move requests/s between runs); and for compressed answers
# the bytes each proxy sends for one after the rounds;
# funcd's minor page faults per run (memory given back to the kernel and touched again);
# CPUs and the load average are printed with the figures.
# Usage: bench/edge.sh [BUILD_DIR]   e.g. bash bench/edge.sh build-rel
#   BENCH_SECONDS (5) per wrk run, BENCH_CONNECTIONS (50), BENCH_ROUNDS (5),
#   BENCH_BODY_SIZES ("6 2048"), BENCH_GATEWAY_THREADS (default: funcd's default,
#   one per usable CPU, at most 4; nginx gets as many worker processes)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
duration=${BENCH_SECONDS:-5}
conns=${BENCH_CONNECTIONS:-50}
rounds=${BENCH_ROUNDS:-5}
sizes=${BENCH_BODY_SIZES:-6 2048}
work=$(mktemp -d /tmp/fe.XXXX) # short: worker socket paths must fit in 108 bytes
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

command -v nginx >/dev/null || { echo "edge.sh: nginx is missing (bench/run.sh installs it)"; exit 1; }
command -v wrk >/dev/null || { echo "edge.sh: wrk is missing"; exit 1; }
start_funcd

origin=https://app.example
warm='{"minReplicas":1,"maxReplicas":1,"concurrency":10000,"queueLength":10000,"idleTimeout":"1h"}'
edge='"edge":{"limits":{"rps":1000000,"burst":10000000,"maxBodyBytes":"1Mi","maxInFlight":1000000},
  "cors":{"allowOrigins":["'$origin'"],"allowMethods":["GET","POST"],"allowHeaders":["content-type"],"maxAge":600},
  "headers":{"set":{"X-Frame-Options":"DENY"},"remove":["X-Powered-By"]},"compress":true}'
mkdir -p "$work/native"
cp "$build/bench/bench-worker" "$work/native/worker"
declare -A NPORT FPORT
for size in $sizes; do
  body_env="{\"BENCH_BODY_BYTES\":\"$size\"}"
  [ "$size" = 6 ] && body_env="{}" # the worker's own "hello\n"
  FPORT[$size]=$(free_port) # the floor: a worker that also listens on TCP (spec.network: host)
  floor_env="{\"BENCH_TCP_PORT\":\"${FPORT[$size]}\"}"
  [ "$size" = 6 ] || floor_env="{\"BENCH_TCP_PORT\":\"${FPORT[$size]}\",\"BENCH_BODY_BYTES\":\"$size\"}"
  create "floor$size" native worker "$work/native" "$warm" "$floor_env" host
  wait_ok "http://127.0.0.1:${FPORT[$size]}/"
  create "edge$size" native worker "$work/native" "$warm" "$body_env" none "$edge"
  wait_ok "$dp/fn/default/edge$size/"
  # The newest worker socket: funcd-edge's (workers are made one at a time here).
  sock=$(ls -td "$work"/s/run/w*/worker.sock | head -n 1)
  create "plain$size" native worker "$work/native" "$warm" "$body_env"
  wait_ok "$dp/fn/default/plain$size/"
  NPORT[$size]=$(free_port)
  start_nginx "$work/nginx$size" "${NPORT[$size]}" "$sock" \
    "limit_req_zone \$server_name zone=fn:1m rate=1000000r/s;
     gzip on; gzip_types application/json; gzip_min_length 256; gzip_comp_level 1; gzip_proxied any; gzip_vary on;" \
    "limit_req zone=fn burst=10000000 nodelay;
     add_header X-Frame-Options DENY always; proxy_hide_header X-Powered-By;
     add_header Access-Control-Allow-Origin \$http_origin always; add_header Vary Origin always;"
done

url_of() { # target size
  case $1 in
    funcd-edge) echo "$dp/fn/default/edge$2/" ;;
    funcd-plain) echo "$dp/fn/default/plain$2/" ;;
    nginx-edge) echo "http://127.0.0.1:${NPORT[$2]}/" ;;
  esac
}
# Each answers as configured: gzip where the edge is on and the answer is not tiny.
for size in $sizes; do
  for t in funcd-edge funcd-plain nginx-edge; do
    enc=$(curl -s -o /dev/null -D - -H 'Accept-Encoding: gzip' -H "Origin: $origin" "$(url_of $t "$size")" |
      tr -d '\r' | awk -F': ' 'tolower($1)=="content-encoding" {print $2}')
    want=gzip; { [ $t = funcd-plain ] || [ "$size" -lt 256 ]; } && want=""
    [ "$enc" = "$want" ] || { echo "edge.sh: $t ($size bytes) answered Content-Encoding '$enc', not '$want'"; exit 1; }
  done
done

load_before=$(cut -d' ' -f1-3 /proc/loadavg)
targets=(funcd-edge funcd-plain nginx-edge)
summary() { # the ratios in round order, then their median
  printf '%s; median %s' "$*" "$(printf '%s\n' "$@" | sort -n |
    awk '{v[NR]=$1} END {m = NR % 2 ? v[(NR+1)/2] : (v[NR/2] + v[NR/2+1]) / 2; printf "%.2f", m}')"
}
report=""
for size in $sizes; do
  res=$(wrk -t1 -c"$conns" -d"${duration}s" --latency "http://127.0.0.1:${FPORT[$size]}/")
  out=$(printf '  %-12s %10s requests/s   p50 / p99 %s' "floor" "$(rps <<<"$res")" "$(lat <<<"$res")")$'\n'
  cost=() vs_nginx=() cpu_cost=()
  for r in $(seq "$rounds"); do
    k=$(( (r - 1) % 3 ))
    order=("${targets[@]:$k}" "${targets[@]:0:$k}")
    declare -A X P C F
    for t in "${order[@]}"; do
      t0=$(cpu_ticks)
      f0=$(minflt "$funcd_pid")
      res=$(wrk -t1 -c"$conns" -d"${duration}s" --latency -H 'Accept-Encoding: gzip' -H "Origin: $origin" "$(url_of $t "$size")")
      C[$t]=$(cpu_us_per_request "$t0" "$(cpu_ticks)" "$res")
      F[$t]=$(faults_per_1000_requests "$f0" "$(minflt "$funcd_pid")" "$res")
      X[$t]=$(rps <<<"$res")
      P[$t]=$(lat <<<"$res")
    done
    c=$(ratio "${X[funcd-edge]}" "${X[funcd-plain]}")
    n=$(ratio "${X[funcd-edge]}" "${X[nginx-edge]}")
    u=$(ratio "${C[funcd-plain]}" "${C[funcd-edge]}")
    cost+=("$c")
    vs_nginx+=("$n")
    cpu_cost+=("$u")
    out+=$(printf 'round %d (%s)\n' "$r" "${order[*]}")$'\n'
    for t in "${targets[@]}"; do
      out+=$(printf '  %-12s %10s requests/s   p50 / p99 %s   CPU %s us/request' "$t" "${X[$t]}" "${P[$t]}" "${C[$t]}")$'\n'
    done
    out+=$(printf '  ratios: funcd-edge / funcd-plain %s (by CPU per request %s), funcd-edge / nginx-edge %s' "$c" "$u" "$n")$'\n'
    out+=$(printf '  funcd page faults per 1000 requests: funcd-edge %s, funcd-plain %s' "${F[funcd-edge]}" "${F[funcd-plain]}")$'\n'
  done
  report+=$(printf '\n%s answers (%s)' "$size-byte" "$([ "$size" = 6 ] && echo 'text, left alone by gzip as tiny' || echo 'JSON, gzip-compressed')")$'\n'
  report+="$out"
  report+=$(printf '%-44s %s' "funcd-edge / funcd-plain over $rounds rounds" "$(summary "${cost[@]}")")$'\n'
  report+=$(printf '%-44s %s' "funcd-edge / nginx-edge over $rounds rounds" "$(summary "${vs_nginx[@]}")")$'\n'
  report+=$(printf '%-44s %s' "funcd-plain / funcd-edge CPU per request" "$(summary "${cpu_cost[@]}")")$'\n'
  if [ "$size" -ge 256 ]; then # what each sends for it, once the rounds ran (funcd has learned)
    gz_bytes() { curl -s -H 'Accept-Encoding: gzip' -H "Origin: $origin" "$(url_of "$1" "$size")" | wc -c; }
    report+=$(printf '%-44s %s' "gzip'd answer: funcd-edge / nginx-edge bytes" "$(gz_bytes funcd-edge) / $(gz_bytes nginx-edge) (of $size)")$'\n'
  fi
done
load_after=$(cut -d' ' -f1-3 /proc/loadavg)

printf '\n%s\n' "edge cost (wrk -t1 -c$conns, ${duration}s per run, loopback, Accept-Encoding: gzip)"
printf '%-44s %s\n' "CPUs; load average before / after" "$(nproc); $load_before / $load_after"
printf '%-44s %s\n' "funcd gateway threads / nginx worker processes" "$threads / $nginx_workers"
printf '%s' "$report"
