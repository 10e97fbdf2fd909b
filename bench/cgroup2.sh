#!/usr/bin/env bash
# Sandboxed native cold start with the workers' cgroups on the cgroup v2 layout (cloned into
# them, ADR 0042) against this host's default layout (v1 on a hybrid host: moved into them), in
# one run: sandbox-bench -2 alternates the two runtimes round by round. On a hybrid host the v2
# side is forced onto the controller-less cgroup2 mount, so it measures placement without
# limits; the default side has its v1 cgroups. Prints the load and the cgroup2 mount's options
# beside the figures. Needs root.
# Usage: bench/cgroup2.sh [BUILD_DIR]   (a release build; BENCH_CGROUP2_RUNS, default 300)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
runs=${BENCH_CGROUP2_RUNS:-300}
mnt=$(awk '$0 ~ / - cgroup2 / {print $5; exit}' /proc/self/mountinfo)
[ -n "$mnt" ] || { echo "no cgroup2 mount" >&2; exit 1; }
work=$(mktemp -d /tmp/cg2.XXXX) # short: the socket path must fit in 108 bytes
trap 'rm -rf "$work"' EXIT
echo "load: $(cut -d' ' -f1-3 /proc/loadavg); cgroup2 at $mnt: $(awk '$0 ~ / - cgroup2 / {print $NF; exit}' /proc/self/mountinfo)"
"$build/bench/sandbox-bench" "$runs" "$work" -2 "$mnt" -- "$PWD/$build/bench/bench-worker"
echo "load: $(cut -d' ' -f1-3 /proc/loadavg)"
