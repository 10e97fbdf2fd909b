#!/usr/bin/env bash
# Image pull: funcd's OCI client against `skopeo copy` of the same image from
# the same registry (Debian's docker-registry on 127.0.0.1, plain HTTP), and
# the second, cached pull. The image is 8 layers of 4 MiB random data.
# Usage: bench/pull.sh [BUILD_DIR]   (BENCH_RUNS, default 5)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
runs=${BENCH_RUNS:-5}
for tool in docker-registry skopeo; do
  command -v $tool >/dev/null || { echo "pull.sh: $tool is missing"; exit 1; }
done
[ -x "$build/bench/oci-pull" ] || { echo "pull.sh: build $build/bench/oci-pull first"; exit 1; }
work=$(mktemp -d /tmp/funcd-pull.XXXX)
reg_pid=
cleanup() {
  if [ -n "$reg_pid" ]; then kill "$reg_pid" 2>/dev/null || true; wait "$reg_pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
addr=127.0.0.1:$port
cat >"$work/config.yml" <<YAML
version: 0.1
log: {level: error, accesslog: {disabled: true}}
storage: {filesystem: {rootdirectory: $work/storage}}
http: {addr: $addr}
YAML
docker-registry serve "$work/config.yml" >"$work/registry.log" 2>&1 &
reg_pid=$!
for _ in $(seq 100); do curl -sf "http://$addr/v2/" >/dev/null && break; sleep 0.05; done

FUNCD_SOURCE_ROOT=$PWD sh tests/oci/fixtures.sh "$work/layouts" big
skopeo --insecure-policy copy -q --dest-tls-verify=false "oci:$work/layouts/big:1" "docker://$addr/big:1"

ms() { date +%s%N | awk '{printf "%.1f", $1/1e6}'; }
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

: >"$work/skopeo" >"$work/funcd" >"$work/cached"
for i in $(seq "$runs"); do
  t0=$(ms)
  skopeo --insecure-policy copy -q --src-tls-verify=false "docker://$addr/big:1" "oci:$work/s$i:1"
  t1=$(ms)
  awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.1f\n", b-a}' >>"$work/skopeo"
  rm -rf "$work/s$i"
  out=$("$build/bench/oci-pull" --insecure "$addr" "$work/c$i" "$addr/big:1")
  echo "$out" | sed 's/.*pull_ms=\([0-9.]*\).*/\1/' >>"$work/funcd"
  echo "$out" | sed 's/.*cached_ms=\([0-9.]*\).*/\1/' >>"$work/cached"
  rm -rf "$work/c$i"
done
echo "image: 8 layers x 4 MiB (32 MiB), docker-registry on $addr, median of $runs runs"
printf '%-40s %8s ms\n' "skopeo copy docker:// -> oci: (cold)" "$(median <"$work/skopeo")"
printf '%-40s %8s ms\n' "funcd OCI client (cold)" "$(median <"$work/funcd")"
printf '%-40s %8s ms\n' "funcd OCI client (cached, tag)" "$(median <"$work/cached")"
