#!/usr/bin/env bash
# Runs every ```sh block of README.md, as written, against a funcd of its own
# (ephemeral loopback ports, memory store) in a copy of examples/: so the
# README's examples keep working. `make run` (the daemon: this script starts
# its own) and `make test` (the suite itself) are left out; a block whose
# first line is "# illustrative" is shown, not run.
#
#   bash tests/cli/test_readme.sh path/to/funcd path/to/funcdctl
set -u

FUNCD=${1:?usage: test_readme.sh FUNCD FUNCDCTL}
CTL=${2:?usage: test_readme.sh FUNCD FUNCDCTL}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CTL=$(cd "$(dirname "$CTL")" && pwd)/$(basename "$CTL")
SRC=${FUNCD_SOURCE_ROOT:-$HERE/../..}
# shellcheck source=lib.sh
. "$HERE/lib.sh"

# The blocks, one file each: $WORK/blocks/N.sh.
mkdir -p "$WORK/blocks" "$WORK/src"
awk -v dir="$WORK/blocks" '
    /^```sh$/ { n++; inblock = 1; file = sprintf("%s/%02d.sh", dir, n); printf "" > file; next }
    /^```/ && inblock { inblock = 0; close(file); next }
    inblock { print > file }
' "$SRC/README.md"
cp -r "$SRC/examples" "$WORK/src/"
rm -f "$WORK/src/examples/functions/native/hello"

if [ ${#SHIMS_ARGS[@]} -eq 0 ]; then
    echo "# SKIP: this funcd has no shims to run the README's functions"
    exit 77
fi
start_funcd

for block in "$WORK"/blocks/*.sh; do
    name="README block $(basename "$block" .sh): $(grep -v '^#' "$block" | head -n 1)"
    if head -n 1 "$block" | grep -q '^# illustrative'; then
        echo "# SKIP $name (illustrative)"
        continue
    fi
    grep -vE '^make (run|test)( |$)' "$block" >"$block.run"
    if ! grep -q '[^[:space:]]' "$block.run"; then
        echo "# SKIP $name (make run / make test: this script runs funcd itself)"
        continue
    fi
    LAST_ARGS="(the block above)"
    # funcdctl as the README calls it: the binary under test, whatever PATH says.
    (cd "$WORK/src" && CTL=$CTL bash -e -o pipefail -c \
        'funcdctl() { "$CTL" "$@"; }; export -f funcdctl; . "$1"' _ "$block.run") \
        >"$WORK/out" 2>"$WORK/err"
    RC=$?
    if [ "$RC" = 0 ]; then
        ok "$name"
    else
        fail "$name"
        sed 's/^/    block: /' "$block.run"
    fi
done

echo "$PASSED passed, $FAILED failed"
[ "$FAILED" = 0 ]
