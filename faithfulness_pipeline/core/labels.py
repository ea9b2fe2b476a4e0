"""Labelled rows: the calibration settings, the label columns and how labels are tied to scored rows.

A labelled table has the row key columns (``row_key``, or the id column and the turn column the scorer
keys rows by) and ``label_hallucinated`` (bool) and/or ``label_faithfulness`` (0-1, share of the answer
supported by the context). Without ``label_hallucinated`` the binary label is ``label_faithfulness < 1``
(anything unsupported counts as hallucinated). Light on purpose (no statistics library): the settings
module imports it for every command.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

import polars as pl

from faithfulness_pipeline.core import schema as S
from faithfulness_pipeline.core.errors import InputError

LABEL_HALLUCINATED: Final = "label_hallucinated"
LABEL_FAITHFULNESS: Final = "label_faithfulness"
LABEL_COLUMNS: Final = (LABEL_HALLUCINATED, LABEL_FAITHFULNESS)
CLAIM: Final = "claim"
LABEL_VERDICT: Final = "label_verdict"
VERDICT_VALUES: Final = ("supported", "contradicted", "unsupported")
#: Which judge a row of a joined table was scored by: the name the caller gave the scored table.
JUDGE: Final = "judge"
_EXAMPLES = 5


# --- labels in ------------------------------------------------------------------------------------------


def check_labels(labels: pl.DataFrame) -> None:
    """One clear error when the labelled table cannot be used: no label column, wrong types, bad values."""
    present = [c for c in LABEL_COLUMNS if c in labels.columns]
    if not present:
        raise InputError(
            f"the labelled table has neither {LABEL_HALLUCINATED!r} (bool) nor {LABEL_FAITHFULNESS!r} (0-1); "
            f"it has {labels.columns[:12]}. Add one of them."
        )
    if LABEL_HALLUCINATED in labels.columns and labels.schema[LABEL_HALLUCINATED] not in (pl.Boolean, pl.Null):
        raise InputError(
            f"{LABEL_HALLUCINATED!r} must be a bool column, got {labels.schema[LABEL_HALLUCINATED]}: write "
            f"true for a hallucinated answer, false otherwise"
        )
    if LABEL_FAITHFULNESS in labels.columns:
        dtype = labels.schema[LABEL_FAITHFULNESS]
        if not (dtype.is_numeric() or dtype == pl.Null):
            raise InputError(f"{LABEL_FAITHFULNESS!r} must be a number in [0, 1], got a {dtype} column")
        values = labels.get_column(LABEL_FAITHFULNESS).cast(pl.Float64)
        bad = labels.filter(values.is_nan() | (values < 0) | (values > 1))
        if bad.height:
            raise InputError(
                f"{LABEL_FAITHFULNESS!r} must lie in [0, 1]; {bad.height} row(s) do not, e.g. "
                f"{bad.get_column(LABEL_FAITHFULNESS).head(_EXAMPLES).to_list()}"
            )


def key_columns(labels: pl.DataFrame, scored: pl.DataFrame, *, id_column: str, turn_column: str,
                key_column: str | None) -> list[str]:
    """The columns that tie a labelled row to its scored row: ``row_key`` when the labels carry it, else the
    scorer's own key columns (the key column, or the id column plus the turn column when both tables have it)."""
    if S.ROW_KEY in labels.columns:
        wanted = [S.ROW_KEY]
    elif key_column is not None:
        wanted = [key_column]
    else:
        wanted = [id_column] + ([turn_column] if turn_column in labels.columns and turn_column in scored.columns
                                else [])
    for table, name in ((labels, "labelled"), (scored, "scored")):
        missing = [c for c in wanted if c not in table.columns]
        if missing:
            raise InputError(
                f"the {name} table lacks the key column(s) {missing} that tie labels to scores; it has "
                f"{table.columns[:12]}. Add {S.ROW_KEY!r} to the labels, or name the key with --id-col / --key-col."
            )
    return wanted


