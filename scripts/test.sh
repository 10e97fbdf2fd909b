#!/usr/bin/env bash
# Builds with ASan+UBSan and runs every meson test; prints per-test results,
# the failing logs, and a last line "N passed, N failed".
set -uo pipefail
build=${1:-build-test}
cd "$(dirname "$0")/.."

if [ ! -f "$build/build.ninja" ]; then
  CC=${CC:-gcc} meson setup "$build" -Db_sanitize=address,undefined -Db_lundef=false \
    -Dbuildtype=debug -Doptimization=1 -Dwerror=true -Dtests=enabled -Dexamples=enabled \
    --wrap-mode=nodownload >/dev/null \
    || { echo "meson setup failed"; echo "0 passed, 1 failed"; exit 1; }
fi
if ! meson compile -C "$build"; then
  echo "build failed"
  echo "0 passed, 1 failed"
  exit 1
fi
meson test -C "$build" --print-errorlogs --num-processes 2 >"$build/test-output.txt" 2>&1
status=$?
grep -E '^ *[0-9]+/[0-9]+ ' "$build/test-output.txt" || cat "$build/test-output.txt" | tail -50
[ $status -ne 0 ] && sed -n '/^Summary of Failures/,$p' "$build/test-output.txt" | head -100
python3 scripts/test-summary.py "$build/meson-logs/testlog.json"
exit $status
