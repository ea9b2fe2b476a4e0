"""Guards the few private dagster names the package keeps because Dagster has no public way to do the job.

Private modules move between dagster releases without notice, and the places that use them hide a move:
the fork server and defs/preload.py skip a module that does not import, and mypy (``ignore_missing_imports``)
types a vanished name as ``Any``. These tests make such a move fail here, naming the module and the versions.
"""

from __future__ import annotations

import ast
import importlib
import importlib.metadata
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

from faithfulness_pipeline.defs import PRELOAD_MODULES
from faithfulness_pipeline.defs.preload import CHECKED_WITH_DAGSTER, MODULES

PACKAGE = Path(__file__).resolve().parents[2] / "faithfulness_pipeline"
PRIVATE_MODULE = re.compile(r"dagster\._[\w.]*")
INSTALLED = importlib.metadata.version("dagster")
RECHECK = (
    f"installed dagster {INSTALLED}, the private names were checked with dagster {CHECKED_WITH_DAGSTER}. "
    "Re-check each private name against the installed release (move or drop what this file reports): "
    "MODULES and CHECKED_WITH_DAGSTER in faithfulness_pipeline/defs/preload.py, PRELOAD_MODULES in "
    "faithfulness_pipeline/defs/__init__.py, the type-only imports of faithfulness_pipeline/defs/schedules.py"
)


def test_dagster_is_the_version_the_private_names_were_checked_with() -> None:
    assert INSTALLED == CHECKED_WITH_DAGSTER, (
        f"dagster was upgraded: {RECHECK}, then set CHECKED_WITH_DAGSTER = {INSTALLED!r}"
    )


@pytest.mark.parametrize("module", list(dict.fromkeys((*MODULES, *PRELOAD_MODULES))))
def test_every_preload_module_imports(module: str) -> None:
    try:
        importlib.import_module(module)
    except ImportError as exc:
        pytest.fail(f"preload module {module} does not import ({exc}); the fork server would skip it: {RECHECK}")


@dataclass(frozen=True)
class PrivateName:
    path: str
    line: int
    module: str
    name: str | None  # None: the module itself

    def __str__(self) -> str:
        # Also the test id: without the line number, so ids stay put when the file around the name changes.
        return f"{self.path} {self.module}" + (f".{self.name}" if self.name else "")


def _private_names() -> list[PrivateName]:
    """Every private dagster module or name the package refers to: imports, including those only made
    while type checking, and module names in strings (preload lists)."""
    found: list[PrivateName] = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
            where = (str(path.relative_to(PACKAGE.parent)), getattr(node, "lineno", 0))
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                if PRIVATE_MODULE.fullmatch(node.module):
                    found += [PrivateName(*where, node.module, alias.name) for alias in node.names]
                elif node.module == "dagster":
                    found += [PrivateName(*where, "dagster", a.name) for a in node.names if a.name.startswith("_")]
            elif isinstance(node, ast.Import):
                found += [PrivateName(*where, a.name, None) for a in node.names if PRIVATE_MODULE.fullmatch(a.name)]
            elif (
                isinstance(node, ast.Constant) and isinstance(node.value, str) and PRIVATE_MODULE.fullmatch(node.value)
            ):
                found.append(PrivateName(*where, node.value, None))
    return found


@pytest.mark.parametrize("private", _private_names(), ids=str)
def test_every_private_dagster_name_of_the_package_resolves(private: PrivateName) -> None:
    try:
        module = importlib.import_module(private.module)
    except ImportError as exc:
        pytest.fail(f"{private.path}:{private.line}: module {private.module} does not import ({exc}): {RECHECK}")
    if private.name is not None and not hasattr(module, private.name):
        pytest.fail(f"{private.path}:{private.line}: {private.module} has no {private.name}: {RECHECK}")


def test_the_scan_sees_the_known_private_names() -> None:
    """The scan above would pass on nothing if it stopped seeing names: it must at least find these."""
    seen = {(p.module, p.name) for p in _private_names()}
    expected: set[tuple[str, str | None]] = {
        (m, None) for m in (*MODULES, *PRELOAD_MODULES) if m.startswith("dagster._")
    }
    expected.add(("dagster._core.definitions.unresolved_asset_job_definition", "UnresolvedAssetJobDefinition"))
    assert expected <= seen, f"not found by the scan: {sorted(expected - seen, key=str)}"
