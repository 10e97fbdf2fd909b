#!/usr/bin/env bash
# Tests the worker shims (funcd-python.py, funcd-node.js, funcd-exec) and the
# example functions by starting each exactly as the platform does (argv, env
# and cwd from docs/worker-contract.md) and talking HTTP to its Unix socket
# with curl.
#
#   bash tests/shims/test_shims.sh SHIMS_DIR READY_TIME HELLO_NATIVE SOURCE_ROOT
#
# Prints "ok - ..." / "FAIL - ..." / "skipped - ..." per check and a summary;
# exits non-zero on any failure. Every process it starts is killed on exit.
set -u

SHIMS=${1:?usage: test_shims.sh SHIMS_DIR READY_TIME HELLO_NATIVE SOURCE_ROOT}
READY_TIME=${2:?}
HELLO_NATIVE=${3:?}
SRC=${4:?}
HERE=$SRC/tests/shims
PY=/usr/bin/python3
NODE=$(command -v node || true)
WORK=$(mktemp -d /tmp/funcd-shims.XXXXXX) # short: socket paths are limited to 107 bytes
EXAMPLES=$WORK/examples # a copy: running them writes __pycache__ and the like
cp -r "$SRC/examples/functions" "$EXAMPLES"
PIDS=()
PASSED=0
FAILED=0

cleanup() {
    for pid in "${PIDS[@]}"; do
        kill -KILL "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
    done
    rm -rf "$WORK"
}
trap cleanup EXIT

ok() { echo "ok - $1"; PASSED=$((PASSED + 1)); }
fail() {
    echo "FAIL - $1"
    FAILED=$((FAILED + 1))
    echo "    status: ${CODE:-}"
    sed 's/^/    headers: /' "$WORK/hdrs" 2>/dev/null | head -20
    sed 's/^/    body: /' "$WORK/body" 2>/dev/null | head -20
}
skip() { echo "skipped - $1"; }

# start_worker NAME CODE_DIR HANDLER ARGV...: starts a worker the way the
# platform does; sets SOCK and WPID; its stdout/stderr go to $WORK/NAME.{out,err}.
start_worker() {
    local name=$1 code=$2 handler=$3
    shift 3
    SOCK=$WORK/$name.sock
    (cd "$code" && exec env FUNCD_LISTEN="$SOCK" FUNCD_NAMESPACE=default FUNCD_FUNCTION="$name" \
        FUNCD_REPLICA="$name-1" FUNCD_HANDLER="$handler" FUNCD_CODE_DIR="$code" PYTHONUNBUFFERED=1 \
        GREETING=hi "$@") >"$WORK/$name.out" 2>"$WORK/$name.err" &
    WPID=$!
    PIDS+=("$WPID")
}

# wait_ready: waits (10 s at most) until GET /_/ready on $SOCK answers 200.
wait_ready() {
    for _ in $(seq 200); do
        [ "$(curl -s -o /dev/null -w '%{http_code}' --unix-socket "$SOCK" http://worker/_/ready)" = 200 ] && return 0
        kill -0 "$WPID" 2>/dev/null || return 1
        sleep 0.05
    done
    return 1
}

