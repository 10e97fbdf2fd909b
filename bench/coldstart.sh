#!/usr/bin/env bash
# Cold start, zero -> first byte, sandbox on and off, next to the floor, in one run, per
# runtime (native, python3, node; BENCH_COLD_RUNTIMES picks): two funcd instances (one with
# --no-sandbox) serve the same function, and bench-coldstart takes turns within each round (the
# floor: spawning the same worker and calling its socket; then each funcd through its gateway,
# a new TCP connection per request, as curl makes). Prints the load, the cgroup layout and the cgroup2 mount's favordynmods flag
# beside the figures, since all three change them.
# Usage: bench/coldstart.sh [BUILD_DIR]   (a release build; BENCH_COLD_RUNS, default 100)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
runs=${BENCH_COLD_RUNS:-100}
token=funcd-dev-token
work=$(mktemp -d /tmp/fc.XXXX) # short: worker socket paths must fit in 108 bytes
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
  [ -n "${BENCH_KEEP:-}" ] || rm -rf "$work"
}
trap cleanup EXIT

targets=()
create() { # api name runtime handler dir
  curl -sf -o /dev/null -H "Authorization: Bearer $token" -d '{"apiVersion":"funcd.dev/v1",
    "kind":"Function","metadata":{"name":"'"$2"'"},"spec":{"runtime":"'"$3"'","handler":"'"$4"'",
    "source":{"path":"'"$5"'"},"scaling":{"minReplicas":0,"maxReplicas":1,"concurrency":10,
    "idleTimeout":"10ms"}}}' "$1/apis/funcd.dev/v1/namespaces/default/functions"
}
start_funcd() { # name [extra flags...]: adds "name=API,DP" to targets
  local name=$1
  shift
  "$build/bin/funcd/funcd" --memory --dev --listen 127.0.0.1:0 --data-plane-listen 127.0.0.1:0 \
    --fn-runner-listen 127.0.0.1:0 --shims "$build/shims" --state-dir "$work/$name" \
    --source-root "$work" "$@" 2>"$work/$name.log" &
  pids+=($!)
  for _ in $(seq 200); do grep -q 'data plane listening' "$work/$name.log" && break; sleep 0.05; done
  local api dp
  api="http://$(sed -n 's/.*control plane listening on //p' "$work/$name.log")"
  dp="http://$(sed -n 's/.*data plane listening on //p' "$work/$name.log")"
  for rt in "${runtimes[@]}"; do
    case $rt in
      native) create "$api" cold-native native worker "$work/native" ;;
      python3) create "$api" cold-python3 python3 main.handler "$work/py" ;;
      node) create "$api" cold-node node index.js#handler "$work/node" ;;
    esac || { echo "coldstart.sh: cannot create cold-$rt on $name:"; cat "$work/$name.log"; exit 1; }
    local ok=0
    for _ in $(seq 400); do curl -sf -o /dev/null "$dp/fn/default/cold-$rt/" && ok=1 && break; sleep 0.025; done
    [ $ok = 1 ] || { echo "coldstart.sh: no answer from cold-$rt on $name:"; cat "$work/$name.log"; exit 1; }
  done
  targets+=("$name=$api,$dp")
}

runtimes=(${BENCH_COLD_RUNTIMES:-native python3 node})
command -v node >/dev/null || runtimes=("${runtimes[@]/node/}")
mkdir -p "$work/native" "$work/py" "$work/node" "$work/floor"
cp "$build/bench/bench-worker" "$work/native/worker"
printf 'def handler(req):\n    return "hello\\n"\n' >"$work/py/main.py"
printf 'exports.handler = async () => "hello\\n";\n' >"$work/node/index.js"
start_funcd off --no-sandbox
start_funcd on
favor=off
grep -q ' - cgroup2 .*favordynmods' /proc/self/mountinfo && favor=on
echo "cgroup controllers: $(awk '$3 == "cgroup" {print $2}' /proc/mounts | xargs -n1 basename | paste -sd' ')" \
  "(v1); cgroup2 at $(awk '$3 == "cgroup2" {print $2}' /proc/mounts | head -n 1), favordynmods $favor"
cs="$build/bench/bench-coldstart"
for rt in "${runtimes[@]}"; do
  [ -n "$rt" ] || continue
  echo
  echo "== $rt, $runs rounds; load before: $(cut -d' ' -f1-3 /proc/loadavg)"
  case $rt in
    native) floor=(-- "$work/native/worker") ;;
    python3) floor=(-e FUNCD_HANDLER=main.handler -e "FUNCD_CODE_DIR=$work/py" -e PYTHONDONTWRITEBYTECODE=1
                    -- /usr/bin/python3 "$build/shims/funcd-python.py") ;;
    node) floor=(-e FUNCD_HANDLER=index.js#handler -e "FUNCD_CODE_DIR=$work/node"
                 -- "$(command -v node)" "$build/shims/funcd-node.js") ;;
  esac
  "$cs" compare "$runs" "$work/floor" "cold-$rt" "$token" "${targets[@]}" "${floor[@]}"
  echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
done
