"""The code blocks of the README and the docs pages, for the tests that run them as printed.

A block is read where it is written (an ``--8<--`` include of the docs site is not expanded), so each block
has one home and one test that runs it; tests/docs/test_commands.py holds the list of which test that is. A
docs page's copy of a README section (between :data:`COPY` and its end marker, held equal to the README's by
tests/docs/test_copies.py) is the README's block, not another home.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

from tests.user_shell import user_env

REPO = Path(__file__).resolve().parents[1]
VENV_BIN = REPO / ".venv" / "bin"

#: Languages of blocks that are commands or code a reader runs; ``text`` marks diagrams and synopses.
RUNNABLE = ("bash", "python", "sql")

#: A docs page's copy of the README section ``name``: copied rather than included, so that the page read as a
#: file (on a code host) shows the commands, not an include line.
COPY = re.compile(r"^<!-- copied from README\.md:(?P<name>[\w-]+);[^\n]*-->\n(?P<text>.*?)^<!-- end of the copy -->$",
                  re.DOTALL | re.MULTILINE)
_FENCE = re.compile(r"^```(?P<lang>[^\n`]*)\n(?P<code>.*?)^```[ \t]*$", re.DOTALL | re.MULTILINE)


def code_blocks(page: str) -> list[tuple[str, str]]:
    """``(language, code)`` of every fenced block of ``page`` (a path from the repository root)."""
    text = COPY.sub("", (REPO / page).read_text(encoding="utf-8"))
    return [(m["lang"].strip(), m["code"]) for m in _FENCE.finditer(text)]


def block(page: str, lang: str, needle: str) -> str:
    """The one ``lang`` block of ``page`` that contains ``needle``."""
    found = [code for lang_, code in code_blocks(page) if lang_ == lang and needle in code]
    assert len(found) == 1, f"expected one {lang} block holding {needle!r} in {page}, found {len(found)}"
    return found[0]


def shell_env(**extra: str) -> dict[str, str]:
    """A user's shell (:func:`tests.user_shell.user_env`) whose ``uv run`` finds this project from
    any folder (``UV_PROJECT``), as it would from the repository root."""
    return {**user_env(), "UV_PROJECT": str(REPO), **extra}


def activated(env: dict[str, str]) -> dict[str, str]:
    """``env`` with the project's environment activated (``source .venv/bin/activate``): for commands that
    a block runs inside ``uv run`` or the fake server's wrapper, which call ``faithfulness-pipeline`` bare."""
    return {**env, "PATH": os.pathsep.join([str(VENV_BIN), env.get("PATH", "")]), "VIRTUAL_ENV": str(REPO / ".venv")}


def run_shell(code: str, cwd: Path, env: dict[str, str], timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """Runs a bash block as a reader pastes it, but stopping at the first command that fails."""
    return subprocess.run(["bash", "-c", "set -euo pipefail\n" + code], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout, check=False)


def exported(code: str) -> dict[str, str]:
    """The variables a block of ``export`` lines sets, as bash sets them (quotes and ``$PWD`` resolved)."""
    script = code + '\nfor name in $(compgen -e); do printf "%s=%s\\0" "$name" "${!name}"; done'
    done = subprocess.run(["bash", "-c", script], env={"PATH": os.environ.get("PATH", "")}, cwd="/",
                          capture_output=True, text=True, timeout=30, check=True)
    pairs = (item.split("=", 1) for item in done.stdout.split("\0") if "=" in item)
    names = set(re.findall(r"\b([A-Z][A-Z0-9_]*)=", code))
    return {name: value for name, value in pairs if name in names}
