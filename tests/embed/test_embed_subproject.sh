#!/usr/bin/env bash
# Builds examples/embed.c in a new meson project that takes libfuncd from
# subprojects/funcd (a symlink to this source tree), the documented way, with
# a user's options (no -Werror, no sanitizers, no downloads), then runs it;
# funcd's wraps are read on the way (a malformed one fails the setup), and
# forced fallbacks show its dependency() calls reach them.
#   test_embed_subproject.sh MESON SOURCE_ROOT
set -euo pipefail
meson=$1
src=$(cd "$2" && pwd)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/funcd-embed.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

mkdir "$tmp/subprojects"
ln -s "$src" "$tmp/subprojects/funcd"
cp "$src/examples/embed.c" "$tmp/"
cat >"$tmp/meson.build" <<'MESON'
project('consumer', 'c', default_options: ['c_std=gnu17', 'warning_level=2'])
funcd_dep = dependency('libfuncd', fallback: ['funcd', 'libfuncd_dep'],
  default_options: ['tests=disabled', 'examples=disabled', 'cli=disabled'])
# The subproject overrides 'libfuncd': a plain lookup now finds the same one.
assert(dependency('libfuncd').found(), 'libfuncd is not overridden by the subproject')
executable('embed', 'embed.c', dependencies: [funcd_dep, dependency('libcurl')])
executable('duration', 'duration.c', dependencies: funcd_dep)
MESON
# The daemon's one former private call is public API: exported and documented.
cat >"$tmp/duration.c" <<'C'
#include <funcd/funcd.h>
#include <stdio.h>
#include <string.h>
int main(void)
{
    uint64_t ms = 7;
    if (funcd_parse_duration_ms("1h30m", &ms) != 0 || ms != 5400000) {
        printf("1h30m -> %llu\n", (unsigned long long)ms);
        return 1;
    }
    if (funcd_parse_duration_ms("1.5s", &ms) != 0 || ms != 1500) {
        printf("1.5s -> %llu\n", (unsigned long long)ms);
        return 1;
    }
    ms = 5400000;
    if (funcd_parse_duration_ms("soon", &ms) != FUNCD_EINVAL || ms != 5400000 ||
        !strstr(funcd_error_last()->message, "soon")) {
        printf("soon accepted or message \"%s\"\n", funcd_error_last()->message);
        return 1;
    }
    printf("durations ok\n");
    return 0;
}
C

# The outer test build's sanitizer settings must not leak into this build.
unset CFLAGS LDFLAGS ASAN_OPTIONS UBSAN_OPTIONS LSAN_OPTIONS
cd "$tmp"
if ! CC=${CC:-gcc} nice "$meson" setup build --buildtype=plain -Dwerror=false \
    --wrap-mode=nodownload --force-fallback-for=libfuncd >setup.log 2>&1; then
  cat setup.log
  echo "FAIL: meson setup of the consumer project"
  exit 1
fi
grep -q "Executing subproject funcd" setup.log || { cat setup.log; echo "FAIL: funcd was not used as a subproject"; exit 1; }
if ! nice "$meson" compile -C build >compile.log 2>&1; then
  tail -60 compile.log
  echo "FAIL: meson compile of the consumer project"
  exit 1
fi
# Nothing of funcd's tests, examples or benchmarks is built for a host.
for unwanted in bench tests examples; do
  if [ -e "build/subprojects/funcd/$unwanted" ]; then
    echo "FAIL: the subproject built its $unwanted"
    exit 1
  fi
done

./build/duration || { echo "FAIL: funcd_parse_duration_ms through the public API"; exit 1; }

rc=0
out=$(timeout 120 ./build/embed 2>&1) || rc=$?
if [ $rc -ne 0 ]; then
  echo "$out"
  echo "FAIL: embed exited with $rc"
  exit 1
fi
echo "$out"
grep -q '^POST functions -> 201$' <<<"$out" || { echo "FAIL: the Function was not created"; exit 1; }
grep -q '^GET functions/hello -> 200$' <<<"$out" || { echo "FAIL: the Function was not read back"; exit 1; }
grep -q '"observedGeneration"' <<<"$out" || { echo "FAIL: no status from the controller"; exit 1; }

# funcd's dependency() calls reach its wraps (subprojects/*.wrap) when a
# host lacks a package: with the fallback forced, each names its wrap and,
# downloads being off, fetches nothing. (tests/embed/test_wraps.sh builds
# each wrap's packagefiles.) A run stops at its first missing subproject;
# http-parser's lookup goes on to the system library when its wrap fails.
fallback() { # NAMES WRAP...
  local names=$1 log="fallback-${1//,/-}.log"
  shift
  CC=${CC:-gcc} nice "$meson" setup "build-fb-${names//,/-}" --buildtype=plain -Dwerror=false \
    --wrap-mode=nodownload --force-fallback-for="libfuncd,$names" >"$log" 2>&1 || true
  for wrap in "$@"; do
    grep -q "Using subprojects/funcd/subprojects/$wrap.wrap" "$log" \
      || { cat "$log"; echo "FAIL: a forced fallback for $names did not use funcd's $wrap.wrap"; exit 1; }
  done
  grep -q "Automatic wrap-based subproject downloading is disabled" "$log" \
    || { cat "$log"; echo "FAIL: a forced fallback for $names did not stop before downloading"; exit 1; }
}
fallback libcjson cjson
fallback yaml-0.1 libyaml
fallback http-parser,sqlite3 http-parser sqlite3
echo "funcd's wraps provide libcjson, yaml-0.1, http-parser and sqlite3"

echo "PASS: a consumer project builds and runs libfuncd as a subproject"
