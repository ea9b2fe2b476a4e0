"""Text a model writes that is not valid Unicode (a lone UTF-16 surrogate: half an emoji) never ends a run.

Real HTTP to the fake server through litellm: the scripted judge answers some items with a lone surrogate
at the end of every claim and reason, either as the JSON escape inside its reply (what a model in JSON
mode writes) or in the reply's content itself (the provider's JSON carries the escape). Both modes
(interactive, batch), both steps; the scored table, the result store and the Parquet file are written
and each bad character is U+FFFD where it stood.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import polars as pl
import pytest

from faithfulness_pipeline.api import score_frame
from faithfulness_pipeline.core import schema as S
from faithfulness_pipeline.core.config import ScoringConfig
from faithfulness_pipeline.judging.factory import make_judge
from faithfulness_pipeline.judging.llm.parsing import parse_extract_reply, parse_verdict_reply
from faithfulness_pipeline.judging.llm.valid_text import REPLACEMENT, valid_text
from faithfulness_pipeline.settings.judge import JudgeSettings
from faithfulness_pipeline.testing.fakellm import FakeLLMServer
from faithfulness_pipeline.testing.fakellm.faults import BatchTiming
from faithfulness_pipeline.testing.scripted import ScriptedJudge, typical_frame

KEY_ENV = "FP_TEST_TEXT_KEY"
MARKER = "[C]"  # rows whose answers hold a contradicted sentence get the bad text
FAST = BatchTiming(validating_s=0.01, per_line_s=0.001, finalizing_s=0.01, cancelling_s=0.01)


@pytest.fixture(autouse=True)
def _key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_ENV, "sk-text")


def _settings(server: FakeLLMServer, store: Path, **extra: Any) -> JudgeSettings:
    values: dict[str, Any] = {
        "model": "openai/fake-judge", "api_base": server.base_url, "api_key_env": KEY_ENV, "timeout_s": 5,
        "backoff_base_s": 0.01, "backoff_max_s": 0.05, "batch_poll_s": 0.02, "store": str(store),
        "max_items_per_pack": 4,
    }
    values.update(extra)
    return JudgeSettings(**values)


def _strings(df: pl.DataFrame) -> list[str]:
    claims = [c for cs in df.get_column("claims").to_list() if cs for c in cs]
    reasons = [v["reason"] for vs in df.get_column("verdicts").to_list() if vs for v in vs if v["reason"]]
    return claims + reasons


@pytest.mark.parametrize("mode", ["interactive", "batch"])
@pytest.mark.parametrize("written", ["surrogate", "raw_surrogate"])
def test_a_lone_surrogate_from_the_model_becomes_u_fffd_and_every_row_is_written(
    tmp_path: Path, mode: str, written: str
) -> None:
    frame = typical_frame(18, seed=3)
    marked = frame.filter(pl.col("output").str.contains(MARKER, literal=True))
    assert 0 < marked.height < frame.height
    script = ScriptedJudge(misbehave={MARKER: written}, times=10_000)
    with FakeLLMServer(script, batch_timing=FAST) as server:
        judge = make_judge(_settings(server, tmp_path / "store.sqlite", mode=mode))
        scored = score_frame(frame, judge, ScoringConfig(chunk_rows=7))
        notes = judge.stats().notes
        sent = server.stats().requests + server.stats().batch_lines
        server.reset_stats()
        again = score_frame(frame, make_judge(_settings(server, tmp_path / "store.sqlite", mode=mode)))
        assert server.stats().requests + server.stats().batch_lines == 0  # every result was stored
    assert sent > 0
    assert scored.height == frame.height and (scored.get_column("status") == "ok").all()
    out = tmp_path / "scored.parquet"
    scored.write_parquet(out)
    back = pl.read_parquet(out)
    assert back.drop(list(S.RUN_COLUMNS)).equals(scored.drop(list(S.RUN_COLUMNS)))
    assert again.drop(list(S.RUN_COLUMNS)).sort(S.ROW_KEY).equals(
        scored.drop(list(S.RUN_COLUMNS)).sort(S.ROW_KEY))
    texts = _strings(back)
    for text in texts:
        text.encode("utf-8")  # strict: no surrogate left anywhere
    # The marker is where the text was: at the end of each claim and reason of the rows answered so.
    hit = back.filter(pl.col("output").str.contains(MARKER, literal=True))
    for claims in hit.get_column("claims").to_list():
        assert claims and all(c.endswith(f" {REPLACEMENT}") for c in claims)
    for verdicts in hit.get_column("verdicts").to_list():
        assert all(v["reason"].endswith(f"cut {REPLACEMENT}") for v in verdicts)
    clean = back.filter(~pl.col("output").str.contains(MARKER, literal=True))
    assert not any(REPLACEMENT in t for t in _strings(clean))
    note = next(n for n in notes if "not valid Unicode" in n)
    assert note.startswith(f"{2 * hit.height} results hold judge text")  # claims and verdicts of each row


def test_valid_text_replaces_only_lone_halves() -> None:
    assert valid_text("plain") == "plain"
    assert valid_text("台北101 😀") == "台北101 😀"
    assert valid_text("cut \ud83d") == f"cut {REPLACEMENT}"
    assert valid_text("\ude00 low first, then a pair \ud83d\ude00") == f"{REPLACEMENT} low first, then a pair 😀"


def test_the_parser_names_the_items_whose_text_it_replaced() -> None:
    extract = parse_extract_reply('{"a":{"1":["A claim \\ud83d"]},"b":{"1":true}}', {"a": ("x.",), "b": ("y.",)})
    assert extract.ok == {"a": (f"A claim {REPLACEMENT}",), "b": ("y.",)} and extract.replaced == {"a"}
    verdict = parse_verdict_reply('{"a":["S0"],"b":["U|no \\udc00 passage"]}', {"a": (1, 1), "b": (1, 1)})
    assert verdict.replaced == {"b"}
    assert verdict.ok["b"][0].reason == f"no {REPLACEMENT} passage"
