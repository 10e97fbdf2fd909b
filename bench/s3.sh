#!/usr/bin/env bash
# The S3 gateway (docs/s3.md): PUT and GET throughput of one 64 MiB object through the
# gateway (--s3-listen, file blob under --data-dir), sent and fetched by curl with presigned
# URLs (UNSIGNED-PAYLOAD: no client-side hashing in the figures), against the same object
# written and read directly through the file blob (bench/s3_blob.c) in the same data
# directory, in the same run, rounds alternating. Prints MB/s (median of ROUNDS) for each.
#
#   bash bench/s3.sh [BUILD_DIR]      (default: build-rel; ROUNDS=5, SIZE=67108864)
# Needs curl and python3-boto3 (to presign). Run it on a quiet machine.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build-rel}
ROUNDS=${ROUNDS:-5}
SIZE=${SIZE:-67108864}
work=$(mktemp -d /tmp/fs3.XXXX)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done; rm -rf "$work"; }
trap cleanup EXIT
. bench/lib.sh
echo "admin-token admin default" >"$work/tokens"
chmod 600 "$work/tokens"
funcd_store=(--data-dir "$work/data")
start_funcd --token-file "$work/tokens" --s3-listen 127.0.0.1:0
s3=$(sed -n 's/.*S3 gateway listening on //p' "$work/funcd.log")
[ -n "$s3" ] || { echo "funcd did not start its S3 gateway:"; cat "$work/funcd.log"; exit 1; }
token=admin-token
curl -sf -o /dev/null -H "Authorization: Bearer $token" -d '{"apiVersion":"funcd.dev/v1","kind":"Function",
  "metadata":{"name":"bench"},"spec":{"runtime":"python3","handler":"main.handler",
  "source":{"bundle":"sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"},
  "bindings":{"blob":[{"bucket":"bench","prefix":"","access":"readwrite"}]}}}' "$fns"
creds=$(curl -sf -H "Authorization: Bearer $token" "$fns/bench/s3-credentials")
urls=$(CREDS="$creds" /usr/bin/python3 - <<'PY'
import json, os, boto3
from botocore.config import Config
c = json.loads(os.environ["CREDS"])
s3 = boto3.client("s3", endpoint_url=c["endpoint"], region_name=c["region"],
                  aws_access_key_id=c["accessKeyId"], aws_secret_access_key=c["secretAccessKey"],
                  config=Config(s3={"addressing_style": "path"}))
p = {"Bucket": "bench", "Key": "obj"}
print(s3.generate_presigned_url("put_object", Params=p, ExpiresIn=3600))
print(s3.generate_presigned_url("get_object", Params=p, ExpiresIn=3600))
PY
)
put_url=$(echo "$urls" | sed -n 1p)
get_url=$(echo "$urls" | sed -n 2p)
head -c "$SIZE" /dev/urandom >"$work/obj"
: >"$work/gw" ; : >"$work/direct"
for r in $(seq "$ROUNDS"); do
  curl -sf -o /dev/null -w '%{time_total} ' -T "$work/obj" "$put_url" >>"$work/gw"
  curl -sf -o "$work/back" -w '%{time_total}\n' "$get_url" >>"$work/gw"
  cmp -s "$work/obj" "$work/back" || { echo "round $r: the object came back different"; exit 1; }
  "$build/bench/s3-blob" "$work/data/blobs" "$SIZE" 1 >>"$work/direct"
done
python3 - "$SIZE" "$work/gw" "$work/direct" <<'PY'
import statistics, sys
size = int(sys.argv[1]) / 1e6
def med(path, col):
    return statistics.median(float(l.split()[col]) for l in open(path) if l.strip())
for name, path in (("gateway (curl, presigned)", sys.argv[2]), ("file blob directly", sys.argv[3])):
    print(f"{name:28s} PUT {size / med(path, 0):8.1f} MB/s   GET {size / med(path, 1):8.1f} MB/s")
PY
