#!/usr/bin/env bash
# The wraps in subprojects/ without a download: for each, a scratch project
# asks for the dependency the wrap provides, with the fallback forced and
# downloads off, and finds the subproject already "fetched": a stand-in
# source tree (a few functions under the real file names, not the library)
# with the wrap's packagefiles laid over it, as meson does after a fetch.
# That checks what funcd wrote, offline: the wrap's [provide] name and
# variable, the packagefiles' meson.build (sources, include layout such as
# <cjson/cJSON.h>, generated config.h), a static library a program links.
# The real sources are not built here (funcd's builds never download).
#   test_wraps.sh MESON SOURCE_ROOT
set -euo pipefail
meson=$1
src=$(cd "$2" && pwd)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/funcd-wraps.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
unset CFLAGS LDFLAGS ASAN_OPTIONS UBSAN_OPTIONS LSAN_OPTIONS

# wrap_value WRAP KEY: a key's value in a wrap file.
wrap_value() { sed -n "s/^$2 *= *//p" "$src/subprojects/$1.wrap" | head -1; }

# stub FILE SYMBOL: a C file defining SYMBOL (returns its length).
stub() { mkdir -p "$(dirname "$1")"; printf 'int %s(void) { return %d; }\n' "$2" "${#2}" >"$1"; }

# check WRAP DEPENDENCY HEADER USE: builds a program that includes HEADER
# and calls USE through dependency(DEPENDENCY) from WRAP's subproject.
check() {
  local wrap=$1 depname=$2 header=$3 use=$4
  local dir patchdir proj=$tmp/$wrap
  dir=$(wrap_value "$wrap" directory); dir=${dir:-$wrap}
  patchdir=$(wrap_value "$wrap" patch_directory)
  grep -q "^$depname *= *" "$src/subprojects/$wrap.wrap" \
    || { echo "FAIL: $wrap.wrap does not provide $depname"; exit 1; }
  mkdir -p "$proj/subprojects"
  cp "$src/subprojects/$wrap.wrap" "$proj/subprojects/"
  mv "$tmp/tree" "$proj/subprojects/$dir"
  cp -r "$src/subprojects/packagefiles/$patchdir/." "$proj/subprojects/$dir/"
  cat >"$proj/meson.build" <<MESON
project('wrapcheck', 'c')
d = dependency('$depname', allow_fallback: true)
executable('use', 'use.c', dependencies: d)
MESON
  printf '#include <%s>\nint main(void) { return %s() > 0 ? 0 : 1; }\n' "$header" "$use" >"$proj/use.c"
  if ! (cd "$proj" && CC=${CC:-gcc} "$meson" setup build --wrap-mode=nodownload \
          --force-fallback-for="$depname" >setup.log 2>&1 &&
        grep -q "Dependency $depname from subproject" setup.log &&
        "$meson" compile -C build >compile.log 2>&1 && ./build/use); then
    cat "$proj/setup.log" "$proj/compile.log" 2>/dev/null | tail -40 || true
    echo "FAIL: $wrap.wrap: dependency('$depname') from its subproject"
    exit 1
  fi
  echo "ok   $wrap.wrap provides $depname"
}

# Stand-in trees, under the file names the packagefiles build.
mkdir -p "$tmp/tree"
printf 'int cjson_stub(void);\n' >"$tmp/tree/cJSON.h"
stub "$tmp/tree/cJSON.c" cjson_stub
check cjson libcjson cjson/cJSON.h cjson_stub

mkdir -p "$tmp/tree/include" "$tmp/tree/src"
printf 'int yaml_stub(void);\n' >"$tmp/tree/include/yaml.h"
# api.c also reads the generated config.h, as libyaml's does.
printf '#include "config.h"\n#include <yaml.h>\nint yaml_stub(void) { return YAML_VERSION_MAJOR + sizeof(YAML_VERSION_STRING) > 0; }\n' \
  >"$tmp/tree/src/api.c"
for f in dumper emitter loader parser reader scanner writer; do stub "$tmp/tree/src/$f.c" "yaml_${f}_stub"; done
check libyaml yaml-0.1 yaml.h yaml_stub

mkdir -p "$tmp/tree"
printf 'int http_parser_stub(void);\n' >"$tmp/tree/http_parser.h"
stub "$tmp/tree/http_parser.c" http_parser_stub
check http-parser http-parser http_parser.h http_parser_stub

mkdir -p "$tmp/tree"
printf 'int sqlite3_stub(void);\n' >"$tmp/tree/sqlite3.h"
stub "$tmp/tree/sqlite3.c" sqlite3_stub
check sqlite3 sqlite3 sqlite3.h sqlite3_stub

# Every wrap in subprojects/ was checked above.
n=$(ls "$src/subprojects/"*.wrap | wc -l)
[ "$n" -eq 4 ] || { echo "FAIL: $n wraps in subprojects/, this test checks 4"; exit 1; }
echo "PASS: every wrap provides its dependency from its packagefiles"
