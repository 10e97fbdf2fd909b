#!/usr/bin/env bash
# Control-plane benchmarks, each beside a peer measured in the same run:
#   - GET of one object over keep-alive HTTP vs nginx serving the same JSON as a static file
#   - POST (create) throughput
#   - idle RSS of `funcd --memory`
# Usage: bench/run.sh [BUILD_DIR]   (make bench)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
funcd=$build/bin/funcd/funcd
duration=${BENCH_SECONDS:-5}
conns=${BENCH_CONNECTIONS:-50}
token=funcd-dev-token
work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT

bash scripts/install-deps.sh test
if ! command -v nginx >/dev/null; then
  echo "bench: installing nginx-light (the peer)" >&2
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo=sudo
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends nginx-light >/dev/null
fi

# funcd on ephemeral ports; read the bound address from its log.
"$funcd" --memory --dev --listen 127.0.0.1:0 --data-plane-listen 127.0.0.1:0 --fn-runner-listen 127.0.0.1:0 2>"$work/funcd.log" &
pids+=($!)
funcd_pid=$!
for _ in $(seq 100); do grep -q 'control plane listening' "$work/funcd.log" && break; sleep 0.05; done
addr=$(sed -n 's/.*control plane listening on //p' "$work/funcd.log")
api="http://$addr/apis/funcd.dev/v1/namespaces/default/functions"

sleep 1
rss_kib=$(awk '/VmRSS/ {print $2}' /proc/$funcd_pid/status)

obj='{"apiVersion":"funcd.dev/v1","kind":"Function","metadata":{"name":"bench"},"spec":{"runtime":"python3","handler":"main.handler","source":{"path":"/srv/bench"}}}'
curl -sf -H "Authorization: Bearer $token" -d "$obj" "$api" >/dev/null
sleep 0.2
curl -sf -H "Authorization: Bearer $token" "$api/bench" >"$work/bench.json"

# The peer: nginx serving the same bytes as a static file, keep-alive, one worker.
mkdir -p "$work/www" "$work/nginx"
cp "$work/bench.json" "$work/www/bench.json"
cat >"$work/nginx/nginx.conf" <<CONF
worker_processes 1;
daemon off;
pid $work/nginx/nginx.pid;
error_log $work/nginx/error.log;
events { worker_connections 1024; }
http {
  access_log off;
  client_body_temp_path $work/nginx;
  proxy_temp_path $work/nginx;
  fastcgi_temp_path $work/nginx;
  uwsgi_temp_path $work/nginx;
  scgi_temp_path $work/nginx;
  keepalive_requests 1000000;
  server { listen 127.0.0.1:0; root $work/www; }
}
CONF
# nginx cannot print an ephemeral port: pick a free one.
nport=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
sed -i "s/listen 127.0.0.1:0/listen 127.0.0.1:$nport/" "$work/nginx/nginx.conf"
nginx -c "$work/nginx/nginx.conf" -p "$work/nginx" 2>/dev/null &
pids+=($!)
for _ in $(seq 100); do curl -sf "http://127.0.0.1:$nport/bench.json" >/dev/null && break; sleep 0.05; done

rps() { awk '/Requests\/sec/ {print $2}'; }
get_funcd=$(wrk -t1 -c"$conns" -d"${duration}s" -H "Authorization: Bearer $token" "$api/bench" | rps)
get_nginx=$(wrk -t1 -c"$conns" -d"${duration}s" "http://127.0.0.1:$nport/bench.json" | rps)

cat >"$work/create.lua" <<'LUA'
local n = 0
local tid = 0
setup = function(thread) tid = tid + 1; thread:set("tid", tid) end
request = function()
  n = n + 1
  local body = '{"apiVersion":"funcd.dev/v1","kind":"Function","metadata":{"name":"b' .. tid .. '-' .. n ..
    '"},"spec":{"runtime":"python3","handler":"main.handler","source":{"path":"/srv/bench"}}}'
  return wrk.format("POST", nil, {["Authorization"] = "Bearer funcd-dev-token",
                                  ["Content-Type"] = "application/json"}, body)
end
LUA
create_out=$(wrk -t1 -c"$conns" -d"${duration}s" -s "$work/create.lua" "$api")
create_funcd=$(echo "$create_out" | rps)
non2xx=$(echo "$create_out" | awk '/Non-2xx/ {print $NF}')

ratio=$(python3 -c "print(f'{float($get_funcd)/float($get_nginx):.2f}')")
printf '\n%-46s %12s\n' "benchmark (wrk -t1 -c$conns -d${duration}s, loopback)" "result"
printf '%-46s %12s\n' "GET one Function, funcd control plane" "$get_funcd req/s"
printf '%-46s %12s\n' "GET the same JSON, nginx static (peer)" "$get_nginx req/s"
printf '%-46s %12s\n' "ratio funcd / nginx" "$ratio"
printf '%-46s %12s\n' "POST create Function, funcd" "$create_funcd req/s"
[ -n "$non2xx" ] && printf '%-46s %12s\n' "  non-2xx answers during create" "$non2xx"
printf '%-46s %12s\n' "idle RSS of funcd --memory" "$((rss_kib / 1024)).$(( (rss_kib % 1024) * 10 / 1024 )) MiB"
