"""The API key never leaves for anywhere but the provider, even when the provider echoes it back.

A canary key is configured for the CLI and for ``dg launch`` runs against an upstream that repeats the
key in its 500 and 401 errors (body and headers; whole, reversed, base64 at each alignment, hex,
URL-encoded, pieces), on requests that fail every retry, so the errors are kept. Then every file the runs
wrote is scanned, decoded where it is encoded (Parquet cells, SQLite rows, JSON lines, logs): output
and claim tables, the Mastra export, the result store, stdout and stderr, the Dagster event log and run
storage, compute logs and asset metadata under the temporary DAGSTER_HOME. The key appears in none of
them: not whole, not reversed, not base64, hex or URL encoded, and no 12-character piece of it.
"""

from __future__ import annotations

import base64
import sqlite3
import subprocess
import sys
import zlib
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import polars as pl
import pytest

from faithfulness_pipeline.judging.llm.secrets import Redactor as LiteLLMRedactor
from tests.reliability.leaky import LeakyServer, echoes
from tests.reliability.support import (
    DAY,
    KEY_ENV,
    MODEL,
    REPO,
    TO_SCORED,
    child_env,
    dg_launch,
    make_home,
    run_cli,
    short_rows,
)

#: '/', '+' and '=' make its URL-encoded form differ from the plain one.
CANARY = "sk-Zq8/RtY2wLm5+XpN7vKc3Hd=J6fGb4S"
#: What the kept errors say for each form the upstream echoes (``leaky.echoes``): proof each was kept.
ECHO_LABELS = ("key [REDACTED]", "reversed", "auth", "hex", "url", "key ending", "key starting")


def needles(secret: str) -> dict[str, str]:
    """Every form of the secret to look for, named."""
    out = {"plain": secret, "reversed": secret[::-1], "hex": secret.encode().hex(),
           "HEX": secret.encode().hex().upper(), "url": quote(secret, safe="")}
    for pad in range(3):  # base64 of the key at each alignment inside a longer encoded text
        for name, encode in (("b64", base64.b64encode), ("b64url", base64.urlsafe_b64encode)):
            text = encode(b"\0" * pad + secret.encode()).decode()
            out[f"{name}+{pad}"] = text[4:-4]
    core = secret.removeprefix("sk-")
    out |= {f"piece@{i}": core[i : i + 12] for i in range(len(core) - 11)}
    return out


NEEDLES = needles(CANARY)


def _texts(path: Path) -> Iterator[str]:
    """The file's raw text, plus its decoded content where it is a Parquet or SQLite file."""
    raw = path.read_bytes()
    yield raw.decode("utf-8", errors="ignore")
    if path.suffix == ".parquet" and raw[:4] == b"PAR1" and raw[-4:] == b"PAR1":
        yield pl.read_parquet(path).write_ndjson()
    if raw.startswith(b"SQLite format 3\0"):
        with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as conn:
            tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
            for table in tables:
                for row in conn.execute(f'SELECT * FROM "{table}"'):  # names come from the file itself
                    yield repr(row)
                    yield " ".join(c.decode("utf-8", "ignore") for c in row if isinstance(c, bytes))
                    yield " ".join(_inflated(c) for c in row if isinstance(c, bytes))  # Dagster's snapshots


def _inflated(blob: bytes) -> str:
    """A zlib blob's text (Dagster keeps job snapshots compressed in run storage), else nothing."""
    try:
        return zlib.decompress(blob).decode("utf-8", "ignore")
    except zlib.error:
        return ""


def leaks(text: str) -> list[str]:
    return [name for name, needle in NEEDLES.items() if needle in text]


def scan(*roots: Path, extra: dict[str, str] | None = None) -> dict[str, list[str]]:
    """Every file under ``roots`` (and the named ``extra`` texts) in which some form of the key was found."""
    found: dict[str, list[str]] = {}
    files = 0
    for root in roots:
        for path in sorted(p for p in root.rglob("*") if p.is_file()):
            files += 1
            hits = sorted({h for text in _texts(path) for h in leaks(text)})
            if hits:
                found[str(path)] = hits
    for name, text in (extra or {}).items():
        if hits := leaks(text):
            found[name] = hits
    assert files, "nothing was scanned"
    return found


def test_the_scanner_finds_every_form_of_the_key(tmp_path: Path) -> None:
    forms = ["x" + CANARY + "y", CANARY[::-1], base64.b64encode(b"Bearer " + CANARY.encode()).decode(),
             CANARY.encode().hex(), f"key ending {CANARY[-14:]}", quote(CANARY, safe=""),
             base64.urlsafe_b64encode(b"Ke " + CANARY.encode()).decode()]  # fmt: skip
    for n, form in enumerate(forms):
        pl.DataFrame({"error": [form]}).write_parquet(tmp_path / f"{n}.parquet", compression="zstd")
    with sqlite3.connect(tmp_path / "s.sqlite") as conn:
        conn.execute("CREATE TABLE t (v BLOB)")
        conn.execute("INSERT INTO t VALUES (?)", (("pad" * 2000 + CANARY).encode(),))
    found = scan(tmp_path)
    assert sorted(Path(p).name for p in found) == [f"{n}.parquet" for n in range(len(forms))] + ["s.sqlite"]


