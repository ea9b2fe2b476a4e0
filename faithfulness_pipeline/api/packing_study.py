"""Does packing cost agreement with people? The same labelled rows judged in several request shapes.

Packing many answers into one request is where our cost lead comes from, and where a real judge can go wrong
(a case scored by its neighbours or its position; verdicts lost in a long reply). This study measures it on a
judge's own endpoint and a team's own labelled rows:

- **extraction** in two shapes: one answer per request (Mastra's shape) and the settings' packing: claims per
  answer, and how many answers got a different number of claims;
- **verdicts** over the *same* claims in every shape (the one-per-request extraction's), so extraction noise
  cannot hide a packing effect: ``single`` (one answer per request), ``packed`` (``max_items_per_pack``, or
  the vendor default where it is unset),
  ``shuffled`` (packed over the rows in another order: other neighbours, other positions) and ``repeat``
  (``packed`` again: the model's own run-to-run noise, the floor any shape's flips are read against);
- per shape: agreement with the labels (``core.calibration``: balanced accuracy per language with bootstrap
  intervals, and each shape's difference from ``single`` with a paired bootstrap interval), verdict flips
  between shapes claim by claim, and requests, tokens and wall time.

No result store: every shape pays for its own requests (a store would hand the second shape the first's
results). ``faithfulness-pipeline packing-study`` runs it; ``bench/judge_quality.py`` runs it on the shared dev
set against the real-model tier.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Final

import polars as pl

from faithfulness_pipeline.core import schema as S
from faithfulness_pipeline.core.calibration import CalibrationConfig, calibrate, paired_differences
from faithfulness_pipeline.core.config import ScoringConfig
from faithfulness_pipeline.core.errors import ConfigError
from faithfulness_pipeline.core.flow import extract_items, row_frame, verdict_items
from faithfulness_pipeline.core.labels import LABEL_HALLUCINATED
from faithfulness_pipeline.core.normalize import prepare
from faithfulness_pipeline.core.port import ClaimVerdict, ExtractItem, ExtractResult, Judge, VerdictItem, VerdictResult
from faithfulness_pipeline.core.scoring import faithfulness_label, hallucination_label, round_half_up
from faithfulness_pipeline.settings.judge import DEFAULT_MAX_ITEMS_PER_PACK, JudgeSettings

#: The verdict shapes, in report order; ``single`` is the reference the others are compared with.
SHAPES: Final = ("single", "packed", "shuffled", "repeat")
#: Pairs whose claim-by-claim flips are reported: packing's effect, position's, and the model's own noise.
FLIP_PAIRS: Final = (("single", "packed"), ("single", "shuffled"), ("packed", "shuffled"), ("packed", "repeat"))
JUDGE_COLUMN: Final = "judge"

#: Builds the judge a shape runs with (the study's settings with that shape's packing).
JudgeFactory = Callable[[JudgeSettings], Judge]


@dataclass
class ShapeCost:
    """What one shape's run sent and how long it took."""

    requests: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    wall_s: float = 0.0
    errors: int = 0


@dataclass
class StudyResult:
    """Per-row verdicts and scores of every shape (``rows``), agreement (``calibration``, ``differences``),
    claim flips (``flips``), extraction in two shapes (``extraction``) and costs."""

    rows: pl.DataFrame
    calibration: pl.DataFrame
    differences: pl.DataFrame
    flips: pl.DataFrame
    extraction: pl.DataFrame
    costs: dict[str, ShapeCost] = field(default_factory=dict)


def _round_robin(groups: Sequence[Sequence[int]]) -> list[int]:
    out: list[int] = []
    for turn in range(max((len(g) for g in groups), default=0)):
        out += [g[turn] for g in groups if turn < len(g)]
    return out


def stratified(labelled: pl.DataFrame, rows: int, seed: int = 0) -> pl.DataFrame:
    """At most ``rows`` of ``labelled``, as even across languages as they allow, and within a language across
    sources and labels; which rows of a group come first is a seeded shuffle, not the table's order."""
    if labelled.height <= rows:
        return labelled
    order = list(range(labelled.height))
    random.Random(seed).shuffle(order)

    def column(name: str) -> list[object]:
        return labelled.get_column(name).to_list() if name in labelled.columns else [None] * labelled.height

    language, source, label = column("language"), column("source"), column(LABEL_HALLUCINATED)
    by_language: dict[object, dict[object, list[int]]] = {}
    for i in order:
        by_language.setdefault(language[i], {}).setdefault((source[i], label[i]), []).append(i)
    per_language = [_round_robin(list(groups.values())) for groups in by_language.values()]
    return labelled[sorted(_round_robin(per_language)[:rows])]


