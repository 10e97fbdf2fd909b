#!/bin/sh
# A KRM function in shell that fails the KRM way: the reason on stderr, a
# ResourceList carrying an error result on stdout, exit status 1.
set -eu
cat >/dev/null
echo "fail: the ResourceList is refused on purpose (fixture fail.sh)" >&2
cat <<'JSON'
{"apiVersion": "config.kubernetes.io/v1", "kind": "ResourceList", "items": [],
 "results": [{"message": "refused on purpose", "severity": "error"}]}
JSON
exit 1
