"""Output paths are checked before the first request and the outputs of a run are committed together.

Refused before anything is paid for (exit 2, one line, nothing touched): an output naming an existing
folder, two outputs naming one file, an output naming an input file. An output that cannot be written
(a file where its folder should be, a file-size limit reached while writing) is one line naming the path
and the OS error, exit 1, and leaves every earlier output as it was: all outputs are replaced, or none.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import polars as pl
import pytest

from faithfulness_pipeline.tables import output_files
from faithfulness_pipeline.tables.output_files import OutputError, committed_together
from faithfulness_pipeline.testing.fakellm import FakeLLMServer
from faithfulness_pipeline.testing.scripted import ScriptedJudge
from tests.reliability.support import child_env, short_rows

KEY = "sk-outputs-0c1d2e3f4a5b6c7d"


@pytest.fixture(scope="module")
def server() -> Iterator[FakeLLMServer]:
    with FakeLLMServer(ScriptedJudge(), api_key=KEY) as srv:
        yield srv


def _score(src: Path, *args: str, server: FakeLLMServer | None = None, fsize: int | None = None,
           ) -> subprocess.CompletedProcess[str]:
    judge = [] if server is None else ["--model", "openai/fake-judge", "--api-base", server.base_url,
                                       "--api-key-env", "FP_OUT_KEY", "--timeout", "5"]  # fmt: skip

    def limit() -> None:  # in the child only: the test process keeps its own limits
        if fsize is not None:
            resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))

    return subprocess.run(
        [sys.executable, "-m", "faithfulness_pipeline.cli", "score", str(src), *args, *judge, "--quiet"],
        capture_output=True, text=True, env=child_env(FP_OUT_KEY=KEY), timeout=300, check=False, preexec_fn=limit,
    )  # fmt: skip


def _one_line_error(done: subprocess.CompletedProcess[str], status: int, *words: str) -> None:
    assert done.returncode == status, done.stderr
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr
    assert all(w in lines[0] for w in words), (words, lines[0])


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


@pytest.mark.parametrize(
    "case", ["output is a folder", "claims-out is a folder", "claims-out = -o", "mastra-out = claims-out",
             "-o = the input", "mastra-out = an input of a folder", "-o = the input by another spelling"],
)  # fmt: skip
def test_bad_output_paths_are_refused_before_any_request(case: str, server: FakeLLMServer, tmp_path: Path) -> None:
    inputs = tmp_path / "in"
    inputs.mkdir()
    src = inputs / "rows.parquet"
    short_rows(30).write_parquet(src)
    out = tmp_path / "out"
    out.mkdir()
    (out / "claims.parquet").write_bytes(b"the claims of an earlier run")
    (out / "folder").mkdir()
    scored, claims = str(out / "scored.parquet"), str(out / "claims.parquet")
    args, words = {
        "output is a folder": (["-o", str(out / "folder")], ["-o", "folder"]),
        "claims-out is a folder": (["-o", scored, "--claims-out", str(out / "folder")], ["--claims-out", "folder"]),
        "claims-out = -o": (["-o", claims, "--claims-out", claims], ["--claims-out", "-o", "claims.parquet"]),
        "mastra-out = claims-out": (["-o", scored, "--claims-out", claims, "--mastra-out", claims],
                                    ["--mastra-out", "--claims-out"]),
        "-o = the input": (["-o", str(src)], ["-o", "input"]),
        "mastra-out = an input of a folder": (["-o", scored, "--mastra-out", str(src)], ["--mastra-out", "input"]),
        "-o = the input by another spelling": (["-o", str(inputs / ".." / "in" / "rows.parquet")], ["-o", "input"]),
    }[case]  # fmt: skip
    before_in, before_out = _snapshot(inputs), _snapshot(out)
    requests = server.stats().requests
    done = _score(inputs if "folder" in case and "input" in case else src, *args, server=server)
    _one_line_error(done, 2, *words)
    assert server.stats().requests == requests  # nothing was paid for
    assert _snapshot(inputs) == before_in and _snapshot(out) == before_out  # nothing was touched


def test_a_file_in_the_way_of_the_output_folder_is_one_line(tmp_path: Path) -> None:
    src = tmp_path / "in.parquet"
    short_rows(10).write_parquet(src)
    (tmp_path / "blocker").write_text("not a folder")
    done = _score(src, "-o", str(tmp_path / "blocker" / "deeper" / "scored.parquet"))
    _one_line_error(done, 1, "-o", "blocker", "a file is in the way")


def test_refused_runs_create_no_output_folder(tmp_path: Path) -> None:
    """Checking the outputs creates nothing: a run refused after the check (here: its API key is not set)
    leaves no empty output folder behind."""
    src = tmp_path / "in.parquet"
    short_rows(3).write_parquet(src)
    done = _score(src, "-o", str(tmp_path / "new" / "folder" / "scored.parquet"), "--model", "openai/fake-judge",
                  "--api-key-env", "FP_NOT_SET_ANYWHERE")  # fmt: skip
    assert done.returncode == 2 and "FP_NOT_SET_ANYWHERE" in done.stderr, done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.parquet"]


def test_a_file_size_limit_while_writing_leaves_every_output_as_it_was(tmp_path: Path) -> None:
    """A limit reached while writing (the same path as a full disk: an OSError from a write) is one line
    naming the output and the error; the earlier run's three outputs stay untouched, no temporary stays."""
    src = tmp_path / "in.parquet"
    short_rows(2000).write_parquet(src)
    out = tmp_path / "out"
    outputs = ["-o", str(out / "scored.parquet"), "--claims-out", str(out / "claims.parquet"),
               "--mastra-out", str(out / "mastra.jsonl")]  # fmt: skip
    first = _score(short_rows(5).write_parquet(tmp_path / "small.parquet") or tmp_path / "small.parquet", *outputs)
    assert first.returncode == 0, first.stderr
    before = _snapshot(out)
    assert len(before) == 3
    done = _score(src, *outputs, fsize=256 * 1024)
    _one_line_error(done, 1, "File too large", "nothing was written")
    assert any(o in done.stderr for o in ("-o", "--claims-out", "--mastra-out"))
    assert _snapshot(out) == before  # all or none: none
    assert sorted(p.name for p in out.iterdir()) == ["claims.parquet", "mastra.jsonl", "scored.parquet"]


