# Helpers shared by the gateway benchmarks (bench/serving.sh, bench/edge.sh);
# sourced, not run. They expect $build (the build directory), $work (a short
# temporary directory: worker socket paths must fit in 108 bytes) and the
# array pids (processes to end on exit) from the script.
# An admin's token (start_funcd writes its file): benches ask for spec.network: host, an
# admin's to ask for, and name host paths under $work.
token=bench-admin

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_ok() { for _ in $(seq 400); do curl -sf -o /dev/null "$1" && return 0; sleep 0.025; done; echo "no answer from $1"; exit 1; }
rps() { awk '/Requests\/sec/ {print $2}'; }
lat() { awk '$1=="50%" {p50=$2} $1=="99%" {p99=$2} END {print p50 " / " p99}'; }
ratio() { python3 -c "print(f'{float($1)/float($2):.2f}')"; }
# CPU time the whole machine spent (user, nice, system, irq, softirq), in clock ticks; taken
# around a wrk run and divided by wrk's requests it is the CPU every party (client, proxy,
# worker) spent per request: on a machine the run keeps busy, the throughput is the CPUs over
# that, and unlike requests/s it hardly moves with how the scheduler's turns fell.
cpu_ticks() { awk '/^cpu / {print $2 + $3 + $4 + $7 + $8}' /proc/stat; }
minflt() { awk '{print $10}' "/proc/$1/stat"; } # a process' minor page faults so far
faults_per_1000_requests() { # faults-before faults-after wrk-output
  python3 -c "import re,sys; n=int(re.search(r'(\d+) requests in', sys.argv[3]).group(1)); print(f'{(int(sys.argv[2])-int(sys.argv[1]))*1000/n:.1f}')" "$1" "$2" "$3"
}
cpu_us_per_request() { # ticks-before ticks-after wrk-output
  python3 -c "import os,re,sys; t=os.sysconf('SC_CLK_TCK'); n=int(re.search(r'(\d+) requests in', sys.argv[3]).group(1)); print(f'{($2-$1)*1e6/t/n:.1f}')" "$1" "$2" "$3"
}

# Starts funcd (--dev, ephemeral ports; extra flags appended) on the stores
# the array funcd_store names (default: in memory; a script may set it, e.g.
# funcd_store=(--data-dir "$work/data")) and sets funcd_pid, api, dp and fns
# from its log. The array funcd_wrap, when set, is the command funcd runs
# under (e.g. funcd_wrap=(valgrind --tool=callgrind)).
start_funcd() {
  # --allow-host-network: a warm worker may also listen on a TCP port of the host
  # (spec.network: host) so that the same process can be measured directly.
  declare -p funcd_store &>/dev/null && [ ${#funcd_store[@]} -gt 0 ] || funcd_store=(--memory)
  echo "bench-admin admin *" >"$work/bench-tokens" && chmod 600 "$work/bench-tokens"
  ${funcd_wrap[@]+"${funcd_wrap[@]}"} "$build/bin/funcd/funcd" "${funcd_store[@]}" --dev --token-file "$work/bench-tokens" --source-root "$work" --allow-host-network --listen 127.0.0.1:0 \
    --data-plane-listen 127.0.0.1:0 --fn-runner-listen 127.0.0.1:0 \
    --shims "$build/shims" --state-dir "$work/s" "$@" 2>"$work/funcd.log" &
  pids+=($!)
  funcd_pid=$!
  for _ in $(seq "${funcd_start_polls:-200}"); do grep -q 'data plane listening' "$work/funcd.log" && break; sleep 0.05; done
  api="http://$(sed -n 's/.*control plane listening on //p' "$work/funcd.log")"
  dp="http://$(sed -n 's/.*data plane listening on //p' "$work/funcd.log")"
  fns="$api/apis/funcd.dev/v1/namespaces/default/functions"
}

create() { # name runtime handler dir scaling-json [env-json [network [more-spec-fields]]]
  curl -s -o "$work/create.out" -w '%{http_code}' -H "Authorization: Bearer $token" -d "{\"apiVersion\":\"funcd.dev/v1\",\"kind\":\"Function\",
    \"metadata\":{\"name\":\"$1\"},\"spec\":{\"runtime\":\"$2\",\"handler\":\"$3\",\"source\":{\"path\":\"$4\"},
    \"scaling\":$5,\"env\":${6:-{\}},\"network\":\"${7:-none}\"${8:+,$8}}}" "$fns" >"$work/create.code"
  [ "$(cat "$work/create.code")" = 201 ] || { echo "creating $1: HTTP $(cat "$work/create.code") $(cat "$work/create.out")"; return 1; }
}

# The socket of the first worker of a function whose state dir path matches
# nothing else (the only one when one function runs).
first_worker_socket() { ls -d "$work"/s/run/w*/worker.sock | head -n 1; }

# funcd's gateway thread count: BENCH_GATEWAY_THREADS, else funcd's default (one per usable
# CPU, at most 4). The benches give nginx as many worker processes, so neither side has more.
bench_gateway_threads() {
  local n=${BENCH_GATEWAY_THREADS:-$(nproc)}
  [ -n "${BENCH_GATEWAY_THREADS:-}" ] || [ "$n" -le 4 ] || n=4
  echo "$n"
}

# nginx with one worker process (or $nginx_workers) on 127.0.0.1:PORT proxying / to UPSTREAMS (nginx
# `server` addresses, e.g. "unix:/path/worker.sock" or "127.0.0.1:8081 127.0.0.1:8082")
# over keep-alive connections; HTTP_EXTRA goes in http {}, LOCATION_EXTRA in
# location / {}; it is ready when WAIT_PATH (default /) answers.
# Usage: start_nginx_upstreams DIR PORT UPSTREAMS [HTTP_EXTRA [LOCATION_EXTRA [WAIT_PATH]]]
start_nginx_upstreams() {
  local dir=$1 port=$2 upstreams=$3 http_extra=${4:-} location_extra=${5:-} wait_path=${6:-/}
  mkdir -p "$dir"
  # As root nginx would drop to www-data, which may not enter funcd's 0700 state dir.
  local nginx_user="" servers=""
  [ "$(id -u)" -eq 0 ] && nginx_user="user root;"
  for u in $upstreams; do servers+="server $u; "; done
  cat >"$dir/nginx.conf" <<CONF
$nginx_user
worker_processes ${nginx_workers:-1};
daemon off;
pid $dir/nginx.pid;
error_log $dir/error.log;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path $dir; proxy_temp_path $dir;
  fastcgi_temp_path $dir; uwsgi_temp_path $dir; scgi_temp_path $dir;
  keepalive_requests 1000000;
  upstream worker { $servers keepalive 256; keepalive_requests 1000000; }
  $http_extra
  server {
    listen 127.0.0.1:$port;
    location / { proxy_pass http://worker; proxy_http_version 1.1; proxy_set_header Connection ""; $location_extra }
  }
}
CONF
  nginx -c "$dir/nginx.conf" -p "$dir" -e "$dir/error.log" 2>/dev/null &
  pids+=($!)
  wait_ok "http://127.0.0.1:$port$wait_path"
}

# nginx in front of one worker's Unix socket SOCK.
# Usage: start_nginx DIR PORT SOCK [HTTP_EXTRA [LOCATION_EXTRA]]
start_nginx() {
  start_nginx_upstreams "$1" "$2" "unix:$3" "${4:-}" "${5:-}"
}
