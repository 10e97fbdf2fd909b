#!/usr/bin/env bash
# funcdctl and workflows: examples/workflows/run.sh against a real
# `funcd --memory --dev` (its three python3 functions deployed, the workflow
# applied, one run waited for), then get workflowruns, describe workflowrun
# and the usage errors.
#
#   bash tests/cli/test_cli_workflow.sh path/to/funcd path/to/funcdctl
set -u

FUNCD=${1:?usage: test_cli_workflow.sh FUNCD FUNCDCTL}
CTL=${2:?usage: test_cli_workflow.sh FUNCD FUNCDCTL}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
EXAMPLE=$HERE/../../examples/workflows
# shellcheck source=lib.sh
. "$HERE/lib.sh"

start_funcd

LAST_ARGS="examples/workflows/run.sh"
timeout 180 bash "$EXAMPLE/run.sh" "$CTL" >"$WORK/out" 2>"$WORK/err"
RC=$?
OUT=$(cat "$WORK/out")
ERR=$(cat "$WORK/err")
expect "the example deploys, applies and runs the order workflow" 0 \
    out '"sent": "shipped: 4 x apple"' out '"sent": "shipped: 2 x fig"' \
    out 'Phase: +Succeeded' out 'notify +Succeeded +2 attempts .*dependsOn price; 2 items'

ctl get workflowruns
expect "get workflowruns lists the run" 0 out '^NAME +WORKFLOW +PHASE +DURATION +AGE' \
    out '^order-[0-9a-f]+ +order +Succeeded'
run=$(sed -n 's/^\(order-[0-9a-f]*\) .*/\1/p' <<<"$OUT" | head -n 1)

ctl get workflowrun "$run" -o json
expect "get workflowrun ID -o json prints the run" 0 out '"kind": "WorkflowRun"' \
    out '"phase": "Succeeded"'

ctl describe workflowrun "$run"
expect "describe workflowrun shows the tree of steps" 0 out "^Run: +$run" \
    out '^  fetch +Succeeded +1 attempt ' out '^  price +Succeeded +1 attempt .*dependsOn fetch' \
    out '^Output: +\[\{"sent"'

ctl workflow run order -d '{"id": 17}'
expect "an input that does not match the schema is refused" 1 err 'input.id' err 'must be string'

ctl workflow run order -d '{"id": "B-2"}'
expect "workflow run without --wait prints the run created" 0 \
    out '^workflowrun/order-[0-9a-f]+ created$'

ctl workflow run nosuch -d '{}'
expect "a run of a workflow that does not exist is an error" 1 err 'not found'

ctl workflow run
expect "workflow run needs a name" 2 err "needs the workflow's NAME"
ctl workflow go order
expect "workflow takes run only" 2 err "subcommand"
ctl workflow run order --timeout 5s
expect "--timeout needs --wait" 2 err "with --wait"
ctl describe workflowrun
expect "describe workflowrun takes one ID" 2 err "takes one ID"
ctl describe workflowrun nope-1
expect "describe of an unknown run says not found" 1 err 'not found'

echo "$PASSED passed, $FAILED failed"
[ "$FAILED" = 0 ]
