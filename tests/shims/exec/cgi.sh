#!/bin/sh
# The command the exec shim test runs once per request; PATH_INFO picks what it does.
case "$PATH_INFO" in
/cgi)
    body=$(cat)
    printf 'Status: 201 Created\r\nContent-Type: text/plain\r\nX-Thing: 1\r\n\r\n'
    printf 'got: %s' "$body"
    ;;
/plain)
    echo "just text"
    ;;
/fail)
    echo "first stderr line" >&2
    echo "last words" >&2
    exit 3
    ;;
/env*)
    printf '%s\n' "method=$REQUEST_METHOD" "path=$PATH_INFO" "query=$QUERY_STRING" \
        "type=$CONTENT_TYPE" "length=$CONTENT_LENGTH" "x_test=$HTTP_X_TEST" \
        "id=$FUNCD_INVOCATION_ID" "uri=$REQUEST_URI" "greeting=$GREETING" "proxy=${HTTP_PROXY:-unset}"
    ;;
/redirect)
    printf 'Location: /elsewhere\n\n'
    ;;
/slow)
    sleep 1
    echo slept
    ;;
*)
    cat
    ;;
esac
