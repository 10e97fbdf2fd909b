# What the CLI test scripts share: a funcd of their own on ephemeral loopback
# ports, `ctl` to run funcdctl and `expect` to check what it did. Sourced
# after FUNCD, CTL and HERE are set; prints "ok - ..." / "FAIL - ...".
# shellcheck shell=bash

WORK=$(mktemp -d "${TMPDIR:-/tmp}/funcdctl-test.XXXXXX")
FUNCD_PID=
WATCH_PID=
PASSED=0
FAILED=0

cleanup() {
    for pid in $WATCH_PID $FUNCD_PID; do
        kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
    done
    rm -rf "$WORK"
}
trap cleanup EXIT

ok() { echo "ok - $1"; PASSED=$((PASSED + 1)); }
fail() {
    echo "FAIL - $1"
    FAILED=$((FAILED + 1))
    echo "    command: funcdctl ${LAST_ARGS:-}"
    echo "    exit status: ${RC:-}"
    sed 's/^/    stdout: /' "$WORK/out" 2>/dev/null | head -40
    sed 's/^/    stderr: /' "$WORK/err" 2>/dev/null | head -40
}

# Streaming commands run in the background under `timeout --foreground`: the
# Ctrl-C the test sends must reach funcdctl alone. Plain `timeout` also sends
# SIGCONT to its whole process group, which can cancel the SIGSTOP that
# LeakSanitizer's tracer uses to stop the exiting process, and both then
# wait for each other forever.
bg_ctl() {
    local out=$1 err=$2
    shift 2
    timeout --foreground 30 "$CTL" "$@" >"$out" 2>"$err" &
    WATCH_PID=$!
}

# ctl ARGS...: runs funcdctl (stdin passed through); sets RC, OUT, ERR.
ctl() {
    LAST_ARGS="$*"
    timeout 20 "$CTL" "$@" >"$WORK/out" 2>"$WORK/err"
    RC=$?
    OUT=$(cat "$WORK/out")
    ERR=$(cat "$WORK/err")
}

# expect DESCRIPTION STATUS [out|err PATTERN]...: checks the last ctl run.
expect() {
    local what=$1 status=$2
    shift 2
    if [ "$RC" != "$status" ]; then
        fail "$what (want exit status $status)"
        return
    fi
    while [ $# -ge 2 ]; do
        local text=$OUT
        [ "$1" = err ] && text=$ERR
        if ! grep -qE -- "$2" <<<"$text"; then
            fail "$what (want $1 to match /$2/)"
            return
        fi
        shift 2
    done
    ok "$what"
}

# The shims (language workers) live in the build tree's shims/ folder; FUNCD
# is BUILD/bin/funcd/funcd.
BUILD=${FUNCD_BUILD_ROOT:-$(cd "$(dirname "$FUNCD")/../.." && pwd)}
SHIMS_ARGS=()
if "$FUNCD" --help 2>&1 | grep -q -- --shims && [ -d "$BUILD/shims" ]; then
    SHIMS_ARGS=(--shims "$BUILD/shims")
fi

# The function runner, when this funcd has one: its functions directory is
# filled by write_test_functions, its address read from the log.
FN_RUNNER_ARGS=()
FN_RUNNER=
if "$FUNCD" --help 2>&1 | grep -q -- --fn-runner-listen; then
    mkdir -p "$WORK/functions"
    FN_RUNNER_ARGS=(--fn-runner-listen 127.0.0.1:0 --functions-dir "$WORK/functions")
fi

# start_funcd [EXTRA FUNCD ARGS...]
start_funcd() {
    "$FUNCD" --memory --dev --listen 127.0.0.1:0 --data-plane-listen 127.0.0.1:0 \
        "${SHIMS_ARGS[@]}" "${FN_RUNNER_ARGS[@]}" "$@" 2>"$WORK/funcd.log" &
    FUNCD_PID=$!
    local addr=
    for _ in $(seq 150); do
        addr=$(sed -n 's/^funcd: control plane listening on //p' "$WORK/funcd.log" | head -n 1)
        [ -n "$addr" ] && break
        if ! kill -0 "$FUNCD_PID" 2>/dev/null; then
            break
        fi
        sleep 0.1
    done
    if [ -z "$addr" ]; then
        echo "FAIL - funcd did not print its control-plane address; its log:"
        sed 's/^/    /' "$WORK/funcd.log"
        echo "0 passed, 1 failed"
        exit 1
    fi
    export FUNCD_SERVER="http://$addr" FUNCD_TOKEN=funcd-dev-token
    echo "# funcd (pid $FUNCD_PID) at $FUNCD_SERVER"
    if [ ${#FN_RUNNER_ARGS[@]} -gt 0 ]; then
        for _ in $(seq 50); do
            FN_RUNNER=$(sed -n 's/^funcd: function runner listening on //p' "$WORK/funcd.log" |
                head -n 1)
            [ -n "$FN_RUNNER" ] && break
            sleep 0.1
        done
        echo "# function runner at ${FN_RUNNER:-<not printed>}"
    fi
}


# stop_bg DESCRIPTION-ARGS: Ctrl-C to the background funcdctl of bg_ctl, then
# its exit status and output as the last ctl run (for expect).
stop_bg() {
    local out=$1 err=$2
    shift 2
    kill -INT "$WATCH_PID" 2>/dev/null
    wait "$WATCH_PID"
    RC=$?
    WATCH_PID=
    cp "$out" "$WORK/out"
    cp "$err" "$WORK/err"
    OUT=$(cat "$WORK/out")
    ERR=$(cat "$WORK/err")
    LAST_ARGS="$*"
}

# wait_for FILE PATTERN: until FILE has a line matching PATTERN (at most ~10 s).
wait_for() {
    for _ in $(seq 100); do
        grep -qE -- "$2" "$1" 2>/dev/null && return 0
        sleep 0.1
    done
    return 1
}

# expect_golden DESCRIPTION STATUS NAME: the last ctl run's stdout, ages
# (5s, 3m, ...) read as AGE and column gaps as " | ", against
# golden/NAME.txt; FUNCD_GOLDEN_UPDATE=1 rewrites the file instead.
expect_golden() {
    local what=$1 status=$2 golden=$HERE/golden/$3.txt got
    got=$(sed -E -e 's/ {3,}/ | /g' \
        -e 's/(^| \| )[0-9]+[smhdy]( \| |$)/\1AGE\2/g' <<<"$OUT")
    if [ "${FUNCD_GOLDEN_UPDATE:-}" = 1 ]; then
        printf '%s\n' "$got" >"$golden"
    fi
    if [ "$RC" != "$status" ]; then
        fail "$what (want exit status $status)"
    elif [ "$got" != "$(cat "$golden" 2>/dev/null)" ]; then
        fail "$what (stdout differs from golden/$3.txt)"
        diff <(cat "$golden" 2>/dev/null) <(printf '%s\n' "$got") | sed 's/^/    /'
    else
        ok "$what"
    fi
}
