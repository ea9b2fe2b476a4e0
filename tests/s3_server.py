"""A real S3 HTTP endpoint for the object-store tests: moto's server mode on 127.0.0.1, on a free port.

Nothing is monkeypatched: pyarrow, polars, DuckDB (through fsspec) and the CLI's subprocesses talk HTTP to
it exactly as they would to S3, found by ``AWS_ENDPOINT_URL`` and signed with the dummy keys of
:func:`s3_env`. ``boto3`` (moto's own dependency) is only the tests' window on the server: making buckets,
listing every key a write left behind.
"""

from __future__ import annotations

import importlib.util
import itertools
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: The identity the tests sign with (moto accepts any key unless its IAM checks are switched on).
ACCESS_KEY = "AKIAFPTESTS000000000"
SECRET_KEY = "fp-test-secret-0000000000000000000000000"
REGION = "us-east-1"

_BUCKETS = itertools.count()


def missing_reason() -> str | None:
    """Why the S3 tests cannot run here, or None."""
    if importlib.util.find_spec("moto") is None or importlib.util.find_spec("flask") is None:
        return "moto[server] is not installed (uv sync installs the dev group, which has it): no S3 endpoint"
    return None


@dataclass
class S3Server:
    """A running moto server: its endpoint, and a boto3 client on it for the tests' own checks."""

    endpoint: str
    server: Any

    def client(self) -> Any:
        import boto3

        return boto3.client("s3", endpoint_url=self.endpoint, region_name=REGION, aws_access_key_id=ACCESS_KEY,
                            aws_secret_access_key=SECRET_KEY)

    def new_bucket(self, prefix: str = "fp-test") -> str:
        name = f"{prefix}-{next(_BUCKETS)}"
        self.client().create_bucket(Bucket=name)
        return name

    def keys(self, bucket: str) -> list[str]:
        """Every object in ``bucket``, staging objects included, sorted; not the folder markers (empty keys
        ending in ``/``, which pyarrow leaves where it deleted the last file of a folder: no reader takes
        them for data)."""
        pages = self.client().get_paginator("list_objects_v2").paginate(Bucket=bucket)
        objects = [obj for page in pages for obj in page.get("Contents", [])]
        assert all(obj["Size"] == 0 for obj in objects if obj["Key"].endswith("/")), "a folder marker with bytes"
        return sorted(obj["Key"] for obj in objects if not obj["Key"].endswith("/"))

    def open_uploads(self, bucket: str) -> list[str]:
        """Keys of multipart uploads begun and neither completed nor aborted (a killed writer's)."""
        return sorted(u["Key"] for u in self.client().list_multipart_uploads(Bucket=bucket).get("Uploads", []))


def s3_env(server: S3Server, home: Path) -> dict[str, str]:
    """The environment that points every S3 client at ``server``: endpoint, keys, region; and empty
    profile files under ``home`` so the developer's own ~/.aws never takes part. No instance-metadata
    lookup (it would leave the machine)."""
    config = home / "aws-config"
    credentials = home / "aws-credentials"
    config.write_text("", encoding="utf-8")
    credentials.write_text("", encoding="utf-8")
    return {
        "AWS_ENDPOINT_URL": server.endpoint,
        "AWS_ACCESS_KEY_ID": ACCESS_KEY,
        "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
        "AWS_REGION": REGION,
        "AWS_DEFAULT_REGION": REGION,
        "AWS_EC2_METADATA_DISABLED": "true",
        "AWS_CONFIG_FILE": str(config),
        "AWS_SHARED_CREDENTIALS_FILE": str(credentials),
    }


#: Variables of the caller's environment that would point a client elsewhere or sign with another identity.
FOREIGN_AWS = ("AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN", "AWS_ROLE_ARN",
               "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_ENDPOINT_URL_S3", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
               "AWS_CONTAINER_CREDENTIALS_FULL_URI")


@contextmanager
def s3_server() -> Iterator[S3Server]:
    """moto's threaded server on 127.0.0.1 and a port the OS picks; stopped on exit."""
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    try:
        yield S3Server(f"http://{host}:{port}", server)
    finally:
        server.stop()
