#!/usr/bin/env bash
# End-to-end test of funcdctl: starts a real `funcd --memory --dev` on ephemeral
# loopback ports and drives it the way an operator would.
#
#   bash tests/cli/test_cli.sh path/to/funcd path/to/funcdctl
#
# Prints "ok - ..." / "FAIL - ..." per check and "N passed, N failed"; exits
# non-zero on any failure. funcd is stopped on exit whatever happens.
set -u

FUNCD=${1:?usage: test_cli.sh FUNCD FUNCDCTL}
CTL=${2:?usage: test_cli.sh FUNCD FUNCDCTL}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=lib.sh
. "$HERE/lib.sh"

test_usage() {
    ctl
    expect "no command is a usage error" 2 err "usage: funcdctl"
    ctl --help
    expect "--help lists the commands" 0 out "apply" out "describe" out "FUNCD_TOKEN"
    ctl get widgets
    expect "unknown kind is a usage error" 2 err 'unknown kind "widgets"' err "function \(fn\)"
    ctl get fn -o xml
    expect "unknown output format is a usage error" 2 err "table, wide, json, yaml or name"
    ctl apply
    expect "apply without -f is a usage error" 2 err "apply needs -f"
    ctl frobnicate
    expect "unknown command is a usage error" 2 err 'unknown command "frobnicate"'
    ctl --server http://127.0.0.1:1 get fn
    expect "unreachable server says what to do" 1 err "cannot reach funcd" err "FUNCD_SERVER"
}

test_serving_usage() {
    ctl deploy
    expect "deploy without DIR is a usage error" 2 err "deploy needs the DIR"
    ctl deploy "$HERE" --runtime python3
    expect "deploy without --name is a usage error" 2 err "needs --name"
    ctl deploy "$HERE" --name x
    expect "deploy without --runtime is a usage error" 2 err "needs --runtime"
    ctl deploy "$HERE" --name x --runtime python3 --min lots
    expect "deploy --min takes a number" 2 err "--min takes a whole number"
    ctl deploy "$HERE" --name x --runtime python3 --timeout soon
    expect "deploy --timeout takes a duration" 2 err "--timeout takes a duration"
    ctl deploy "$HERE" --name x --runtime python3 --env NOEQUALS
    expect "deploy --env takes K=V" 2 err "--env takes NAME=VALUE"
    ctl deploy "$HERE" --name x --runtime python3 --mode batch
    expect "deploy --mode is http or exec" 2 err "--mode is http"
    ctl deploy "$HERE" "$HERE" --name x --runtime python3
    expect "deploy takes one DIR" 2 err "deploy takes one DIR"
    ctl invoke
    expect "invoke without NAME is a usage error" 2 err "invoke needs the NAME"
    ctl invoke x -H nocolon
    expect "invoke -H needs a colon" 2 err "-H takes 'Name: value'"
    ctl invoke x -X 'GE T'
    expect "invoke -X takes a method" 2 err "-X takes an HTTP method"
    ctl invoke x --frob
    expect "invoke rejects unknown flags" 2 err 'unknown flag "--frob"'
    ctl logs
    expect "logs without NAME is a usage error" 2 err "logs needs the NAME"
    ctl logs x --tail many
    expect "logs --tail takes a number" 2 err "--tail takes a number"
    ctl deploy --help
    expect "deploy --help lists its flags" 0 out "--wait-timeout" out "--no-wait"
    ctl --server http://127.0.0.1:1 deploy "$HERE" --name x --runtime python3
    expect "deploy to an unreachable server says what to do" 1 err "cannot reach funcd" \
        err "FUNCD_SERVER"
    ctl --server http://127.0.0.1:1 logs x
    expect "logs from an unreachable server says what to do" 1 err "cannot reach funcd"
    ctl --server http://127.0.0.1:1 invoke x
    expect "invoke asks the control plane where the data plane is" 1 err "cannot reach funcd"
    ctl invoke x --data-plane http://127.0.0.1:1
    expect "invoke at an unreachable data plane says what to do" 1 \
        err "cannot reach the data plane at http://127.0.0.1:1" err "FUNCD_DATA_PLANE"
    FUNCD_DATA_PLANE=127.0.0.1:1 ctl invoke x
    expect "invoke reads FUNCD_DATA_PLANE" 1 err "cannot reach the data plane at http://127.0.0.1:1"
    ctl deploy "$WORK/nosuch" --name x --runtime python3
    expect "deploy of a missing directory names it" 1 err "nosuch"
    mkdir -p "$WORK/empty/.git"
    ctl deploy "$WORK/empty" --name x --runtime python3
    expect "deploy of an empty directory refuses" 1 err "holds no files"
}

