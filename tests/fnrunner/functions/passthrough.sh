#!/bin/sh
# A KRM function in shell: hands the ResourceList back unchanged. Its log
# line names the process that ran it, that process's parent and, for a warm
# worker, the worker's replica. In a worker's sandbox the pids are those of
# its own pid namespace (the worker is always 2), so a test identifies the
# worker by its replica and finds its host pid through /proc.
set -eu
echo "passthrough: pid=$$ ppid=$PPID replica=${FUNCD_REPLICA:-}" >&2
exec cat
