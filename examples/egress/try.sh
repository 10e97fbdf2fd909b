#!/usr/bin/env bash
# Egress policy (docs/egress.md): a python3 function allowed to reach one host and port only.
#   FUNCD=http://127.0.0.1:8080 TOKEN=funcd-dev-token bash examples/egress/try.sh [HOST] [PORT]
# (funcd --dev, with its sandbox; HOST:PORT an HTTP server you run, e.g. python3 -m http.server)
set -euo pipefail
FUNCD=${FUNCD:-http://127.0.0.1:8080}
TOKEN=${TOKEN:-funcd-dev-token}
DP=${DP:-http://127.0.0.1:8081}
host=${1:-example.com}
port=${2:-80}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
chmod 755 "$dir"
cat >"$dir/main.py" <<'PY'
import urllib.request, urllib.error
def handler(req):
    url = req.args.get('url', '')
    try:
        with urllib.request.urlopen(url, timeout=10) as r:   # through HTTP_PROXY
            return 200, {}, {'status': r.status, 'bytes': len(r.read())}
    except urllib.error.HTTPError as e:                     # 403 from funcd's proxy
        return 200, {}, {'status': e.code, 'why': e.read().decode()}
PY
chmod 644 "$dir/main.py"
api="$FUNCD/apis/funcd.dev/v1/namespaces/default"
auth=(-H "Authorization: Bearer $TOKEN" -H "Content-Type: application/json")
curl -sf "${auth[@]}" -d "{\"apiVersion\":\"funcd.dev/v1\",\"kind\":\"EgressPolicy\",
  \"metadata\":{\"name\":\"try\"},\"spec\":{\"allow\":[{\"host\":\"$host\",\"ports\":[$port]}]}}" \
  "$api/egresspolicies" >/dev/null
curl -sf "${auth[@]}" -d "{\"apiVersion\":\"funcd.dev/v1\",\"kind\":\"Function\",
  \"metadata\":{\"name\":\"egress-try\"},\"spec\":{\"runtime\":\"python3\",\"handler\":\"main.handler\",
  \"network\":\"egress\",\"source\":{\"path\":\"$dir\"}}}" "$api/functions" >/dev/null
sleep 3
echo "allowed:"; curl -s "$DP/fn/default/egress-try?url=http://$host:$port/"; echo
echo "denied:";  curl -s "$DP/fn/default/egress-try?url=http://169.254.169.254/"; echo
curl -s "${auth[@]}" -X DELETE "$api/functions/egress-try" >/dev/null
curl -s "${auth[@]}" -X DELETE "$api/egresspolicies/try" >/dev/null
