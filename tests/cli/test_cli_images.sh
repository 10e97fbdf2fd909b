#!/usr/bin/env bash
# End-to-end test of funcdctl's image commands (pull, get images, deploy
# --image) against a real docker-registry on loopback and a real
# `funcd --memory --dev` that may pull from it.
#
#   bash tests/cli/test_cli_images.sh path/to/funcd path/to/funcdctl
#
# Prints "ok - ..." / "FAIL - ..." / "skip - ..." per check and a summary;
# exits non-zero on any failure, 77 when a tool it needs is missing. The
# registry and funcd are stopped by pid on exit whatever happens.
set -u

FUNCD=${1:?usage: test_cli_images.sh FUNCD FUNCDCTL}
CTL=${2:?usage: test_cli_images.sh FUNCD FUNCDCTL}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
SRC=${FUNCD_SOURCE_ROOT:-$(cd "$HERE/../.." && pwd)}
export FUNCD_SOURCE_ROOT=$SRC

for tool in /usr/bin/docker-registry /usr/bin/skopeo /usr/bin/curl cc tar gzip sha256sum; do
    if ! command -v "$tool" >/dev/null 2>&1; then
        echo "skip - $tool is not installed"
        exit 77
    fi
done

WORK=$(mktemp -d "${TMPDIR:-/tmp}/funcdctl-images.XXXXXX")
REGISTRY_PID=
FUNCD_PID=
PASSED=0
FAILED=0
SKIPPED=0

stop_pid() { # PID: SIGTERM, then SIGKILL if it lingers
    local pid=$1
    [ -n "$pid" ] || return 0
    kill "$pid" 2>/dev/null || return 0
    for _ in $(seq 50); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    kill -9 "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
}

cleanup() {
    stop_pid "$FUNCD_PID"
    stop_pid "$REGISTRY_PID"
    rm -rf "$WORK"
}
trap cleanup EXIT

ok() { echo "ok - $1"; PASSED=$((PASSED + 1)); }
skip() { echo "skip - $1"; SKIPPED=$((SKIPPED + 1)); }
fail() {
    echo "FAIL - $1"
    FAILED=$((FAILED + 1))
    echo "    command: funcdctl ${LAST_ARGS:-}"
    echo "    exit status: ${RC:-}"
    sed 's/^/    stdout: /' "$WORK/out" 2>/dev/null | head -40
    sed 's/^/    stderr: /' "$WORK/err" 2>/dev/null | head -40
}

