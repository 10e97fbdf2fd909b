"""An S3 client run against funcd's S3 gateway (docs/s3.md) with Debian's boto3.

As a program (tests/e2e/test_s3.c runs it against --s3-listen):
    python3 s3_client.py full BUCKET PREFIX   multipart upload of 64 MiB, ranged GETs,
                                              ListObjectsV2 with delimiter and continuation,
                                              a presigned GET (its URL printed as
                                              "PRESIGNED <url>" with "EXPECT <sha256>"), a
                                              write outside PREFIX denied
    python3 s3_client.py errors BUCKET PREFIX S3's errors (a gateway with a 1 MiB cap)
As a function (handler "s3_client.handler"): `full` from inside the worker, with
the bucket and prefix in the query (?bucket=&prefix=); the presigned URL is fetched
with urllib there. Credentials and the endpoint come from the environment funcd
injects: AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_ENDPOINT_URL, AWS_REGION.
Exits (or answers) with the first failed check.
"""
import hashlib
import os
import sys
import urllib.request

import boto3
from botocore.config import Config
from botocore.exceptions import ClientError

MiB = 1 << 20


def client(secret=None):
    return boto3.client(
        "s3",
        endpoint_url=os.environ["AWS_ENDPOINT_URL"],
        region_name=os.environ.get("AWS_REGION", "funcd"),
        aws_access_key_id=os.environ["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=secret or os.environ["AWS_SECRET_ACCESS_KEY"],
        config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}),
    )


def check(cond, what):
    if not cond:
        raise AssertionError(what)


def error_code(fn):
    try:
        fn()
    except ClientError as e:
        return e.response["Error"]["Code"]
    return None


def full(bucket, prefix, fetch_presigned):
    s3 = client()
    out = []
    # multipart: 8 MiB parts, listed before completing
    data = os.urandom(64 * MiB)
    key = prefix + "big.bin"
    up = s3.create_multipart_upload(Bucket=bucket, Key=key)["UploadId"]
    parts = []
    for i in range(8):
        r = s3.upload_part(Bucket=bucket, Key=key, UploadId=up, PartNumber=i + 1,
                           Body=data[i * 8 * MiB:(i + 1) * 8 * MiB])
        parts.append({"PartNumber": i + 1, "ETag": r["ETag"]})
    listed = s3.list_parts(Bucket=bucket, Key=key, UploadId=up)["Parts"]
    check([p["PartNumber"] for p in listed] == list(range(1, 9)), "list_parts: %r" % listed)
    check(all(p["Size"] == 8 * MiB for p in listed), "part sizes")
    s3.complete_multipart_upload(Bucket=bucket, Key=key, UploadId=up,
                                 MultipartUpload={"Parts": parts})
    check(s3.head_object(Bucket=bucket, Key=key)["ContentLength"] == 64 * MiB, "head size")
    # an aborted upload is gone
    up2 = s3.create_multipart_upload(Bucket=bucket, Key=prefix + "aborted")["UploadId"]
    s3.upload_part(Bucket=bucket, Key=prefix + "aborted", UploadId=up2, PartNumber=1, Body=b"x")
    s3.abort_multipart_upload(Bucket=bucket, Key=prefix + "aborted", UploadId=up2)
    check(error_code(lambda: s3.list_parts(Bucket=bucket, Key=prefix + "aborted", UploadId=up2))
          == "NoSuchUpload", "aborted upload still listed")
    # ranged GETs
    r = s3.get_object(Bucket=bucket, Key=key, Range="bytes=1000-1999")
    check(r["Body"].read() == data[1000:2000], "range 1000-1999")
    check(r["ContentRange"] == "bytes 1000-1999/%d" % (64 * MiB), "Content-Range")
    r = s3.get_object(Bucket=bucket, Key=key, Range="bytes=%d-" % (40 * MiB + 7))
    check(r["Body"].read() == data[40 * MiB + 7:], "open range")
    r = s3.get_object(Bucket=bucket, Key=key, Range="bytes=-10")
    check(r["Body"].read() == data[-10:], "suffix range")
    body = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
    check(hashlib.sha256(body).digest() == hashlib.sha256(data).digest(), "whole object")
    del body
    # ListObjectsV2: delimiter, continuation, max-keys
    for k in ["dir/a/1", "dir/a/2", "dir/b/1", "dir/c", "dir/d", "dir/e"]:
        s3.put_object(Bucket=bucket, Key=prefix + k, Body=k.encode())
    keys, prefixes, pages, token = [], [], 0, None
    while True:
        kw = {"Bucket": bucket, "Prefix": prefix + "dir/", "Delimiter": "/", "MaxKeys": 2}
        if token:
            kw["ContinuationToken"] = token
        r = s3.list_objects_v2(**kw)
        pages += 1
        keys += [c["Key"] for c in r.get("Contents", [])]
        prefixes += [p["Prefix"] for p in r.get("CommonPrefixes", [])]
        if not r["IsTruncated"]:
            break
        token = r["NextContinuationToken"]
        check(pages < 10, "listing does not end")
    check(pages == 3, "pages: %d" % pages)
    check(keys == [prefix + "dir/c", prefix + "dir/d", prefix + "dir/e"], "keys: %r" % keys)
    check(prefixes == [prefix + "dir/a/", prefix + "dir/b/"], "prefixes: %r" % prefixes)
    r = s3.list_objects_v2(Bucket=bucket, Prefix=prefix + "dir/a/")
    check([c["Key"] for c in r["Contents"]] == [prefix + "dir/a/1", prefix + "dir/a/2"], "flat")
    # presigned GET
    url = s3.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": prefix + "dir/c"},
                                    ExpiresIn=300)
    if fetch_presigned:
        with urllib.request.urlopen(url, timeout=30) as f:
            check(f.read() == b"dir/c", "presigned GET")
    else:
        out.append("PRESIGNED " + url)
        out.append("EXPECT " + hashlib.sha256(b"dir/c").hexdigest())
    # outside the prefix: denied
    check(error_code(lambda: s3.put_object(Bucket=bucket, Key="elsewhere/x", Body=b"no"))
          == "AccessDenied", "a write outside the prefix was not denied")
    check(error_code(lambda: s3.get_object(Bucket=bucket, Key="elsewhere/x")) == "AccessDenied",
          "a read outside the prefix was not denied")
    # delete
    s3.delete_object(Bucket=bucket, Key=prefix + "dir/e")
    check(error_code(lambda: s3.get_object(Bucket=bucket, Key=prefix + "dir/e")) == "NoSuchKey",
          "deleted object still there")
    out.append("OK full")
    return out