test_fn_usage() {
    ctl fn
    expect "fn without a subcommand is a usage error" 2 err "fn needs a subcommand: eval"
    ctl fn frob
    expect "fn with an unknown subcommand" 2 err 'unknown fn subcommand "frob"'
    ctl fn eval -f "$HERE/fn-resources.yaml"
    expect "fn eval without IMAGE is a usage error" 2 err "needs the function's IMAGE"
    ctl fn eval set-namespace -f "$HERE/fn-resources.yaml" --timeout soon
    expect "fn eval --timeout takes a duration" 2 err "--timeout takes a duration"
    ctl fn eval a b -f "$HERE/fn-resources.yaml"
    expect "fn eval takes one IMAGE" 2 err "takes one IMAGE"
    ctl fn eval set-namespace -f "$HERE/fn-resources.yaml" -o json
    expect "fn eval refuses -o" 2 err "fn prints table, not -o json"
    ctl fn eval set-namespace -f "$HERE/fn-resources.yaml" --frob
    expect "fn eval rejects unknown flags" 2 err 'unknown flag "--frob"'
    ctl fn eval --help
    expect "fn --help lists its flags" 0 out "--exec PATH" out "FUNCD_FN_RUNNER"
    ctl fn eval set-namespace -f "$HERE/app.yaml"
    expect "fn eval refuses what is not a ResourceList" 1 err "is a Function, not a ResourceList"
    ctl fn eval set-namespace -f "$WORK/nosuch.yaml"
    expect "fn eval of a missing file names it" 1 err "cannot open .*nosuch.yaml"
    ctl fn eval set-namespace -f "$HERE/fn-resources.yaml" --runner 127.0.0.1:1
    expect "fn eval at an unreachable runner says what to do" 1 \
        err "cannot reach the function runner at 127.0.0.1:1" err "FUNCD_FN_RUNNER"
    FUNCD_FN_RUNNER=127.0.0.1:1 ctl fn eval set-namespace -f - <"$HERE/fn-resources.yaml"
    expect "fn eval reads FUNCD_FN_RUNNER and stdin" 1 \
        err "cannot reach the function runner at 127.0.0.1:1"
    ctl fn eval set-namespace -f "$HERE/fn-resources.yaml" --runner "${FUNCD_SERVER#http://}"
    expect "fn eval at the control plane says it is no runner" 1 \
        err "speaks HTTP/1.1 only, not gRPC" err "--fn-runner-listen"
}

test_apply() {
    ctl apply -f "$HERE/app.yaml"
    expect "apply creates three kinds" 0 out "^function/hello created$" \
        out "^functionconfig/set-namespace created$" out "^secret/registry-auth created$"
    ctl apply -f "$HERE/app.yaml"
    expect "apply again is unchanged" 0 out "^function/hello unchanged$" \
        out "^functionconfig/set-namespace unchanged$" out "^secret/registry-auth unchanged$"
    sed 's/GREETING: hi/GREETING: hello/' "$HERE/app.yaml" >"$WORK/app2.yaml"
    ctl apply -f "$WORK/app2.yaml"
    expect "apply of a changed spec configures only it" 0 out "^function/hello configured$" \
        out "^secret/registry-auth unchanged$"
}

