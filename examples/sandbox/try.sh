#!/usr/bin/env bash
# The sandbox at work (docs/security.md): the same hostile function, once in a funcd with the
# sandbox (the default) and once with --no-sandbox. Starts and stops its own funcd.
#
#   bash examples/sandbox/try.sh [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build}
funcd=$build/bin/funcd/funcd
ctl=$build/bin/funcdctl/funcdctl
work=$(mktemp -d /tmp/funcd-sandbox.XXXX)
pid=
cleanup() {
  [ -z "$pid" ] || { kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; }
  rm -rf "$work"
}
trap cleanup EXIT
echo "a secret in funcd's data directory" >"$work/secret"
for mode in sandbox no-sandbox; do
  flags=(--memory --dev --listen 127.0.0.1:0 --data-plane-listen 127.0.0.1:0 --fn-runner-listen 127.0.0.1:0)
  [ "$mode" = sandbox ] || flags+=(--no-sandbox)
  "$funcd" "${flags[@]}" 2>"$work/funcd.log" &
  pid=$!
  for _ in $(seq 100); do grep -q "data plane listening" "$work/funcd.log" 2>/dev/null && break; sleep 0.05; done
  api=$(sed -n 's/.*control plane listening on //p' "$work/funcd.log")
  export FUNCD_SERVER=http://$api FUNCD_TOKEN=funcd-dev-token
  export FUNCD_DATA_PLANE=http://$(sed -n 's/.*data plane listening on //p' "$work/funcd.log")
  "$ctl" deploy examples/sandbox --name hostile --runtime python3 --handler main.handler \
    -e "SECRET_FILE=$work/secret" -e "CONTROL_PLANE=$api" >/dev/null
  echo "== funcd $( [ "$mode" = sandbox ] && echo "(sandbox on, the default)" || echo "--no-sandbox")"
  "$ctl" invoke hostile
  kill "$pid"; wait "$pid" 2>/dev/null || true; pid=
done
