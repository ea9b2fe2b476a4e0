"""The pytest configuration hides only the known dependency warnings: a new warning still shows."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

PROBE = '''
import warnings


def test_warns():
    warnings.warn("InitResourceContext.dagster_run is deprecated and will be removed", DeprecationWarning)
    warnings.warn("Function `JobDefinition.run_request_for_partition` is deprecated and will be removed",
                  DeprecationWarning)
    warnings.warn("Items 'a', 'b' on TypedDict class '_P' are using the `ReadOnly` qualifier. Pydantic will not protect",
                  UserWarning)
    warnings.warn("Item 'a' on TypedDict class 'Q' is using the `ReadOnly` qualifier. Pydantic will not", UserWarning)
    warnings.warn("a brand-new deprecation nobody filtered", DeprecationWarning)
    warnings.warn("InitResourceContext.dagster_run is deprecated, but as a UserWarning", UserWarning)
'''


def test_known_dependency_warnings_are_hidden_and_a_new_one_shows(tmp_path: Path) -> None:
    probe = tmp_path / "test_probe.py"
    probe.write_text(PROBE, encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-c", str(ROOT / "pyproject.toml"), "--rootdir", str(tmp_path),
         "-n", "0", "-p", "no:cacheprovider", str(probe)],
        cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:]
    summary = done.stdout
    assert "2 warnings" in summary, summary
    assert "a brand-new deprecation nobody filtered" in summary
    assert "but as a UserWarning" in summary  # a filter matches its category too, not the text alone
    assert "will be removed" not in summary and "ReadOnly" not in summary  # the known ones are hidden
