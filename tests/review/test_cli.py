"""The review's commands as a user runs them: labels of a spreadsheet imported (tied by the id column, a label of
no scored answer named and not stored), the reviewers' agreement, the corrected figures read from the store
(``estimate --labels STORE``), and ``review serve`` refusing a network address without a token, serving on
127.0.0.1 and ending cleanly on SIGTERM; and docs/review.md's commands, run as printed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import polars as pl

from faithfulness_pipeline.review.store import LabelStore
from faithfulness_pipeline.testing.processes import death_signal, free_port, stop
from tests.cli.test_cli import ROOT, SAMPLE, run_cli
from tests.doc_blocks import activated, block, run_shell
from tests.reliability.support import child_env
from tests.review.conftest import Reviewed


def test_a_spreadsheets_labels_come_in_and_feed_agreement_and_the_corrected_figures(
        reviewed: Reviewed, tmp_path: Path) -> None:
    rows = reviewed.rows.filter(pl.col("status") == "ok")
    ids = rows.get_column("conversation_id").to_list()[:6]
    sheet = tmp_path / "sheet.csv"
    # two reviewers of the same six answers, one typo'd id, one row nobody filled in; bo's rows name no reviewer
    pl.DataFrame({
        "conversation_id": [*ids, *ids, "flat-999", ids[0]],
        "label_hallucinated": [True, False, True, False, False, True,  # ana
                               False, True, True, False, False, False,  # bo: splits on the 1st, 2nd and 6th
                               False, None],
        "reviewer": ["ana"] * 6 + [None] * 6 + ["ana", "chen"],
        "comment": ["x"] * 14,
    }).write_csv(sheet)
    store = tmp_path / "labels.sqlite"
    done = run_cli("review", "import", str(sheet), "--store", str(store), "--scored", str(reviewed.scored),
                   "--reviewer", "bo")
    assert done.returncode == 0, done.stderr
    assert "imported 12 label(s) of 6 answer(s) by 2 reviewer(s) (ana, bo)" in done.stdout
    assert "1 row(s) of" in done.stdout and "hold no label" in done.stdout
    assert "1 label(s) name no scored answer and were not imported: flat-999" in done.stderr
    labels = LabelStore(str(store), create=False).labels()
    by_key = dict(zip(rows.get_column("row_key"), rows.iter_rows(named=True), strict=True))
    assert {label.source for label in labels} == {"import"} and len(labels) == 12
    for label in labels:  # each tied to its scored answer, with its lineage
        assert label.judge_model == by_key[label.row_key]["judge_model"] == "offline-lexical-v1"
        assert label.scoring_run_id == by_key[label.row_key]["scoring_run_id"] and label.content_hash

    agreement = run_cli("review", "agreement", "--store", str(store))
    assert agreement.returncode == 0, agreement.stderr
    assert "2 reviewer(s): ana 6, bo 6" in agreement.stdout
    assert "ana & bo: 6 answer(s) in common, 3 agreeing (0.500)" in agreement.stdout
    # ana and bo split on answers 1, 2, 6 of the sheet: named
    assert "3 answer(s) the reviewers split on" in agreement.stdout
    for position in (1, 2, 6):
        assert ids[position - 1] in agreement.stdout

    estimate = run_cli("estimate", str(reviewed.scored), "--labels", str(store), "--by", "", "--min-labels", "2")
    assert estimate.returncode == 0, estimate.stderr
    assert "6 of 6 labelled answer(s) correct the figures" in estimate.stderr
    assert "3 answer(s) have reviewers who disagree" in estimate.stderr
    assert "all rows: 18 answers, 6 labelled" in estimate.stdout
    # compare --labelled takes the store too: the corrected differences; a calibration, which takes one label an
    # answer, is left out in one line where reviewers share answers
    compared = run_cli("compare", str(reviewed.scored), str(reviewed.scored), "--labelled", str(store))
    assert compared.returncode == 0, compared.stderr
    assert "corrected by people's labels" in compared.stdout
    assert "calibration left out: 6 answer(s) of" in compared.stdout


def test_serve_refuses_a_network_address_without_a_token(reviewed: Reviewed, tmp_path: Path) -> None:
    args = ("review", "serve", str(reviewed.queue), "--scored", str(reviewed.scored), "--store",
            str(tmp_path / "labels.sqlite"))
    for extra, says in ((("--host", "0.0.0.0"), "--host 0.0.0.0 would show people's conversations"),
                        (("--host", "0.0.0.0", "--token", "short"), "at least 16 characters")):
        done = run_cli(*args, *extra)
        assert done.returncode == 2 and done.stderr.startswith("error: ") and says in done.stderr
        assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr
    assert not (tmp_path / "labels.sqlite").exists()


def test_serve_answers_on_127_0_0_1_and_ends_on_sigterm(reviewed: Reviewed, tmp_path: Path) -> None:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("FP_")}
    server = subprocess.Popen(
        [sys.executable, "-m", "faithfulness_pipeline.cli", "review", "serve", str(reviewed.queue), "--scored",
         str(reviewed.scored), "--store", str(tmp_path / "labels.sqlite"), "--port", str(port), "--reviewer", "ana"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT)
    try:
        assert server.stdout is not None
        line = server.stdout.readline()
        assert line.startswith(f"review page: http://127.0.0.1:{port}/ ({len(reviewed.rows)} answers"), line
        deadline = time.monotonic() + 30
        while True:
            try:
                answer = httpx.get(f"http://127.0.0.1:{port}/api/next", timeout=5)
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline
                time.sleep(0.1)
        assert answer.status_code == 200 and answer.json()["progress"]["total"] == len(reviewed.rows)
        server.send_signal(signal.SIGTERM)
        assert server.wait(timeout=20) == 0
    finally:
        stop(server)
    assert server.stderr is not None and "Traceback" not in server.stderr.read()


def test_the_documented_review_commands_run_as_printed(tmp_path: Path) -> None:
    """docs/review.md's page, its import, agreement and estimate, after the page's own first commands (the
    sample scored, a queue drawn)."""
    (tmp_path / "sample_data").symlink_to(SAMPLE)
    env = activated(child_env())
    done = run_shell(block("docs/review.md", "bash", "review sample"), tmp_path, env)
    assert done.returncode == 0, done.stderr[-3000:]

    page = subprocess.Popen(["bash", "-c", block("docs/review.md", "bash", "review serve out/review-queue.parquet")],
                            cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, preexec_fn=death_signal())
    try:
        assert page.stdout is not None
        line = page.stdout.readline()
        assert line.startswith("review page: http://127.0.0.1:"), line + (page.stderr.read() if page.stderr else "")
        url = line.split()[2]
        with httpx.Client(base_url=url, follow_redirects=True, timeout=10) as client:
            assert client.get("/?reviewer=ana").status_code == 200
            first = client.get("/api/next").json()["item"]
            assert client.post("/api/label", json={"index": first["index"], "hallucinated": True}).status_code == 200
    finally:
        os.killpg(page.pid, signal.SIGTERM)
        page.wait(timeout=20)
        stop(page)
    assert page.returncode == 0 and LabelStore(str(tmp_path / "out" / "labels.sqlite"), create=False).labels()

    queue = pl.read_parquet(tmp_path / "out" / "review-queue.parquet").get_column("row_key").to_list()
    pl.DataFrame({"row_key": [first["row_key"], queue[1]], "label_hallucinated": [False, True]}).write_csv(
        tmp_path / "sheet.csv")
    done = run_shell(block("docs/review.md", "bash", "review import sheet.csv"), tmp_path, env)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "imported 2 label(s) of 2 answer(s) by 1 reviewer(s) (bo)" in done.stdout
    assert "ana & bo: 1 answer(s) in common, 0 agreeing" in done.stdout and first["row_key"] in done.stdout
    assert "2 of 2 labelled answer(s) correct the figures" in done.stderr  # one answer labelled by both
