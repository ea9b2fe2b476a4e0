"""The checks of the corrected figures (``daily_corrected_quality``): whether every group of the day has labels of
its own, and whether the judge errs alike on the day's labels and on its window's. Both warn only: the table is
written either way, and says where its labels came from."""

# No `from __future__ import annotations`: Dagster reads these annotations at runtime.
from typing import Final

import dagster as dg
import polars as pl

from faithfulness_pipeline.defs.metadata import EXAMPLES, md_list
from faithfulness_pipeline.defs.names import LABELS
from faithfulness_pipeline.defs.warehouse import WarehouseResource

LABELS_COVER: Final = "labels_cover_the_groups"
LABELS_AGREE: Final = "labels_agree_with_the_window"
#: Below it a group's judge error and its window's are called different.
AGREEMENT_P: Final = 0.01


def labels_cover_check(asset: str, partitions: dg.PartitionsDefinition[str]) -> dg.AssetChecksDefinition:
    """Every group of the day corrected by labels of its own: a group that borrows (or has none) is named."""

    @dg.asset_check(
        asset=asset,
        name=LABELS_COVER,
        partitions_def=partitions,
        description="Every day x model x language group has enough labelled answers of its own (min_labels) to be "
        "corrected by them. Warns only: a group with too few borrows the judge's error from its pool (the same "
        "judge, prompt version and language over the label window), or has no corrected figure.",
    )
    def _check(context: dg.AssetCheckExecutionContext, warehouse: WarehouseResource) -> dg.AssetCheckResult:
        table = warehouse.scan(asset, [context.partition_key]).collect()
        if not warehouse.exists(LABELS, None) or warehouse.rows(LABELS, None) == 0:
            return dg.AssetCheckResult(passed=True, severity=dg.AssetCheckSeverity.WARN,
                                       metadata={"groups": table.height, "labels": "none (FP_LABELS unset, or the "
                                                 "read_labels job not run): the corrected figures are empty"})
        short = table.filter(pl.col("labels_from") != "group")
        examples = [f"{r['model'] or '-'} / {r['language'] or '-'}: {r['labelled_answers']} labelled, "
                    f"{r['labels_from']}" for r in short.head(EXAMPLES).iter_rows(named=True)]
        return dg.AssetCheckResult(
            passed=short.is_empty(),
            severity=dg.AssetCheckSeverity.WARN,
            metadata={"groups": table.height, "groups_without_own_labels": short.height,
                      "labelled_answers": int(table.get_column("labelled_answers").sum() or 0),
                      "examples": md_list(examples)},
            description=None if short.is_empty() else f"{short.height} of {table.height} group(s) have too few "
            "labels of their own (pooled or none): label more of their answers (the audit sample), or set "
            "FP_LABELS where there are none",
        )

    return _check


def labels_agree_check(asset: str, partitions: dg.PartitionsDefinition[str]) -> dg.AssetChecksDefinition:
    """The judge errs alike on the day's labels and on the window's: else pooled labels mislead."""

    @dg.asset_check(
        asset=asset,
        name=LABELS_AGREE,
        partitions_def=partitions,
        description="For each group, the judge's error on its own labelled answers is not clearly another than on "
        "the other labelled answers of its pool (window_agreement_p at least 0.01). Warns only: where it is, the "
        "judge erred differently that day (a new app version, a new topic), and a pooled estimate of such a day "
        "would carry the wrong correction.",
    )
    def _check(context: dg.AssetCheckExecutionContext, warehouse: WarehouseResource) -> dg.AssetCheckResult:
        table = warehouse.scan(asset, [context.partition_key]).collect()
        off = table.filter(pl.col("window_agreement_p") < AGREEMENT_P)
        examples = [f"{r['model'] or '-'} / {r['language'] or '-'}: p = {r['window_agreement_p']:.2g}"
                    for r in off.head(EXAMPLES).iter_rows(named=True)]
        return dg.AssetCheckResult(
            passed=off.is_empty(),
            severity=dg.AssetCheckSeverity.WARN,
            metadata={"groups": table.height, "groups_that_disagree": off.height, "examples": md_list(examples)},
            description=None if off.is_empty() else f"{off.height} group(s) where the judge errs otherwise than over "
            f"the label window (p < {AGREEMENT_P}), e.g. {examples[0]}",
        )

    return _check
