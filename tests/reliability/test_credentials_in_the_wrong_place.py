"""Credentials given where they do not belong (issue 40) are refused before anything is sent or written, in one
line that never repeats them: a user:password inside --api-base, a key pasted as --api-key-env, and a libpq
key=value connection string given as --store (once a SQLite file named after it, password included)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from faithfulness_pipeline.core.errors import ConfigError
from faithfulness_pipeline.judging.llm.secrets import refuse_credentials_in, resolve_api_key
from faithfulness_pipeline.judging.store.open import open_store
from tests.reliability.support import child_env, short_rows

SECRET = "hunter2-Zq9xV"


def _score(tmp_path: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    src = tmp_path / "in.parquet"
    short_rows(3).write_parquet(src)
    command = [sys.executable, "-m", "faithfulness_pipeline.cli", "score", str(src), "-o", str(tmp_path / "out.parquet"),
               *extra]  # fmt: skip
    return subprocess.run(command, capture_output=True, text=True, env=child_env(FP_CRED_KEY="sk-cred"),
                          cwd=tmp_path, timeout=120, check=False)  # fmt: skip


@pytest.mark.parametrize(
    "extra",
    [
        ("--model", "openai/fake-judge", "--api-base", f"http://fp:{SECRET}@127.0.0.1:9/v1", "--api-key-env",
         "FP_CRED_KEY"),
        ("--model", "openai/fake-judge", "--api-base", "http://127.0.0.1:9/v1", "--api-key-env", f"sk-{SECRET}"),
        ("--store", f"host=127.0.0.1 dbname=fp user=fp password={SECRET}"),
    ],
    ids=["userinfo-in-api-base", "key-as-api-key-env", "libpq-dsn-as-store"],
)  # fmt: skip
def test_refused_in_one_line_that_does_not_repeat_the_secret(tmp_path: Path, extra: tuple[str, ...]) -> None:
    done = _score(tmp_path, *extra)
    assert done.returncode == 2, done.stderr
    assert SECRET not in done.stdout + done.stderr
    lines = [line for line in done.stderr.strip().splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.parquet"]  # nothing written, no file named after a DSN


def test_the_rules_themselves() -> None:
    with pytest.raises(ConfigError, match="user name or password") as caught:
        refuse_credentials_in(f"https://me:{SECRET}@proxy.example/v1")
    assert SECRET not in str(caught.value) and "https://proxy.example/v1" in str(caught.value)
    refuse_credentials_in("http://127.0.0.1:8080/v1")  # an address alone is fine
    refuse_credentials_in(None)
    with pytest.raises(ConfigError, match="must name an environment variable") as named:
        resolve_api_key("openai/gpt-4o-mini", f"sk-{SECRET}")
    assert SECRET not in str(named.value)
    with pytest.raises(ConfigError, match="libpq") as dsn:
        open_store(f"dbname=fp password={SECRET}")
    assert SECRET not in str(dsn.value)
