#!/usr/bin/env bash
# Secrets as environment variables, end to end on this machine: a private funcd (its own
# ports), a Secret, the python3 example reading it through spec.env and spec.envFrom, and a
# rollout when the Secret changes. Everything it starts it stops.
#
#   bash examples/functions/secret-env/try.sh [BUILD_DIR]   (default: build, as `make run` builds)
set -euo pipefail
cd "$(dirname "$0")/../../.."
build=${1:-build}
funcd=$build/bin/funcd/funcd
ctl=$build/bin/funcdctl/funcdctl
for tool in "$funcd" "$ctl"; do
  [ -x "$tool" ] || { echo "try.sh: $tool is missing (make build)"; exit 1; }
done
work=$(mktemp -d /tmp/funcd-secret-env.XXXX)
pid=
cleanup() { [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT

"$funcd" --memory --dev --listen 127.0.0.1:0 --data-plane-listen 127.0.0.1:0 \
  --fn-runner-listen 127.0.0.1:0 --source-root "$PWD" 2>"$work/funcd.log" &
pid=$!
for _ in $(seq 100); do grep -q "data plane listening" "$work/funcd.log" 2>/dev/null && break; sleep 0.05; done
export FUNCD_SERVER=http://$(sed -n 's/.*control plane listening on //p' "$work/funcd.log")
export FUNCD_TOKEN=funcd-dev-token
dp=http://$(sed -n 's/.*data plane listening on //p' "$work/funcd.log")

echo "== a Secret, and a Function that reads one key of it and all keys of another"
"$ctl" create secret generic greeting --from-literal=text=bonjour
"$ctl" create secret generic extras --from-literal=FAVOURITE_COLOUR=teal
sed "s|/srv/funcd/examples/functions/python3|$PWD/examples/functions/python3|" \
  examples/functions/secret-env/function.yaml >"$work/function.yaml"
"$ctl" apply -f "$work/function.yaml"
for _ in $(seq 200); do curl -fs "$dp/fn/default/hello-secret/" >/dev/null 2>&1 && break; sleep 0.05; done
curl -s "$dp/fn/default/hello-secret/?name=Ada"; echo
echo "(the stored Function holds the reference, not the value:)"
"$ctl" get function hello-secret -o json | python3 -c 'import json,sys; print(json.load(sys.stdin)["spec"]["env"])'

echo "== the Secret changes: new workers see the new value"
printf 'apiVersion: funcd.dev/v1\nkind: Secret\nmetadata: {name: greeting}\nstringData: {text: hola}\n' >"$work/secret.yaml"
"$ctl" apply -f "$work/secret.yaml"
for _ in $(seq 200); do curl -fs "$dp/fn/default/hello-secret/?name=Ada" | grep -q hola && break; sleep 0.05; done
curl -s "$dp/fn/default/hello-secret/?name=Ada"; echo

echo "== a Function naming a Secret that does not exist is not Ready, and says which"
sed 's/name: hello-secret/name: hello-missing/; s/name: greeting, key: text/name: nowhere, key: text/' \
  "$work/function.yaml" >"$work/missing.yaml"
"$ctl" apply -f "$work/missing.yaml"
sleep 1
"$ctl" get function hello-missing -o json |
  python3 -c 'import json,sys; c=json.load(sys.stdin)["status"]["conditions"][0]; print(c["reason"]+":", c["message"])'
