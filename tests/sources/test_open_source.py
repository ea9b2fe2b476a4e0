"""``open_source`` picks the kind of source by what it is given (a frame, a span frame, a Parquet file, a
folder of JSON Lines and CSV, a glob, an OTLP export, a Phoenix project, a landing day); a source's chunks
are read anew at each pass, and the folder it staged span exports in is gone once it is closed. Real files
in tmp_path; a Phoenix project without a server (its pages of spans come from an export file)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, date, datetime
from pathlib import Path

import pandas as pd
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from faithfulness_pipeline.core.errors import InputError
from faithfulness_pipeline.sources import phoenix as phoenix_source
from faithfulness_pipeline.sources.files import FilePart
from faithfulness_pipeline.sources.frames import FramePart
from faithfulness_pipeline.sources.landing import DayPart, LandingDay
from faithfulness_pipeline.sources.open import open_source
from faithfulness_pipeline.sources.source import Part, Source
from faithfulness_pipeline.traces.spans import Span, otlp_spans
from tests.cli.test_cli import run_cli
from tests.traces.otlp_files import oi_llm, oi_retriever, request, span, write_export


def _rows(n: int, start: int = 0) -> pl.DataFrame:
    return pl.DataFrame({
        "conversation_id": [f"c{i}" for i in range(start, start + n)],
        "output": [f"The river is {i} metres wide." for i in range(start, start + n)],
        "context": [[f"The river is {i} metres wide."] for i in range(start, start + n)],
    })


def _ids(source: Source[Part]) -> list[str]:
    return [key for chunk in source.chunks() for key in chunk.get_column("conversation_id").to_list()]


def _export(path: Path, packed: bool = False) -> Path:
    """Two traces, each a retriever and an LLM span after it."""
    traces = []
    for n, trace in enumerate(("a" * 32, "b" * 32)):
        traces += [span(trace, f"{n}{'1' * 15}", "retrieve", oi_retriever(f"Passage {n}."), 0.0),
                   span(trace, f"{n}{'2' * 15}", "llm", oi_llm(f"Question {n}?", f"Answer {n}."), 1.0)]
    return write_export(path, [request(traces)], packed)


def test_a_polars_pandas_or_arrow_frame_is_one_part_of_its_rows() -> None:
    frame = _rows(5)
    for given in (frame, frame.to_pandas(), frame.to_arrow(), frame.to_arrow().to_batches()[0]):
        with open_source(given, rows=2) as source:
            assert [type(p) for p in source.parts] == [FramePart] and source.parts[0].name == "frame"
            assert [c.height for c in source.chunks()] == [2, 2, 1]
            assert _ids(source) == [f"c{i}" for i in range(5)]
            assert source.row_count() == 5 and source.files == [] and source.spans is None and source.notes == []


def test_a_pandas_index_with_a_name_stays_a_column() -> None:
    indexed = pd.DataFrame({"output": ["x", "y"]}, index=pd.Index(["k1", "k2"], name="conversation_id"))
    with open_source(indexed, rows=10) as source:
        assert _ids(source) == ["k1", "k2"]


def test_an_object_that_is_no_table_is_refused_in_one_line() -> None:
    with pytest.raises(InputError, match=r"cannot score a builtins\.list: give a polars or pandas DataFrame"):
        open_source([{"output": "x"}], rows=10)


def test_a_frame_of_spans_becomes_its_conversation_rows() -> None:
    frame = pl.DataFrame({
        "context.trace_id": ["4" * 32, "4" * 32, "4" * 32], "context.span_id": ["4" * 16, "5" * 16, "6" * 16],
        "parent_id": [None, "4" * 16, "4" * 16], "name": ["retriever", "llm", "http"],
        "span_kind": ["RETRIEVER", "LLM", "UNKNOWN"],
        "start_time": ["2025-12-05T00:00:00+00:00", "2025-12-05T00:00:01+00:00", "2025-12-05T00:00:02+00:00"],
        "attributes": [
            json.dumps({"openinference": {"span": {"kind": "RETRIEVER"}},
                        "retrieval": {"documents": [{"document": {"content": "Busan is a port city."}}]}}),
            json.dumps({"openinference": {"span": {"kind": "LLM"}}, "llm": {"model_name": "m1",
                                "input_messages": [{"message": {"role": "user", "content": "What is Busan?"}}],
                                "output_messages": [{"message": {"role": "assistant", "content": "A port city."}}]}}),
            json.dumps({"http": {"method": "GET"}}),
        ],
    })
    with open_source(frame, rows=10) as source:
        (chunk,) = list(source.chunks())
        assert chunk.height == 1 and chunk.get_column("output").to_list() == ["A port city."]
        assert chunk.get_column("context").to_list() == [["Busan is a port city."]]
        assert source.spans is not None and (source.spans.spans, source.spans.llm, source.spans.other) == (3, 1, 1)
        assert "1 LLM span(s) became rows" in source.notes[0]
        assert source.row_count() == 1 and source.files == []


def test_a_parquet_file_is_read_a_row_group_at_a_time_and_anew_at_each_pass(tmp_path: Path) -> None:
    path = tmp_path / "day.parquet"
    pq.write_table(_rows(7).to_arrow(), path, row_group_size=4)
    with open_source(str(path), rows=3) as source:
        assert [type(p) for p in source.parts] == [FilePart] and source.parts[0].name == str(path)
        assert source.parts[0].schema() == _rows(1).schema
        assert [c.height for c in source.chunks()] == [3, 3, 1]
        first = _ids(source)
        assert first == [f"c{i}" for i in range(7)] and _ids(source) == first  # a second pass reads it all again
        passes = source.chunks(), source.chunks()  # two passes at once, each from its own start
        assert [next(passes[0]).height, next(passes[1]).height, next(passes[0]).height] == [3, 3, 3]
        assert source.row_count() == 7 and source.files == [str(path)] and source.spans is None
    with open_source(path, rows=3) as by_path:  # a Path names the same file
        assert _ids(by_path) == first


def test_a_folder_of_json_lines_and_csv_is_a_part_per_file_each_with_its_columns(tmp_path: Path) -> None:
    folder = tmp_path / "in"
    (folder / "sub").mkdir(parents=True)
    _rows(3).write_ndjson(folder / "a.jsonl")
    _rows(2, start=3).select("conversation_id", "output").with_columns(pl.lit("m1").alias("model")).write_csv(
        folder / "sub" / "b.csv")
    (folder / "notes.txt").write_text("not an input")
    with open_source(str(folder), rows=10) as source:
        assert [type(p) for p in source.parts] == [FilePart, FilePart]
        assert [Path(p.name).relative_to(folder).as_posix() for p in source.parts] == ["a.jsonl", "sub/b.csv"]
        assert [list(p.schema()) for p in source.parts] == [["conversation_id", "output", "context"],
                                                             ["conversation_id", "output", "model"]]
        assert [c.height for c in source.chunks()] == [3, 2]  # a chunk never spans two files
        assert _ids(source) == [f"c{i}" for i in range(5)] and source.row_count() == 5


def test_csv_key_columns_named_as_text_are_read_as_text(tmp_path: Path) -> None:
    path = tmp_path / "ids.csv"
    path.write_text("conversation_id,output\n7,x\n10,y\n")
    with open_source(str(path), rows=10) as inferred, open_source(str(path), rows=10,
                                                                  text=frozenset({"conversation_id"})) as kept:
        assert inferred.parts[0].schema()["conversation_id"] == pl.Int64
        assert kept.parts[0].schema()["conversation_id"] == pl.String and _ids(kept) == ["7", "10"]


def test_a_glob_names_the_files_it_matches_only(tmp_path: Path) -> None:
    for name, start in (("day-2.parquet", 2), ("day-1.parquet", 0), ("other.parquet", 9)):
        _rows(2, start).write_parquet(tmp_path / name)
    with open_source(str(tmp_path / "day-*.parquet"), rows=10) as source:
        assert [Path(p.name).name for p in source.parts] == ["day-1.parquet", "day-2.parquet"]
        assert _ids(source) == ["c0", "c1", "c2", "c3"]
    with pytest.raises(InputError, match="matches no files"):
        open_source(str(tmp_path / "night-*.parquet"), rows=10)


def test_an_otlp_export_is_staged_in_a_working_folder_gone_after_the_block(tmp_path: Path) -> None:
    export = _export(tmp_path / "traces.jsonl.gz", packed=True)
    table = tmp_path / "more.parquet"
    _rows(1).write_parquet(table)
    work = tmp_path / "work"
    work.mkdir()
    with open_source(str(tmp_path), rows=10, workdir=str(work)) as source:
        staged = Path(source.parts[1].name)
        assert [type(p) for p in source.parts] == [FilePart, FilePart] and source.parts[0].name == str(table)
        assert staged.parent.parent == work and staged.parent.name.startswith("fp-spans-") and staged.exists()
        assert source.files == [str(table), str(staged), str(export)]  # the export too: no output may replace it
        assert source.spans is not None and (source.spans.llm, source.spans.context) == (2, 2)
        assert any("2 LLM span(s) became rows" in line for line in source.notes)
        rows = pl.concat(list(source.chunks()), how="diagonal_relaxed")
        assert rows.height == 3 and sorted(rows.get_column("output").to_list()) == ["Answer 0.", "Answer 1.",
                                                                                    "The river is 0 metres wide."]
        assert source.row_count() == 3
    assert list(work.iterdir()) == []


def test_a_folder_without_span_exports_makes_no_working_folder(tmp_path: Path) -> None:
    _rows(2).write_parquet(tmp_path / "t.parquet")
    work = tmp_path / "work"
    work.mkdir()
    with open_source(str(tmp_path / "t.parquet"), rows=10, workdir=str(work)):
        assert list(work.iterdir()) == []


def test_an_export_that_cannot_be_staged_leaves_no_working_folder(tmp_path: Path) -> None:
    inputs = tmp_path / "in"
    inputs.mkdir()
    _export(inputs / "a.jsonl")
    (inputs / "b.jsonl").write_text(json.dumps(request([])) + "\n[1, 2, 3]\n", encoding="utf-8")
    work = tmp_path / "work"
    work.mkdir()
    with pytest.raises(InputError, match="line 2 is no OTLP trace request"):
        open_source(str(inputs), rows=10, workdir=str(work))
    assert list(work.iterdir()) == []


def test_a_phoenix_project_is_pulled_into_one_staged_table(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    export = _export(tmp_path / "traces.jsonl")
    asked: list[tuple[str, str | None]] = []

    def pages(spec: str, api_key: str | None) -> Iterator[list[Span]]:
        asked.append((spec, api_key))
        yield from otlp_spans(str(export), 2)

    monkeypatch.setattr(phoenix_source, "phoenix_pieces", pages)
    spec = "phoenix+http://127.0.0.1:6006/projects/rag?start=2025-12-05"
    work = tmp_path / "work"
    work.mkdir()
    with open_source(spec, rows=10, workdir=str(work), phoenix_api_key="k") as source:
        assert asked == [(spec, "k")]
        assert [type(p) for p in source.parts] == [FilePart] and Path(source.parts[0].name).parent.parent == work
        (rows,) = list(source.chunks())
        assert sorted(rows.get_column("output").to_list()) == ["Answer 0.", "Answer 1."]
        assert sorted(rows.get_column("trace_id").to_list()) == ["a" * 32, "b" * 32]
        assert source.spans is not None and source.spans.llm == 2
    assert list(work.iterdir()) == []


def test_a_phoenix_spec_without_a_project_is_refused_in_one_line(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    spec = "phoenix+https://phoenix.example:6006/spans"
    with pytest.raises(InputError, match=r"a Phoenix input names its project: phoenix\+http://127\.0\.0\.1:6006/"):
        open_source(spec, rows=10, workdir=str(work))
    assert list(work.iterdir()) == []
    result = run_cli("score", spec, "-o", str(tmp_path / "o.parquet"), "--quiet")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"error: {spec!r}: a Phoenix input names its project: "
        "phoenix+http://127.0.0.1:6006/projects/NAME?start=2026-12-04&end=2026-12-05"
    ]


def test_a_landing_day_is_each_files_rows_of_that_day(tmp_path: Path) -> None:
    landing = tmp_path / "landing"
    landing.mkdir()
    stamps = [datetime(2026, 11, 24, 23, tzinfo=UTC), datetime(2026, 11, 25, 1, tzinfo=UTC),
              datetime(2026, 11, 25, 23, tzinfo=UTC)]
    _rows(3).with_columns(pl.Series("ts", stamps)).write_parquet(landing / "a.parquet")
    _rows(1, start=3).with_columns(pl.Series("ts", stamps[:1])).write_parquet(landing / "b.parquet")
    day = LandingDay(str(landing), date(2026, 11, 25), "ts")
    source = open_source(day, rows=10)
    assert [type(p) for p in source.parts] == [DayPart, DayPart]
    assert [Path(p.file.path).name for p in source.parts] == ["a.parquet", "b.parquet"]
    assert [[*chunk.get_column("conversation_id")] for chunk in source.chunks()] == [["c1", "c2"], []]
    assert source.row_count() is None  # known only by reading the timestamps
    in_seoul = open_source(LandingDay(str(landing), date(2026, 11, 25), "ts", timezone="Asia/Seoul"), rows=10)
    assert _ids(in_seoul) == ["c0", "c1", "c3"]  # 23:00 UTC on the 24th is the 25th in Seoul
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(InputError, match="holds no Parquet, JSON Lines or CSV files yet"):
        open_source(LandingDay(str(empty), date(2026, 11, 25), "ts"), rows=10)


def test_an_arrow_table_of_spans_reads_as_the_polars_one() -> None:
    spans = pa.table({"trace_id": ["7" * 32], "span_id": ["7" * 16], "name": ["chat"], "attributes": [json.dumps(
        {"gen_ai.operation.name": "chat", "gen_ai.output.messages": json.dumps(
            [{"role": "assistant", "parts": [{"type": "text", "content": "Seven."}]}])})]})
    with open_source(spans, rows=10) as source:
        assert source.spans is not None and source.spans.llm == 1
        assert [c.get_column("output").to_list() for c in source.chunks()] == [["Seven."]]