test_get() {
    ctl get functions
    expect "get functions prints a table" 0 out "^NAME +READY +REPLICAS +AGE$" \
        out "^hello +(True|False|Unknown) +[0-9]+/[0-9]+ +[0-9]+[smhd]$"
    ctl get fn hello -o wide
    expect "get -o wide adds reason, generation and revision" 0 \
        out "^NAME +READY +REPLICAS +AGE +REASON +URL +GENERATION +RESOURCE-VERSION$" \
        out "^hello .* 2 +[0-9]+$"
    ctl get fn hello -o json
    expect "get -o json" 0 out '"kind": "Function"' out '"name": "hello"' out '"GREETING": "hello"'
    ctl get Function hello -o yaml
    expect "get -o yaml" 0 out "^kind: Function" out "name: hello" out "runtime: python3"
    ctl get functions hello -o name
    expect "get -o name" 0 out "^function/hello$"
    ctl get fn -o yaml
    expect "a list as YAML is a v1 List" 0 out "^kind: List" out "^items:" out "name: hello"
    ctl get secrets
    expect "secrets table counts data keys" 0 out "^NAME +TYPE +DATA +AGE$" \
        out "^registry-auth +Opaque +2 +[0-9]+[smhd]$"
    ctl get functionconfig set-namespace
    expect "functionconfig table" 0 out "^NAME +IMAGE +EXECUTORS +AGE$" \
        out "^set-namespace +set-namespace +binary +"
    ctl get fn hello -o json
    printf '%s\n' "$OUT" >"$WORK/hello.json"
    ctl apply -f - <"$WORK/hello.json"
    expect "get -o json feeds apply -f - (unchanged)" 0 out "^function/hello unchanged$"
}

