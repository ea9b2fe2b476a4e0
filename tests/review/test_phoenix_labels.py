"""People's labels from Phoenix (issue 51, item 2): a real Phoenix server (its own SQLite) receives spans in
English, Chinese and Korean through the OpenTelemetry SDK; the CLI pulls and scores the project (writing the
offline judge's annotations back); people's annotations are posted through Phoenix's REST API, beside an LLM
evaluator's; ``review import phoenix+http://...`` brings people's into a real label store, and again adds none.
A Phoenix that wants a key refuses a wrong one in one line that never holds the key."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import polars as pl
import pytest

from faithfulness_pipeline.review.phoenix_labels import AnnotationRule, Stored, reviewer_of, store_labels, user_number
from faithfulness_pipeline.review.store import Label, LabelStore
from faithfulness_pipeline.testing.phoenix_server import Phoenix, PhoenixUnavailable, phoenix
from tests.cli.test_cli import ROOT, run_cli
from tests.doc_blocks import activated, block, run_shell
from tests.reliability.support import child_env
from tests.traces.test_phoenix import TURNS, _send_traces, _wait_for_spans

PROJECT = "labelled"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Phoenix]:
    try:
        with phoenix(tmp_path_factory.mktemp("phoenix")) as up:
            yield up
    except PhoenixUnavailable as why:
        pytest.fail(f"the Phoenix tests cannot run here: {why}")


def _spans(url: str) -> list[dict[str, Any]]:
    reply = httpx.get(f"{url}/v1/projects/{PROJECT}/spans", params={"limit": 1000})
    reply.raise_for_status()
    return list(reply.json()["data"])


def _annotate(url: str, *annotations: dict[str, Any]) -> None:
    reply = httpx.post(f"{url}/v1/span_annotations", params={"sync": "true"}, json={"data": list(annotations)})
    assert reply.status_code == 200, reply.text


def _human(span: str, name: str, identifier: str = "", **result: Any) -> dict[str, Any]:
    metadata = result.pop("metadata", {})
    return {"span_id": span, "name": name, "annotator_kind": "HUMAN", "identifier": identifier, "result": result,
            "metadata": metadata}


def _import(server: Phoenix, scored: Path, store: Path) -> subprocess.CompletedProcess[str]:
    return run_cli("review", "import", f"phoenix+{server.url}/projects/{PROJECT}", "--store", str(store),
                   "--scored", str(scored), "--reviewer", "민지")


def test_peoples_phoenix_annotations_become_labels_once(server: Phoenix, tmp_path: Path) -> None:
    traces = _send_traces(server.url, PROJECT)
    _wait_for_spans(server.url, 3 * len(TURNS), PROJECT)
    scored_path = tmp_path / "scored.parquet"
    done = run_cli("score", f"phoenix+{server.url}/projects/{PROJECT}", "-o", str(scored_path),
                   "--phoenix-endpoint", server.url)  # the judge's own annotations (CODE) are in Phoenix too
    assert done.returncode == 0, done.stderr
    scored = pl.read_parquet(scored_path)
    answer = {language: scored.filter(pl.col("trace_id") == trace).row(0, named=True)
              for language, trace in traces.items()}
    later = _send_traces(server.url, PROJECT)  # spans that came after the scoring: no scored answer
    _wait_for_spans(server.url, 6 * len(TURNS), PROJECT)
    spans = _spans(server.url)
    root_ko = next(s["context"]["span_id"] for s in spans
                   if s["context"]["trace_id"] == traces["ko"] and s["name"] == "rag")
    unscored = next(s["context"]["span_id"] for s in spans
                    if s["context"]["trace_id"] == later["zh"] and s["name"] == "llm")
    en, zh = answer["en"]["span_id"], answer["zh"]["span_id"]
    _annotate(
        server.url,
        _human(en, "hallucination", "ana", label="hallucinated", metadata={"reviewer": "ana"}),
        _human(en, "hallucination", "bo", label="maybe"),  # a value the rule does not know: named
        _human(zh, "hallucination", label="factual", explanation="与资料一致"),  # no person named: --reviewer
        _human(zh, "faithfulness", score=0.9),
        _human(root_ko, "hallucination", "minjun", score=0.2, metadata={"reviewer": "민준"}),  # the trace's root
        _human(unscored, "hallucination", "ana", label="hallucinated", metadata={"reviewer": "ana"}),
        {"span_id": zh, "name": "hallucination", "annotator_kind": "LLM", "identifier": "phoenix-evals",
         "result": {"label": "hallucinated", "score": 1.0}},  # an LLM evaluator's: never a person's label
        _human(en, "correctness", label="correct"),  # another name: not read
    )
    store = tmp_path / "labels.sqlite"
    # zh's annotations name nobody (no user, identifier or metadata): without --reviewer, one line, nothing stored
    nameless = run_cli("review", "import", f"phoenix+{server.url}/projects/{PROJECT}", "--store", str(store),
                       "--scored", str(scored_path))
    assert nameless.returncode == 2 and not store.exists()
    assert "2 of people's annotation(s) name no person" in nameless.stderr.strip().splitlines()[-1]
    first = _import(server, scored_path, store)
    assert first.returncode == 0, first.stderr
    assert "phoenix: 6 of people's annotation(s) of project 'labelled'" in first.stdout
    assert "imported 3 label(s) of 3 answer(s) by 3 reviewer(s) (ana, 민준, 민지)" in first.stdout
    assert "3 new, 0 changed, 0 already there" in first.stdout
    assert "1 annotation(s) of another span of a trace went to its one scored answer" in first.stdout
    assert "skipped 7 annotation(s) that are not people's (1 LLM, 6 ours)" in first.stdout
    assert "1 annotation(s) hold a value that is no label here and were not imported" in first.stderr
    assert f"{en} hallucination='maybe'" in first.stderr
    assert ("1 annotation(s) are of spans that are no scored answer and were not imported: "
            f"{later['zh']}/{unscored}") in first.stderr

    kept = {(a["span_id"], a["name"], a["identifier"]): a for a in httpx.get(
        f"{server.url}/v1/projects/{PROJECT}/span_annotations",
        params={"span_ids": [en, zh, root_ko], "limit": 1000}).json()["data"]}
    labels = LabelStore(str(store), create=False).labels()
    got = {(lb.row_key, lb.reviewer): lb for lb in labels}
    assert {k: (lb.label_hallucinated, lb.label_faithfulness) for k, lb in got.items()} == {
        (answer["en"]["row_key"], "ana"): (True, None),
        (answer["zh"]["row_key"], "민지"): (False, 0.9),
        (answer["ko"]["row_key"], "민준"): (False, None),
    }
    for label in labels:  # tied to the scored answer, with its lineage, at the time the person made it
        row = scored.filter(pl.col("row_key") == label.row_key).row(0, named=True)
        assert label.source == "phoenix" and label.content_hash
        assert (label.judge_model, label.scoring_run_id) == (row["judge_model"], row["scoring_run_id"])
    made = datetime.fromisoformat(kept[(en, "hallucination", "ana")]["updated_at"].replace("Z", "+00:00"))
    assert got[(answer["en"]["row_key"], "ana")].labelled_at == made

    again = _import(server, scored_path, store)
    assert again.returncode == 0, again.stderr
    assert "0 new, 0 changed, 3 already there" in again.stdout
    assert len(LabelStore(str(store), create=False).labels()) == 3

    # ana changes her mind in Phoenix: the label is updated, not added
    _annotate(server.url, _human(en, "hallucination", "ana", label="factual", metadata={"reviewer": "ana"}))
    third = _import(server, scored_path, store)
    assert "0 new, 1 changed, 2 already there" in third.stdout, third.stdout
    after = LabelStore(str(store), create=False).labels()
    assert len(after) == 3
    assert next(lb for lb in after if lb.reviewer == "ana").label_hallucinated is False


def test_the_documented_phoenix_import_runs_as_printed(server: Phoenix, tmp_path: Path) -> None:
    """docs/review.md's Phoenix import, its server moved to this test's: a person's anonymous annotation (a
    Phoenix without authentication) is the label of --reviewer."""
    traces = _send_traces(server.url, "rag-assistant")
    _wait_for_spans(server.url, 3 * len(TURNS), "rag-assistant")
    spans = httpx.get(f"{server.url}/v1/projects/rag-assistant/spans", params={"limit": 1000}).json()["data"]
    llm = next(s["context"]["span_id"] for s in spans
               if s["context"]["trace_id"] == traces["ko"] and s["name"] == "llm")
    _annotate(server.url, _human(llm, "hallucination", label="factual", explanation="자료와 일치한다"))
    code = block("docs/review.md", "bash", 'review import "phoenix+http').replace("http://127.0.0.1:6006", server.url)
    done = run_shell(code, tmp_path, activated(child_env()))
    assert done.returncode == 0, done.stderr[-3000:]
    assert "imported 1 label(s) of 1 answer(s) by 1 reviewer(s) (ana)" in done.stdout
    [label] = LabelStore(str(tmp_path / "out" / "labels.sqlite"), create=False).labels()
    assert (label.reviewer, label.label_hallucinated, label.source) == ("ana", False, "phoenix")
    assert label.row_key == f"{traces['ko']}/{llm}"


def test_a_refused_key_is_one_line_that_never_holds_it(tmp_path_factory: pytest.TempPathFactory,
                                                        tmp_path: Path) -> None:
    secret = "px-key-DO-NOT-SHOW-4f1c9a7e2b"
    scored = tmp_path / "scored.parquet"
    pl.DataFrame({"row_key": ["t/s"], "trace_id": ["t"], "span_id": ["s"]}).write_parquet(scored)
    try:
        with phoenix(tmp_path_factory.mktemp("phoenix-auth"),
                     {"PHOENIX_ENABLE_AUTH": "true", "PHOENIX_SECRET": "a-test-secret-of-32-chars-or-more-0123"}) as up:
            env = {**os.environ, "PHOENIX_API_KEY": secret}
            done = subprocess.run(
                [sys.executable, "-m", "faithfulness_pipeline.cli", "review", "import",
                 f"phoenix+{up.url}/projects/default", "--store", str(tmp_path / "labels.sqlite"), "--scored",
                 str(scored)], capture_output=True, text=True, env=env, cwd=ROOT, timeout=120, check=False)
    except PhoenixUnavailable as why:
        pytest.fail(f"the Phoenix tests cannot run here: {why}")
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "HTTP 401" in lines[0], done.stderr
    assert secret not in done.stdout + done.stderr


def test_the_rule_and_the_reviewer_are_read_as_documented() -> None:
    rule = AnnotationRule()
    assert rule.hallucination({"label": " Hallucinated "}) is True
    assert rule.hallucination({"label": "factual", "score": 1.0}) is False  # a known label wins over a score
    assert rule.hallucination({"label": "not_hallucinated"}) is False
    assert rule.hallucination({"score": 0.5}) is True and rule.hallucination({"score": 0.49}) is False
    assert rule.hallucination({"label": "maybe", "score": 1.0}) is None and rule.hallucination({}) is None
    yes_no = AnnotationRule(hallucinated=("yes",), factual=("no",), threshold=0.8)
    assert yes_no.hallucination({"label": "YES"}) is True and yes_no.hallucination({"score": 0.7}) is False
    users = {"VXNlcjoz": "ana"}
    assert reviewer_of({"metadata": {"annotator": "bo"}, "user_id": "VXNlcjoz"}, users, None) == "bo"
    assert reviewer_of({"user_id": "VXNlcjoz", "identifier": "px-app:VXNlcjoz"}, users, None) == "ana"
    assert reviewer_of({"user_id": "VXNlcjoz"}, {}, None) == user_number("VXNlcjoz") == "phoenix-user-3"
    assert reviewer_of({"identifier": "chen"}, {}, "x") == "chen"
    assert reviewer_of({"identifier": "", "metadata": {}}, {}, "x") == "x"
    assert reviewer_of({"identifier": ""}, {}, None) is None


def test_a_label_given_later_elsewhere_is_kept_over_an_older_annotation(tmp_path: Path) -> None:
    store = LabelStore(str(tmp_path / "labels.sqlite"))
    at = datetime(2026, 12, 4, 9, 0, tzinfo=UTC)
    store.put([Label("t/a", "ana", True, labelled_at=at + timedelta(hours=1), source="review"),
               Label("t/b", "ana", True, labelled_at=at - timedelta(hours=1), source="review")])
    older, newer = (Label("t/a", "ana", False, labelled_at=at, source="phoenix"),
                    Label("t/b", "ana", False, labelled_at=at, source="phoenix"))
    assert store_labels(store, [older, newer]) == Stored(new=0, changed=1, unchanged=0, kept=1)
    assert {lb.row_key: (lb.label_hallucinated, lb.source) for lb in store.labels()} == {
        "t/a": (True, "review"), "t/b": (False, "phoenix")}
    assert store_labels(store, [older, newer]) == Stored(new=0, changed=0, unchanged=1, kept=1)


def test_a_table_import_refuses_phoenixs_options(tmp_path: Path) -> None:
    done = run_cli("review", "import", str(tmp_path / "sheet.csv"), "--store", str(tmp_path / "labels.sqlite"),
                   "--scored", str(tmp_path / "scored.parquet"), "--score-threshold", "0.7")
    assert done.returncode == 2
    assert "--score-threshold read Phoenix's annotations" in done.stderr.strip().splitlines()[-1]