def errors(bucket, prefix):
    s3 = client()
    check(error_code(lambda: s3.put_object(Bucket=bucket, Key=prefix + "big", Body=b"x" * (2 * MiB)))
          == "EntityTooLarge", "2 MiB over a 1 MiB cap")
    s3.put_object(Bucket=bucket, Key=prefix + "small", Body=b"0123456789")
    check(error_code(lambda: s3.get_object(Bucket=bucket, Key=prefix + "absent")) == "NoSuchKey",
          "NoSuchKey")
    check(error_code(lambda: s3.get_object(Bucket=bucket, Key=prefix + "small", Range="bytes=10-20"))
          == "InvalidRange", "InvalidRange")
    check(error_code(lambda: client("wrong" * 8).get_object(Bucket=bucket, Key=prefix + "small"))
          == "SignatureDoesNotMatch", "SignatureDoesNotMatch")
    check(error_code(lambda: s3.get_object(Bucket="unbound", Key=prefix + "small"))
          == "AccessDenied", "an unbound bucket")
    return ["OK errors"]


def handler(req):
    q = req.args
    try:
        lines = full(q.get("bucket", "data"), q.get("prefix", ""), True)
    except Exception as e:  # the answer says which check failed
        return 500, {"content-type": "text/plain"}, "%s: %s" % (type(e).__name__, e)
    return 200, {"content-type": "text/plain"}, "\n".join(lines) + "\n"


if __name__ == "__main__":
    mode, bucket, prefix = sys.argv[1:4]
    try:
        lines = full(bucket, prefix, False) if mode == "full" else errors(bucket, prefix)
    except Exception as e:
        print("FAILED %s: %s" % (type(e).__name__, e))
        sys.exit(1)
    print("\n".join(lines))
