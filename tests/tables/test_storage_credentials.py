"""Credentials come from the usual chain, and a wrong one is an error that does not show it.

moto's server checks every request's signature against its IAM users here (its authentication switched on
for the test), so a request that works proves which identity signed it: a profile in an AWS credentials
file, found by ``AWS_PROFILE``, with no key in the environment — for pyarrow (the AWS SDK's chain), for
polars' scans (boto3's chain) and for the CLI in a subprocess.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from faithfulness_pipeline.tables.read import scan_input
from faithfulness_pipeline.tables.storage import Place, describe
from tests.conftest import S3Bucket
from tests.reliability.support import child_env
from tests.s3_server import REGION

CANARY = "fp-canary-secret-d41d8cd98f00b204e980"


@pytest.fixture
def iam_user(s3: S3Bucket) -> dict[str, str]:
    """An IAM user of moto's that may do anything to S3, and its access key."""
    import boto3

    iam = boto3.client("iam", endpoint_url=s3.server.endpoint, region_name=REGION)
    iam.create_user(UserName=f"fp-{s3.name}")
    iam.put_user_policy(UserName=f"fp-{s3.name}", PolicyName="s3", PolicyDocument=json.dumps(
        {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}]}))
    key = iam.create_access_key(UserName=f"fp-{s3.name}")["AccessKey"]
    return {"id": key["AccessKeyId"], "secret": key["SecretAccessKey"]}


@pytest.fixture
def authenticating(s3: S3Bucket, monkeypatch: pytest.MonkeyPatch) -> None:
    """moto's server checks signatures until the test ends (its own setting, in this process where it runs;
    no client is touched)."""
    from moto import settings

    monkeypatch.setattr(settings, "INITIAL_NO_AUTH_ACTION_COUNT", 0)


def _profile_only(monkeypatch: pytest.MonkeyPatch, s3: S3Bucket, key_id: str, secret: str) -> dict[str, str]:
    """The environment of a machine whose identity is the profile ``fp`` of its credentials file."""
    credentials = Path(s3.env["AWS_SHARED_CREDENTIALS_FILE"])
    credentials.write_text(f"[fp]\naws_access_key_id = {key_id}\naws_secret_access_key = {secret}\n", encoding="utf-8")
    Path(s3.env["AWS_CONFIG_FILE"]).write_text(f"[profile fp]\nregion = {REGION}\n", encoding="utf-8")
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    monkeypatch.setenv("AWS_PROFILE", "fp")
    return {k: v for k, v in s3.env.items() if k not in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")} | {
        "AWS_PROFILE": "fp"}


def _score(source: str, output: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    base = child_env()
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        base.pop(name, None)
    return subprocess.run([sys.executable, "-m", "faithfulness_pipeline.cli", "score", source, "-o", output, "--quiet"],
                          capture_output=True, text=True, env={**base, **env}, timeout=300, check=False)


def test_a_profile_signs_pyarrow_polars_and_the_cli(
    s3: S3Bucket, iam_user: dict[str, str], authenticating: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    env = _profile_only(monkeypatch, s3, iam_user["id"], iam_user["secret"])
    rows = Place.of(s3.uri("in/rows.jsonl"))
    rows.write_text('{"conversation_id": "a", "output": "The bridge opened in 1932.", "context": ["It opened in 1932."]}\n')
    assert rows.read_text().startswith('{"conversation_id"')  # pyarrow signed with the profile
    assert scan_input(rows.uri).collect().get_column("conversation_id").to_list() == ["a"]  # and polars
    done = _score(rows.uri, s3.uri("out/scored.parquet"), env)
    assert done.returncode == 0, done.stderr
    assert pl.read_parquet(Place.of(s3.uri("out/scored.parquet")).read_bytes()).height == 1


def test_a_wrong_secret_is_refused_and_never_shown(
    s3: S3Bucket, iam_user: dict[str, str], authenticating: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = _profile_only(monkeypatch, s3, iam_user["id"], CANARY)
    target = Place.of(s3.uri("out/x.parquet"))
    with pytest.raises(OSError) as caught:
        target.write_bytes(b"x")
    message = describe(caught.value)
    assert CANARY not in message and "signature" in message.lower(), message
    done = _score(s3.uri("in/rows.jsonl"), s3.uri("out/scored.parquet"), env)
    assert done.returncode == 2, done.stderr
    assert CANARY not in done.stdout + done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "s3://" in lines[0], done.stderr
