"""The README's first command on a fresh clone with an empty package cache: its wall time, what it installs,
and the longest time a terminal shows nothing.

Each side clones this repository into a temporary folder (``--base COMMIT`` checks that commit out for the
"before" side), then runs the quickstart's first command from that clone's README, as printed, on a
pseudo-terminal (uv and pip draw progress only on a terminal), with uv's cache in an empty folder and pip's
cache off. Every chunk of output is timestamped: "longest silence" is the largest gap between two chunks (or
from the start to the first), and the line printed after it says what the silence was.

    .venv/bin/python bench/first_command.py [--base a9ee1dd] [--json out.json]

Downloads come from the package index the machine is configured for; the figures include them.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import pty
import re
import select
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from common import ROOT, machine

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


@dataclass
class Run:
    side: str
    commit: str
    command: str
    code: int
    wall_s: float
    silence_s: float
    after_silence: str
    packages: int
    venv_mb: float
    cache_mb: float


def _first_command(clone: Path) -> str:
    readme = (clone / "README.md").read_text(encoding="utf-8")
    found = [line for line in readme.splitlines() if line.endswith("faithfulness-pipeline demo")]
    if len(found) != 1:
        sys.exit(f"{clone}/README.md: expected one line ending with 'faithfulness-pipeline demo', found {found}")
    return found[0]


def _mb(path: Path) -> float:
    done = subprocess.run(["du", "-sm", str(path)], capture_output=True, text=True, check=False)
    return float(done.stdout.split()[0]) if done.returncode == 0 and done.stdout else 0.0


def _on_terminal(command: str, cwd: Path, env: dict[str, str]) -> tuple[int, float, float, str, str]:
    """Runs ``command`` with a pseudo-terminal as stdout and stderr; returns its exit status, wall time, the
    longest gap between output chunks, the text after that gap, and the whole output."""
    leader, follower = pty.openpty()
    started = time.monotonic()
    proc = subprocess.Popen(["bash", "-c", "set -euo pipefail\n" + command], cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                            stdout=follower, stderr=follower, close_fds=True)  # fmt: skip
    os.close(follower)
    chunks: list[tuple[float, str]] = []
    while True:
        ready, _, _ = select.select([leader], [], [], 1.0)
        if ready:
            try:
                data = os.read(leader, 65536)
            except OSError:  # the terminal closed: every process holding it ended
                break
            if not data:
                break
            chunks.append((time.monotonic(), data.decode("utf-8", "replace")))
        elif proc.poll() is not None:
            break
    code = proc.wait()
    ended = time.monotonic()
    os.close(leader)
    gaps = [(chunks[0][0] - started, chunks[0][1])] if chunks else [(ended - started, "")]
    gaps += [(b[0] - a[0], b[1]) for a, b in itertools.pairwise(chunks)]
    gaps.append((ended - (chunks[-1][0] if chunks else started), "(end)"))
    silence, after = max(gaps, key=lambda gap: gap[0])
    text = _ANSI.sub("", "".join(chunk for _, chunk in chunks))
    after = _ANSI.sub("", after).replace("\r", "\n").strip().splitlines()
    return code, ended - started, silence, after[0][:100] if after else "", text


def run_side(side: str, commit: str | None, work: Path) -> Run:
    clone = work / side / "clone"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
    if commit:
        subprocess.run(["git", "-C", str(clone), "checkout", "-q", commit], check=True)
    head = subprocess.run(["git", "-C", str(clone), "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                          check=True).stdout.strip()  # fmt: skip
    cache = work / side / "uv-cache"
    cache.mkdir()
    skip = ("FP_", "DAGSTER_", "VIRTUAL_ENV", "UV", "PYTEST_")
    env = {k: v for k, v in os.environ.items() if not k.startswith(skip)}
    venv_bin = str(ROOT / ".venv" / "bin")
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if p != venv_bin)
    env.update(UV_CACHE_DIR=str(cache), PIP_NO_CACHE_DIR="1", TERM="xterm")
    command = _first_command(clone)
    code, wall, silence, after, text = _on_terminal(command, clone, env)
    if code != 0:
        print(text[-3000:], file=sys.stderr)
    site = list((clone / ".venv" / "lib").glob("python3*/site-packages"))
    packages = len(list(site[0].glob("*.dist-info"))) if site else 0
    return Run(side, head, command, code, wall, silence, after, packages, _mb(clone / ".venv"), _mb(cache))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base", help="also run the README of this commit (the 'before' side), first")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    runs: list[Run] = []
    with tempfile.TemporaryDirectory(prefix="fp-first-command-") as tmp:
        work = Path(tmp)
        if args.base:
            runs.append(run_side("before", args.base, work))
        runs.append(run_side("after", None, work))
    print(f"`.venv/bin/python bench/first_command.py{' --base ' + args.base if args.base else ''}` — {machine()}\n")
    print("| side | commit | exit | wall s | longest silence s (then) | packages | .venv MB | uv cache MB |")
    print("|---|---|---:|---:|---|---:|---:|---:|")
    for r in runs:
        print(f"| {r.side} | {r.commit} | {r.code} | {r.wall_s:.1f} | {r.silence_s:.1f} ({r.after_silence}) | "
              f"{r.packages} | {r.venv_mb:.0f} | {r.cache_mb:.0f} |")
    for r in runs:
        print(f"\n{r.side}: `{r.command}`")
    if args.json:
        args.json.write_text(json.dumps([asdict(r) for r in runs], indent=2), encoding="utf-8")


if __name__ == "__main__":
    main()
