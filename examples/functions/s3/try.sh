#!/usr/bin/env bash
# The S3 gateway end to end on this machine (docs/s3.md): a private funcd (its own ports,
# --s3-listen on 127.0.0.1), the `files` function (python3, boto3) storing uploads through
# 127.0.0.1:9000 in its sandbox, then the same objects read from the host with awscli using
# the function's key from the admin-only s3-credentials endpoint. Needs Debian's awscli and
# python3-boto3. Everything it starts it stops.
#
#   bash examples/functions/s3/try.sh [BUILD_DIR]   (default: build, as `make run` builds)
set -euo pipefail
cd "$(dirname "$0")/../../.."
build=${1:-build}
funcd=$build/bin/funcd/funcd
ctl=$build/bin/funcdctl/funcdctl
for tool in "$funcd" "$ctl" /usr/bin/aws; do
  [ -x "$tool" ] || { echo "try.sh: $tool is missing (make build; apt-get install awscli python3-boto3)"; exit 1; }
done
work=$(mktemp -d /tmp/funcd-s3.XXXX)
pid=
cleanup() { [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT
echo "try-admin admin default" >"$work/tokens" && chmod 600 "$work/tokens"

"$funcd" --memory --token-file "$work/tokens" --listen 127.0.0.1:0 --data-plane-listen 127.0.0.1:0 \
  --fn-runner-listen 127.0.0.1:0 --source-root "$work" --s3-listen 127.0.0.1:0 2>"$work/funcd.log" &
pid=$!
for _ in $(seq 100); do grep -q "data plane listening" "$work/funcd.log" 2>/dev/null && break; sleep 0.05; done
export FUNCD_SERVER=http://$(sed -n 's/.*control plane listening on //p' "$work/funcd.log")
export FUNCD_TOKEN=try-admin
dp=http://$(sed -n 's/.*data plane listening on //p' "$work/funcd.log")

echo "== the files function, bound to bucket files, prefix uploads/"
mkdir "$work/files" && cp examples/functions/s3/main.py "$work/files/"
sed "s|/srv/funcd/examples/functions/s3|$work/files|" examples/functions/s3/function.yaml >"$work/fn.yaml"
"$ctl" apply -f "$work/fn.yaml"
for _ in $(seq 400); do curl -fs "$dp/fn/default/files/" >/dev/null 2>&1 && break; sleep 0.05; done
curl -s -X POST "$dp/fn/default/files/?name=hello.txt" -d 'hello from a function'
curl -s "$dp/fn/default/files/"
echo "== the same object from the host, with the function's key"
creds=$(curl -s -H "Authorization: Bearer $FUNCD_TOKEN" \
  "$FUNCD_SERVER/apis/funcd.dev/v1/namespaces/default/functions/files/s3-credentials")
field() { python3 -c "import json,sys; print(json.load(sys.stdin)['$1'])" <<<"$creds"; }
export AWS_ACCESS_KEY_ID=$(field accessKeyId) AWS_SECRET_ACCESS_KEY=$(field secretAccessKey)
export AWS_REGION=funcd AWS_CONFIG_FILE=/dev/null AWS_SHARED_CREDENTIALS_FILE=/dev/null
endpoint=$(field endpoint)
/usr/bin/aws --endpoint-url "$endpoint" s3 ls s3://files/uploads/
/usr/bin/aws --endpoint-url "$endpoint" s3 cp s3://files/uploads/hello.txt -; echo
echo "== outside its prefix: AccessDenied"
/usr/bin/aws --endpoint-url "$endpoint" s3 cp "$work/fn.yaml" s3://files/elsewhere.yaml 2>&1 || true
