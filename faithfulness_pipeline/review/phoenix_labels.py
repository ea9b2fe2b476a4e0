"""People's labels from Phoenix (``review import phoenix+http://HOST/projects/NAME``): the span annotations
people made in Phoenix's UI (annotator kind ``HUMAN``) become labels of the scored answers those spans became.

- Which annotations: those named :attr:`AnnotationRule.name` (``hallucination``) and, when the rule names one,
  :attr:`AnnotationRule.faithfulness` (``faithfulness``), of annotator kind ``HUMAN`` and not of our
  identifier. The judge's own (``LLM``, or ``CODE`` for the offline judge) are never people's: counted, skipped.
- What they say: a ``hallucination`` label among :attr:`AnnotationRule.hallucinated` is hallucinated, among
  :attr:`AnnotationRule.factual` not; no label, a score of at least :attr:`AnnotationRule.threshold` is
  hallucinated. A ``faithfulness`` score in [0, 1] is the label's ``label_faithfulness``. Any other value is
  counted and named, never guessed at.
- Which answer: the scored row of the annotated span (its ``trace_id`` and ``span_id``); a span that is no scored
  answer itself (the trace's root, say, which people often annotate) is its trace's answer when the trace has
  exactly one. An annotation of a span with no such answer is counted and named.
- Who: the annotation's metadata ``reviewer`` (or ``annotator``, ``user``, ``username``), else its Phoenix
  user (their name where the key may list users, else ``phoenix-user-N``), else its identifier, else the
  ``--reviewer`` given. One label per answer and reviewer, when it was last changed; importing again updates
  those labels, never adds more.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final

import polars as pl

from faithfulness_pipeline.core import schema as S
from faithfulness_pipeline.core.errors import InputError
from faithfulness_pipeline.review.imports import scored_keys
from faithfulness_pipeline.review.items import read_items
from faithfulness_pipeline.review.session import checked_reviewer
from faithfulness_pipeline.review.store import Label, LabelStore
from faithfulness_pipeline.settings.scoring import ScoringSettings
from faithfulness_pipeline.traces.phoenix import IDENTIFIER, PhoenixClient
from faithfulness_pipeline.traces.spans import Span

#: Metadata keys that name the person, in the order they are looked for (an API or SDK client may set one).
REVIEWER_KEYS: Final = ("reviewer", "annotator", "user", "username")
#: The only annotator kind that is a person.
HUMAN: Final = "HUMAN"
_NAMED: Final = 10


@dataclass(frozen=True, slots=True)
class AnnotationRule:
    """Which annotation is a label and which values mean "hallucinated"; labels compare without case."""

    name: str = "hallucination"
    hallucinated: tuple[str, ...] = ("hallucinated",)
    #: Phoenix's own hallucination evaluator says ``factual``; our judge's annotations say ``not_hallucinated``.
    factual: tuple[str, ...] = ("factual", "not_hallucinated")
    threshold: float = 0.5
    faithfulness: str | None = "faithfulness"

    def names(self) -> tuple[str, ...]:
        return (self.name,) if self.faithfulness is None else (self.name, self.faithfulness)

    def hallucination(self, result: Mapping[str, Any]) -> bool | None:
        """The mark of a ``name`` annotation's result; None for a value the rule does not know."""
        label, score = result.get("label"), result.get("score")
        text = label.strip().casefold() if isinstance(label, str) else ""
        if text:
            if text in {v.casefold() for v in self.hallucinated}:
                return True
            if text in {v.casefold() for v in self.factual}:
                return False
            return None
        return None if score is None else bool(float(score) >= self.threshold)


@dataclass(slots=True)
class PhoenixLabels:
    """What one reading of a project gave: the labels, and every annotation that gave none, by why."""

    labels: list[Label] = field(default_factory=list)
    #: people's annotations read (of the rule's names)
    read: int = 0
    #: annotations of those names that are not people's, by annotator kind (ours by any kind among them)
    not_people: dict[str, int] = field(default_factory=dict)
    #: ``trace_id/span_id`` of each annotated span that is no scored answer
    unmatched: list[str] = field(default_factory=list)
    #: ``span_id name=value`` of each annotation whose value the rule does not know
    unknown: list[str] = field(default_factory=list)
    #: older annotations of an answer by the same person (two spans of its trace, say): the newest is kept
    superseded: int = 0
    #: answers matched through their trace (the annotated span was another span of the answer's trace)
    by_trace: int = 0