# ctl ARGS...: runs funcdctl; sets RC, OUT, ERR.
ctl() {
    LAST_ARGS="$*"
    timeout 60 "$CTL" "$@" >"$WORK/out" 2>"$WORK/err"
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
        return 1
    fi
    while [ $# -ge 2 ]; do
        local text=$OUT
        [ "$1" = err ] && text=$ERR
        if ! grep -qE -- "$2" <<<"$text"; then
            fail "$what (want $1 to match /$2/)"
            return 1
        fi
        shift 2
    done
    ok "$what"
}

bail() { # MESSAGE [LOG]: a setup step failed; nothing else can run
    echo "FAIL - $1"
    [ -n "${2:-}" ] && sed 's/^/    /' "$2" | tail -30
    echo "$PASSED passed, $((FAILED + 1)) failed, $SKIPPED skipped"
    exit 1
}

# ---- the registry: docker-registry on a free loopback port ---------------------

start_registry() {
    mkdir -p "$WORK/registry"
    for _ in 1 2 3 4 5; do
        REGISTRY=127.0.0.1:$((20000 + RANDOM % 40000))
        cat >"$WORK/registry/config.yml" <<EOF
version: 0.1
log:
  level: error
  accesslog:
    disabled: true
storage:
  filesystem:
    rootdirectory: $WORK/registry/storage
http:
  addr: $REGISTRY
EOF
        /usr/bin/docker-registry serve "$WORK/registry/config.yml" >"$WORK/registry.log" 2>&1 &
        REGISTRY_PID=$!
        for _ in $(seq 100); do
            kill -0 "$REGISTRY_PID" 2>/dev/null || break
            if curl -fs -o /dev/null "http://$REGISTRY/v2/"; then
                echo "# registry (pid $REGISTRY_PID) at $REGISTRY"
                return 0
            fi
            sleep 0.05
        done
        stop_pid "$REGISTRY_PID" # the port was taken, most likely: another one
        REGISTRY_PID=
    done
    return 1
}

push() { # LAYOUT REPO:TAG
    skopeo --insecure-policy copy -q --dest-tls-verify=false "oci:$1:1" \
        "docker://$REGISTRY/$2" >/dev/null 2>"$WORK/skopeo.log"
}

# Not --no-sandbox: an image's worker runs chrooted into the image's root
# filesystem, which only the sandbox does (this suite runs as root).
start_funcd() {
    "$FUNCD" --memory --dev --listen 127.0.0.1:0 --data-plane-listen 127.0.0.1:0 \
        --insecure-registry "$REGISTRY" 2>"$WORK/funcd.log" &
    FUNCD_PID=$!
    local addr=
    for _ in $(seq 150); do
        addr=$(sed -n 's/^funcd: control plane listening on //p' "$WORK/funcd.log" | head -n 1)
        [ -n "$addr" ] && break
        kill -0 "$FUNCD_PID" 2>/dev/null || break
        sleep 0.1
    done
    [ -n "$addr" ] || return 1
    export FUNCD_SERVER="http://$addr" FUNCD_TOKEN=funcd-dev-token
    echo "# funcd (pid $FUNCD_PID) at $FUNCD_SERVER"
}

sh "$SRC/tests/oci/fixtures.sh" "$WORK/layouts" worker big >"$WORK/fixtures.log" 2>&1 ||
    bail "tests/oci/fixtures.sh could not build the images" "$WORK/fixtures.log"
start_registry || bail "docker-registry did not start" "$WORK/registry.log"
push "$WORK/layouts/worker" test/worker:1 || bail "skopeo could not push" "$WORK/skopeo.log"
push "$WORK/layouts/big" test/big:1 || bail "skopeo could not push" "$WORK/skopeo.log"
start_funcd || bail "funcd did not print its control-plane address" "$WORK/funcd.log"

WORKER=$REGISTRY/test/worker:1
BIG=$REGISTRY/test/big:1
# The manifest's digest, as the layout's index names it: what funcd must report.
WORKER_DIGEST=$(sed -n 's/.*"digest":"\(sha256:[0-9a-f]*\)".*/\1/p' \
    "$WORK/layouts/worker/index.json")
[ -n "$WORKER_DIGEST" ] || bail "no digest in the worker layout's index.json" \
    "$WORK/layouts/worker/index.json"

# ---- usage -----------------------------------------------------------------------

ctl pull
expect "pull without IMAGE is a usage error" 2 err "pull needs the IMAGE"
ctl pull a b
expect "pull takes one IMAGE" 2 err "pull takes one IMAGE"
ctl deploy --name x
expect "deploy needs DIR or --image" 2 err "or --image IMAGE"
ctl deploy "$WORK" --image "$WORKER" --name x
expect "deploy refuses DIR and --image together" 2 err "not both"

# ---- pull ------------------------------------------------------------------------

ctl pull "$WORKER"
expect "pull prints the digest (plain lines: stderr is no terminal)" 0 \
    out "^pulled $WORKER $WORKER_DIGEST$" err "^pulling $WORKER$"
if grep -q $'\r' "$WORK/err"; then
    fail "pull draws no bar when stderr is not a terminal"
else
    ok "pull draws no bar when stderr is not a terminal"
fi

ctl pull "$BIG"
expect "pull reports each quarter of a 32 MiB image" 0 \
    out "^pulled $BIG sha256:" err "pulling $BIG: 32\.0 of 32\.0 MiB"
QUARTERS=$(grep -c "^pulling $BIG: .* of 32\.0 MiB" <<<"$ERR")
if [ "$QUARTERS" -ge 1 ] && [ "$QUARTERS" -le 4 ]; then
    ok "pull prints at most one line per quarter ($QUARTERS)"
else
    fail "pull prints at most one line per quarter (got $QUARTERS)"
fi

ctl pull "$WORKER" -o json
expect "pull -o json prints the final state" 0 out '"phase": "Done"' out '"digest": "sha256:'

if command -v script >/dev/null 2>&1; then
    # script(1) gives funcdctl a terminal; the typescript holds what it drew.
    LAST_ARGS="pull $BIG (under script)"
    timeout 60 script -qec "'$CTL' pull '$BIG'" "$WORK/typescript" >"$WORK/out" 2>"$WORK/err" \
        </dev/null
    RC=$?
    OUT=$(tr '\r' '\n' <"$WORK/typescript" | sed 's/\x1b\[K//g')
    ERR=$OUT
    expect "pull on a terminal draws the bar and still prints the digest" 0 \
        out "^pulled $BIG sha256:" err "^pulling $BIG  \[#{20}\]  32\.0/32\.0 MiB"
else
    skip "script(1) is not installed: the terminal bar is not exercised"
fi

ctl pull "$REGISTRY/test/worker:bad*tag"
expect "a bad reference fails naming the field" 1 err "(field image|image reference)" \
    err "400 BadRequest"

ctl pull "$REGISTRY/test/worker:nosuchtag"
expect "an unknown tag fails with the registry's message" 1 \
    err "pulling $REGISTRY/test/worker:nosuchtag: .*(not found|unknown|MANIFEST)"

# ---- get images ------------------------------------------------------------------

ctl get images
expect "get images lists the cache" 0 out "^DIGEST +REF +SIZE +PULLED" \
    out "^sha256:[0-9a-f]{12} +$WORKER +[0-9.]+ (B|KiB|MiB) +[0-9]+s" \
    out "^sha256:[0-9a-f]{12} +$BIG +32\.0 MiB "
ctl get images -o wide
expect "get images -o wide adds platform, layers, entrypoint" 0 \
    out "PLATFORM +LAYERS +ENTRYPOINT" out "$WORKER .* linux/[a-z0-9]+ +1 +/bin/worker$"
ctl get images -o json
expect "get images -o json is a List of the cache" 0 out '"kind": "List"' \
    out "\"ref\": \"$WORKER\"" out '"entrypoint": \['
ctl get images "$BIG" -o name
expect "get images REF -o name picks one" 0 out '^image/sha256:[0-9a-f]{64}$'
[ "$(wc -l <<<"$OUT")" = 1 ] && ok "get images REF prints that image alone" ||
    fail "get images REF prints that image alone"
ctl get images nosuch/image:1
expect "get images of an image not in the cache fails" 1 err 'no image "nosuch/image:1"'

# ---- deploy --image ----------------------------------------------------------------

ctl deploy --image "$REGISTRY/test/worker:nosuchtag" --name broken
expect "deploy --image of a missing tag fails before writing the Function" 1 \
    err "pulling .*nosuchtag"
ctl get fn broken
expect "deploy --image wrote no Function when the pull failed" 1 err "not found|NotFound"

ctl deploy --image "$WORKER" --name imgfn --no-wait
expect "deploy --image --no-wait pulls, then writes the Function" 0 \
    out "^function/imgfn (created|configured)$" err "pulled $WORKER sha256:"
ctl get fn imgfn -o json
expect "the Function runs the image, runtime native" 0 \
    out "\"image\": \"$WORKER\"" out '"runtime": "native"'

ctl deploy --image "$WORKER" --name imgfn --wait-timeout 30s
expect "deploy --image waits until the Function is Ready" 0 out "^function/imgfn ready$"
ctl invoke imgfn --path /hello -d ping
expect "invoke reaches the image's worker" 0 out '"path": ?"/hello"' out '"body": ?"ping"'
ctl get fn imgfn -o json
expect "the Function's status names the digest pulled" 0 \
    out "\"digest\": \"$WORKER_DIGEST\""

echo "$PASSED passed, $FAILED failed, $SKIPPED skipped"
[ "$FAILED" = 0 ]
