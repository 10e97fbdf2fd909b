#!/usr/bin/env bash
# A function calling another, end to end on this machine: a private funcd (its own ports),
# the native example as `hello-native` (from zero), and `checkout` (python3) calling it
# through its local API. Everything it starts it stops.
#
#   bash examples/functions/fn-to-fn/try.sh [BUILD_DIR]   (default: build, as `make run` builds)
set -euo pipefail
cd "$(dirname "$0")/../../.."
build=${1:-build}
funcd=$build/bin/funcd/funcd
ctl=$build/bin/funcdctl/funcdctl
for tool in "$funcd" "$ctl"; do
  [ -x "$tool" ] || { echo "try.sh: $tool is missing (make build)"; exit 1; }
done
command -v cc >/dev/null || { echo "try.sh: a C compiler is needed for the native example"; exit 1; }
work=$(mktemp -d /tmp/funcd-fn-to-fn.XXXX)
pid=
cleanup() { [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT

"$funcd" --memory --dev --listen 127.0.0.1:0 --data-plane-listen 127.0.0.1:0 \
  --fn-runner-listen 127.0.0.1:0 --source-root "$work" 2>"$work/funcd.log" &
pid=$!
for _ in $(seq 100); do grep -q "data plane listening" "$work/funcd.log" 2>/dev/null && break; sleep 0.05; done
export FUNCD_SERVER=http://$(sed -n 's/.*control plane listening on //p' "$work/funcd.log")
export FUNCD_TOKEN=funcd-dev-token
dp=http://$(sed -n 's/.*data plane listening on //p' "$work/funcd.log")

echo "== the callee: the native example, scaled to zero"
cp -r examples/functions/native "$work/native"
make -s -C "$work/native" >/dev/null
"$ctl" deploy "$work/native" --name hello-native --runtime native --handler hello >/dev/null
echo "== the caller: checkout, bound to hello-native"
mkdir "$work/checkout" && cp examples/functions/fn-to-fn/main.py "$work/checkout/"
sed "s|/srv/funcd/examples/functions/fn-to-fn|$work/checkout|" examples/functions/fn-to-fn/function.yaml >"$work/fn.yaml"
"$ctl" apply -f "$work/fn.yaml"
for _ in $(seq 200); do curl -fs "$dp/fn/default/checkout/" >/dev/null 2>&1 && break; sleep 0.05; done
curl -s "$dp/fn/default/checkout/" -d 'an order'; echo
echo "== a caller whose bindings do not name the callee is refused (403)"
sed 's/name: checkout/name: rogue/; s/invoke: \[hello-native\]/invoke: [someone-else]/' "$work/fn.yaml" >"$work/rogue.yaml"
"$ctl" apply -f "$work/rogue.yaml"
for _ in $(seq 200); do curl -fs "$dp/fn/default/rogue/" >/dev/null 2>&1 && break; sleep 0.05; done
curl -s "$dp/fn/default/rogue/"; echo
