#!/usr/bin/env bash
# What the edge costs per request, in instructions: a measure that does not
# depend on the machine's load (issue 14). funcd runs under callgrind
# (valgrind --tool=callgrind; the workers are other processes and run
# natively) with the same two Functions as bench/edge.sh: every edge feature
# on (limits high enough never to refuse, CORS, a header set and one
# removed, gzip) and none, for a 6-byte answer (too small to compress: the
# edge's fixed costs) and a 2 KiB JSON one (compressed). For each, a client
# sends warm-up requests, the counters are zeroed, N requests follow on one
# keep-alive connection (Accept-Encoding: gzip, an allowed Origin) and the
# counters are dumped: every instruction funcd's threads ran in between,
# divided by N, of the gateway thread (and the access log's writer): the
# platform loop's timers tick by the clock, not by the requests. With EDGE_COST_ACCESS_LOG=1 funcd also writes the access log
# (--access-log to a file), which records a span per request.
# Printed: instructions per request on / off and the difference, then the
# functions whose own instructions per request differ most between on and
# off (where the edge's cost is), and the inclusive cost of the edge's parts.
# Usage: bash bench/edge-cost.sh [BUILD_DIR]   e.g. bash bench/edge-cost.sh build-rel
#   EDGE_COST_REQUESTS (2000), EDGE_COST_SIZES ("6 2048"), EDGE_COST_TOP (25),
#   EDGE_COST_ACCESS_LOG (unset), BENCH_KEEP=1 keeps the callgrind files.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
requests=${EDGE_COST_REQUESTS:-2000}
sizes=${EDGE_COST_SIZES:-6 2048}
top=${EDGE_COST_TOP:-25}
command -v valgrind >/dev/null && command -v callgrind_control >/dev/null &&
  command -v callgrind_annotate >/dev/null || { echo "edge-cost.sh: valgrind (callgrind) is missing"; exit 1; }
work=$(mktemp -d /tmp/fc.XXXX) # short: worker socket paths must fit in 108 bytes
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
  [ -n "${BENCH_KEEP:-}" ] && echo "callgrind files kept in $work" || rm -rf "$work"
}
trap cleanup EXIT
. bench/lib.sh

# One gateway thread: the per-request path is the same, and the dump holds one
# thread's work rather than idle threads' polling.
export FUNCD_GATEWAY_THREADS=${FUNCD_GATEWAY_THREADS:-1}
# The preload stands in for pidfd_open, which valgrind 3.19 lacks (bench/valgrind_pidfd.c).
preload=$build/bench/libvalgrind-pidfd.so
[ -f "$preload" ] || { echo "edge-cost.sh: $preload is missing (meson compile -C $build bench/valgrind-pidfd)"; exit 1; }
funcd_wrap=(env LD_PRELOAD="$preload" valgrind --tool=callgrind --trace-children=no --callgrind-out-file="$work/cg.%p"
  --dump-instr=no --compress-strings=no --compress-pos=no --separate-threads=yes)
funcd_start_polls=1200 # funcd starts slowly under valgrind
# --no-sandbox: under valgrind the sandbox's set-up (open_tree, namespaces) fails;
# the workers run natively either way, and the gateway's path is the same.
extra=(--no-sandbox)
[ -n "${EDGE_COST_ACCESS_LOG:-}" ] && extra+=(--access-log "$work/access.log")
start_funcd "${extra[@]}"
[ -n "$dp" ] && [ "$dp" != "http://" ] || { echo "edge-cost.sh: funcd did not start"; cat "$work/funcd.log"; exit 1; }

origin=https://app.example
warm='{"minReplicas":1,"maxReplicas":1,"concurrency":10000,"queueLength":10000,"idleTimeout":"1h"}'
edge='"edge":{"limits":{"rps":1000000,"burst":10000000,"maxBodyBytes":"1Mi","maxInFlight":1000000},
  "cors":{"allowOrigins":["'$origin'"],"allowMethods":["GET","POST"],"allowHeaders":["content-type"],"maxAge":600},
  "headers":{"set":{"X-Frame-Options":"DENY"},"remove":["X-Powered-By"]},"compress":true}'
mkdir -p "$work/native"
cp "$build/bench/bench-worker" "$work/native/worker"
for size in $sizes; do
  body_env="{\"BENCH_BODY_BYTES\":\"$size\"}"
  [ "$size" = 6 ] && body_env="{}"
  create "edge$size" native worker "$work/native" "$warm" "$body_env" none "$edge"
  create "plain$size" native worker "$work/native" "$warm" "$body_env"
done

# N GETs on one keep-alive connection, each answer read whole; prints the
# Content-Encoding of the last answer.
client() { # url count
  python3 - "$1" "$2" "$origin" <<'PY'
import http.client, sys, urllib.parse
u = urllib.parse.urlsplit(sys.argv[1]); n = int(sys.argv[2])
c = http.client.HTTPConnection(u.hostname, u.port, timeout=120)
enc = ""
for _ in range(n):
    c.request("GET", u.path, headers={"Accept-Encoding": "gzip", "Origin": sys.argv[3]})
    r = c.getresponse(); r.read()
    if r.status != 200: sys.exit(f"HTTP {r.status} from {sys.argv[1]}")
    enc = r.getheader("Content-Encoding") or ""
print(enc or "identity")
PY
}

