# A function keeping uploads in the S3 gateway (docs/s3.md): POST stores the body under
# uploads/{name}, GET lists what is there, GET ?name=N reads one back. funcd puts the
# function's key and the endpoint (127.0.0.1:9000 inside its sandbox) in AWS_*.
import os

import boto3
from botocore.config import Config
from botocore.exceptions import ClientError

s3 = boto3.client("s3", endpoint_url=os.environ["AWS_ENDPOINT_URL"],
                  config=Config(s3={"addressing_style": "path"}))
BUCKET = "files"


def handler(req):
    name = req.args.get("name", "")
    try:
        if req.method == "POST":
            s3.put_object(Bucket=BUCKET, Key="uploads/" + name, Body=req.body)
            return 201, {"content-type": "text/plain"}, "stored uploads/%s\n" % name
        if name:
            obj = s3.get_object(Bucket=BUCKET, Key="uploads/" + name)
            return 200, {"content-type": "application/octet-stream"}, obj["Body"].read()
        listed = s3.list_objects_v2(Bucket=BUCKET, Prefix="uploads/")
        keys = ["%s %d" % (o["Key"], o["Size"]) for o in listed.get("Contents", [])]
        return 200, {"content-type": "text/plain"}, "\n".join(keys) + "\n"
    except ClientError as e:
        err = e.response["Error"]
        return e.response["ResponseMetadata"]["HTTPStatusCode"], {"content-type": "text/plain"}, \
            "%s: %s\n" % (err["Code"], err["Message"])
