"""litellm fetches nothing on its own when our judge imports it, unless the user asks it to."""

from __future__ import annotations

import http.server
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

import pytest

ROOT = Path(__file__).resolve().parents[2]
# Imports litellm the way the judge does (model card, token counter), in a fresh process.
SCRIPT = (
    "from faithfulness_pipeline.judging.llm.card import token_counter\n"
    "assert token_counter('openai/gpt-4o-mini')('hello world') == 2\n"
)


class _PriceMapServer(http.server.BaseHTTPRequestHandler):
    hits: ClassVar[list[str]] = []

    def do_GET(self) -> None:
        type(self).hits.append(self.path)
        self.send_response(404)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def price_map_url() -> Iterator[str]:
    """Where litellm is told its remote price map lives: a local server that counts the fetches."""
    _PriceMapServer.hits = []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _PriceMapServer)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/prices.json"
    finally:
        server.shutdown()
        server.server_close()


def _import_with(env: dict[str, str]) -> None:
    # Only what a user's shell would have: none of the test suite's LITELLM_* settings.
    base = {k: v for k, v in os.environ.items() if not k.startswith(("LITELLM_", "HF_HUB_"))}
    done = subprocess.run([sys.executable, "-c", SCRIPT], cwd=ROOT, env={**base, "PYTHONPATH": str(ROOT), **env},
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]


def test_the_judge_imports_litellm_without_fetching_its_price_map(price_map_url: str) -> None:
    _import_with({"LITELLM_MODEL_COST_MAP_URL": price_map_url})
    assert _PriceMapServer.hits == []


def test_a_user_who_wants_the_newest_price_map_still_gets_it_fetched(price_map_url: str) -> None:
    # The check above could not fail if litellm never fetched from this URL: here it must.
    _import_with({"LITELLM_MODEL_COST_MAP_URL": price_map_url, "LITELLM_OFFLINE_MODE": "false",
                  "LITELLM_LOCAL_MODEL_COST_MAP": "False"})
    assert _PriceMapServer.hits == ["/prices.json"]


# Runs the CLI in this process after noting which thread first looks for litellm (None: nobody did).
_CLI_PROBE = """
import atexit, sys, threading
seen = []
class Probe:
    def find_spec(self, name, path=None, target=None):
        if name == "litellm" and not seen:
            seen.append(threading.current_thread().name)
sys.meta_path.insert(0, Probe())
atexit.register(lambda: print("LITELLM_IMPORTED_ON", seen[0] if seen else None))
from faithfulness_pipeline.cli import main
main(sys.argv[1:])
"""


def _cli_import_thread(*args: str) -> str:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("FP_", "OPENAI_"))}
    done = subprocess.run([sys.executable, "-c", _CLI_PROBE, "score", str(ROOT / "sample_data"), "-o",
                           "/nonexistent/never-written.parquet", *args], cwd=ROOT, env=base, capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.strip().splitlines()[-1]


def test_the_cli_imports_litellm_on_a_worker_thread_only_when_a_model_is_used() -> None:
    # A dry run reads and prepares the input like a real run (and needs neither key nor server).
    assert _cli_import_thread("--model", "openai/gpt-4o-mini", "--dry-run") == "LITELLM_IMPORTED_ON import-litellm"
    assert _cli_import_thread("--dry-run") == "LITELLM_IMPORTED_ON None"