def _settings_for(settings: JudgeSettings, shape: str) -> JudgeSettings:
    """A shape's settings. The packed shapes pack as ``max_items_per_pack`` says or, where it is unset, as the
    judge packs at a vendor's API: on a server of one's own the default is already one answer per request, and
    the study is there to weigh packing. No store, no refresh: each shape must ask for itself."""
    packed = settings.max_items_per_pack or DEFAULT_MAX_ITEMS_PER_PACK
    return settings.model_copy(update={"store": None, "refresh": False,
                                       "max_items_per_pack": 1 if shape == "single" else packed})


async def _run(factory: JudgeFactory, settings: JudgeSettings, call: Callable[[Judge], object],
               opened: list[Judge]) -> tuple[object, ShapeCost]:  # fmt: skip
    """One shape's call with a judge of its own. The judges are closed together at the end of the study, not
    here: closing one closes the HTTP clients litellm shares between them."""
    judge = factory(settings)
    opened.append(judge)
    started = time.monotonic()
    results = await call(judge)  # type: ignore[misc]
    cost = ShapeCost(wall_s=time.monotonic() - started)
    stats = judge.stats() if hasattr(judge, "stats") else None
    if stats is not None:
        cost.requests, cost.prompt_tokens, cost.completion_tokens = (stats.requests, stats.prompt_tokens,
                                                                     stats.completion_tokens)  # fmt: skip
    return results, cost


async def _close(opened: Sequence[Judge]) -> None:
    for judge in opened:
        close = getattr(judge, "aclose", None)
        if close is not None:
            await close()


def _ordered(items: Sequence[ExtractItem] | Sequence[VerdictItem], shuffle_seed: int | None) -> list:  # type: ignore[type-arg]
    out = list(items)
    if shuffle_seed is not None:
        random.Random(shuffle_seed).shuffle(out)
    return out


async def _extract(factory: JudgeFactory, settings: JudgeSettings, items: list[ExtractItem],
                   opened: list[Judge]) -> tuple[dict[str, ExtractResult], ShapeCost]:  # fmt: skip
    results, cost = await _run(factory, settings, lambda judge: judge.extract_claims(items), opened)
    by_id = {r.id: r for r in results}  # type: ignore[attr-defined]
    cost.errors = sum(r.error is not None for r in by_id.values())
    return by_id, cost


async def _verdicts(factory: JudgeFactory, settings: JudgeSettings, items: list[VerdictItem],
                    shuffle_seed: int | None, opened: list[Judge],
                    ) -> tuple[dict[str, VerdictResult], ShapeCost]:  # fmt: skip
    ordered = _ordered(items, shuffle_seed)
    results, cost = await _run(factory, settings, lambda judge: judge.judge_claims(ordered), opened)
    by_id = {r.id: r for r in results}  # type: ignore[attr-defined]
    cost.errors = sum(r.error is not None for r in by_id.values())
    return by_id, cost


def _count(result: ExtractResult) -> int | None:
    return None if result.claims is None else len(result.claims)


def _scores(claims: Sequence[str], verdicts: Sequence[ClaimVerdict] | None, error: str | None) -> tuple[
        float | None, float | None]:  # fmt: skip
    """Both scores, as the scorer computes them (zero claims: 0; an error: null)."""
    if error is not None:
        return None, None
    if not claims:
        return 0.0, 0.0
    assert verdicts is not None and len(verdicts) == len(claims)
    hallucinated = sum(hallucination_label(v.verdict) == "yes" for v in verdicts)
    faithful = sum(faithfulness_label(v.verdict, v.speculative) == "yes" for v in verdicts)
    return round_half_up(hallucinated / len(claims)), round_half_up(faithful / len(claims))


