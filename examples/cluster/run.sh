#!/usr/bin/env bash
# A three-node funcd cluster on this machine (docs/cluster.md): a private PostgreSQL
# (store and blobs) and nats-server (bus) in a temporary directory, three funcd nodes on
# loopback ports, and nginx in front of their data planes. It deploys
# examples/functions/exec through node 1 (the bundle goes to PostgreSQL), calls it through
# nginx, then waits for Ctrl-C; everything it started is ended by pid, everything it made
# is under the temporary directory.
#
#   bash examples/cluster/run.sh [BUILD_DIR]     (default: build, as `make run` builds)
#   CLUSTER_ONCE=1: stop after the call instead of waiting
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build}
funcd=$build/bin/funcd/funcd
ctl=$build/bin/funcdctl/funcdctl
pgbin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
for tool in "$funcd" "$ctl" "$pgbin/postgres" nats-server nginx curl; do
  command -v "$tool" >/dev/null || { echo "run.sh: $tool is missing (make build; scripts/install-deps.sh test)"; exit 1; }
done
work=$(mktemp -d /tmp/funcd-cluster.XXXX) # short: worker socket paths must fit in 108 bytes
chmod 755 "$work"
pids=()
cleanup() {
  # nginx and the nodes first, then the servers they use.
  for ((i = ${#pids[@]} - 1; i >= 0; i--)); do
    kill "${pids[i]}" 2>/dev/null || true
    wait "${pids[i]}" 2>/dev/null || true
  done
  rm -rf "$work"
}
trap cleanup EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

echo "== PostgreSQL on a Unix socket in $work/pg"
# PostgreSQL refuses to run as root: then it runs as postgres (setpriv execs, so the pid
# kept is the server's).
as_pg=()
mkdir -p "$work/pg"
if [ "$(id -u)" -eq 0 ]; then
  as_pg=(setpriv --reuid=postgres --regid=postgres --init-groups)
  chown postgres: "$work/pg"
fi
"${as_pg[@]}" "$pgbin/initdb" -D "$work/pg/data" -A trust -U postgres -E UTF8 --locale=C >"$work/initdb.log" 2>&1
"${as_pg[@]}" "$pgbin/postgres" -D "$work/pg/data" -k "$work/pg" -c listen_addresses= 2>"$work/pg.log" &
pids+=($!)
for _ in $(seq 400); do "$pgbin/pg_isready" -q -h "$work/pg" -U postgres && break; sleep 0.05; done
db="postgresql:///postgres?host=$work/pg&user=postgres"

echo "== nats-server with JetStream"
nats_port=$(free_port)
nats-server -js -a 127.0.0.1 -p "$nats_port" -sd "$work/nats" -l "$work/nats.log" &
pids+=($!)
for _ in $(seq 400); do grep -q 'Server is ready' "$work/nats.log" 2>/dev/null && break; sleep 0.05; done

declare -A api dp
for n in n1 n2 n3; do
  mkdir -p "$work/$n"
  "$funcd" --memory --dev --store "$db" --blob "$db" --bus "nats://127.0.0.1:$nats_port" \
    --encryption-key-file "$work/encryption.key" --state-dir "$work/$n/state" \
    --listen 127.0.0.1:0 --data-plane-listen 127.0.0.1:0 --fn-runner-listen 127.0.0.1:0 \
    --node-name $n 2>"$work/$n.log" &
  pids+=($!)
  for _ in $(seq 400); do grep -q 'data plane listening' "$work/$n.log" && break; sleep 0.05; done
  grep -q 'data plane listening' "$work/$n.log" || { echo "$n did not start:"; cat "$work/$n.log"; exit 1; }
  api[$n]="http://$(sed -n 's/.*control plane listening on //p' "$work/$n.log")"
  dp[$n]="http://$(sed -n 's/.*data plane listening on //p' "$work/$n.log")"
  echo "== node $n: API ${api[$n]}, data plane ${dp[$n]} (log $work/$n.log)"
done

lb_port=$(free_port)
mkdir -p "$work/nginx"
user=""
[ "$(id -u)" -eq 0 ] && user="user root;" # else nginx's worker would run as nobody
cat >"$work/nginx/nginx.conf" <<CONF
$user
worker_processes 1;
daemon off;
pid $work/nginx/nginx.pid;
error_log $work/nginx/error.log;
events { worker_connections 1024; }
http {
  access_log $work/nginx/access.log;
  client_body_temp_path $work/nginx; proxy_temp_path $work/nginx;
  fastcgi_temp_path $work/nginx; uwsgi_temp_path $work/nginx; scgi_temp_path $work/nginx;
  upstream funcd {
    server ${dp[n1]#http://}; server ${dp[n2]#http://}; server ${dp[n3]#http://};
    keepalive 32;
  }
  server {
    listen 127.0.0.1:$lb_port;
    location / { proxy_pass http://funcd; proxy_http_version 1.1; proxy_set_header Connection "";
                 proxy_next_upstream error; }
  }
}
CONF
nginx -c "$work/nginx/nginx.conf" -p "$work/nginx" -e "$work/nginx/error.log" 2>/dev/null &
pids+=($!)
lb="http://127.0.0.1:$lb_port"
echo "== nginx in front of the three data planes: $lb"

export FUNCD_TOKEN=funcd-dev-token
echo "== deploy through n1, call through nginx (three times: nginx takes turns)"
"$ctl" --server "${api[n1]}" deploy examples/functions/exec --name hello --runtime native \
  --handler hello.sh --mode exec
for _ in 1 2 3; do
  for _ in $(seq 200); do curl -sf -o /dev/null -d hi "$lb/fn/default/hello/" && break; sleep 0.05; done
  curl -s -d 'some text' "$lb/fn/default/hello/"
done
echo "== n3's API lists what n1 took (REPLICAS: summed over the nodes by the leader):"
"$ctl" --server "${api[n3]}" get functions
echo "== the nodes (n1 started first: it holds the cluster lease):"
"$ctl" --server "${api[n2]}" get nodes

[ -n "${CLUSTER_ONCE:-}" ] && exit 0
cat <<EOF

The cluster runs. In another terminal:
  export FUNCD_TOKEN=funcd-dev-token
  $ctl --server ${api[n2]} get functions
  $ctl --server ${api[n2]} get nodes
  curl -d hi $lb/fn/default/hello/
Ctrl-C ends it.
EOF
while :; do sleep 3600; done
