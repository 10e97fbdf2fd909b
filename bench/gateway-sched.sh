#!/usr/bin/env bash
# The gateway threads' scheduling policy (docs/adr/0061): one funcd, one warm native
# worker, nginx proxy_pass (keep-alive, as many worker processes as funcd has gateway
# threads) to the same worker socket. The funcd gateway threads (funcd-gw/N) are switched
# between SCHED_BATCH (funcd's default) and SCHED_OTHER with chrt between runs, so both
# policies are measured in the same process, alternated, next to nginx:
#   1. throughput, wrk -t1 -c50, BENCH_ROUNDS (5) rounds;
#   2. latency p50 / p99 at -c1 and -c8, on an idle machine and with BENCH_HOGS (2)
#      busy loops, not pinned: as many as the machine has CPUs keep every CPU busy (what a
#      batch thread gives up: it does not preempt a running task when its socket wakes it).
# Usage: bench/gateway-sched.sh [BUILD_DIR]   BENCH_SECONDS (5), BENCH_ROUNDS (5), BENCH_HOGS (2)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
duration=${BENCH_SECONDS:-5}
rounds=${BENCH_ROUNDS:-5}
hogs=${BENCH_HOGS:-2}
work=$(mktemp -d /tmp/fb.XXXX)
pids=()
hog_pids=()
cleanup() {
  for p in "${hog_pids[@]}" "${pids[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT
. bench/lib.sh
threads=$(bench_gateway_threads)
export FUNCD_GATEWAY_THREADS=$threads
nginx_workers=$threads
for c in nginx wrk chrt; do command -v $c >/dev/null || { echo "gateway-sched.sh: $c is missing"; exit 1; }; done
start_funcd
mkdir -p "$work/native"
cp "$build/bench/bench-worker" "$work/native/worker"
create warm native worker "$work/native" \
  '{"minReplicas":1,"maxReplicas":1,"concurrency":10000,"queueLength":10000,"idleTimeout":"1h"}'
wait_ok "$dp/fn/default/warm/"
nport=$(free_port)
start_nginx "$work/nginx" "$nport" "$(first_worker_socket)"

gw=()
for t in /proc/"$funcd_pid"/task/*; do
  case $(cat "$t/comm") in funcd-gw/*) gw+=("${t##*/}") ;; esac
done
[ ${#gw[@]} = "$threads" ] || { echo "gateway-sched.sh: found ${#gw[@]} funcd-gw threads, not $threads"; exit 1; }
policy() { for t in "${gw[@]}"; do chrt "$1" -p 0 "$t"; done; }
url_of() { case $1 in nginx) echo "http://127.0.0.1:$nport/" ;; *) echo "$dp/fn/default/warm/" ;; esac; }
run() { # target connections -> "requests/s p50 p99"
  case $1 in batch) policy -b ;; normal) policy -o ;; esac
  wrk -t1 -c"$2" -d"${duration}s" --latency "$(url_of "$1")" |
    awk '/Requests\/sec/ {r=$2} $1=="50%" {p50=$2} $1=="99%" {p99=$2} END {print r, p50, p99}'
}

load_before=$(cut -d' ' -f1-3 /proc/loadavg)
printf '\n%s\n' "gateway threads under SCHED_BATCH and SCHED_OTHER (wrk -t1, ${duration}s runs, loopback)"
printf '%-40s %s\n' "CPUs; gateway threads = nginx workers" "$(nproc); $threads"
batch_r=() normal_r=()
for r in $(seq "$rounds"); do
  if [ $((r % 2)) = 1 ]; then order="batch normal nginx"; else order="nginx normal batch"; fi
  declare -A X
  for t in $order; do X[$t]=$(run "$t" 50); done
  b=${X[batch]%% *} o=${X[normal]%% *} n=${X[nginx]%% *}
  batch_r+=("$(ratio "$b" "$n")") normal_r+=("$(ratio "$o" "$n")")
  printf 'round %s -c50 requests/s: batch %s, normal %s, nginx %s; / nginx: batch %s, normal %s\n' \
    "$r" "$b" "$o" "$n" "${batch_r[-1]}" "${normal_r[-1]}"
done
printf '%-40s %s\n' "batch / nginx per round" "${batch_r[*]}"
printf '%-40s %s\n' "normal / nginx per round" "${normal_r[*]}"

for load in idle hogs; do
  if [ $load = hogs ]; then
    for _ in $(seq "$hogs"); do (while :; do :; done) & hog_pids+=($!); done
  fi
  for c in 1 8; do
    line=""
    for t in batch normal nginx; do
      read -r rps p50 p99 <<<"$(run "$t" "$c")"
      line+=$(printf '%s %s / %s (%s/s)   ' "$t" "$p50" "$p99" "$rps")
    done
    printf '%-40s %s\n' "latency p50 / p99 -c$c, $([ $load = idle ] && echo idle || echo "$hogs busy loops")" "$line"
  done
done
printf '%-40s %s\n' "load average before / after" "$load_before / $(cut -d' ' -f1-3 /proc/loadavg)"