# The node list of a single funcd: itself, ready, leading (docs/cluster.md).
test_nodes() {
    ctl get nodes
    expect "get nodes prints a table" 0 \
        out "^NAME +ADDRESS +AGE +READY +WORKERS +LEADER$" \
        out "^[a-z0-9.-]+ +127\.0\.0\.1:[0-9]+ +[0-9]+[smhd] +True +[0-9]+ +True$"
    ctl get nodes -o name
    expect "get nodes -o name" 0 out "^node/[a-z0-9.-]+$"
    local node=${OUT#node/}
    ctl get node "$node" -o yaml
    expect "get node NAME -o yaml" 0 out "^kind: Node$" out "^  name: $node$" \
        out "^  ready: true$" out "^  leader: true$"
    ctl get nodes -o json
    expect "get nodes -o json is a v1 List" 0 out '"kind": "List"' out '"kind": "Node"' \
        out '"leader": true'
    ctl get node no-such-node
    expect "get node of an unknown name" 1 err 'node "no-such-node" not found'
    ctl get nodes -A
    expect "get nodes takes no -A" 2 err "get nodes takes at most one NAME"
}

test_describe() {
    ctl describe fn hello
    expect "describe shows metadata, spec and conditions" 0 out "^Name: +hello$" \
        out "^Labels: +app=hello$" out "^Spec:$" out "^  runtime: python3$" out "^Conditions:"
    ctl describe secret registry-auth
    expect "describe secret shows sizes, not values" 0 out "password: 6 bytes"
    if grep -q s3cret "$WORK/out"; then fail "describe secret leaks a value"; else ok "describe secret hides values"; fi
}

test_errors() {
    ctl apply -f "$HERE/invalid.yaml"
    expect "validation error names the field" 1 err "spec\.runtime"
    FUNCD_TOKEN=not-a-token ctl get fn
    expect "bad token says to set FUNCD_TOKEN" 1 err "401" err "FUNCD_TOKEN"
    ctl -n elsewhere get fn
    expect "forbidden namespace is named" 1 err "403" err 'namespace "elsewhere"'
    ctl get fn nosuch
    expect "get of a missing object" 1 err 'not found' err "404"
}

test_watch() {
    ctl get fn -o json
    local rv
    rv=$(grep -oE '"resourceVersion": *"[0-9]+"' "$WORK/out" | tail -n 1 | grep -oE '[0-9]+')
    bg_ctl "$WORK/watch.out" "$WORK/watch.err" watch fn --resource-version "${rv:-0}"
    sed 's/name: hello/name: watched/' "$HERE/app.yaml" >"$WORK/watched.yaml"
    ctl apply -f "$WORK/watched.yaml"
    ctl delete fn watched
    for _ in $(seq 50); do
        grep -q "^DELETED .*watched" "$WORK/watch.out" && break
        sleep 0.1
    done
    kill -INT "$WATCH_PID" 2>/dev/null
    wait "$WATCH_PID"
    RC=$?
    WATCH_PID=
    cp "$WORK/watch.out" "$WORK/out"
    cp "$WORK/watch.err" "$WORK/err"
    OUT=$(cat "$WORK/out")
    ERR=$(cat "$WORK/err")
    LAST_ARGS="watch fn --resource-version $rv"
    expect "watch streams events and stops on Ctrl-C" 0 out "^EVENT +NAME +READY" \
        out "^ADDED +watched " out "^DELETED +watched "
}

test_delete() {
    ctl delete fn hello
    expect "delete one" 0 out "^function/hello deleted$"
    ctl get fn hello
    expect "get after delete is not found" 1 err "not found"
    ctl delete fn hello
    expect "delete of a missing object fails" 1 err "not found"
    ctl delete fn hello --ignore-not-found
    expect "delete --ignore-not-found" 0
    ctl delete -f "$HERE/app.yaml" --ignore-not-found
    expect "delete -f deletes what the file names" 0 \
        out "^functionconfig/set-namespace deleted$" out "^secret/registry-auth deleted$"
    ctl get fn
    expect "an empty list says so" 0 err "No functions found"
}

# The python3 example, or (if another checkout lacks it) a handler of the same shape.
python_example() {
    local dir=${FUNCD_SOURCE_ROOT:-$HERE/../..}/examples/functions/python3
    if [ ! -f "$dir/main.py" ]; then
        dir=$WORK/hello-py
        mkdir -p "$dir"
        cat >"$dir/main.py" <<'PY'
def handler(req):
    print('{"severity":"INFO","msg":"said hello to %s"}' % req.args.get('name', 'world'))
    return {'method': req.method, 'path': req.path, 'bodyBytes': len(req.body)}
PY
    fi
    echo "$dir"
}

# logs_until PATTERN ARGS...: runs `logs` until its output matches (the log
# pipeline is asynchronous), at most ~5 s.
logs_until() {
    local pattern=$1
    shift
    for _ in $(seq 50); do
        ctl logs "$@"
        grep -qE -- "$pattern" <<<"$OUT" && return
        sleep 0.1
    done
}

test_serving() {
    local dir
    dir=$(python_example)
    ctl deploy "$dir" --name hello-py --runtime python3 --handler main.handler \
        -e GREETING=hey --max 2 --wait-timeout 30s
    expect "deploy packs, uploads, applies and waits for Ready" 0 \
        out "^function/hello-py ready$" err "uploaded .* \(sha256:[0-9a-f]{64}\)" \
        err "function/hello-py created, waiting for Ready"
    ctl deploy "$dir" --name hello-py --runtime python3 --handler main.handler \
        -e GREETING=hey --max 2
    expect "deploying the same tree again changes nothing" 0 out "^function/hello-py ready$" \
        err "function/hello-py unchanged"
    ctl get fn hello-py -o json
    expect "deploy wrote the spec from its flags" 0 out '"bundle": "sha256:[0-9a-f]{64}"' \
        out '"GREETING": "hey"' out '"maxReplicas": 2' out '"handler": "main.handler"'
    ctl invoke hello-py -d '{"a":1}'
    expect "invoke sends the body and prints the answer" 0 out '"bodyBytes": ?7' \
        out '"method": ?"POST"'
    ctl invoke hello-py -i --path '/sub?name=ann'
    expect "invoke -i shows the status line and the invocation id" 0 err "^HTTP/1.1 200" \
        err "^[Xx]-[Ff]uncd-[Ii]nvocation-[Ii]d: ." out '"method": ?"GET"' out "/sub"
    echo -n 'abc' >"$WORK/body.bin"
    ctl invoke hello-py -d @"$WORK/body.bin" -X PUT
    expect "invoke -d @FILE -X PUT" 0 out '"bodyBytes": ?3' out '"method": ?"PUT"'
    ctl invoke nosuch
    expect "invoke of an unknown function prints the Status" 1 err "function/nosuch: .*404" \
        err "invocation"
    ctl get functions
    expect "get functions shows the replicas" 0 out "^hello-py +True +[0-9]+/[1-9][0-9]* +"
    logs_until "said hello to ann" hello-py
    expect "logs prints what the function wrote" 0 \
        out "^[0-9T:.-]+Z hello-py-[0-9a-z-]+ .*said hello to ann"
    ctl logs hello-py -o json --tail 1
    expect "logs -o json --tail 1 prints one raw record" 0 out '^\{.*"line":' \
        out '"replica":"hello-py'
    if [ "$(grep -c . <<<"$OUT")" != 1 ]; then fail "logs --tail 1 printed more than one record"; fi
    ctl logs hello-py --show-node --tail 1 -o json
    node=$(sed -n 's/.*"node":"\([^"]*\)".*/\1/p' <<<"$OUT")
    ctl logs hello-py --show-node --tail 1
    expect "logs --show-node prints the node that read the line after its time" 0 \
        out "^[0-9T:.Z-]+ ${node:-NO-NODE-FIELD} hello-py-[0-9]+ [A-Z]+ "
    bg_ctl "$WORK/follow.out" "$WORK/follow.err" logs hello-py -f --tail 0
    sleep 0.5
    ctl invoke hello-py --path '/?name=bob'
    for _ in $(seq 50); do
        grep -q "said hello to bob" "$WORK/follow.out" && break
        sleep 0.1
    done
    kill -INT "$WATCH_PID" 2>/dev/null
    wait "$WATCH_PID"
    RC=$?
    WATCH_PID=
    cp "$WORK/follow.out" "$WORK/out"
    cp "$WORK/follow.err" "$WORK/err"
    OUT=$(cat "$WORK/out")
    ERR=$(cat "$WORK/err")
    LAST_ARGS="logs hello-py -f --tail 0"
    expect "logs -f follows new records and stops on Ctrl-C" 0 out "said hello to bob"
    test_async
    ctl delete fn hello-py
    expect "delete the deployed function" 0 out "^function/hello-py deleted$"
    ctl invoke hello-py
    expect "a deleted function is not found" 1 err "404"
}

test_deploy_failures() {
    mkdir -p "$WORK/broken"
    echo 'x = 1' >"$WORK/broken/other.py"
    ctl deploy "$WORK/broken" --name broken --runtime python3 --handler main.handler \
        --wait-timeout 10s
    if [ "$RC" = 0 ]; then
        # The platform may only find a missing module when a worker starts.
        ok "deploy of a handler that is missing: Ready (found at the first request)"
        ctl invoke broken
        expect "invoking a missing handler fails" 1 err "function/broken"
    else
        expect "deploy of a missing handler names the Ready reason" 1 err "function/broken"
    fi
    ctl delete fn broken --ignore-not-found
    ctl deploy "$WORK/broken" --name broken-native --runtime native --handler other.py \
        --wait-timeout 10s
    expect "deploy names the Ready condition's reason when it is False" 1 \
        err "function/broken-native is not ready: [A-Za-z]+: .*other\.py"
    ctl delete fn broken-native --ignore-not-found
    mkdir -p "$WORK/linked"
    cp "$(python_example)/main.py" "$WORK/linked/"
    ln -s main.py "$WORK/linked/link.py"
    ctl deploy "$WORK/linked" --name linked --runtime python3 --handler main.handler --no-wait
    expect "deploy --no-wait skips symlinks with a warning" 0 out "^function/linked created$" \
        err "warning: skipping symlink link\.py"
    ctl delete fn linked
    local exec_dir=${FUNCD_SOURCE_ROOT:-$HERE/../..}/examples/functions/exec
    if [ -x "$exec_dir/hello.sh" ]; then
        ctl deploy "$exec_dir" --name hello-sh --runtime native --mode exec --handler hello.sh \
            --wait-timeout 30s
        expect "deploy --mode exec of a script" 0 out "^function/hello-sh ready$"
        ctl invoke hello-sh -d 'hi' --path /x
        expect "the script kept its exec bit in the bundle" 0 out "you sent 2 bytes to /x: hi"
        ctl delete fn hello-sh
    fi
}

# KRM functions for the exec evaluator, in the runner's functions directory.
write_test_functions() {
    local dir=$WORK/functions
    cat >"$dir/rename-web.sh" <<'SH'
#!/bin/sh
# Renames the Deployment "web" to "web-exec"; says so on stderr.
echo "rename-web: renaming web" >&2
exec sed 's/^    name: web$/    name: web-exec/'
SH
    cat >"$dir/fail.sh" <<'SH'
#!/bin/sh
cat >/dev/null
echo "boom: the input is wrong" >&2
exit 3
SH
    cat >"$dir/report.sh" <<'SH'
#!/bin/sh
# Exits 0 but reports an error result, which fails `fn eval` all the same.
cat >/dev/null
cat <<'YAML'
apiVersion: config.kubernetes.io/v1
kind: ResourceList
items: []
results:
- message: replicas too high
  severity: error
  resourceRef: {apiVersion: apps/v1, kind: Deployment, name: web}
  field: {path: spec.replicas}
- message: consider a PodDisruptionBudget
  severity: warning
YAML
SH
    cat >"$dir/sleep.sh" <<'SH'
#!/bin/sh
exec sleep 10
SH
    chmod +x "$dir"/*.sh
}

test_fn_eval() {
    local rl=$HERE/fn-resources.yaml
    write_test_functions
    ctl fn eval set-namespace -f "$rl" --runner "$FN_RUNNER"
    expect "fn eval of the set-namespace builtin sets the namespace" 0 \
        out "^kind: ResourceList" out "^      name: web$" out "^      namespace: prod$"
    if [ "$(grep -c '^      namespace: prod$' "$WORK/out")" != 2 ] || grep -q 'namespace: dev' "$WORK/out"; then
        fail "set-namespace sets both namespaced items, and only them"
    else
        ok "set-namespace sets both namespaced items, and only them"
    fi
    FUNCD_FN_RUNNER=$FN_RUNNER ctl fn eval gcr.io/kpt-fn/set-namespace:v0.4.1 <"$rl"
    expect "fn eval reads stdin and FUNCD_FN_RUNNER; kpt's image name is the builtin" 0 \
        out "^      namespace: prod$"
    ctl fn eval example.com/nosuch:v1 -f "$rl" --runner "$FN_RUNNER"
    expect "an image no evaluator has is NOT_FOUND" 1 err "example.com/nosuch:v1" \
        err "\(NOT_FOUND\)$"
    ctl fn eval --exec rename-web.sh -f "$rl" --runner "$FN_RUNNER"
    expect "fn eval --exec runs a binary of the functions directory" 0 \
        out "^    name: web-exec$" err "^rename-web: renaming web$"
    ctl fn eval example.com/rename:v1 --exec rename-web.sh -f "$rl" --runner "$FN_RUNNER"
    expect "fn eval IMAGE --exec PATH runs PATH" 0 out "^    name: web-exec$"
    ctl fn eval --exec fail.sh -f "$rl" --runner "$FN_RUNNER"
    expect "a function that exits non-zero is INTERNAL with its stderr" 1 \
        err "boom: the input is wrong" err "\(INTERNAL\)$"
    ctl fn eval --exec report.sh -f "$rl" --runner "$FN_RUNNER"
    expect "error results fail fn eval and are printed" 1 out "^kind: ResourceList" \
        err "^error: replicas too high \(Deployment/web, field spec.replicas\)$" \
        err "^warning: consider a PodDisruptionBudget$"
    ctl fn eval --exec ../outside.sh -f "$rl" --runner "$FN_RUNNER"
    expect "--exec outside the functions directory is INVALID_ARGUMENT" 1 \
        err "\(INVALID_ARGUMENT\)$"
    ctl fn eval --exec sleep.sh -f "$rl" --runner "$FN_RUNNER" --timeout 300ms
    expect "--timeout becomes grpc-timeout: DEADLINE_EXCEEDED" 1 err "\(DEADLINE_EXCEEDED\)$"
    cat >"$WORK/fc.yaml" <<'YAML'
apiVersion: funcd.dev/v1
kind: FunctionConfig
metadata:
  name: rename-web
spec:
  image: rename-web
  prefixes: [example.com/fns]
  binaryExecutor:
    tags: [v1]
    path: rename-web.sh
YAML
    ctl apply -f "$WORK/fc.yaml"
    ctl fn eval example.com/fns/rename-web:v1 -f "$rl" --runner "$FN_RUNNER"
    expect "a FunctionConfig binaryExecutor maps an image to a binary" 0 \
        out "^    name: web-exec$"
    ctl fn eval example.com/fns/rename-web:v2 -f "$rl" --runner "$FN_RUNNER"
    expect "a tag the binaryExecutor lacks is NOT_FOUND" 1 err "\(NOT_FOUND\)$"
    ctl delete -f "$WORK/fc.yaml"
    if [ ${#SHIMS_ARGS[@]} -gt 0 ]; then
        # A podExecutor image is a directory holding an executable named "function".
        mkdir -p "$WORK/functions/rename-warm"
        cp "$WORK/functions/rename-web.sh" "$WORK/functions/rename-warm/function"
        sed -e 's/rename-web/rename-warm/g' -e 's/binaryExecutor:/podExecutor:/' \
            -e '/path: /d' "$WORK/fc.yaml" >"$WORK/fc-warm.yaml"
        ctl apply -f "$WORK/fc-warm.yaml"
        ctl fn eval example.com/fns/rename-warm:v1 -f "$rl" --runner "$FN_RUNNER"
        expect "a FunctionConfig podExecutor runs the image's directory as a warm worker" 0 \
            out "^    name: web-exec$" err "^rename-web: renaming web$"
        ctl delete -f "$WORK/fc-warm.yaml"
    fi
    if grep -q '"fnRunner"' <<<"$("$CTL" version -o json 2>/dev/null)"; then
        ctl fn eval set-namespace -f "$rl"
        expect "fn eval finds the runner through the control plane's /version" 0 \
            out "^      namespace: prod$"
    fi
}

test_version() {
    ctl version
    expect "version shows client and server" 0 out "^Client Version: [0-9]" out "^Server Version: "
}

test_stop() {
    kill -TERM "$FUNCD_PID"
    wait "$FUNCD_PID"
    local status=$?
    FUNCD_PID=
    if [ "$status" = 0 ]; then
        ok "funcd stops cleanly on SIGTERM"
    else
        echo "FAIL - funcd exited with status $status on SIGTERM; its log:"
        sed 's/^/    /' "$WORK/funcd.log" | tail -40
        FAILED=$((FAILED + 1))
    fi
}

# invoke --async, get invocations, dlq (docs/eventing.md); hello-py is deployed
# (test_serving calls it).
test_async() {
    ctl invoke hello-py --callback-url http://127.0.0.1:1/
    expect "--callback-url goes with --async" 2 err "--callback-url goes with --async"
    ctl invoke hello-py --async -d '{"a":1}' --path '/?name=async'
    expect "invoke --async prints the invocation id" 0 out '^[0-9a-f-]{36}$'
    local id=$OUT
    for _ in $(seq 100); do
        ctl get invocations "$id"
        grep -q Succeeded <<<"$OUT" && break
        sleep 0.1
    done
    expect "get invocations ID shows it Succeeded, with the answer" 0         out "^$id +hello-py +Succeeded +1 +200 " out '"method": ?"POST"'
    ctl get invocations
    expect "get invocations lists it" 0 out "^NAME +FUNCTION +STATE +ATTEMPTS +CODE +AGE" \
        out "^$id +hello-py +Succeeded"
    ctl get invocations "$id" -o json
    expect "get invocations -o json is the Invocation" 0 out '"kind": "Invocation"' \
        out '"state": "Succeeded"'
    ctl invoke nosuch --async
    expect "invoke --async of an unknown function is refused at once" 1 err "404"
    ctl dlq list
    expect "dlq list of an empty queue says so" 0 err "No dead letters found"
    ctl dlq replay
    expect "dlq replay needs IDs" 2 err "dlq replay takes the IDs"
    ctl dlq purge
    expect "dlq purge needs IDs or --all" 2 err "dlq purge takes the IDs"
    ctl dlq replay no-such-id
    expect "dlq replay of an unknown id is a 404" 1 err "deadletter/no-such-id.*not found"
    ctl dlq purge --all
    expect "dlq purge --all" 0 out "purged 0 dead letters"
}

start_funcd
test_usage
test_serving_usage
test_fn_usage
test_apply
test_get
test_nodes
test_describe
test_errors
test_watch
test_delete
if grep -q '"dataPlane"' <<<"$("$CTL" version -o json 2>/dev/null)"; then
    test_serving
    test_deploy_failures
else
    echo "# SKIP serving: this funcd does not report a data plane yet"
fi
if [ -n "$FN_RUNNER" ]; then
    test_fn_eval
else
    echo "# SKIP fn eval: this funcd has no function runner yet"
fi
test_version
test_stop

echo "$PASSED passed, $FAILED failed"
[ "$FAILED" = 0 ]
