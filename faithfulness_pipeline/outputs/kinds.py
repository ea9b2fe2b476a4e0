"""What an output is: the kinds of entry in the list of outputs (``outputs.catalog``).

Every output is made of the scored rows of a run (the command line's) or of a day (the Dagster assets').
How it is made from them decides its kind:

- :class:`ChunkTable`: a table built from each scored chunk on its own (the scored table, the claim table):
  it streams, whatever the run's size;
- :class:`DayTable`: a table built from a day's scored rows together, a few light columns of them
  (the daily aggregates, the model comparison);
- :class:`ChunkLines`: JSON Lines built from each scored chunk (the Mastra export);
- :class:`Sent`: what leaves for another system rather than into a table (evaluation events to an OTLP
  endpoint, annotations to Phoenix), enabled by the settings that name that system.

An entry says what the entry points need and nothing about them: its name, what it holds (the table's and
each column's description: Dagster's column schema, the DuckDB comments and the docs read the same text),
its kinds, its command-line option, whether BI tools get a view of it, which Dagster checks guard it, and the
revision that goes into its code version. The command line (``outputs.run_files``) and the Dagster layer
(``defs.outputs``) make every entry of the list the same way, so a new output is one entry.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import date
from typing import Final

import polars as pl

from faithfulness_pipeline.settings.review import REVIEW_SAMPLE_SIZE
from faithfulness_pipeline.settings.traces import TraceExportSettings

#: The day column of the rows a :class:`DayTable` is built from (a name no user's table has).
DAY: Final = "__fp_day"


@dataclass(frozen=True, slots=True)
class OutputContext:
    """What building an output reads of the settings: the scoring settings' columns and thresholds, and
    where the scored rows' heavy columns live."""

    model_column: str = "model"
    id_column: str = "conversation_id"
    turn_column: str = "turn"
    key_column: str | None = None
    answer_column: str = "output"
    #: The answer's language (no setting names it: the sample data's column, which the comparison reads too).
    language_column: str = "language"
    hallucination_threshold: float = 0.5
    scale: float = 1.0
    #: Columns each day's groups are also compared by (an app or prompt version).
    segment_columns: tuple[str, ...] = ()
    #: The input's passage and chat message columns.
    heavy_columns: tuple[str, ...] = ()
    chunk_rows: int = 50_000
    #: The day of the rows (a warehouse partition); None on the command line, whose rows may span days.
    day: date | None = None
    #: The warehouse's BI views join back what a table leaves to another (the passages and chat messages stay
    #: in raw_conversations, a claim's passage in the scored table's verdicts); the command line's files stand
    #: alone.
    views_join: bool = False
    #: The command line's day of a row: the date of this column in ``timezone`` where the rows have it, else
    #: of ``scored_at`` (a warehouse's day is its partition's).
    timestamp_column: str = "created_at"
    timezone: str = "UTC"
    #: People's labels, for the outputs that correct the judge's figures (:attr:`DayTable.labelled`): the label
    #: tables as given (``core.corrected.keyed_labels`` ties them to rows), and the scored rows of the days before
    #: whose answers they label (the labels a group with too few of its own may borrow); None: no labels.
    labels: pl.DataFrame | None = None
    labelled_before: pl.DataFrame | None = None
    min_labels: int = 10
    #: Rows of the audit sample people label: of the day in the warehouse, of the run on the command line.
    review_sample_size: int = REVIEW_SAMPLE_SIZE


@dataclass(frozen=True, kw_only=True, eq=False)
class Output:
    """What every output declares. An entry is itself, compared and hashed by identity: the list holds each once."""

    name: str
    #: What one row of the output is, in a sentence or two.
    description: str
    #: Column -> what it holds; a column of the user's own has none.
    columns: Mapping[str, str] = field(default_factory=dict)
    #: Dagster kinds beside the table format's own name.
    kinds: frozenset[str] = frozenset()
    #: The command line's option naming where it goes (None: the command line does not offer it).
    option: str | None = None
    #: Its one-letter form, which messages name it by.
    short_option: str | None = None
    #: The option's help.
    option_help: str = ""
    #: Bumped when the output's own code changes what it holds; part of its Dagster code version.
    revision: str = "1"

    def describe(self, column: str) -> str | None:
        return self.columns.get(column)


