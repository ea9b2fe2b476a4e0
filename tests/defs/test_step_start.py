"""Where step processes come from: a fork server that has the code location loaded, unless the temporary
folder is too long for its socket path, where steps start as fresh processes and a warning says why."""

from __future__ import annotations

import logging
import multiprocessing
import tempfile
from pathlib import Path

import dagster as dg
import pytest

from faithfulness_pipeline.defs import build_defs


def _executor(monkeypatch: pytest.MonkeyPatch, temp: Path) -> dg.ExecutorDefinition:
    temp.mkdir(parents=True, exist_ok=True)
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    executor = build_defs().resolve_job_def("score_conversations").executor_def
    assert executor is not None
    return executor


@pytest.mark.skipif("forkserver" not in multiprocessing.get_all_start_methods(), reason="no fork server on this OS")
def test_steps_fork_from_a_server_under_a_short_temporary_folder(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING):
        executor = _executor(monkeypatch, Path("/tmp"))
    assert executor is not dg.multiprocess_executor  # the configured fork-server variant
    assert not [r for r in caplog.records if "fork server" in r.getMessage()]


@pytest.mark.skipif("forkserver" not in multiprocessing.get_all_start_methods(), reason="no fork server on this OS")
def test_a_temporary_folder_too_long_for_the_socket_falls_back_to_fresh_processes_and_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    long_temp = tmp_path / ("t" * 80)  # with pymp-XXXXXXXX/listener-XXXXXXXX beyond 107 bytes
    with caplog.at_level(logging.WARNING):
        executor = _executor(monkeypatch, long_temp)
    assert executor is dg.multiprocess_executor
    warned = [r.getMessage() for r in caplog.records if "fork server" in r.getMessage()]
    assert len(warned) == 1 and str(long_temp) in warned[0] and "TMPDIR" in warned[0], warned
