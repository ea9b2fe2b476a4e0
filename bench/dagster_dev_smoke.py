"""Smoke test of the README's `dagster dev` instructions: start it, ask GraphQL for every asset, stop it.

Run from the repository root: ``python bench/dagster_dev_smoke.py`` (uses a temporary DAGSTER_HOME with a
copy of dagster_home/dagster.yaml and a temporary warehouse; the repository's folders are not touched).
Prints how long the server took to answer and the asset keys it lists; exits 1 if anything is missing.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
EXPECTED = {
    "raw_conversations",
    "extracted_claims",
    "judged_claims",
    "scored_conversations",
    "claim_table",
    "daily_answer_quality",
    "answer_quality_duckdb",
}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return int(response.status)
    except (urllib.error.URLError, OSError):
        return 0


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp) / "dagster_home"
        home.mkdir()
        shutil.copy(REPO / "dagster_home" / "dagster.yaml", home / "dagster.yaml")
        env = {**os.environ, "DAGSTER_HOME": str(home), "FP_WAREHOUSE": str(Path(tmp) / "warehouse")}
        port = _free_port()
        started = time.monotonic()
        proc = subprocess.Popen(
            [str(Path(sys.executable).parent / "dagster"), "dev", "-h", "127.0.0.1", "-p", str(port)],
            cwd=REPO,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        try:
            url = f"http://127.0.0.1:{port}"
            while _status(f"{url}/server_info") != 200:
                if proc.poll() is not None or time.monotonic() - started > 120:
                    print("dagster dev did not come up", file=sys.stderr)
                    return 1
                time.sleep(0.5)
            ready = time.monotonic() - started
            query = json.dumps({"query": "{ assetNodes { assetKey { path } } }"}).encode()
            request = urllib.request.Request(f"{url}/graphql", data=query, headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(request, timeout=30) as response:
                nodes = json.loads(response.read())["data"]["assetNodes"]
            keys = {"/".join(n["assetKey"]["path"]) for n in nodes}
            print(f"dagster dev answered on {url} after {ready:.1f} s; assets: {', '.join(sorted(keys))}")
            missing = EXPECTED - keys
            if missing:
                print(f"missing assets: {sorted(missing)}", file=sys.stderr)
                return 1
            return 0
        finally:
            # dagster dev, its webserver, daemon and code servers share the session started above
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=3)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


if __name__ == "__main__":
    sys.exit(main())
