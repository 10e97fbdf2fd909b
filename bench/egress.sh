#!/usr/bin/env bash
# The egress gateway (docs/egress.md): a 100 MiB download and small requests (each on a new
# connection, as a function's urllib makes them) from an origin on 127.0.0.2, by one client on
# the host going direct and the same client through the gateway's proxy (names resolved by
# the gateway through a DNS server on 127.0.0.4), in the same run, rounds alternating.
# Prints the medians: MB/s and requests/s for each, and the ratio (aim: >= 0.8x for the
# download); and, for the download, CPU time and timeslices per MiB of all threads, of the
# gateway's thread and of the client's, which hold also on a loaded machine; and minor page faults
# per MiB (fresh memory), with the first round's gateway CPU and faults (medians hide those).
#
#   bash bench/egress.sh [BUILD_DIR]   (default: build-rel; BYTES=104857600 ROUNDS=5 SMALL=1000)
# Run it on a quiet machine.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build-rel}
[ -d "$build" ] || meson setup "$build" -Dbuildtype=release >/dev/null
meson compile -C "$build" egress-bench >/dev/null
exec "$build/bench/egress-bench" "${BYTES:-104857600}" "${ROUNDS:-5}" "${SMALL:-1000}"
