#!/bin/sh
# An exec-mode function for funcd: run once per request, the body on stdin,
# the request in CGI variables, the response on stdout (a CGI header block,
# then the body). Anything on stderr goes to the function's log.
set -eu
body=$(cat)
echo "hello.sh: $REQUEST_METHOD $PATH_INFO (${CONTENT_LENGTH:-0} bytes)" >&2
printf 'Content-Type: text/plain\n\n'
printf '%s from a shell script: you sent %s bytes to %s' "${GREETING:-hello}" "${#body}" "$PATH_INFO"
[ -n "$body" ] && printf ': %s' "$body"
printf '\n'
