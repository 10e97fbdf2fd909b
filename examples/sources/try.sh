#!/usr/bin/env bash
# Functions from an OCI image and from a git repository, end to end, on this machine:
# a private funcd (its own ports and data directory), a local docker-registry, a bare git
# repository. Everything it starts it stops; everything it makes is under a temp dir.
#
#   bash examples/sources/try.sh [BUILD_DIR]       (default: build, as `make run` builds)
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build}
funcd=$build/bin/funcd/funcd
ctl=$build/bin/funcdctl/funcdctl
for tool in "$funcd" "$ctl" /usr/bin/docker-registry /usr/bin/skopeo git cc; do
  command -v "$tool" >/dev/null || { echo "try.sh: $tool is missing (make build; scripts/install-deps.sh)"; exit 1; }
done
work=$(mktemp -d /tmp/funcd-sources.XXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

echo "== a registry on loopback, and an image built from scratch (a static HTTP worker)"
reg=127.0.0.1:$(free_port)
printf 'version: 0.1\nlog: {level: error, accesslog: {disabled: true}}\nstorage: {filesystem: {rootdirectory: %s/registry}}\nhttp: {addr: "%s"}\n' \
  "$work" "$reg" >"$work/registry.yml"
/usr/bin/docker-registry serve "$work/registry.yml" >"$work/registry.log" 2>&1 &
pids+=($!)
sh tests/oci/fixtures.sh "$work/layouts" worker >/dev/null
for _ in $(seq 100); do curl -fs "http://$reg/v2/" >/dev/null && break; sleep 0.05; done
skopeo copy -q --dest-tls-verify=false "oci:$work/layouts/worker:1" "docker://$reg/hello:1"

echo "== funcd with its own data directory, told the registry is a loopback one"
"$funcd" --data-dir "$work/data" --dev --listen 127.0.0.1:0 --data-plane-listen 127.0.0.1:0 \
  --fn-runner-listen 127.0.0.1:0 --insecure-registry "$reg" --source-root "$work" 2>"$work/funcd.log" &
pids+=($!)
for _ in $(seq 100); do grep -q "data plane listening" "$work/funcd.log" 2>/dev/null && break; sleep 0.05; done
api=http://$(sed -n 's/.*control plane listening on //p' "$work/funcd.log")
dp=http://$(sed -n 's/.*data plane listening on //p' "$work/funcd.log")
export FUNCD_SERVER=$api FUNCD_TOKEN=funcd-dev-token FUNCD_DATA_PLANE=$dp

"$ctl" pull "$reg/hello:1"
"$ctl" deploy --image "$reg/hello:1" --name hello-image
"$ctl" get images
curl -s "$dp/fn/default/hello-image/from-an-image"; echo

echo "== a function from a git repository, redeployed when the branch moves"
git init -q --bare "$work/repo.git"
git clone -q "$work/repo.git" "$work/checkout" 2>/dev/null
commit() { # VERSION
  mkdir -p "$work/checkout/fn"
  printf '#!/bin/sh\ncat >/dev/null\nprintf "Content-Type: text/plain\\r\\n\\r\\nversion %s\\n"\n' "$1" >"$work/checkout/fn/hello.sh"
  chmod +x "$work/checkout/fn/hello.sh"
  git -C "$work/checkout" add -A
  git -C "$work/checkout" -c user.name=try -c user.email=try@localhost commit -qm "$1"
  git -C "$work/checkout" push -q origin HEAD:refs/heads/main 2>/dev/null
}
commit 1
cat >"$work/git-fn.yaml" <<YAML
apiVersion: funcd.dev/v1
kind: Function
metadata: {name: hello-git}
spec:
  runtime: native
  mode: exec
  handler: hello.sh
  source: {git: {url: "$work/repo.git", ref: main, path: fn}}
YAML
"$ctl" apply -f "$work/git-fn.yaml"
for _ in $(seq 200); do curl -fs "$dp/fn/default/hello-git/" 2>/dev/null | grep -q version && break; sleep 0.05; done
curl -s "$dp/fn/default/hello-git/"
commit 2
echo "(pushed version 2; funcd polls the branch every minute: --git-poll 1m; re-applying a changed spec resolves at once)"
sed -i 's/handler: hello.sh/handler: hello.sh\n  env: {REDEPLOY: "1"}/' "$work/git-fn.yaml"
"$ctl" apply -f "$work/git-fn.yaml"
for _ in $(seq 200); do curl -fs "$dp/fn/default/hello-git/" 2>/dev/null | grep -q "version 2" && break; sleep 0.05; done
curl -s "$dp/fn/default/hello-git/"
"$ctl" get function hello-git -o json | python3 -c 'import json,sys; print("status.source:", json.load(sys.stdin)["status"]["source"])'