# Instructions per request (all of funcd's threads) between -z and -d.
n_dump=0
measure() { # label url
  client "$2" 200 >/dev/null # warm: worker connection, pools, compressors
  callgrind_control -z "$funcd_pid" >/dev/null 2>&1
  enc=$(client "$2" "$requests")
  callgrind_control -d "$1" "$funcd_pid" >/dev/null 2>&1
  n_dump=$((n_dump + 1))
  # One file per thread: the gateway's (it ran on_req) and the access log's
  # writer count; the platform loop's timers, which tick by the clock and
  # not by the requests, do not.
  local f n=0
  sleep 1
  for f in "$work"/cg.*."$n_dump"-*; do
    [ -e "$f" ] || continue
    if grep -q -e '^fn=on_req$' -e '^fn=writer_main$' "$f"; then n=$((n + 1)); mv "$f" "$work/$1.cg.$n"; else rm -f "$f"; fi
  done
  [ "$n" -gt 0 ] || { echo "edge-cost.sh: no gateway thread in dump $n_dump"; exit 1; }
  echo "$enc" >"$work/$1.enc"
}

for size in $sizes; do
  wait_ok "$dp/fn/default/edge$size/"
  wait_ok "$dp/fn/default/plain$size/"
  measure "on$size" "$dp/fn/default/edge$size/"
  measure "off$size" "$dp/fn/default/plain$size/"
done

# The report: totals, the functions that differ most, the edge's parts.
python3 - "$work" "$requests" "$top" "$sizes" <<'PY'
import re, subprocess, sys
work, n, top, sizes = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4].split()
def costs(f, inclusive):
    """Instructions by function in a callgrind file (written with
    --compress-strings=no --compress-pos=no): own, or with what it calls."""
    fns, fn, after_calls, total = {}, None, False, 0
    import glob
    for l in (l for g in sorted(glob.glob(f + ".*")) for l in open(g)):
        if l.startswith("fn="):
            fn = l[3:].strip()
        elif l.startswith("calls="):
            after_calls = True
        elif l.startswith("summary:"):
            total += int(l.split()[1])
        elif l[:1].isdigit() or l[:1] in "+-*":
            parts = l.split()
            if len(parts) < 2 or fn is None:
                continue
            c = int(parts[1])
            if not after_calls or inclusive:
                fns[fn] = fns.get(fn, 0) + c
            after_calls = False
    return total, fns
parts = [ # the edge's parts, inclusive (a function not called counts 0)
    ("rate limit (GCRA)", ["funcd_edge_rate_take"]),
    ("edge checks (limits, in flight)", ["edge_check"]),
    ("shaping: request side (CORS origin, Accept-Encoding)", ["funcd_shape_request"]),
    ("shaping: answer headers (CORS, set/remove, gzip decision)", ["on_setup_ostream"]),
    ("gzip (deflate, streams)", ["gz_do_send"]),
    ("traceparent: parse or start", ["funcd_edge_trace_start"]),
    ("traceparent: the worker's headers", ["funcd_edge_put_headers"]),
    ("span record (gateway thread)", ["funcd_edge_note_start", "funcd_edge_note_end", "funcd_edge_note_answer"]),
    ("access log writer thread", ["writer_main"]),
    ("metrics (track end)", ["funcd_gw_track_end"]),
    ("invocation id", ["funcd_gw_new_id"]),
]
print(f"edge cost in instructions per request (callgrind, {n} requests on one keep-alive "
      "connection, one gateway thread, Accept-Encoding: gzip, an allowed Origin)")
for size in sizes:
    on_t, on_self = costs(f"{work}/on{size}.cg", False)
    off_t, off_self = costs(f"{work}/off{size}.cg", False)
    _, on_inc = costs(f"{work}/on{size}.cg", True)
    _, off_inc = costs(f"{work}/off{size}.cg", True)
    enc_on = open(f"{work}/on{size}.enc").read().strip()
    enc_off = open(f"{work}/off{size}.enc").read().strip()
    print(f"\n{size}-byte answers (edge on: {enc_on}, off: {enc_off})")
    print(f"  edge on   {on_t / n:10.0f} instructions/request")
    print(f"  edge off  {off_t / n:10.0f} instructions/request")
    print(f"  the edge  {(on_t - off_t) / n:10.0f} instructions/request ({(on_t / off_t - 1) * 100:+.1f}%)")
    print(f"  functions by own instructions/request, on - off (top {top}):")
    d = {k: on_self.get(k, 0) - off_self.get(k, 0) for k in set(on_self) | set(off_self)}
    for k in sorted(d, key=lambda k: -abs(d[k]))[:top]:
        print(f"    {d[k] / n:+9.0f}  on {on_self.get(k, 0) / n:8.0f}  off {off_self.get(k, 0) / n:8.0f}  {k}")
    print("  the edge's parts, inclusive instructions/request (on / off):")
    for label, names in parts:
        a = sum(on_inc.get(x, 0) for x in names) / n
        b = sum(off_inc.get(x, 0) for x in names) / n
        print(f"    {a:9.0f} / {b:9.0f}  {label}")
PY