def test_the_redactor_removes_every_echoed_form_and_leaves_other_text() -> None:
    redact = LiteLLMRedactor(CANARY)
    for echo in echoes(CANARY):
        cleaned = redact(f"upstream failure, {echo}; request id req-0af31c")
        assert leaks(cleaned) == [], (echo, cleaned)
        assert cleaned.startswith("upstream failure, ") and cleaned.endswith("; request id req-0af31c")
    text = "The museum opened in 1901. 博物馆于1901年开放。박물관은 1901년에 문을 열었다."
    assert redact(text) == text


@pytest.mark.parametrize("mode", ["flaky", "broken", "reject"])
def test_the_cli_never_writes_or_prints_the_key(mode: str, tmp_path: Path) -> None:
    src = tmp_path / "in.parquet"
    short_rows(120).write_parquet(src)
    out = tmp_path / "out"
    with LeakyServer(mode) as server:
        done = run_cli(
            [*_cli(server, src, out / "scored.parquet"), "--claims-out", str(out / "claims.parquet"),
             "--mastra-out", str(out / "mastra.jsonl"), "--store", str(out / "store.sqlite")],
            CANARY,
            FP_JUDGE_BACKOFF_BASE_S="0.01", FP_JUDGE_MAX_RETRIES="2", FP_JUDGE_MAX_ITEMS_PER_PACK="4",
        )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    scored = pl.read_parquet(out / "scored.parquet")
    assert scored.height == 120
    answered = pl.read_parquet(src).filter(pl.col("output").str.strip_chars() != "").height
    errors = scored.filter(pl.col("status") == "error").get_column("error").to_list()
    if mode == "reject":  # the key did reach the provider, which refused it and said so
        assert len(errors) == answered and all("AuthenticationError" in e for e in errors)
    elif mode == "broken":  # every retry failed: the echoing errors are what the run keeps, in every form
        assert len(errors) == answered and all("upstream failure" in e for e in errors)
        assert all(any(f"upstream failure, {label}" in e for e in errors) for label in ECHO_LABELS), errors
        mastra = (out / "mastra.jsonl").read_text(encoding="utf-8")
        assert mastra.count("upstream failure") == 2 * answered  # both scorers' reasons carry the error
        assert "error: " in done.stderr and "upstream failure" in done.stderr  # the summary quotes errors
    else:
        assert server.requests > scored.filter(pl.col("status") == "ok").height / 32
    assert scan(out, extra={"stdout": done.stdout, "stderr": done.stderr}) == {}


def _cli(server: LeakyServer, src: Path, out: Path) -> list[str]:
    return [*_base(server), str(src), "-o", str(out)]


def _base(server: LeakyServer) -> list[str]:
    return [sys.executable, "-m", "faithfulness_pipeline.cli", "score", "--model", MODEL, "--api-base",
            server.base_url, "--api-key-env", KEY_ENV, "--timeout", "5"]  # fmt: skip


@pytest.mark.parametrize("mode", ["broken", "reject"])
def test_dagster_runs_never_store_or_log_the_key(mode: str, tmp_path: Path) -> None:
    """The provider fails every request (or refuses the key) and repeats the key: every row fails, the
    error-rate check fails with the (redacted) errors as examples in its metadata, and the key is in none
    of it: warehouse tables, run and event storage, the index database, compute logs."""
    landing = tmp_path / "landing"
    landing.mkdir()
    rows = short_rows(90)
    rows.write_parquet(landing / "conversations.parquet")
    home = make_home(tmp_path / "dagster_home")
    warehouse = tmp_path / "warehouse"
    with LeakyServer(mode) as server:
        env = child_env(
            DAGSTER_HOME=str(home), FP_LANDING=str(landing), FP_WAREHOUSE=str(warehouse), FP_JUDGE_MODEL=MODEL,
            FP_JUDGE_API_BASE=server.base_url, FP_JUDGE_API_KEY_ENV=KEY_ENV, **{KEY_ENV: CANARY},
            FP_JUDGE_BACKOFF_BASE_S="0.01", FP_JUDGE_MAX_RETRIES="1", FP_JUDGE_MAX_ITEMS_PER_PACK="4",
        )  # fmt: skip
        run = subprocess.run(dg_launch(DAY, TO_SCORED), env=env, cwd=REPO, capture_output=True, text=True,
                             timeout=600, check=False)  # fmt: skip
        assert server.requests > 0
    assert "RUN_SUCCESS" in run.stdout + run.stderr, run.stderr[-3000:]
    scored = pl.read_parquet(warehouse / "scored_conversations" / f"ds={DAY}" / "data.parquet")
    answered = rows.filter(pl.col("output").str.strip_chars() != "").height
    why = "AuthenticationError" if mode == "reject" else "upstream failure"
    assert scored.filter(pl.col("error").str.contains(why)).height == answered
    event_log = b"".join(p.read_bytes() for p in home.rglob("*.db"))
    assert b"error_rate" in event_log and why.encode() in event_log  # the check ran and said why
    assert {"runs.db", "index.db"} <= {p.name for p in home.rglob("*.db")}
    assert any(p.suffix in (".err", ".out", ".complete") for p in home.rglob("*")), "no compute logs to scan"
    assert scan(home, warehouse, extra={"stdout": run.stdout, "stderr": run.stderr}) == {}