def attach_labels(scored: pl.DataFrame, labels: pl.DataFrame, keys: Sequence[str]) -> pl.DataFrame:
    """The scored rows of the labelled rows, with the label columns (and the labels' grouping columns the
    scored table lacks). Every labelled row must have exactly one scored row: none is dropped silently."""
    check_labels(labels)
    keys = list(keys)
    wanted = [c for c in labels.columns if c not in scored.columns or c in LABEL_COLUMNS or c in keys]
    left = labels.select(wanted).with_columns(pl.col(k).cast(pl.String) for k in keys)
    for table, name in ((left, "labelled"), (scored.select(keys), "scored")):
        repeated = table.filter(pl.struct(keys).is_duplicated()).select(keys).unique()
        if repeated.height:
            raise InputError(
                f"{repeated.height} key(s) appear more than once in the {name} table, e.g. "
                f"{repeated.head(_EXAMPLES).rows()}: each labelled answer needs its own key ({keys})"
            )
    right = scored.drop([c for c in LABEL_COLUMNS if c in scored.columns]).with_columns(
        pl.col(k).cast(pl.String) for k in keys
    )
    joined = left.join(right, on=keys, how="left", coalesce=True, maintain_order="left")
    unscored = joined.filter(pl.col("status").is_null())
    if unscored.height:
        raise InputError(
            f"{unscored.height} labelled row(s) have no row in the scored table, e.g. "
            f"{unscored.select(keys).head(_EXAMPLES).rows()}: score the labelled rows themselves, or check the key "
            f"columns {keys}"
        )
    return joined


def binary_label(frame: pl.DataFrame) -> pl.Expr:
    """``label_hallucinated``, else ``label_faithfulness < 1``; null where the row has no label."""
    if LABEL_HALLUCINATED in frame.columns:
        expr = pl.col(LABEL_HALLUCINATED).cast(pl.Boolean)
        if LABEL_FAITHFULNESS in frame.columns:
            expr = expr.fill_null(pl.col(LABEL_FAITHFULNESS).cast(pl.Float64) < 1)
        return expr
    return pl.col(LABEL_FAITHFULNESS).cast(pl.Float64) < 1


def normalise_claim(text: pl.Expr) -> pl.Expr:
    """Claim text as it is matched between people's labels and a judge's claims: case, surrounding spaces
    and punctuation, and runs of whitespace do not count."""
    return (
        text.str.to_lowercase()
        .str.replace_all(r"\s+", " ")
        .str.strip_chars()
        .str.strip_chars(" .!?;:,。！？；：，、")
    )


def check_claim_labels(claims: pl.DataFrame, keys: Sequence[str]) -> pl.DataFrame:
    """The per-claim labels, validated, with a normalised claim column for matching (one clear error otherwise)."""
    missing = [c for c in (*keys, CLAIM, LABEL_VERDICT) if c not in claims.columns]
    if missing:
        raise InputError(
            f"the per-claim labels lack {missing}; they need the row key columns {list(keys)}, {CLAIM!r} and "
            f"{LABEL_VERDICT!r} ({', '.join(VERDICT_VALUES)})"
        )
    verdict = pl.col(LABEL_VERDICT).cast(pl.String).str.to_lowercase().str.strip_chars()
    bad = claims.filter(~verdict.is_in(VERDICT_VALUES) | verdict.is_null())
    if bad.height:
        raise InputError(
            f"{LABEL_VERDICT!r} must be one of {', '.join(VERDICT_VALUES)}; {bad.height} claim label(s) are not, "
            f"e.g. {bad.get_column(LABEL_VERDICT).head(_EXAMPLES).to_list()}"
        )
    return claims.select(
        *[pl.col(k).cast(pl.String) for k in keys],
        normalise_claim(pl.col(CLAIM).cast(pl.String)).alias("__fp_claim"),
        verdict.alias(LABEL_VERDICT),
    )