def test_a_folder_made_in_the_way_during_the_run_changes_nothing(tmp_path: Path) -> None:
    first, second = tmp_path / "a.parquet", tmp_path / "b.jsonl"
    first.write_text("old a")

    def run() -> None:
        with committed_together({"-o": str(first), "--x": str(second)}) as tmps:
            tmps["-o"].write_text("new a")
            tmps["--x"].write_text("new b")
            second.mkdir()  # appears after the run began
            (second / "keep").write_text("x")

    with pytest.raises(OutputError, match=r"b\.jsonl"):
        run()
    assert first.read_text() == "old a" and (second / "keep").read_text() == "x"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.parquet", "b.jsonl"]


def test_a_failure_halfway_through_the_commit_puts_the_old_outputs_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The OS refuses the third rename (after the first output was moved in): the old files come back."""
    first, second = tmp_path / "a.parquet", tmp_path / "b.jsonl"
    first.write_text("old a")
    second.write_text("old b")
    real_replace, calls = os.replace, []

    def failing_replace(src: os.PathLike[str], dst: os.PathLike[str]) -> None:
        calls.append(dst)
        if len(calls) == 4:  # a aside, a in, b aside, b in: the last one fails
            raise OSError(28, "No space left on device", str(src))
        real_replace(src, dst)

    monkeypatch.setattr(output_files.os, "replace", failing_replace)

    def run() -> None:
        with committed_together({"-o": str(first), "--x": str(second)}) as tmps:
            tmps["-o"].write_text("new a")
            tmps["--x"].write_text("new b")

    with pytest.raises(OutputError, match="No space left"):
        run()
    monkeypatch.undo()
    assert first.read_text() == "old a" and second.read_text() == "old b"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.parquet", "b.jsonl"]


def test_outputs_appear_together_when_the_run_succeeds(tmp_path: Path) -> None:
    targets = {"-o": str(tmp_path / "s.parquet"), "--claims-out": str(tmp_path / "c.parquet")}
    Path(targets["-o"]).write_text("old")
    with committed_together(targets) as tmps:
        pl.DataFrame({"x": ["한국어", "中文"]}).write_parquet(tmps["-o"])
        pl.DataFrame({"y": [1]}).write_parquet(tmps["--claims-out"])
        assert not Path(targets["--claims-out"]).exists() and Path(targets["-o"]).read_text() == "old"
    assert pl.read_parquet(targets["-o"]).get_column("x").to_list() == ["한국어", "中文"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.parquet", "s.parquet"]


def test_a_folder_that_refuses_writes_is_one_line_before_any_row(tmp_path: Path) -> None:
    """Root ignores permission bits, so a read-only folder is hard to make in a test; sysfs refuses new
    files even to root. Skipped where it does not."""
    probe = Path("/sys/fp-write-probe")
    try:
        probe.touch()
    except OSError:
        pass
    else:
        probe.unlink()
        pytest.skip("/sys accepts new files here: no folder that refuses writes to test with")
    src = tmp_path / "in.parquet"
    short_rows(5).write_parquet(src)
    done = _score(src, "-o", "/sys/scored.parquet", "--claims-out", str(tmp_path / "claims.parquet"))
    _one_line_error(done, 1, "-o", "/sys/scored.parquet")
    assert not (tmp_path / "claims.parquet").exists()  # checked before any output is started
