"""The review page's HTTP side, in process (starlette's test client): blind until the reviewer has labelled an
answer, each reviewer seeing only their own labels; every label in the store when the answer returns; undo;
the token, the host and the origin a request must have; errors as one plain line, with no traceback and no
password, the store gone included."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from faithfulness_pipeline.review.app import build_app
from faithfulness_pipeline.review.items import JUDGED, read_items, read_queue
from faithfulness_pipeline.review.session import ReviewSession
from faithfulness_pipeline.review.store import LabelStore
from faithfulness_pipeline.settings.scoring import ScoringSettings
from tests.postgres_cluster import PASSWORD, Cluster
from tests.review.conftest import HOSTILE_ANSWER, Reviewed

LOCAL = "http://127.0.0.1:8000"
TOKEN = "a-token-of-twenty-chars"


def _session(reviewed: Reviewed, store: str) -> ReviewSession:
    items = read_items(read_queue([str(reviewed.queue)]), [str(reviewed.scored)], [], ScoringSettings())
    return ReviewSession(items, LabelStore(store))


@pytest.fixture
def session(reviewed: Reviewed, tmp_path: Path) -> Iterator[ReviewSession]:
    made = _session(reviewed, str(tmp_path / "labels.sqlite"))
    yield made
    made.store.close()


def _client(session: ReviewSession, **kwargs: Any) -> TestClient:
    return TestClient(build_app(session, **kwargs), base_url=LOCAL, raise_server_exceptions=False,
                      follow_redirects=False)


def _judge_texts(reviewed: Reviewed, row_key: str) -> list[str]:
    """What the judge said of an answer, word for word: none of it may be on the page before a label."""
    row = reviewed.rows.filter(reviewed.rows.get_column("row_key") == row_key).row(0, named=True)
    texts = [row["hallucination_reason"], *(v["reason"] for v in row["verdicts"])]
    return [t for t in texts if t]


def _as(client: TestClient, reviewer: str) -> TestClient:
    assert client.get(f"/?reviewer={reviewer}").status_code == 303
    return client


def test_blind_until_labelled_and_each_reviewer_sees_only_their_own(session: ReviewSession,
                                                                     reviewed: Reviewed) -> None:
    ana, bo = _as(_client(session), "ana"), _as(_client(session), "보라")
    page = ana.get("/")
    assert page.status_code == 200 and page.headers["cache-control"] == "no-store"
    assert "script-src 'nonce-" in page.headers["content-security-policy"]
    first = ana.get("/api/next").json()
    key = first["item"]["row_key"]
    secrets_of_the_judge = _judge_texts(reviewed, key)
    assert secrets_of_the_judge
    for text in (page.text, json.dumps(first, ensure_ascii=False)):
        assert not any(said in text for said in secrets_of_the_judge)
    assert first["judge"] is None and first["label"] is None
    # the claims' texts are what the reviewer marks; nothing the judge said of them is there
    assert not set(first["item"]) & (set(JUDGED) - {"claims"}) and "hallucination" not in json.dumps(first["item"])

    labelled = ana.post("/api/label", json={"index": first["item"]["index"], "hallucinated": True,
                                            "claims": [{"claim_index": 0, "verdict": "contradicted"}]})
    assert labelled.status_code == 200
    shown = labelled.json()
    assert shown["label"]["hallucinated"] is True and shown["label"]["faithfulness"] == 0.0
    assert shown["judge"]["verdicts"] and all(said in labelled.text for said in secrets_of_the_judge)
    assert shown["progress"]["labelled"] == 1 and shown["progress"]["total"] == session.total
    assert session.store.of_reviewer("ana")[key].content_hash == first["item"]["content_hash"]

    theirs = bo.get(f"/api/item?index={first['item']['index']}").json()  # bo has not labelled it: blind
    assert theirs["judge"] is None and theirs["label"] is None and theirs["progress"]["labelled"] == 0
    assert bo.get("/api/next").json()["item"]["row_key"] == key  # ana's label is not bo's
    assert ana.get("/api/next").json()["item"]["row_key"] != key

    bo.post("/api/label", json={"index": first["item"]["index"], "hallucinated": False, "claims": []})
    agreement = bo.get("/api/progress").json()["agreement"]
    assert agreement == [{"reviewer": "ana", "answers": 1, "agreeing": 0, "kappa": 0.0}]


def test_undo_takes_the_latest_label_out_of_the_store(session: ReviewSession) -> None:
    ana = _as(_client(session), "ana")
    assert ana.post("/api/undo", json={}).status_code == 409
    for index in (0, 1):
        assert ana.post("/api/label", json={"index": index, "hallucinated": index == 1}).status_code == 200
    undone = ana.post("/api/undo", json={}).json()
    assert undone["undone"] and undone["item"]["index"] == 1 and undone["judge"] is None  # blind again
    assert set(session.store.of_reviewer("ana")) == {session.items[0].row_key}
    assert ana.get("/api/next").json()["item"]["index"] == 1


def test_requests_the_review_cannot_take_are_one_line(session: ReviewSession) -> None:
    nameless = _client(session)
    assert "name yourself first" in nameless.get("/api/next").json()["error"]
    assert 'name="reviewer"' in nameless.get("/").text  # the page asks for a name
    ana = _as(_client(session), "ana")
    for body in ({"index": 999, "hallucinated": True}, {"index": 0, "hallucinated": "yes"},
                 {"index": 0, "hallucinated": True, "claims": [{"claim_index": 99, "verdict": "supported"}]},
                 {"index": 0, "hallucinated": True, "claims": [{"claim_index": 0, "verdict": "maybe"}]}):
        refused = ana.post("/api/label", json=body)
        assert refused.status_code == 400 and refused.json()["error"], body
    assert ana.post("/api/label", content=b"{", headers={"content-type": "application/json"}).status_code == 400
    assert session.store.labels() == []
    assert _client(session).get("/?reviewer=%01bad").status_code == 400


def test_a_token_guards_every_request_and_the_host_and_origin_are_checked(session: ReviewSession) -> None:
    guarded = _client(session, token=TOKEN, host="0.0.0.0")
    for path in ("/", "/api/next", "/?reviewer=ana"):
        refused = guarded.get(path)
        assert refused.status_code == 403 and refused.headers["content-type"].startswith("text/plain")
    assert guarded.get("/", headers={"x-review-token": "wrong-token-of-twenty"}).status_code == 403
    opened = guarded.get(f"/?token={TOKEN}&reviewer=ana")
    assert opened.status_code == 303 and opened.headers["location"] == "/"  # the token leaves the address
    assert guarded.get("/").status_code == 200 and guarded.get("/api/next").status_code == 200  # now by cookie
    headers = {"x-review-token": TOKEN}
    assert TestClient(build_app(session, token=TOKEN), base_url="http://192.0.2.7:9000").get(
        "/", headers=headers).status_code == 200  # with a token any host name will do

    local = _as(_client(session), "ana")
    assert local.get("/", headers={"host": "rebound.example:8000"}).status_code == 403  # DNS rebinding
    assert local.post("/api/label", content=b'{"index": 0, "hallucinated": true}',
                      headers={"content-type": "text/plain"}).status_code == 415
    assert local.post("/api/label", json={"index": 0, "hallucinated": True},
                      headers={"origin": "http://elsewhere.example"}).status_code == 403
    assert session.store.labels() == []


def test_hostile_text_stays_text_in_the_page(session: ReviewSession) -> None:
    ana = _as(_client(session), "ana")
    at = next(item.index for item in session.items if item.answer == HOSTILE_ANSWER)
    for earlier in range(at):
        ana.post("/api/label", json={"index": earlier, "hallucinated": False})
    page = ana.get("/").text
    assert "window.__pwned" in page and "</script><script>window.__pwned" not in page  # escaped in its JSON


def test_an_error_is_one_plain_line_without_traceback_or_password(
        reviewed: Reviewed, postgres: Cluster, caplog: pytest.LogCaptureFixture,
        monkeypatch: pytest.MonkeyPatch) -> None:
    postgres.psql("CREATE DATABASE review_gone")
    session = _session(reviewed, postgres.url(database="review_gone"))
    ana = _as(_client(session), "ana")
    assert ana.post("/api/label", json={"index": 0, "hallucinated": True}).status_code == 200
    postgres.psql("DROP DATABASE review_gone WITH (FORCE)", database="postgres")
    with caplog.at_level(logging.ERROR):
        failed = ana.post("/api/label", json={"index": 1, "hallucinated": True})
    assert failed.status_code == 503 and "not saved" in failed.json()["error"]
    assert PASSWORD not in failed.text and PASSWORD not in caplog.text and "review_gone" in caplog.text

    def broken(*args: object) -> None:
        raise RuntimeError(f"boom {PASSWORD} {postgres.url()}")

    monkeypatch.setattr(session, "progress", broken)
    crashed = ana.get("/api/progress")
    assert crashed.status_code == 500 and crashed.text.startswith("internal error")
    assert "Traceback" not in crashed.text and PASSWORD not in crashed.text
    assert PASSWORD not in caplog.text
    session.store.close()
