"""The README's install line on a Python whose distribution manages it (PEP 668: Debian 12, Ubuntu 23.04+,
Homebrew), where ``pip install uv`` into the system's Python is refused: the line must still install uv and
the package, and the demo's command must install no dependency group (no test tooling, no model weights).

The interpreter is made here: a copy of the one running the suite (its binary and standard library, pip as
its only package) with the ``EXTERNALLY-MANAGED`` marker beside its standard library, which is what pip reads.
The project is a copy of its metadata (pyproject.toml, uv.lock, README.md) with the package linked in; uv's
and pip's caches are the user's, as for a reader who ran the line before (a cold cache is BENCHMARKS.md's)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from tests.doc_blocks import REPO, block
from tests.user_shell import user_env

# Parts of the standard library the line never touches: the copy stays small (~80 MB) and quick to make.
_UNUSED = shutil.ignore_patterns("site-packages", "test", "tests", "__pycache__", "idlelib", "tkinter",
                                 "turtledemo", "ensurepip")  # fmt: skip


def _externally_managed_python(dest: Path) -> Path:
    base = Path(sys.base_prefix)
    stdlib = Path(sysconfig.get_path("stdlib", vars={"installed_base": str(base), "base": str(base)}))
    pip = stdlib / "site-packages" / "pip"
    if not pip.is_dir():
        pytest.skip(f"the base interpreter at {base} has no pip to copy (the README asks for pip)")
    executable = Path(getattr(sys, "_base_executable", sys.executable)).resolve()
    (dest / "bin").mkdir(parents=True)
    shutil.copy2(executable, dest / "bin" / executable.name)
    (dest / "bin" / "python3").symlink_to(executable.name)
    copied = dest / stdlib.relative_to(base)
    shutil.copytree(stdlib, copied, ignore=_UNUSED)
    shutil.copytree(pip, copied / "site-packages" / "pip", ignore=shutil.ignore_patterns("__pycache__"))
    (copied / "EXTERNALLY-MANAGED").write_text("[externally-managed]\nError=made by tests/docs/test_install.py\n")
    return dest / "bin"


def _project(dest: Path) -> Path:
    dest.mkdir()
    for name in ("pyproject.toml", "uv.lock", "README.md"):
        shutil.copy2(REPO / name, dest / name)
    (dest / "faithfulness_pipeline").symlink_to(REPO / "faithfulness_pipeline")
    return dest


def _shell(bin_dir: Path) -> dict[str, str]:
    """The user's shell with only the made interpreter and the system's tools on PATH: no uv, no venv."""
    env = {k: v for k, v in user_env().items() if not k.startswith(("UV", "PYTHON"))}
    env["PATH"] = os.pathsep.join([str(bin_dir), "/usr/bin", "/bin"])
    return env


def test_the_demo_install_line_works_on_an_externally_managed_python_and_installs_no_test_tools(
        tmp_path: Path) -> None:  # fmt: skip
    bin_dir = _externally_managed_python(tmp_path / "python")
    project = _project(tmp_path / "project")
    env = _shell(bin_dir)
    refused = subprocess.run(["python3", "-m", "pip", "install", "-q", "uv"], cwd=project, env=env,
                             capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    assert refused.returncode != 0 and "externally-managed-environment" in refused.stderr, refused.stderr

    quickstart = block("README.md", "bash", "faithfulness-pipeline demo")
    demo, suite = (line for line in quickstart.strip().splitlines() if line.startswith("python3"))
    install = demo.removesuffix("faithfulness-pipeline demo")
    assert suite.startswith(install.removesuffix("uv run --frozen "))
    # The line as printed, asking the installed command for its version instead of running the demo (the
    # demo itself runs as printed in tests/defs/test_demo.py).
    done = subprocess.run(["bash", "-c", "set -euo pipefail\n" + install + "faithfulness-pipeline --version"],
                          cwd=project, env=env, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "faithfulness-pipeline, version" in done.stdout
    venv_python = project / ".venv" / "bin" / "python"
    assert Path(os.path.realpath(venv_python)).parent == bin_dir  # the made interpreter, not another one
    probe = "import importlib.util as u; print([m for m in ('pytest', 'xllamacpp', 'selenium') if u.find_spec(m)])"
    found = subprocess.run([str(venv_python), "-c", probe], env=env, capture_output=True, text=True, timeout=60,
                           check=True)  # fmt: skip
    assert found.stdout.strip() == "[]", f"the demo's install brought test tools: {found.stdout}"
