#!/bin/sh
# A KRM function in shell that never answers in time. The sleep is a child
# of the shell (no exec), so a runner that kills only the pid it started
# leaves it behind, which the deadline test looks for.
echo "sleep: sleeping past any deadline" >&2
sleep 17.25
cat
