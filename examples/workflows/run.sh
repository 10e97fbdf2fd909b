#!/usr/bin/env bash
# Deploys the order workflow's functions and the workflow to the funcd that
# funcdctl talks to (FUNCD_SERVER, FUNCD_TOKEN), then runs it once and shows
# the tree of its steps. Usage: examples/workflows/run.sh [FUNCDCTL]
set -euo pipefail
CTL=${1:-funcdctl}
HERE=$(cd "$(dirname "$0")" && pwd)
"$CTL" deploy "$HERE/order" --name fetch-order --runtime python3 --handler main.fetch_order
"$CTL" deploy "$HERE/order" --name price --runtime python3 --handler main.price
"$CTL" deploy "$HERE/order" --name notify --runtime python3 --handler main.notify
"$CTL" apply -f "$HERE/order.yaml"
"$CTL" workflow run order -d '{"id": "A-17"}' --wait --timeout 2m
run=$("$CTL" get workflowruns -o name | tail -n 1)
"$CTL" describe "${run%%/*}" "${run#*/}"
