"""The report's charts as inline SVG, drawn with matplotlib's SVG backend (no browser, no network).

Text stays text (``svg.fonttype = none``): the viewer's own fonts draw it, so Chinese and Korean labels
need no font embedded and the file stays small. matplotlib escapes every string it writes into the SVG,
so a model or language name holding markup is drawn as text. No layout engine: matplotlib's constrained
layout measured every text several times, more than half of the drawing; each figure is instead cut to
what it draws (``bbox_inches="tight"``, one measuring pass), so no label is clipped. Settings are applied
per figure with ``rc_context`` and the figures are not registered with pyplot: nothing process-wide changes.
"""

from __future__ import annotations

import io
import re
import warnings
from collections.abc import Callable
from typing import Any

import polars as pl

from faithfulness_pipeline.report.data import MARKS

_COLORS = {"contradicted": "#c0392b", "unsupported": "#e67e22", "speculative": "#8e6fbf", "supported": "#2e8b57"}
_WIDTH_IN = 10.0
_HEIGHT_IN = 2.9
_METADATA = re.compile(r"<metadata>.*?</metadata>\s*", re.DOTALL)


def _svg(name: str, draw: Callable[[Any], None], height: float = _HEIGHT_IN) -> str:
    """One figure drawn by ``draw(figure)`` as an ``<svg>`` element (no XML prolog, ids unique per chart)."""
    import matplotlib
    from matplotlib.figure import Figure

    settings: dict[Any, Any] = {
        "svg.fonttype": "none", "svg.hashsalt": f"fp-{name}", "font.size": 9.0, "axes.titlesize": 10.0,
    }
    with matplotlib.rc_context(settings), warnings.catch_warnings():
        # Layout measures CJK text with the bundled Latin font; the browser draws it with its own fonts.
        warnings.filterwarnings("ignore", message="Glyph .* missing from font")
        figure = Figure(figsize=(_WIDTH_IN, height), layout=None)
        draw(figure)
        buffer = io.StringIO()
        figure.savefig(buffer, format="svg", bbox_inches="tight", pad_inches=0.05,
                       metadata={"Date": None, "Creator": None})
    text = _METADATA.sub("", buffer.getvalue())  # an RDF block of namespaces: bytes no reader needs
    start = text.index("<svg")
    return text[start:].replace("<svg ", f'<svg data-chart="{name}" role="img" ', 1)


def _days(frame: pl.DataFrame) -> list[Any]:
    return frame.get_column("day").to_list()


def _by_model(daily: pl.DataFrame) -> list[tuple[str, pl.DataFrame]]:
    labelled = daily.with_columns(pl.col("model").fill_null("(no model)"))
    return [(str(key[0]), part.sort("day")) for key, part in labelled.group_by("model", maintain_order=True)]


