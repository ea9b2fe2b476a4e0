"""What ``compare --labelled`` adds: the differences of two scorings, or of the groups of one, corrected by
people's labels (``core.corrected.corrected_difference``), as lines beside the judge's own comparison."""

from __future__ import annotations

import polars as pl

from faithfulness_pipeline.core.corrected import EstimateConfig, corrected_difference, keyed_labels, labelled_scores
from faithfulness_pipeline.core.errors import InputError
from faithfulness_pipeline.settings.scoring import ScoringSettings

_HEAD = ("corrected by people's labels (prediction-powered: the judge's error measured on the labelled answers "
         "and taken out; docs/corrected.md):")


def _num(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"


def _values(table: pl.DataFrame, labels: pl.DataFrame, scoring: ScoringSettings,
            config: EstimateConfig) -> pl.DataFrame:
    keyed = keyed_labels(labels, table, id_column=scoring.id_column, turn_column=scoring.turn_column,
                         key_column=scoring.key_column)
    values, _ = labelled_scores(table, keyed, config)
    return values


def _lines(difference: pl.DataFrame, names: tuple[str, str]) -> list[str]:
    out = []
    for row in difference.iter_rows(named=True):
        text = (f"  {row['figure']:<22} {names[0]} {_num(row['baseline'])} ({row['baseline_labels']} labels) -> "
                f"{names[1]} {_num(row['candidate'])} ({row['candidate_labels']} labels)  ")
        if row["difference"] is None:
            out.append(text + "too few labels for an interval")
        else:
            out.append(text + f"difference {row['difference']:+.3f} [{row['low']:+.3f}, {row['high']:+.3f}]: "
                       f"{row['verdict']}")
    return out


def _config(scoring: ScoringSettings) -> EstimateConfig:
    return EstimateConfig(threshold=scoring.hallucination_threshold, scale=scoring.scale)


def corrected_tables(tables: tuple[pl.DataFrame, pl.DataFrame], labels: pl.DataFrame,
                     scoring: ScoringSettings) -> str:
    """The corrected figures of two scorings and their differences, each side corrected by its own labelled
    answers (the labels that tie to its rows)."""
    config = _config(scoring)
    base, cand = (_values(table, labels, scoring, config) for table in tables)
    return "\n".join([_HEAD, *_lines(corrected_difference(base, cand, config), ("baseline", "candidate"))])


def corrected_segments(table: pl.DataFrame, by: str, baseline: str | None, labels: pl.DataFrame,
                       scoring: ScoringSettings) -> str:
    """Each group of ``by`` against the baseline group, corrected by the labelled answers of each group."""
    config = _config(scoring)
    values = _values(table, labels, scoring, config)
    groups = sorted(values.get_column(by).drop_nulls().cast(pl.String).unique().to_list())
    base = baseline if baseline is not None else (groups[0] if groups else None)
    if base is None or base not in groups:
        raise InputError(f"no scored answers of {by} {base!r} to correct against: the groups are {groups}")
    text = pl.col(by).cast(pl.String)
    lines = [_HEAD]
    for group in groups:
        if group == base:
            continue
        lines.append(f"{by}={group} vs {base}")
        lines += _lines(corrected_difference(values.filter(text == base), values.filter(text == group), config),
                        (base, group))
    return "\n".join(lines)