@dataclass(slots=True)
class _Pending:
    hallucinated: bool | None = None
    faithfulness: float | None = None
    when: dict[str, datetime] = field(default_factory=dict)  # each name's time: the newest annotation wins


def _time(annotation: Mapping[str, Any]) -> datetime:
    """When the annotation was last changed (a person's changed mind is their label), in UTC."""
    raw = annotation.get("updated_at") or annotation.get("created_at")
    if not isinstance(raw, str):
        return datetime.now(UTC)
    when = datetime.fromisoformat(raw.replace("Z", "+00:00"))
    return when if when.tzinfo else when.replace(tzinfo=UTC)


def user_number(user_id: str) -> str:
    """``phoenix-user-N`` for Phoenix's user id (a relay id: base64 of ``User:N``), the id itself if not one."""
    try:
        kind, _, number = base64.b64decode(user_id, validate=True).decode().partition(":")
    except (binascii.Error, UnicodeDecodeError, ValueError):
        return f"phoenix-user-{user_id}"
    return f"phoenix-user-{number}" if kind == "User" and number else f"phoenix-user-{user_id}"


def reviewer_of(annotation: Mapping[str, Any], users: Mapping[str, str], default: str | None) -> str | None:
    """Who made the annotation (see the module), or None when nothing names them and no default is given."""
    metadata = annotation.get("metadata") or {}
    for key in REVIEWER_KEYS:
        value = metadata.get(key) if isinstance(metadata, Mapping) else None
        if isinstance(value, str) and value.strip():
            return value
    user = annotation.get("user_id")
    if user:
        return users.get(str(user)) or user_number(str(user))
    identifier = annotation.get("identifier")
    if isinstance(identifier, str) and identifier.strip():
        return identifier
    return default


class _Index:
    """The scored answers by span and by trace: their row keys, the texts left on disk."""

    def __init__(self, scored: Sequence[str]) -> None:
        keys = scored_keys(scored, [S.TRACE_ID, S.SPAN_ID])
        missing = [c for c in (S.TRACE_ID, S.SPAN_ID) if c not in keys.columns]
        if missing:
            raise InputError(f"the scored tables have no {', '.join(missing)} column: Phoenix's annotations are of "
                             "spans, and only rows made of spans (a Phoenix project or span export scored) carry them")
        rows = keys.select(S.ROW_KEY, S.TRACE_ID, S.SPAN_ID).drop_nulls()
        self.span: dict[tuple[str, str], str] = {}
        self.trace: dict[str, list[str]] = {}
        for key, trace, span in rows.iter_rows():
            self.span[(trace, span)] = key
            self.trace.setdefault(trace, []).append(key)

    def answer(self, trace: str | None, span: str) -> tuple[str | None, bool]:
        """The row key of the answer the span is (or its trace's one answer: then True), None if none."""
        if trace is None:
            return None, False
        if (trace, span) in self.span:
            return self.span[(trace, span)], False
        answers = self.trace.get(trace, [])
        return (answers[0], True) if len(answers) == 1 else (None, False)


def _pages(client: PhoenixClient, project: str, spans: Iterable[list[Span]],
           names: Sequence[str]) -> Iterable[tuple[dict[str, str], list[dict[str, Any]]]]:
    """Per page of the project's spans: each span's trace, and the annotations of those spans."""
    for page in spans:
        traces = {span.span_id: span.trace_id for span in page}
        if traces:
            yield traces, client.span_annotations(project, list(traces), names)