def _date_axis(axes: Any, days: list[Any]) -> None:
    """Ticks on whole days only (never the hours between them), at most about eight; half a day of margin."""
    import datetime as dt

    import matplotlib.dates as mdates

    if days:
        first, last = (dt.datetime.combine(d, dt.time()) for d in (min(days), max(days)))
        axes.set_xlim(first - dt.timedelta(hours=12), last + dt.timedelta(hours=12))
    span = (max(days) - min(days)).days + 1 if days else 1
    locator = mdates.DayLocator(interval=max(1, -(-span // 8)))  # type: ignore[no-untyped-call]
    axes.xaxis.set_major_locator(locator)
    axes.xaxis.set_major_formatter(mdates.ConciseDateFormatter(locator))  # type: ignore[no-untyped-call]


def _band(axes: Any, days: list[Any], part: pl.DataFrame, column: str, color: str) -> None:
    """The 95 % interval of ``column`` as a shaded band, on the days that have one of some width."""
    low, high = f"{column}_low", f"{column}_high"
    if low not in part.columns or not (part.get_column(high) - part.get_column(low)).fill_null(0).gt(0).any():
        return
    lows = [float("nan") if v is None else v for v in part.get_column(low).to_list()]
    highs = [float("nan") if v is None else v for v in part.get_column(high).to_list()]
    axes.fill_between(days, lows, highs, color=color, alpha=0.15, linewidth=0)


def trend_chart(daily: pl.DataFrame, threshold: float, scale: float) -> str:
    """Per day and model: hallucination mean (solid) and p90 (dashed), faithfulness mean, share over threshold;
    a shaded band is the 95 % interval of a mean or share measured on a sample (none for a census)."""

    def draw(figure: Any) -> None:
        halluc, faith, share = figure.subplots(1, 3, gridspec_kw={"wspace": 0.3})  # room for the long titles
        for index, (model, part) in enumerate(_by_model(daily)):
            color = f"C{index % 10}"
            days = _days(part)
            halluc.plot(days, part.get_column("hallucination_mean").to_list(), "o-", color=color, label=model)
            halluc.plot(days, part.get_column("hallucination_p90").to_list(), "--", color=color, alpha=0.6)
            faith.plot(days, part.get_column("faithfulness_mean").to_list(), "o-", color=color, label=model)
            share.plot(days, part.get_column("over_threshold_share").to_list(), "o-", color=color, label=model)
            for axes, column in ((halluc, "hallucination_mean"), (faith, "faithfulness_mean"),
                                 (share, "over_threshold_share")):
                _band(axes, days, part, column, color)
        halluc.set_title("hallucination: mean (solid), p90 (dashed)")
        faith.set_title("faithfulness: mean")
        share.set_title(f"share of answers over {threshold:g}")
        for axes, top in ((halluc, scale), (faith, scale), (share, 1.0)):
            axes.set_ylim(-0.02 * top, 1.02 * top)
            axes.grid(alpha=0.3)
            _date_axis(axes, [d for d in daily.get_column("day").to_list() if d is not None])
        if len(daily):
            share.legend(fontsize=8, loc="best")

    return _svg("trend", draw)


def distribution_chart(distribution: pl.DataFrame, scale: float) -> str:
    """Histograms of both scores over [0, scale] in tenths, from how many answers had each score value
    (``score``, ``value``, ``answers``)."""

    def draw(figure: Any) -> None:
        bins = [scale * i / 10 for i in range(11)]
        for axes, score, color in zip(figure.subplots(1, 2), ("hallucination", "faithfulness"),
                                      ("#c0392b", "#2e8b57"), strict=True):
            part = distribution.filter(pl.col("score") == score)
            values, weights = part.get_column("value").to_list(), part.get_column("answers").to_list()
            axes.hist(values, bins=bins, weights=weights, color=color, edgecolor="white")
            axes.set_title(f"{score} score ({sum(weights)} answers)")
            axes.set_xlim(0, scale)
            axes.set_ylabel("answers")
            axes.grid(axis="y", alpha=0.3)

    return _svg("distribution", draw)


def verdict_mix_chart(mix: pl.DataFrame) -> str:
    """Share of claims per mark (contradicted, unsupported, speculative, supported) for each language."""
    languages = sorted(mix.get_column("language").unique().to_list()) if len(mix) else []
    counts = {(lang, mark): int(n) for lang, mark, n in mix.iter_rows()}
    totals = {lang: sum(counts.get((lang, m), 0) for m in MARKS) for lang in languages}

    def draw(figure: Any) -> None:
        axes = figure.subplots()
        left = [0.0] * len(languages)
        for mark in MARKS:
            shares = [counts.get((lang, mark), 0) / totals[lang] if totals[lang] else 0.0 for lang in languages]
            axes.barh(languages, shares, left=left, color=_COLORS[mark], label=mark)
            left = [a + b for a, b in zip(left, shares, strict=True)]
        axes.set_yticks(range(len(languages)), [f"{lang} ({totals[lang]} claims)" for lang in languages])
        axes.set_xlim(0, 1)
        axes.set_xlabel("share of claims (verdict mix per language)")
        axes.legend(ncols=4, fontsize=8, loc="lower center", bbox_to_anchor=(0.5, 1.0))
        axes.invert_yaxis()

    return _svg("verdicts", draw, height=max(1.8, 0.9 + 0.35 * len(languages)))


def claims_chart(per_answer: pl.DataFrame, cap: int = 15) -> str:
    """How many claims the scored answers hold (answers with more than ``cap`` claims share the last bar)."""
    counts: dict[int, int] = {}
    cap = max(1, min(cap, int(per_answer.get_column("n_claims").max() or 0)))  # type: ignore[arg-type]
    for n, answers in per_answer.iter_rows():
        key = min(int(n or 0), cap)
        counts[key] = counts.get(key, 0) + int(answers)

    def draw(figure: Any) -> None:
        axes = figure.subplots()
        xs = list(range(cap + 1))
        axes.bar(xs, [counts.get(x, 0) for x in xs], color="#4a6fa5")
        axes.set_xticks(xs, [str(x) if x < cap else f"{cap}+" for x in xs])
        axes.set_xlabel("claims in the answer")
        axes.set_ylabel("answers")
        axes.set_title("claims per answer")
        axes.grid(axis="y", alpha=0.3)

    return _svg("claims", draw, height=2.4)
