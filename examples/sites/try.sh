#!/usr/bin/env bash
# Deploys public/ as Site hello-site (a single-page app with a 404 page) to the
# funcd that funcdctl talks to (FUNCD_SERVER, FUNCD_TOKEN), then reads it
# from the data plane: the index, a route of the app (the index again), a
# missing asset (the 404 page), a 304 for a known ETag and a range.
# Usage: examples/sites/try.sh [FUNCDCTL] [DATA_PLANE_URL]
#   (default: funcdctl, http://127.0.0.1:8081; docs/sites.md)
set -euo pipefail
CTL=${1:-funcdctl}
DP=${2:-http://127.0.0.1:8081}
HERE=$(cd "$(dirname "$0")" && pwd)
gzip -kf "$HERE/public/assets/app.js" # a precompressed sibling, served to gzip clients
"$CTL" deploy-site "$HERE/public" --name hello-site --spa --not-found 404.html \
  --cache-control 'public, max-age=60'
base=$DP/site/default/hello-site
echo "--- the index"
curl -sS -i "$base/"
echo "--- a route of the app: the index, 200"
curl -sS -o /dev/null -w '%{http_code}\n' "$base/users/42"
echo "--- a missing asset: the 404 page"
curl -sS -w '%{http_code}\n' "$base/missing.png"
etag=$(curl -sS -o /dev/null -D - "$base/" | sed -n 's/^[Ee][Tt]ag: //p' | tr -d '\r')
echo "--- If-None-Match $etag: 304"
curl -sS -o /dev/null -w '%{http_code}\n' -H "If-None-Match: $etag" "$base/"
echo "--- bytes 0-15 of app.js: 206"
curl -sS -w '\n%{http_code}\n' -H 'Range: bytes=0-15' "$base/assets/app.js"
echo "--- app.js to a gzip client"
curl -sS -o /dev/null -D - -H 'Accept-Encoding: gzip' "$base/assets/app.js" | grep -i '^content-encoding'
