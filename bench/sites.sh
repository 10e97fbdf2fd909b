#!/usr/bin/env bash
# Static Sites (docs/sites.md): funcd's gateway serving a Site next to nginx
# serving the same directory, in the same run: requests/s and p50/p99 latency
# of wrk for a small file (index.html, 1 KiB) and a 1 MiB file. The Site is
# deployed from a bundle (funcdctl deploy-site), so its files are kept in
# memory after the first read; nginx runs with as many worker processes as
# funcd has gateway threads, sendfile and open_file_cache on. Rounds alternate
# which server goes first; the funcd / nginx ratio is given per round.
# Usage: bash bench/sites.sh [BUILD_DIR]   (e.g. build-rel)
#   BENCH_SECONDS (5) per wrk run, BENCH_CONNECTIONS (50), BENCH_ROUNDS (3),
#   BENCH_THREADS (wrk threads, 2), BENCH_GATEWAY_THREADS (default: funcd's)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
duration=${BENCH_SECONDS:-5}
conns=${BENCH_CONNECTIONS:-50}
rounds=${BENCH_ROUNDS:-3}
wrk_threads=${BENCH_THREADS:-2}
[ -n "${BENCH_GATEWAY_THREADS:-}" ] && export FUNCD_GATEWAY_THREADS=$BENCH_GATEWAY_THREADS
work=$(mktemp -d /tmp/fs.XXXX)
pids=()
funcd_store=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
  [ -n "${BENCH_KEEP:-}" ] || rm -rf "$work"
}
trap cleanup EXIT
. bench/lib.sh

for tool in nginx wrk curl; do
  command -v $tool >/dev/null || { echo "sites.sh: $tool is missing (apt-get install nginx wrk curl)"; exit 1; }
done
start_funcd

# The site: a 1 KiB page and a 1 MiB file.
site=$work/site
mkdir -p "$site"
python3 - "$site" <<'PY'
import os, sys
d = sys.argv[1]
page = "<!doctype html><title>bench</title>" + "<p>static site benchmark</p>" * 34
open(os.path.join(d, "index.html"), "w").write(page[:1024])
open(os.path.join(d, "big.bin"), "wb").write(os.urandom(1 << 20))
PY
FUNCD_SERVER=$api FUNCD_TOKEN=$token "$build/bin/funcdctl/funcdctl" deploy-site "$site" --name bench >/dev/null
wait_ok "$dp/site/default/bench/"

# nginx on the same directory, as many workers as funcd has gateway threads.
gw_threads=${FUNCD_GATEWAY_THREADS:-$(python3 -c 'import os; print(min(4, len(os.sched_getaffinity(0))))')}
nport=$(free_port)
mkdir -p "$work/nginx"
nginx_user=""
[ "$(id -u)" -eq 0 ] && nginx_user="user root;"
cat >"$work/nginx/nginx.conf" <<CONF
$nginx_user
worker_processes $gw_threads;
daemon off;
pid $work/nginx/nginx.pid;
error_log $work/nginx/error.log;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path $work/nginx; proxy_temp_path $work/nginx;
  fastcgi_temp_path $work/nginx; uwsgi_temp_path $work/nginx; scgi_temp_path $work/nginx;
  keepalive_requests 1000000;
  sendfile on; tcp_nopush on;
  open_file_cache max=1000 inactive=60s; open_file_cache_valid 60s;
  default_type application/octet-stream;
  types { text/html html; }
  server {
    listen 127.0.0.1:$nport;
    root $site;
    index index.html;
  }
}
CONF
nginx -c "$work/nginx/nginx.conf" -p "$work/nginx" -e "$work/nginx/error.log" 2>/dev/null &
pids+=($!)
wait_ok "http://127.0.0.1:$nport/"

# Both serve the same bytes.
for f in index.html big.bin; do
  cmp -s <(curl -sf "$dp/site/default/bench/$f") <(curl -sf "http://127.0.0.1:$nport/$f") ||
    { echo "sites.sh: funcd and nginx answer $f differently"; exit 1; }
done

url_of() { # server file
  case $1 in
    funcd) echo "$dp/site/default/bench/$2" ;;
    nginx) echo "http://127.0.0.1:$nport/$2" ;;
  esac
}
p99() { awk '$1=="99%" {print $2}'; }
p50() { awk '$1=="50%" {print $2}'; }

load_before=$(cut -d' ' -f1-3 /proc/loadavg)
printf '%-34s %-6s %12s %10s %10s\n' "file (wrk -t$wrk_threads -c$conns, ${duration}s)" server "requests/s" "p50" "p99"
for f in index.html big.bin; do
  ratios=()
  for round in $(seq "$rounds"); do
    order="funcd nginx"
    [ $((round % 2)) -eq 0 ] && order="nginx funcd"
    declare -A R=()
    for s in $order; do
      out=$(wrk -t"$wrk_threads" -c"$conns" -d"${duration}s" --latency "$(url_of "$s" "$f")")
      R[$s]=$(rps <<<"$out")
      printf '%-34s %-6s %12s %10s %10s\n' "$f (round $round)" "$s" "${R[$s]}" \
        "$(p50 <<<"$out")" "$(p99 <<<"$out")"
    done
    ratios+=("$(ratio "${R[funcd]}" "${R[nginx]}")")
  done
  echo "$f: funcd / nginx requests/s per round: ${ratios[*]}"
done
echo "load average before: $load_before, after: $(cut -d' ' -f1-3 /proc/loadavg); CPUs: $(nproc); gateway threads = nginx workers = $gw_threads"