# req [CURL ARGS...] URL_PATH: one request to $SOCK; sets CODE; body in $WORK/body.
req() {
    local path=${!#}
    CODE=$(curl -sS --max-time 10 --unix-socket "$SOCK" -o "$WORK/body" -D "$WORK/hdrs" -w '%{http_code}' \
        "${@:1:$#-1}" "http://worker$path" 2>"$WORK/curl.err")
    BODY=$(cat "$WORK/body")
}

# header NAME: the value of a response header of the last req.
header() { sed -n "s/^$1: *//Ip" "$WORK/hdrs" | tr -d '\r' | head -n 1; }

# jget EXPR: evaluates EXPR on the last body parsed as JSON (as d), prints
# strings raw and anything else as JSON.
jget() {
    if [ -x "$PY" ]; then
        "$PY" -c 'import json, sys
d = json.load(open(sys.argv[1])); v = eval(sys.argv[2])
print(v if isinstance(v, str) else json.dumps(v, separators=(",", ":")))' "$WORK/body" "$1" 2>/dev/null
    else
        "$NODE" -e 'const d = JSON.parse(require("fs").readFileSync(process.argv[1])); const v = eval(process.argv[2]);
console.log(typeof v === "string" ? v : JSON.stringify(v))' "$WORK/body" "$1" 2>/dev/null
    fi
}

# check DESCRIPTION TEST...: ok when the test command succeeds.
check() {
    local what=$1
    shift
    if "$@"; then ok "$what"; else fail "$what"; fi
}

eq() { [ "$1" = "$2" ] || { echo "    want '$2', got '$1'"; return 1; }; }
has_log_line() { # FILE SEVERITY INVOCATION_ID: a JSON log line with both
    grep -F "\"invocationId\":\"$3\"" "$1" | grep -qF "\"severity\":\"$2\""
}

# stop_worker: SIGTERM while a slow request is in flight; the request must
# complete and the worker exit 0.
check_drain() {
    local label=$1 slow_path=$2
    curl -sS --max-time 10 --unix-socket "$SOCK" -o "$WORK/slow.body" -w '%{http_code}' \
        "http://worker$slow_path" >"$WORK/slow.code" 2>/dev/null &
    local curl_pid=$!
    sleep 0.4
    kill -TERM "$WPID"
    wait "$WPID"
    local rc=$?
    wait "$curl_pid"
    check "$label: SIGTERM waits for the in-flight request" eq "$(cat "$WORK/slow.code") $(cat "$WORK/slow.body")" "200 slept"
    check "$label: exits 0 after SIGTERM" eq "$rc" 0
}

# keep-alive: two URLs on one curl command reuse one connection.
check_keepalive() {
    local conns
    conns=$(curl -s --unix-socket "$SOCK" -o /dev/null -o /dev/null -w '%{num_connects} ' \
        http://worker/text http://worker/_/ready)
    check "$1: two requests share one connection" eq "$conns" "1 0 "
}

# concurrency: a slow request does not hold up another one.
check_concurrency() {
    local label=$1 slow_path=$2 fast_path=$3
    curl -s --max-time 10 --unix-socket "$SOCK" -o /dev/null "http://worker$slow_path" &
    local curl_pid=$! start end
    sleep 0.2
    start=$(date +%s%N)
    req "$fast_path"
    end=$(date +%s%N)
    wait "$curl_pid"
    check "$label: a request is answered while a slow one runs ($(((end - start) / 1000000)) ms)" \
        test "$CODE" = 200 -a $(((end - start) / 1000000)) -lt 900
}

# The checks python3 and node share: same routes, same answers.
check_handler_shapes() {
    local label=$1
    req -X POST -H 'X-Test: yes' -H 'X-Funcd-Invocation-Id: inv-echo' -H 'Content-Type: application/json' \
        --data-binary '{"k":"v"}' '/some/path?x=1&y=a%20b&x=2'
    check "$label: echo answers 200 JSON" eq "$CODE $(header Content-Type)" "200 application/json"
    check "$label: method, path and query reach the handler" \
        eq "$(jget "d['method']") $(jget "d['path']") $(jget "d['query']")" "POST /some/path x=1&y=a%20b&x=2"
    check "$label: args has the first value of each" eq "$(jget "d['args']")" '{"x":"1","y":"a b"}'
    check "$label: headers are lower-case" eq "$(jget "d['headers']['x-test']")" "yes"
    check "$label: invocation id" eq "$(jget "d['invocationId']")" "inv-echo"
    check "$label: body, text and json" eq "$(jget "d['bodyLength']") $(jget "d['text']") $(jget "d['json']")" \
        '9 {"k":"v"} {"k":"v"}'

    req /text
    check "$label: str answers text/plain" eq "$CODE $(header Content-Type) $BODY" \
        "200 text/plain; charset=utf-8 hello text"
    req /bytes
    check "$label: bytes answer application/octet-stream" \
        eq "$CODE $(header Content-Type) $(od -An -tx1 "$WORK/body" | tr -d ' \n')" \
        "200 application/octet-stream 0001726177"
    req /list
    check "$label: a list answers JSON" eq "$CODE $(header Content-Type) $BODY" '200 application/json [1,"two"]'
    req /triple
    check "$label: status, headers and body" eq "$CODE $(header X-Custom) $(header Content-Type) $BODY" \
        "201 yes text/csv a,b"
    req /none
    check "$label: nothing returned answers 204" eq "$CODE" 204

    req -H 'X-Funcd-Invocation-Id: inv-boom' /boom
    check "$label: an exception answers 500 with a JSON Status" \
        eq "$CODE $(jget "d['kind']") $(jget "d['code']")" "500 Status 500"
    check "$label: the exception is logged as one JSON line with invocationId" \
        has_log_line "$WORK/$label.err" ERROR inv-boom
    req /badheader
    check "$label: a header with a line break answers 500" eq "$CODE" 500
    req -H 'Transfer-Encoding: chunked' -d x /echo
    [ "$label" = node ] || check "$label: a chunked request body answers 411" eq "$CODE" 411
    req -H "X-Big: $(head -c 70000 /dev/zero | tr '\0' a)" /text
    check "$label: a head over 64 KiB answers 431" eq "$CODE" 431
    check_keepalive "$label"
}

check_broken() {
    local label=$1
    shift
    start_worker "$label-broken" "$@"
    wait "$WPID"
    local rc=$?
    check "$label: a handler that fails to load exits 3" eq "$rc" 3
    check "$label: ... and says why on stderr" grep -q 'broken on purpose' "$WORK/$label-broken.err"
}

# ---- python3 -------------------------------------------------------------
if [ -x "$PY" ]; then
    mkdir -p "$WORK/py" && cp "$HERE"/python/*.py "$WORK/py/"
    start_worker python "$WORK/py" app.handler "$PY" "$SHIMS/funcd-python.py"
    check "python: ready" wait_ready
    check_handler_shapes python
    req /pair
    check "python: (status, body)" eq "$CODE $BODY" "202 accepted"
    req /awaitable
    check "python: a returned coroutine is awaited" eq "$CODE $BODY" '200 {"async":true,"path":"/awaitable"}'
    check_concurrency python '/slow?s=1.5' /text
    check_drain python '/slow?s=1'

    start_worker python-async "$WORK/py" app.async_handler "$PY" "$SHIMS/funcd-python.py"
    check "python: async def handler ready" wait_ready
    req /x
    check "python: async def handler answers" eq "$CODE $BODY" '200 {"async":true,"path":"/x"}'
    check_broken python "$WORK/py" broken.handler "$PY" "$SHIMS/funcd-python.py"
    start_worker python-missing "$WORK/py" app.nope "$PY" "$SHIMS/funcd-python.py"
    wait "$WPID"
    check "python: a missing function exits 3 naming it" eq "$? $(grep -c "no attribute 'nope'" "$WORK/python-missing.err")" "3 1"
else
    skip "python: $PY is not installed"
fi

# ---- node ------------------------------------------------------------------
if [ -n "$NODE" ]; then
    mkdir -p "$WORK/node" && cp "$HERE"/node/*.js "$WORK/node/"
    start_worker node "$WORK/node" app.js "$NODE" "$SHIMS/funcd-node.js"
    check "node: ready (export defaults to handler)" wait_ready
    check_handler_shapes node
    req /status-object
    check "node: an object that is not {status:number,...} is JSON" eq "$CODE $BODY" '200 {"status":"ok"}'
    req -H 'X-Funcd-Invocation-Id: inv-reject' /reject
    check "node: a rejected promise answers 500 and is logged" \
        test "$CODE" = 500 -a -n "$(grep -F inv-reject "$WORK/node.err")"
    check_concurrency node '/slow?s=1.5' /text
    check_drain node '/slow?s=1'

    start_worker node-async "$WORK/node" 'app.js#asyncHandler' "$NODE" "$SHIMS/funcd-node.js"
    check "node: file.js#export ready" wait_ready
    req /y
    check "node: the named export answers" eq "$CODE $BODY" '200 {"async":true,"path":"/y"}'
    check_broken node "$WORK/node" broken.js "$NODE" "$SHIMS/funcd-node.js"
else
    skip "node: node is not installed"
fi

# ---- exec ----------------------------------------------------------------------
mkdir -p "$WORK/exec" && cp "$HERE/exec/cgi.sh" "$WORK/exec/handler"
start_worker exec "$WORK/exec" handler "$SHIMS/funcd-exec" -- "$WORK/exec/handler"
check "exec: ready" wait_ready
req --data-binary payload /cgi
check "exec: a CGI header block sets status and headers" \
    eq "$CODE $(header X-Thing) $(header Content-Type) $BODY" "201 1 text/plain got: payload"
req /plain
check "exec: plain stdout is the body" eq "$CODE $(header Content-Type) $BODY" \
    "200 application/octet-stream just text"
req -H 'X-Funcd-Invocation-Id: inv-fail' /fail
check "exec: a non-zero exit answers 502 with the last stderr line" \
    eq "$CODE $(jget "d['reason']") $(jget "d['message']")" \
    "502 FunctionFailed handler exited with status 3: last words"
check "exec: the command's stderr lines reach the worker's stderr" \
    eq "$(grep -c -e '^first stderr line$' -e '^last words$' "$WORK/exec.err")" 2
check "exec: the failed invocation is logged with its id" has_log_line "$WORK/exec.out" ERROR inv-fail
req -X PUT -H 'X-Test: yes' -H 'Proxy: http://evil' -H 'X-Funcd-Invocation-Id: inv-env' -H 'Content-Type: text/x' \
    --data-binary abc '/env/p%20q/r?a=1&b=2'
check "exec: the request reaches the command as CGI variables" eq "$(tr '\n' ' ' <"$WORK/body")" \
    "method=PUT path=/env/p q/r query=a=1&b=2 type=text/x length=3 x_test=yes id=inv-env uri=/env/p%20q/r?a=1&b=2 greeting=hi proxy=unset "
check "exec: each invocation is logged as a JSON line with status and durationMs" \
    test -n "$(grep -F '"invocationId":"inv-env"' "$WORK/exec.out" | grep -F '"status":200' | grep -F durationMs)"
head -c 100000 /dev/urandom >"$WORK/blob"
req --data-binary @"$WORK/blob" /echo
check "exec: the body reaches stdin byte for byte" cmp -s "$WORK/blob" "$WORK/body"
req /redirect
check "exec: Location without Status redirects" eq "$CODE $(header Location)" "302 /elsewhere"
req -H 'Transfer-Encoding: chunked' -d x /echo
check "exec: a chunked request body answers 411" eq "$CODE" 411
req -H "X-Big: $(head -c 70000 /dev/zero | tr '\0' a)" /plain
check "exec: a head over 64 KiB answers 431" eq "$CODE" 431
if [ -x "$PY" ]; then
    garbage=$("$PY" -c 'import socket, sys
s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); s.sendall(b"NOT HTTP AT ALL\r\n\r\n")
print(s.recv(100).split(b"\r\n")[0].decode())' "$SOCK")
    check "exec: garbage answers 400" eq "$garbage" "HTTP/1.1 400 Bad Request"
fi
check_keepalive exec
check_concurrency exec /slow /plain
check_drain exec /slow

start_worker exec-missing "$WORK/exec" nope "$SHIMS/funcd-exec" -- "$WORK/exec/nope"
check "exec: ready even when the command is missing" wait_ready
req /x
check "exec: a command that cannot start answers 502 saying why" eq "$CODE $(jget "d['message']")" \
    "502 cannot run nope: No such file or directory"
if [ -x "$PY" ]; then # the python3 runtime's exec mode: [funcd-exec, --, python3, CODE_DIR/handler]
    printf '%s\n' 'import os, sys' \
        'sys.stdout.write("Content-Type: text/plain\n\npython saw " + os.environ["PATH_INFO"] + " " + sys.stdin.read())' \
        >"$WORK/exec/handler.py"
    start_worker exec-python "$WORK/exec" handler.py "$SHIMS/funcd-exec" -- "$PY" "$WORK/exec/handler.py"
    wait_ready && req --data-binary 'a body' /py
    check "exec: a python3 command answers" eq "$CODE $(header Content-Type) $BODY" "200 text/plain python saw /py a body"
fi

# ---- examples ----------------------------------------------------------------
if [ -x "$PY" ]; then
    start_worker ex-python "$EXAMPLES/python3" main.handler "$PY" "$SHIMS/funcd-python.py"
    wait_ready && req -H 'X-Funcd-Invocation-Id: inv-ex' '/hi/there?name=Ada'
    check "example python3: answers with the request path" eq "$CODE $(jget "d['path']") $(jget "d['message']")" \
        "200 /hi/there hi, Ada, from python"
    check "example python3: logs a JSON line" has_log_line "$WORK/ex-python.out" INFO inv-ex
fi
if [ -n "$NODE" ]; then
    start_worker ex-node "$EXAMPLES/node" index.js "$NODE" "$SHIMS/funcd-node.js"
    wait_ready && req '/hi/there?name=Ada'
    check "example node: answers with the request path" eq "$CODE $(jget "d['path']") $(jget "d['message']")" \
        "200 /hi/there hi, Ada, from node"
fi
start_worker ex-exec "$EXAMPLES/exec" hello.sh "$SHIMS/funcd-exec" -- "$EXAMPLES/exec/hello.sh"
wait_ready && req --data-binary 'some text' /hi
check "example exec: answers" eq "$CODE $BODY" "200 hi from a shell script: you sent 9 bytes to /hi: some text"
check "example exec: its stderr line is logged" grep -q '^hello.sh: POST /hi (9 bytes)$' "$WORK/ex-exec.err"
mkdir -p "$WORK/native" && cp "$HELLO_NATIVE" "$WORK/native/hello"
start_worker ex-native "$WORK/native" hello "$WORK/native/hello"
check "example native: ready" wait_ready
req -H 'X-Funcd-Invocation-Id: inv-c' '/greet?name=Ada'
check "example native: answers with the request path" eq "$CODE $(jget "d['path']") $(jget "d['message']")" \
    "200 /greet hi, Ada, from C"
check_keepalive ex-native
kill -TERM "$WPID"
wait "$WPID"
check "example native: exits 0 on SIGTERM" eq "$?" 0

# ---- start times -------------------------------------------------------------
# Spawn to the first 200 from /_/ready, 10 runs each; printed, not judged (the
# sanitizer build and a loaded machine make any bound flaky).
start_time() {
    local label=$1 code=$2 handler=$3
    shift 3
    local t
    t=$(cd "$code" && FUNCD_LISTEN="$WORK/t.sock" FUNCD_HANDLER="$handler" FUNCD_CODE_DIR="$code" \
        PYTHONUNBUFFERED=1 "$READY_TIME" 10 "$@" 2>/dev/null)
    echo "# start time $label (min median max ms): ${t:-failed}"
}
[ -x "$PY" ] && start_time python "$EXAMPLES/python3" main.handler "$PY" "$SHIMS/funcd-python.py"
[ -n "$NODE" ] && start_time node "$EXAMPLES/node" index.js "$NODE" "$SHIMS/funcd-node.js"
start_time exec "$EXAMPLES/exec" hello.sh "$SHIMS/funcd-exec" -- "$EXAMPLES/exec/hello.sh"
start_time native "$WORK/native" hello "$WORK/native/hello"

echo "$PASSED passed, $FAILED failed"
[ "$FAILED" = 0 ]
