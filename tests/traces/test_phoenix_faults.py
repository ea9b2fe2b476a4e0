"""Phoenix as a remote that misbehaves (issue 52): every way its replies can go wrong ends in one line naming
the endpoint without credentials, within the deadline, after a bounded number of requests — never in a
traceback or a run that does not end. The remote is a real HTTP server on 127.0.0.1 (tests.traces.fault_server)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from faithfulness_pipeline.core.errors import InputError
from faithfulness_pipeline.traces.phoenix import PhoenixClient
from tests.traces.fault_server import Asked, FaultServer, Reply, json_reply

SPANS = "/v1/projects/p/spans"


def run_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """The command line in a child, with ``env`` over ours (``tests.cli.test_cli.run_cli`` drops API keys)."""
    return subprocess.run([sys.executable, "-m", "faithfulness_pipeline.cli", *args], capture_output=True,
                          text=True, env={**os.environ, **(env or {})}, timeout=120, check=False)


def span(n: int, **fields: Any) -> dict[str, Any]:
    item: dict[str, Any] = {
        "context": {"trace_id": f"{n:032x}", "span_id": f"{n:016x}"}, "name": "llm", "span_kind": "LLM",
        "parent_id": None, "start_time": "2026-12-01T10:00:00+00:00",
        "attributes": {"llm": {"output_messages": [{"message": {"role": "assistant", "content": "hi"}}]}},
    }
    return {**item, **fields}


def _deep(levels: int) -> dict[str, Any]:
    """Attributes nested ``levels`` objects deep (past the readers' bound)."""
    value: dict[str, Any] = {"leaf": "x"}
    for _ in range(levels):
        value = {"a": value}
    return value


def refusal(answer: Reply, timeout_s: float = 10.0) -> str:
    """The one line pulling a project's spans from a server that answers ``answer`` ends in."""
    with FaultServer(lambda asked: answer) as server, PhoenixClient(server.url, timeout_s=timeout_s) as client, \
            pytest.raises(InputError) as refused:
        list(client.spans("p", None, None))
    line = str(refused.value)
    assert "\n" not in line and line.startswith(f"Phoenix at {server.url} ")
    return line


@pytest.mark.parametrize(("body", "content_type", "said"), [
    (b"<html><body>Sign in</body></html>", "text/html", "text/html, not JSON"),
    (b"{not json", "application/json", "a body that is not JSON"),
    (b"[1, 2]", "application/json", "a list, not a JSON object"),
    (b"", "application/json", "no body"),
    (b'{"data": {"a": 1}}', "application/json", "whose data is an object"),
    (b'{"data": [], "next_cursor": 7}', "application/json", "next_cursor that is a number"),
])
def test_a_reply_that_is_no_json_object_is_one_line(body: bytes, content_type: str, said: str) -> None:
    assert said in refusal(Reply(200, body, content_type))


@pytest.mark.parametrize(("fields", "said"), [
    ({"start_time": 1764583200}, "start_time is a number"),
    ({"start_time": "yesterday"}, "start_time 'yesterday' is no ISO time"),
    ({"context": "0123"}, "context is text"),
    ({"context": {"trace_id": 5, "span_id": "a"}}, "context has a trace_id or span_id that is not text"),
    ({"attributes": ["x"]}, "attributes is a list"),
    ({"attributes": _deep(100)}, "nests deeper than"),
])
def test_a_span_field_of_the_wrong_type_is_one_line(fields: dict[str, Any], said: str) -> None:
    line = refusal(json_reply({"data": [span(1), span(2, **fields)], "next_cursor": None}))
    assert said in line and f"page 1 of GET {SPANS}" in line


def test_a_redirect_to_another_port_is_not_followed_and_the_same_origin_is() -> None:
    with FaultServer(lambda asked: json_reply({"data": [span(1)], "next_cursor": None})) as elsewhere:
        line = refusal(Reply(307, headers={"Location": f"{elsewhere.url}{SPANS}"}, content_type=None))
        assert f"to {elsewhere.url}{SPANS}, another origin, which is not followed" in line
        assert not elsewhere.asked  # nothing, the key least of all, went to the other port

    def moved(asked: Asked) -> Reply:
        if asked.path == SPANS:
            return Reply(307, headers={"Location": "/moved/spans?limit=1000"}, content_type=None)
        return json_reply({"data": [span(1)], "next_cursor": None})

    with FaultServer(moved) as server, PhoenixClient(server.url) as client:
        assert [len(p) for p in client.spans("p", None, None)] == [1]
        assert [a.path for a in server.asked] == [SPANS, "/moved/spans"]


def test_a_reply_trickled_into_its_headers_ends_at_the_whole_request_deadline() -> None:
    # httpx reads a status line and headers with a per-read timeout only: a byte each 0.2 s never trips it
    started = time.monotonic()
    line = refusal(Reply(200, b'{"data": [], "next_cursor": null}', trickle_s=0.2, trickle_head=True), timeout_s=1.0)
    assert "did not answer GET" in line and "within 1 s" in line
    assert time.monotonic() - started < 8  # the head alone takes 14 s to trickle


def test_a_trickled_reply_ends_at_the_whole_request_deadline() -> None:
    started = time.monotonic()
    line = refusal(Reply(200, b'{"data": [], "next_cursor": null}' * 4, trickle_s=0.1), timeout_s=1.0)
    assert "did not answer GET" in line and "within 1 s" in line
    assert time.monotonic() - started < 3  # a per-read timeout would have waited the whole 13 s


def test_a_cursor_that_never_changes_stops_on_the_second_page() -> None:
    with FaultServer(lambda asked: json_reply({"data": [span(1)], "next_cursor": "same"})) as server, \
            PhoenixClient(server.url) as client, pytest.raises(InputError) as refused:
        list(client.spans("p", None, None))
    assert "gave the cursor 'same' of GET" in str(refused.value) and "stopped after 2 pages" in str(refused.value)
    assert len(server.asked) == 2


def test_the_cli_refuses_a_phoenix_that_sends_html_in_one_line_without_the_credentials(tmp_path: Path) -> None:
    echo = "<html>Authorization: Basic YWRtaW46czNjcmV0LXB3 Bearer s3cret-key api_key=s3cret-key</html>"
    with FaultServer(lambda asked: Reply(200, echo.encode(), "text/html")) as server:
        source = f"phoenix+http://admin:s3cret-pw@{server.url.removeprefix('http://')}/projects/p?api_key=s3cret-q"
        result = run_cli("score", source, "-o", str(tmp_path / "o.parquet"), env={"PHOENIX_API_KEY": "s3cret-key"})
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr and "s3cret" not in result.stderr
    assert f"Phoenix at {server.url} answered GET {SPANS} with text/html" in result.stderr.strip().splitlines()[-1]
