#!/usr/bin/env bash
# Cluster benchmarks (issue 15), each next to its peer in the same run:
#   (a) creates/s through the API: one funcd on PostgreSQL (--store/--blob
#       postgres://) vs one on sqlite (--data-dir), BENCH_CREATES Secrets over
#       BENCH_CONNECTIONS keep-alive connections (bench/create_bench.c); both
#       servers keep their default durability (PostgreSQL fsync on, sqlite
#       synchronous=FULL), both nodes encrypt Secrets with a key file;
#   (b) watch latency, p50/p99 over BENCH_WATCH_WRITES writes: a PUT through node
#       1's API to the event on a watch on node 3, next to the same write's event
#       on node 1 and the PUT's own answer (bench/watch_latency.c); three nodes on
#       one PostgreSQL and one nats-server;
#   (c) requests/s through nginx (keep-alive, one worker process) over the three
#       nodes' data planes vs through the same nginx to node 1 alone, a warm
#       native worker (bench/worker.c) per node, BENCH_ROUNDS rounds of wrk
#       alternating which goes first.
# PostgreSQL (initdb + postgres on a Unix socket in a temporary directory, as the
# postgres user when run as root), nats-server and nginx are started here and
# ended by pid on exit.
# Usage: bench/cluster.sh [BUILD_DIR]   (a release build: bash bench/cluster.sh build-rel)
#   BENCH_CREATES (3000), BENCH_CONNECTIONS (16), BENCH_WATCH_WRITES (500),
#   BENCH_SECONDS (5) per wrk run, BENCH_WRK_CONNECTIONS (50), BENCH_ROUNDS (3)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
creates=${BENCH_CREATES:-3000}
conns=${BENCH_CONNECTIONS:-16}
writes=${BENCH_WATCH_WRITES:-500}
duration=${BENCH_SECONDS:-5}
wrk_conns=${BENCH_WRK_CONNECTIONS:-50}
rounds=${BENCH_ROUNDS:-3}
token=funcd-dev-token
funcd="$build/bin/funcd/funcd"
work=$(mktemp -d /tmp/fcl.XXXX) # short: socket paths must fit in 108 bytes
chmod 755 "$work"
pids=()
cleanup() {
  # The last started first: nginx and the nodes before the servers they use.
  for ((i = ${#pids[@]} - 1; i >= 0; i--)); do
    kill "${pids[i]}" 2>/dev/null || true
    wait "${pids[i]}" 2>/dev/null || true
  done
  [ -n "${BENCH_KEEP:-}" ] || rm -rf "$work"
}
trap cleanup EXIT
for f in "$funcd" "$build/bench/create-bench" "$build/bench/watch-latency" "$build/bench/bench-worker"; do
  [ -x "$f" ] || { echo "cluster.sh: $f is missing (meson compile -C $build)"; exit 1; }
done
for t in nginx nats-server wrk; do
  command -v $t >/dev/null || { echo "cluster.sh: $t is missing (scripts/install-deps.sh test)"; exit 1; }
done
pgbin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
[ -x "$pgbin/postgres" ] || { echo "cluster.sh: PostgreSQL is missing (scripts/install-deps.sh test)"; exit 1; }

. bench/lib.sh # free_port, wait_ok, rps, ratio, start_nginx_upstreams

# ---- PostgreSQL and nats-server --------------------------------------------------
# PostgreSQL refuses to run as root: as root, it runs as postgres (setpriv execs,
# so the pid kept is the postmaster's).
as_pg=()
if [ "$(id -u)" -eq 0 ]; then
  as_pg=(setpriv --reuid=postgres --regid=postgres --init-groups)
  mkdir -p "$work/pg" && chown postgres: "$work/pg"
else
  mkdir -p "$work/pg"
fi
"${as_pg[@]}" "$pgbin/initdb" -D "$work/pg/data" -A trust -U postgres -E UTF8 --locale=C >"$work/initdb.log" 2>&1
"${as_pg[@]}" "$pgbin/postgres" -D "$work/pg/data" -k "$work/pg" -c listen_addresses= \
  -c max_connections=100 2>"$work/pg.log" &
pids+=($!)
for _ in $(seq 400); do "$pgbin/pg_isready" -q -h "$work/pg" -U postgres && break; sleep 0.05; done
"$pgbin/pg_isready" -q -h "$work/pg" -U postgres || { echo "PostgreSQL did not start"; cat "$work/pg.log"; exit 1; }
pg="postgresql:///postgres?host=$work/pg&user=postgres"

nats_port=$(free_port)
nats-server -js -a 127.0.0.1 -p "$nats_port" -sd "$work/nats" -l "$work/nats.log" &
pids+=($!)
nats="nats://127.0.0.1:$nats_port"
for _ in $(seq 400); do grep -q 'Server is ready' "$work/nats.log" 2>/dev/null && break; sleep 0.05; done

# start NAME ARGS...: funcd --node-name NAME in the background (log $work/NAME.log); sets
# api_NAME, dp_NAME and pid_NAME.
start() {
  local name=$1; shift
  mkdir -p "$work/$name"
  "$funcd" --listen 127.0.0.1:0 --data-plane-listen 127.0.0.1:0 --fn-runner-listen 127.0.0.1:0 \
    --dev --source-root "$work" --log-level warn --encryption-key-file "$work/encryption.key" \
    --state-dir "$work/$name/s" --node-name "$name" "$@" 2>"$work/$name.log" &
  pids+=($!)
  printf -v "pid_$name" '%s' $!
  for _ in $(seq 2000); do grep -q 'data plane listening' "$work/$name.log" && break; sleep 0.005; done
  grep -q 'data plane listening' "$work/$name.log" || { echo "funcd $name did not start:"; cat "$work/$name.log"; exit 1; }
  printf -v "api_$name" 'http://%s' "$(sed -n 's/.*control plane listening on //p' "$work/$name.log")"
  printf -v "dp_$name" 'http://%s' "$(sed -n 's/.*data plane listening on //p' "$work/$name.log")"
}
# A node of the cluster: the store and blobs on PostgreSQL, the bus on NATS.
cluster_flags=(--memory --store "$pg" --blob "$pg" --bus "$nats")

# ---- (a) creates/s: PostgreSQL vs sqlite ------------------------------------------
declare -A rate
start sqlite --data-dir "$work/sqlite"
start pgone --memory --store "$pg" --blob "$pg"
for name in sqlite pgone; do
  api_var="api_$name"
  out=$("$build/bench/create-bench" "${!api_var}" "$token" secrets "$creates" "$conns" "s-$name")
  echo "  $name: $out"
  rate[$name]=$(sed -n 's/.*: \([0-9]*\)\/s.*/\1/p' <<<"$out")
done
echo "cluster: creates through the API: PostgreSQL ${rate[pgone]}/s, sqlite ${rate[sqlite]}/s" \
  "($(ratio "${rate[pgone]}" "${rate[sqlite]}")x of sqlite; $creates Secrets, $conns connections)"
# Done with them: pgone would else be a fourth node of the cluster below.
for p in "$pid_sqlite" "$pid_pgone"; do
  kill "$p"; wait "$p" || true
  for i in "${!pids[@]}"; do [ "${pids[i]}" = "$p" ] && unset 'pids[i]'; done
done
pids=("${pids[@]}")

# ---- (b) watch latency node 1 -> node 3 -------------------------------------------
for n in n1 n2 n3; do start $n "${cluster_flags[@]}"; done
echo "cluster: $("$build/bench/watch-latency" "$api_n1" "$api_n3" "$token" "$writes")"

# ---- (c) requests/s through nginx: three nodes vs one -----------------------------
mkdir -p "$work/fn"
cp "$build/bench/bench-worker" "$work/fn/worker"
curl -sf -o /dev/null -H "Authorization: Bearer $token" -X PUT -d "{\"apiVersion\":\"funcd.dev/v1\",
  \"kind\":\"Function\",\"metadata\":{\"name\":\"warm\"},\"spec\":{\"runtime\":\"native\",
  \"handler\":\"worker\",\"source\":{\"path\":\"$work/fn\"},\"scaling\":{\"minReplicas\":1,
  \"maxReplicas\":1,\"concurrency\":10000,\"queueLength\":10000,\"idleTimeout\":\"1h\"}}}" \
  "$api_n1/apis/funcd.dev/v1/namespaces/default/functions/warm"
for n in n1 n2 n3; do dp_var="dp_$n"; wait_ok "${!dp_var}/fn/default/warm/"; done

# nginx_start DIR PORT DATA_PLANE_URL...: a one-worker nginx proxying to the data planes.
nginx_start() {
  local dir=$1 port=$2; shift 2
  start_nginx_upstreams "$dir" "$port" "${*//http:\/\//}" "" "proxy_next_upstream error;" /fn/default/warm/
}
port3=$(free_port)
nginx_start "$work/nginx3" "$port3" "$dp_n1" "$dp_n2" "$dp_n3"
port1=$(free_port)
nginx_start "$work/nginx1" "$port1" "$dp_n1"

declare -A R
out=""
ratios=()
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
for r in $(seq "$rounds"); do
  if [ $((r % 2)) = 1 ]; then order="one three"; else order="three one"; fi
  for t in $order; do
    if [ $t = one ]; then port=$port1; else port=$port3; fi
    R[$t]=$(wrk -t2 -c"$wrk_conns" -d"${duration}s" "http://127.0.0.1:$port/fn/default/warm/" | rps)
  done
  q=$(ratio "${R[three]}" "${R[one]}")
  ratios+=("$q")
  out+=$(printf '  round %s (%s): nginx -> 1 node / nginx -> 3 nodes requests/s: %s / %s, ratio %s' \
    "$r" "$order" "${R[one]}" "${R[three]}" "$q")$'\n'
done
printf '%s' "$out"
echo "cluster: requests/s through nginx, 3 nodes / 1 node over $rounds rounds:" \
  "$(printf '%s\n' "${ratios[@]}" | sort -n | awk '{v[NR]=$1} END {printf "min %s, median %s, max %s", v[1], v[int((NR+1)/2)], v[NR]}')" \
  "(wrk -t2 -c$wrk_conns; $(nproc) CPUs, load $load_before; every node, nginx and wrk on this machine)"