async def run_study(
    labelled: pl.DataFrame,
    settings: JudgeSettings,
    factory: JudgeFactory,
    *,
    scoring: ScoringConfig | None = None,
    calibration: CalibrationConfig | None = None,
    shapes: Sequence[str] = SHAPES,
    shuffle_seed: int = 1,
    progress: Callable[[str], None] | None = None,
) -> StudyResult:
    """Judges ``labelled`` (rows with ``label_hallucinated``, an answer and its context) in every shape of
    ``shapes`` with the judges ``factory`` builds from ``settings``; see the module docstring."""
    unknown = [s for s in shapes if s not in SHAPES]
    if unknown or "single" not in shapes:
        raise ConfigError(f"shapes must include 'single' and be among {', '.join(SHAPES)}; got {', '.join(shapes)}")
    if LABEL_HALLUCINATED not in labelled.columns:
        raise ConfigError(f"the labelled rows have no {LABEL_HALLUCINATED} column (found: "
                          f"{', '.join(labelled.columns)})")  # fmt: skip
    say = progress or (lambda _: None)
    scoring = scoring or ScoringConfig()
    calibration = calibration or CalibrationConfig(group_columns=("language",))
    prepared = prepare(labelled, scoring)
    rows = row_frame(prepared)
    items = extract_items(rows)
    if not items:
        raise ConfigError("the labelled rows have no answer to judge")

    opened: list[Judge] = []
    try:
        say(f"extraction, one answer per request ({len(items)} answers)")
        single_x, x_single_cost = await _extract(factory, _settings_for(settings, "single"), items, opened)
        say("extraction, packed")
        packed_x, x_packed_cost = await _extract(factory, _settings_for(settings, "packed"), items, opened)
        claims = [single_x[it.id].claims for it in items]
        v_items = verdict_items(items, [list(c) if c is not None else None for c in claims], rows)
        costs = {"extract:single": x_single_cost, "extract:packed": x_packed_cost}
        verdicts: dict[str, dict[str, VerdictResult]] = {}
        for shape in shapes:
            say(f"verdicts, {shape} ({len(v_items)} answers)")
            seed = shuffle_seed if shape == "shuffled" else None
            verdicts[shape], costs[shape] = await _verdicts(factory, _settings_for(settings, shape), v_items, seed,
                                                            opened)  # fmt: skip
    finally:
        await _close(opened)
    extraction = pl.DataFrame({
        S.ROW_KEY: [it.id for it in items],
        "claims_single": [_count(single_x[it.id]) for it in items],
        "claims_packed": [_count(packed_x[it.id]) for it in items],
    }, schema={S.ROW_KEY: pl.String, "claims_single": pl.Int64, "claims_packed": pl.Int64})  # fmt: skip

    kept = [c for c in labelled.columns if c in prepared.columns and (c.startswith("label_") or c == "language")]
    labels = prepared.select(S.ROW_KEY, *kept)
    per_row = _per_row(items, single_x, verdicts, v_items, settings, shapes)
    joined = per_row.join(labels, on=S.ROW_KEY, how="left")
    table = calibrate(joined, calibration)
    differences = paired_differences(joined, [S.ROW_KEY], calibration)
    return StudyResult(joined, table, differences, _flips(per_row, shapes, calibration.threshold), extraction, costs)


async def extraction_by_pack_size(labelled: pl.DataFrame, settings: JudgeSettings, factory: JudgeFactory,
                                  sizes: Sequence[int], *, scoring: ScoringConfig | None = None,
                                  ) -> tuple[pl.DataFrame, dict[int, ShapeCost]]:  # fmt: skip
    """Claims per answer when ``sizes[k]`` answers share an extraction request, for each k: one column of claim
    counts per size (null: an error row), and what each size cost. Extraction alone, no labels needed."""
    items = extract_items(row_frame(prepare(labelled, scoring or ScoringConfig())))
    counts: dict[str, list[int | None]] = {}
    costs: dict[int, ShapeCost] = {}
    opened: list[Judge] = []
    try:
        for size in sizes:
            found, costs[size] = await _extract(factory, settings.model_copy(update={
                "store": None, "refresh": False, "max_items_per_pack": size}), items, opened)  # fmt: skip
            counts[f"claims_{size}"] = [_count(found[it.id]) for it in items]
    finally:
        await _close(opened)
    frame = pl.DataFrame({S.ROW_KEY: [it.id for it in items], **counts},
                         schema={S.ROW_KEY: pl.String, **dict.fromkeys(counts, pl.Int64)})  # fmt: skip
    return frame, costs