def read_phoenix_labels(client: PhoenixClient, project: str, window: tuple[datetime | None, datetime | None],
                        scored: Sequence[str], raw: Sequence[str], scoring: ScoringSettings,
                        rule: AnnotationRule = AnnotationRule(), reviewer: str | None = None) -> PhoenixLabels:
    """People's labels among the annotations of the spans of ``project`` that started in ``window``, tied to
    the answers of the ``scored`` tables (see the module)."""
    index = _Index(scored)
    out = PhoenixLabels()
    pending: dict[tuple[str, str], _Pending] = {}
    users: dict[str, str] | None = None  # asked for once, and only when an annotation names a user
    nameless = 0
    for traces, page in _pages(client, project, client.spans(project, *window), rule.names()):
        for annotation in page:
            kind, name = str(annotation.get("annotator_kind")), str(annotation.get("name"))
            if kind != HUMAN or annotation.get("identifier") == IDENTIFIER:
                shown = "ours" if annotation.get("identifier") == IDENTIFIER else kind
                out.not_people[shown] = out.not_people.get(shown, 0) + 1
                continue
            out.read += 1
            span = str(annotation.get("span_id"))
            result = annotation.get("result") or {}
            if name == rule.name:
                value: bool | float | None = rule.hallucination(result)
            else:
                score = result.get("score")
                value = float(score) if score is not None and 0 <= float(score) <= 1 else None
            if value is None:
                out.unknown.append(f"{span} {name}={result.get('label') or result.get('score')!r}")
                continue
            key, through_trace = index.answer(traces.get(span), span)
            if key is None:
                out.unmatched.append(f"{traces.get(span)}/{span}")
                continue
            if annotation.get("user_id") and users is None:
                users = client.user_names()
            person = reviewer_of(annotation, users or {}, reviewer)
            if person is None:
                nameless += 1
                continue
            out.by_trace += through_trace
            slot = pending.setdefault((key, checked_reviewer(person)), _Pending())
            when = _time(annotation)
            if name in slot.when:
                out.superseded += 1
                if slot.when[name] >= when:
                    continue
            slot.when[name] = when
            if name == rule.name:
                slot.hallucinated = bool(value)
            else:
                slot.faithfulness = float(value)
    if nameless:
        raise InputError(f"{nameless} of people's annotation(s) name no person (no user, identifier or metadata "
                         "reviewer: a Phoenix without authentication): give --reviewer NAME for them")
    out.labels = _labels(pending, scored, raw, scoring)
    return out


def _labels(pending: Mapping[tuple[str, str], _Pending], scored: Sequence[str], raw: Sequence[str],
            scoring: ScoringSettings) -> list[Label]:
    """Each person's label of each answer, with the answer's lineage and content hash, as ``review import``'s."""
    keys = sorted({key for key, _ in pending})
    wanted = pl.DataFrame({S.ROW_KEY: keys}, schema={S.ROW_KEY: pl.String})
    items = {item.row_key: item for item in read_items(wanted, scored, raw, scoring)} if keys else {}
    labels = []
    for (key, person), slot in sorted(pending.items()):
        item = items[key]
        labels.append(Label(
            row_key=key, reviewer=person, label_hallucinated=slot.hallucinated, label_faithfulness=slot.faithfulness,
            labelled_at=max(slot.when.values()), content_hash=item.content_hash, scoring_run_id=item.scoring_run_id,
            judge_model=item.judge_model, prompt_version=item.prompt_version,
            inclusion_probability=item.inclusion_probability, source="phoenix",
        ))
    return labels


@dataclass(frozen=True, slots=True)
class Stored:
    new: int
    changed: int
    unchanged: int
    #: labels the store holds from the page or a table that are newer than the person's Phoenix annotation
    kept: int


def store_labels(store: LabelStore, labels: Sequence[Label]) -> Stored:
    """Writes ``labels``: a label already there alike is left, one given later elsewhere (the review page, a
    table) by the same person is kept over an older annotation; the rest are written in one transaction."""
    before = {(lb.row_key, lb.reviewer): lb for lb in store.labels([lb.row_key for lb in labels])}
    writes, new, unchanged, kept = [], 0, 0, 0
    for label in labels:
        old = before.get((label.row_key, label.reviewer))
        if old is None:
            new += 1
        elif old.source != "phoenix" and old.labelled_at > label.labelled_at:
            kept += 1
            continue
        elif old.values() == label.values():
            unchanged += 1
            continue
        writes.append(label)
    store.put(writes)
    return Stored(new, len(writes) - new, unchanged, kept)


def named(items: Sequence[str]) -> str:
    more = f" ... and {len(items) - _NAMED} more" if len(items) > _NAMED else ""
    return ", ".join(items[:_NAMED]) + more