@dataclass(frozen=True, kw_only=True, eq=False)
class TableOutput(Output):
    """An output that is a table of the warehouse, partitioned by day."""

    #: BI tools get a view of it over every day (``defs.duckdb_views``).
    view: bool = True
    #: Its rows carry their ``day`` column; otherwise the day is the partition's.
    day_in_rows: bool = False
    #: The Dagster checks that guard it, by name (``defs.checks.CHECKS``).
    checks: tuple[str, ...] = ()
    #: The judge produced what it holds: a change of judge makes it stale.
    judged: bool = True


def _nothing(frame: pl.DataFrame) -> Counter[str]:
    return Counter()


@dataclass(frozen=True, kw_only=True, eq=False)
class ChunkTable(TableOutput):
    """A table built from each scored chunk on its own."""

    #: The table of one chunk of scored rows.
    build: Callable[[pl.DataFrame, OutputContext], pl.DataFrame]
    #: The columns of the scored table it reads (None: all of them), given the columns there are.
    reads: Callable[[list[str], OutputContext], list[str] | None] = lambda present, context: None
    #: Counts worth showing, per chunk written (summed over the table: materialisation metadata).
    tally: Callable[[pl.DataFrame], Counter[str]] = _nothing


@dataclass(frozen=True, kw_only=True, eq=False)
class DayTable(TableOutput):
    """A table built from a day's scored rows together: only the few columns it reads are held."""

    #: The columns of the scored table it reads, given the columns there are.
    reads: Callable[[list[str], OutputContext], list[str]]
    #: The table of the rows read, which carry their day in the column :data:`DAY` (Date): one day in
    #: Dagster, every day of the scored table on the command line.
    build: Callable[[pl.DataFrame, OutputContext], pl.DataFrame]
    #: Its columns, for a run without rows.
    schema: Callable[[OutputContext], pl.Schema]
    #: A markdown preview of the table for the Dagster UI (None: none), under the metadata key ``preview_key``.
    preview: Callable[[pl.DataFrame], str] | None = None
    preview_key: str = "preview"
    #: Built from people's labels too (``OutputContext.labels``): it depends on them, and new labels make it
    #: stale.
    labelled: bool = False
    #: A markdown summary of the rows read, for what the table leaves out (None: none), under ``summary_key``.
    summary: Callable[[pl.DataFrame, OutputContext], str] | None = None
    summary_key: str = "summary"


@dataclass(frozen=True, kw_only=True, eq=False)
class ChunkLines(Output):
    """JSON Lines built from each scored chunk."""

    lines: Callable[[pl.DataFrame], Iterator[str]]


@dataclass(frozen=True, slots=True)
class Delivered:
    """A sent output's outcome: its one line, whether something was not delivered, its figures."""

    line: str
    failed: bool
    figures: dict[str, int | str]


@dataclass(frozen=True, kw_only=True, eq=False)
class Sent(Output):
    """Records sent to another system, from the scored rows of a run or a day."""

    #: Whether the settings name the system (the output exists only then).
    enabled: Callable[[TraceExportSettings], bool]
    #: The setting that names the system, as a person sets it (flag and variable).
    named_by: str
    #: What to say when it is not set.
    unset: str
    #: The columns of the scored table it reads, given the columns there are.
    reads: Callable[[list[str]], list[str]]
    #: Sends the records of the scored chunks. What the system refuses or loses is reported in the
    #: :class:`Delivered` (failed), not raised: each system is written to on its own.
    send: Callable[[Iterable[pl.DataFrame], TraceExportSettings, OutputContext], Delivered]
    #: Raises a ConfigError when the settings (a URL that is no http(s) one) or the scored table's columns
    #: (no span ids: the input was no traces) rule sending out: run before the first judge request is paid
    #: for, and in a dry run.
    check: Callable[[list[str], TraceExportSettings], None] = lambda columns, traces: None
