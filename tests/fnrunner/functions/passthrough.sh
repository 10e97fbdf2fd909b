#!/bin/sh
# A KRM function in shell: hands the ResourceList back unchanged. Its log
# line names the process that ran it and that process's parent (for a warm
# worker: the worker), so a test can find the worker, and kill it.
set -eu
echo "passthrough: pid=$$ ppid=$PPID" >&2
exec cat
