"""A local S3 endpoint for the storage tests: moto's server on 127.0.0.1 (a free port), with IAM on.

`LocalS3` starts moto's threaded server (loopback only: no network), makes a bucket and an IAM
user whose policy allows everything in that bucket except reading objects under `denied/`, then
turns authentication on (moto's reset-auth: from then on every request must be signed by a key
moto knows and is checked against that policy), so a denied object is denied by a real policy
check, as on AWS. `env()` gives the user's credentials and the endpoint as the AWS_* variables
sdscore reads. `stop()` always shuts the server down and turns authentication off again.
"""

from __future__ import annotations

import json
import logging

BUCKET = "sdscore-test"
DENIED_PREFIX = "denied/"


class LocalS3:
    def __init__(self):
        import boto3
        import requests
        from moto.server import ThreadedMotoServer

        logging.getLogger("werkzeug").setLevel(logging.ERROR)  # no request lines on stderr
        self._server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        self._server.start()
        host, port = self._server.get_host_and_port()
        self.endpoint = f"http://{host}:{port}"
        self._requests = requests
        try:
            requests.post(f"{self.endpoint}/moto-api/reset", timeout=10).raise_for_status()  # a fresh store
            setup = dict(endpoint_url=self.endpoint, region_name="us-east-1", aws_access_key_id="setup",
                         aws_secret_access_key="setup")
            boto3.client("s3", **setup).create_bucket(Bucket=BUCKET)
            iam = boto3.client("iam", **setup)
            iam.create_user(UserName="scorer")
            policy = {"Version": "2012-10-17", "Statement": [
                {"Effect": "Allow", "Action": "s3:*", "Resource": "*"},
                {"Effect": "Deny", "Action": "s3:GetObject", "Resource": f"arn:aws:s3:::{BUCKET}/{DENIED_PREFIX}*"},
            ]}
            iam.put_user_policy(UserName="scorer", PolicyName="no-denied", PolicyDocument=json.dumps(policy))
            key = iam.create_access_key(UserName="scorer")["AccessKey"]
            self.access_key, self.secret_key = key["AccessKeyId"], key["SecretAccessKey"]
            self._set_auth(b"0")  # every request from now on is authenticated and authorised
            self.client = boto3.client("s3", endpoint_url=self.endpoint, region_name="us-east-1",
                                       aws_access_key_id=self.access_key, aws_secret_access_key=self.secret_key)
        except BaseException:
            self.stop()
            raise

    def _set_auth(self, count: bytes) -> None:
        reply = self._requests.post(f"{self.endpoint}/moto-api/reset-auth", data=count, timeout=10)
        reply.raise_for_status()

    def env(self) -> dict[str, str]:
        """The environment sdscore reads for this endpoint and user."""
        return {"AWS_ACCESS_KEY_ID": self.access_key, "AWS_SECRET_ACCESS_KEY": self.secret_key,
                "AWS_ENDPOINT_URL": self.endpoint, "AWS_REGION": "us-east-1"}

    def uri(self, key: str) -> str:
        return f"s3://{BUCKET}/{key}"

    def put(self, key: str, data: bytes) -> str:
        self.client.put_object(Bucket=BUCKET, Key=key, Body=data)
        return self.uri(key)

    def put_file(self, key: str, path) -> str:
        with open(path, "rb") as handle:
            return self.put(key, handle.read())

    def get(self, key: str) -> bytes:
        return self.client.get_object(Bucket=BUCKET, Key=key)["Body"].read()

    def keys(self, prefix: str = "") -> list[str]:
        pages = self.client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix)
        return sorted(item["Key"] for page in pages for item in page.get("Contents", []))

    def stop(self) -> None:
        from moto import settings

        try:
            self._server.stop()
        finally:
            settings.INITIAL_NO_AUTH_ACTION_COUNT = float("inf")


def running_s3():
    """A module fixture's body: a LocalS3 that is always stopped (`yield from running_s3()`)."""
    server = LocalS3()
    try:
        yield server
    finally:
        server.stop()


def use_s3(server: LocalS3, monkeypatch) -> None:
    """Point sdscore at `server` for one test: its AWS_* variables, and none that would override them."""
    for name in ("AWS_ENDPOINT_URL_S3", "AWS_SESSION_TOKEN", "AWS_DEFAULT_REGION"):
        monkeypatch.delenv(name, raising=False)
    for name, value in server.env().items():
        monkeypatch.setenv(name, value)
