#!/bin/sh
# A KRM function for podExecutor.templateOverrides: its log line shows the
# OVERRIDE_GREETING of its environment; given a ResourceList holding
# "allocate-mib: N" it first fills N MiB of memory (to meet a memory limit),
# then hands the list back.
set -eu
input=$(cat)
echo "overrides: greeting=${OVERRIDE_GREETING:-} replica=${FUNCD_REPLICA:-}" >&2
mib=$(printf '%s\n' "$input" | sed -n 's/^ *allocate-mib: *"\{0,1\}\([0-9][0-9]*\)"\{0,1\} *$/\1/p')
if [ -n "$mib" ]; then
    python3 -c "import sys; b = bytearray(b'x') * ($mib << 20); sys.stderr.write('overrides: filled %d MiB\n' % (len(b) >> 20))"
fi
printf '%s\n' "$input"
