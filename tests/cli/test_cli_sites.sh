#!/usr/bin/env bash
# funcdctl deploy-site against a real `funcd --memory --dev`: a directory
# uploaded and served as a Site (read back with curl on the data plane), a
# redeploy that keeps the fields its flags do not set, --host routing, a
# directory without its index (not Ready: exit status 1 naming spec.index),
# and the usage errors (docs/sites.md).
#
#   bash tests/cli/test_cli_sites.sh path/to/funcd path/to/funcdctl
set -u

FUNCD=${1:?usage: test_cli_sites.sh FUNCD FUNCDCTL}
CTL=${2:?usage: test_cli_sites.sh FUNCD FUNCDCTL}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=lib.sh
. "$HERE/lib.sh"

start_funcd
DP=http://$(sed -n 's/^funcd: data plane listening on //p' "$WORK/funcd.log" | head -n 1)
echo "# data plane at $DP"

# get PATH [CURL ARGS...]: the data plane's answer; sets RC (curl's), OUT
# (the body), ERR (the status line and headers).
get() {
    local path=$1
    shift
    LAST_ARGS="(curl) $path $*"
    curl -sS --max-time 20 -D "$WORK/err" -o "$WORK/out" "$@" "$DP$path"
    RC=$?
    OUT=$(cat "$WORK/out")
    ERR=$(cat "$WORK/err")
}

SITE=$WORK/site
mkdir -p "$SITE/assets"
echo '<h1>home page</h1>' >"$SITE/index.html"
echo '<h1>not here</h1>' >"$SITE/404.html"
echo 'body{}' >"$SITE/assets/app.css"

ctl deploy-site "$SITE" --name docs --not-found 404.html --spa
expect "deploy-site uploads the directory and waits until the Site is Ready" 0 \
    out '^site/docs ready$'

get /site/default/docs/
expect "the index is served at /site/NS/NAME/" 0 out 'home page' err '^HTTP/1.1 200' \
    err '^[Ee][Tt]ag: "'
get /site/default/docs/assets/app.css
expect "a file has its type" 0 out 'body' err '^[Cc]ontent-[Tt]ype: text/css'
get /site/default/docs/some/route
expect "--spa: a route gets the index" 0 out 'home page' err '^HTTP/1.1 200'
get /site/default/docs/missing.png
expect "--not-found: the page, with 404" 0 out 'not here' err '^HTTP/1.1 404'

echo '<h1>second edition</h1>' >"$SITE/index.html"
ctl deploy-site "$SITE" --name docs --host docs.example.test --cache-control 'max-age=60'
expect "a redeploy configures the Site" 0 out '^site/docs ready$'
get / -H 'Host: docs.example.test'
expect "--host: the Site at / on that Host, with the new files" 0 out 'second edition' \
    err '^[Cc]ache-[Cc]ontrol: max-age=60'
get /site/default/docs/other/route
expect "a redeploy keeps the fields its flags do not set (spa, notFound)" 0 \
    out 'second edition' err '^HTTP/1.1 200'

ctl get site docs -o json
expect "get site shows the spec and the Ready condition" 0 out '"kind": "Site"' \
    out '"notFound": "404.html"' out '"reason": "Serving"'

BARE=$WORK/bare
mkdir -p "$BARE"
echo 'no index here' >"$BARE/readme.txt"
ctl deploy-site "$BARE" --name bare --wait-timeout 20s
expect "a directory without its index is not Ready, naming spec.index" 1 \
    err 'site/bare is not ready: IndexMissing' err 'spec.index index.html'
ctl deploy-site "$BARE" --name bare --index readme.txt
expect "with --index naming a file it is" 0 out '^site/bare ready$'

ctl deploy-site "$SITE"
expect "--name is required" 2 err 'needs --name'
ctl deploy-site --name x
expect "DIR is required" 2 err 'needs the DIR'
ctl deploy-site "$SITE" --name x --host 'a.test:80'
expect "--host takes a name without a port" 2 err 'DNS name'
ctl deploy-site "$SITE" --name x --wait-timeout soon
expect "--wait-timeout takes a duration" 2 err 'duration'
ctl deploy-site "$WORK/nope" --name x
expect "a DIR that does not exist is an error" 1 err 'nope'

echo "$PASSED passed, $FAILED failed"
[ "$FAILED" = 0 ]