def extraction_markdown(frame: pl.DataFrame, costs: dict[int, ShapeCost]) -> str:
    """The pack-size sweep as a markdown table, each size against the first (one answer per request)."""
    sizes = list(costs)
    reference = frame.get_column(f"claims_{sizes[0]}")
    out = ["| answers per extraction request | claims per answer | same count as the first | error rows | "
           "requests | prompt tokens | completion tokens | wall s |", "|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for size in sizes:
        column, cost = frame.get_column(f"claims_{size}"), costs[size]
        same = int((column == reference).sum())
        out.append(f"| {size} | {_pct(column.drop_nulls().mean())} | {same} of {frame.height} | {column.null_count()} "
                   f"| {cost.requests:,} | {cost.prompt_tokens:,} | {cost.completion_tokens:,} | {cost.wall_s:.0f} |")
    return "\n".join(out)


def _per_row(items: Sequence[ExtractItem], extracted: dict[str, ExtractResult],
             verdicts: dict[str, dict[str, VerdictResult]], v_items: Sequence[VerdictItem],
             settings: JudgeSettings, shapes: Sequence[str]) -> pl.DataFrame:  # fmt: skip
    judged = {it.id for it in v_items}
    records: list[dict[str, object]] = []
    for shape in shapes:
        for item in items:
            found = extracted[item.id]
            error = found.error
            codes: list[str] | None = None
            claim_list = list(found.claims or ())
            verdict_list: Sequence[ClaimVerdict] | None = None
            if error is None and item.id in judged:
                result = verdicts[shape][item.id]
                error = result.error
                verdict_list = result.verdicts
                codes = None if verdict_list is None else [v.verdict for v in verdict_list]
            elif error is None and claim_list:
                # claims but no passages: all unsupported, no call (as the scorer does)
                verdict_list = [ClaimVerdict("unsupported") for _ in claim_list]
                codes = [v.verdict for v in verdict_list]
            hallucination, faithfulness = _scores(claim_list, verdict_list, error)
            records.append({
                JUDGE_COLUMN: shape, S.ROW_KEY: item.id, "judge_model": settings.model, "prompt_version": shape,
                "n_claims": len(claim_list), "verdict_codes": codes, "error": error,
                "hallucination_score": hallucination, "faithfulness_score": faithfulness,
            })  # fmt: skip
    return pl.DataFrame(records, schema={
        JUDGE_COLUMN: pl.String, S.ROW_KEY: pl.String, "judge_model": pl.String, "prompt_version": pl.String,
        "n_claims": pl.Int64, "verdict_codes": pl.List(pl.String), "error": pl.String,
        "hallucination_score": pl.Float64, "faithfulness_score": pl.Float64,
    })  # fmt: skip


def _flips(per_row: pl.DataFrame, shapes: Sequence[str], threshold: float) -> pl.DataFrame:
    """Claim by claim, how many verdicts differ between two shapes on the rows both judged without error; and
    how many rows changed their hallucinated / not flag (score above ``threshold``, the calibration's rule)."""
    records: list[dict[str, object]] = []
    for a, b in FLIP_PAIRS:
        if a not in shapes or b not in shapes:
            continue
        left = per_row.filter(pl.col(JUDGE_COLUMN) == a).select(S.ROW_KEY, pl.col("verdict_codes").alias("a"),
                                                                pl.col("hallucination_score").alias("ha"))  # fmt: skip
        right = per_row.filter(pl.col(JUDGE_COLUMN) == b).select(S.ROW_KEY, pl.col("verdict_codes").alias("b"),
                                                                 pl.col("hallucination_score").alias("hb"))  # fmt: skip
        both = left.join(right, on=S.ROW_KEY).filter(pl.col("a").is_not_null() & pl.col("b").is_not_null())
        claims = flipped = rows_flipped = 0
        for codes_a, codes_b, ha, hb in both.select("a", "b", "ha", "hb").iter_rows():
            claims += len(codes_a)
            flipped += sum(x != y for x, y in zip(codes_a, codes_b, strict=True))
            rows_flipped += (ha > threshold) != (hb > threshold)
        records.append({"shapes": f"{a} vs {b}", "rows": both.height, "claims": claims, "verdict_flips": flipped,
                        "flip_share": flipped / claims if claims else None,
                        "rows_flag_flipped": rows_flipped})  # fmt: skip
    return pl.DataFrame(records, schema={"shapes": pl.String, "rows": pl.Int64, "claims": pl.Int64,
                                         "verdict_flips": pl.Int64, "flip_share": pl.Float64,
                                         "rows_flag_flipped": pl.Int64})  # fmt: skip


def _pct(value: object) -> str:
    return "–" if value is None else f"{float(value):.3f}"  # type: ignore[arg-type]


def markdown(result: StudyResult) -> str:
    """The study as markdown tables: agreement per shape and language, differences from ``single``, flips,
    extraction, and costs."""
    out: list[str] = []
    table = result.calibration
    groups = table.select("group_by", "group").unique(maintain_order=True).rows()
    header = " | ".join(f"BA {g if b != 'all' else 'all'} (n)" for b, g in groups)
    out += [f"| shape | {header} | error rows | requests | prompt tokens | completion tokens | wall s |",
            "|---|" + "---:|" * (len(groups) + 5)]  # fmt: skip
    for shape in table.get_column(JUDGE_COLUMN).unique(maintain_order=True).to_list():
        cells = []
        for b, g in groups:
            row = table.filter((pl.col(JUDGE_COLUMN) == shape) & (pl.col("group_by") == b) & (pl.col("group") == g))
            record = row.row(0, named=True) if row.height else {}
            ba, low, high = (record.get(k) for k in ("balanced_accuracy", "balanced_accuracy_low",
                                                     "balanced_accuracy_high"))  # fmt: skip
            interval = f" [{_pct(low)}, {_pct(high)}]" if low is not None else ""
            cells.append(f"{_pct(ba)}{interval} ({record.get('n', 0)})")
        cost = result.costs.get(shape, ShapeCost())
        out.append(f"| {shape} | {' | '.join(cells)} | {cost.errors} | {cost.requests:,} | {cost.prompt_tokens:,} "
                   f"| {cost.completion_tokens:,} | {cost.wall_s:.0f} |")  # fmt: skip
    out += ["", "| shape | BA minus single's | paired 95 % interval | rows |", "|---|---:|---|---:|"]
    for record in result.differences.iter_rows(named=True):
        low, high = record["low"], record["high"]
        interval = f"[{_pct(low)}, {_pct(high)}]" if low is not None else "too few rows"
        out.append(f"| {record['judge']} | {_pct(record['balanced_accuracy_difference'])} | {interval} | "
                   f"{record['n']} |")  # fmt: skip
    out += ["", "| shapes (same claims) | rows | claims | verdicts flipped | share | rows whose flag flipped |",
            "|---|---:|---:|---:|---:|---:|"]  # fmt: skip
    for record in result.flips.iter_rows(named=True):
        out.append(f"| {record['shapes']} | {record['rows']} | {record['claims']} | {record['verdict_flips']} | "
                   f"{_pct(record['flip_share'])} | {record['rows_flag_flipped']} |")  # fmt: skip
    x = result.extraction
    both = x.filter(pl.col("claims_single").is_not_null() & pl.col("claims_packed").is_not_null())
    out += ["", "| extraction | answers | claims per answer | error rows | requests | prompt tokens | "
            "completion tokens | wall s |", "|---|---:|---:|---:|---:|---:|---:|---:|"]  # fmt: skip
    for shape in ("single", "packed"):
        cost = result.costs[f"extract:{shape}"]
        column = x.get_column(f"claims_{shape}")
        mean = column.drop_nulls().mean()
        out.append(f"| {shape} | {x.height} | {_pct(mean)} | {column.null_count()} | {cost.requests:,} | "
                   f"{cost.prompt_tokens:,} | {cost.completion_tokens:,} | {cost.wall_s:.0f} |")  # fmt: skip
    differ = both.filter(pl.col("claims_single") != pl.col("claims_packed")).height
    out.append(f"\nAnswers whose number of claims differs between the two extractions: {differ} of {both.height}.")
    return "\n".join(out)
