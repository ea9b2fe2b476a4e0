"""Arize Phoenix as a source of spans and as the place scores go back to, through its REST API.

- ``PhoenixClient.spans``: a project's spans between two times, page by page (``GET
  /v1/projects/{project}/spans``, cursor paging): bounded memory, one page at a time;
- ``PhoenixClient.annotate``: the scores of rows made of spans as span annotations named ``hallucination`` and
  ``faithfulness`` (score, label, explanation; annotator kind LLM, or CODE for a baseline judge), under one
  identifier, so that a re-run updates them instead of adding more (``POST /v1/span_annotations``);
- ``PhoenixClient.span_annotations``: the annotations of given spans (``GET
  /v1/projects/{project}/span_annotations``, cursor paging), which ``review import`` reads people's labels from;
  ``user_names``: who Phoenix's users are, where the key may list them.

The API key (Phoenix's ``PHOENIX_API_KEY``) goes into the authorization header alone. Every call goes through
``traces.phoenix_http`` (a whole-request deadline, same-origin redirects, a reply that is a JSON object or a
one-line error with credentials scrubbed); here each span's fields are checked for their types as well."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from types import TracebackType
from typing import Any, Final
from urllib.parse import quote

import polars as pl

from faithfulness_pipeline.core import schema as S
from faithfulness_pipeline.core.errors import ConfigError, InputError
from faithfulness_pipeline.traces.attributes import flatten
from faithfulness_pipeline.traces.evaluations import COLUMNS, evaluation_columns, evaluations
from faithfulness_pipeline.traces.phoenix_http import PhoenixHttp, json_kind
from faithfulness_pipeline.traces.spans import Span, span_id_text
from faithfulness_pipeline.traces.urls import http_base

#: Phoenix's own variable for its API key, as its clients read it.
PHOENIX_KEY_ENV: Final = "PHOENIX_API_KEY"
#: The identifier of every annotation we write: the key Phoenix updates on, with the span and the name.
IDENTIFIER: Final = "faithfulness-pipeline"
_PAGE: Final = 1000
#: Span ids one annotations request may name (Phoenix's ``MAX_SPAN_IDS``).
SPAN_IDS_PER_REQUEST: Final = 1000
_POST_BATCH: Final = 500


@dataclass(slots=True)
class AnnotationsSent:
    endpoint: str
    rows: int = 0
    annotations: int = 0
    without_ids: int = 0
    #: why writing stopped (Phoenix refused a page, or did not answer), None when all was written
    error: str | None = None

    def line(self) -> str:
        missing = f"; {self.without_ids} row(s) have no trace_id/span_id" if self.without_ids else ""
        stopped = f", then stopped: {self.error}" if self.error else ""
        return f"phoenix annotations: {self.annotations} written to {self.endpoint}{stopped}{missing}"


#: A span's fields and the JSON types each may have (None: null or absent).
_FIELDS: Final[dict[str, tuple[type, ...]]] = {
    "context": (dict,), "attributes": (dict, type(None)), "start_time": (str, type(None)),
    "name": (str, type(None)), "parent_id": (str, type(None)), "span_kind": (str, type(None)),
}


def _span(item: Mapping[str, Any], wrong: Callable[[str], InputError]) -> Span | None:
    """The span of one item of a page; ``wrong`` makes the error of a field of the wrong type or form."""
    for field, types in _FIELDS.items():
        if not isinstance(item.get(field), types):
            raise wrong(f"{field} is {json_kind(item.get(field))}")
    context = item["context"]
    if not all(isinstance(context.get(k), (str, type(None))) for k in ("trace_id", "span_id")):
        raise wrong(f"context has a trace_id or span_id that is not text: {sorted(context)}")
    trace, own = span_id_text(context.get("trace_id")), span_id_text(context.get("span_id"))
    if trace is None or own is None:
        return None
    try:
        attributes = flatten(item.get("attributes") or {})
    except ValueError as exc:  # nested past MAX_DEPTH: the same refusal as a field of the wrong type
        raise wrong(str(exc)) from None
    kind = item.get("span_kind")
    if kind and "openinference.span.kind" not in attributes:
        attributes["openinference.span.kind"] = kind
    start: str | None = item.get("start_time")
    try:
        started = datetime.fromisoformat(start.replace("Z", "+00:00")) if start else None
    except ValueError:
        raise wrong(f"start_time {(start or '')[:40]!r} is no ISO time") from None
    return Span(trace, own, span_id_text(item.get("parent_id")), str(item.get("name") or ""), started, attributes)


def check_columns(columns: Iterable[str]) -> None:
    """A :class:`ConfigError` when a scored table of ``columns`` cannot give annotations (no span ids)."""
    missing = [c for c in (*COLUMNS, "judge_model") if c not in set(columns)]
    if missing:
        raise ConfigError(f"the scored table has no {', '.join(missing)} column(s): Phoenix annotations need "
                          "rows made of spans (traces as input, docs/traces.md)")


def check_endpoint(endpoint: str) -> None:
    """A :class:`ConfigError` when ``endpoint`` is no http(s) URL: before anything is paid for."""
    http_base(endpoint, "Phoenix endpoint", "http://127.0.0.1:6006")


def _annotations(row: dict[str, Any], threshold: float, scale: float,
                 kind_of: Callable[[str | None], str]) -> list[dict[str, Any]]:
    return [{
        "span_id": evaluation.span_id, "name": evaluation.name, "identifier": IDENTIFIER,
        "annotator_kind": kind_of(row["judge_model"]),
        "result": {"score": evaluation.score, "label": evaluation.label, "explanation": evaluation.explanation},
        "metadata": {"error.type": evaluation.error_type} if evaluation.error_type else {},
    } for evaluation in evaluations(row, threshold, scale)]


class PhoenixClient:
    def __init__(self, endpoint: str, api_key: str | None = None, timeout_s: float = 30.0) -> None:
        self._api = PhoenixHttp(endpoint, api_key, timeout_s)
        #: what messages name: no user info or query (credentials go there)
        self.endpoint = self._api.endpoint

    def __enter__(self) -> PhoenixClient:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self._api.close()

    def _pages(self, path: str, params: dict[str, Any]) -> Iterator[list[dict[str, Any]]]:
        return self._api.pages(path, params)

    def spans(
        self, project: str, start: datetime | None, end: datetime | None, page: int = _PAGE
    ) -> Iterator[list[Span]]:
        """The project's spans that started in [start, end), a page at a time."""
        params: dict[str, Any] = {"limit": page}
        if start is not None:
            params["start_time"] = start.isoformat()
        if end is not None:
            params["end_time"] = end.isoformat()
        path = f"/v1/projects/{quote(project, safe='')}/spans"
        for number, data in enumerate(self._pages(path, params), 1):
            def wrong(what: str, number: int = number) -> InputError:
                return self._api.error(f"sent a span (page {number} of GET {path}) whose {what}")
            yield [s for item in data if (s := _span(item, wrong)) is not None]

    def span_annotations(self, project: str, span_ids: Sequence[str], names: Sequence[str] = (),
                         page: int = _PAGE) -> list[dict[str, Any]]:
        """Every annotation of the spans ``span_ids`` of the project (of the names ``names``, given), as Phoenix
        gives them (``span_id``, ``name``, ``annotator_kind``, ``result``, ``identifier``, ``user_id``, ...)."""
        found: list[dict[str, Any]] = []
        ids = list(dict.fromkeys(span_ids))
        path = f"/v1/projects/{quote(project, safe='')}/span_annotations"
        for start in range(0, len(ids), SPAN_IDS_PER_REQUEST):
            params: dict[str, Any] = {"span_ids": ids[start:start + SPAN_IDS_PER_REQUEST], "limit": page}
            if names:
                params["include_annotation_names"] = list(names)
            for data in self._pages(path, params):
                found += data
        return found

    def user_names(self) -> dict[str, str]:
        """Phoenix's users' names by their id (``user_id`` of an annotation); empty where the key may not list
        them (only an admin's may) or the server has no users (no authentication): the ids stand in then."""
        names: dict[str, str] = {}
        try:
            for data in self._pages("/v1/users", {"limit": _PAGE}):
                names.update({str(u["id"]): str(u["username"]) for u in data if u.get("id") and u.get("username")})
        except InputError:
            return {}
        return names

    def annotate(self, frames: Iterable[pl.DataFrame], *, threshold: float, scale: float,
                 kind_of: Callable[[str | None], str]) -> AnnotationsSent:
        """Writes the scores of ``frames`` (scored rows made of spans, chunk by chunk) as span annotations;
        ``kind_of`` tells a row's annotator kind from its ``judge_model``. A page Phoenix refuses stops the
        writing and is reported in the result's ``error`` (what was written before it stays written)."""
        sent = AnnotationsSent(self.endpoint)
        pending: list[dict[str, Any]] = []
        try:
            for frame in frames:
                check_columns(frame.columns)
                for row in frame.select(*evaluation_columns(frame.columns), "judge_model").iter_rows(named=True):
                    sent.rows += 1
                    if not row[S.TRACE_ID] or not row[S.SPAN_ID]:
                        sent.without_ids += 1
                        continue
                    pending += _annotations(row, threshold, scale, kind_of)
                    if len(pending) >= _POST_BATCH:
                        sent.annotations += self._post(pending)
                        pending = []
            if pending:
                sent.annotations += self._post(pending)
        except InputError as exc:
            sent.error = str(exc)
        return sent

    def _post(self, data: list[dict[str, Any]]) -> int:
        # Phoenix answers a JSON object for what it took; anything else (a 204, a proxy's page) is refused in
        # _api.call: what returns here was taken.
        self._api.call("POST", "/v1/span_annotations", params={"sync": "true"}, json={"data": data})
        return len(data)
