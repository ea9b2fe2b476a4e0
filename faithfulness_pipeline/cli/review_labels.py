"""``faithfulness-pipeline review serve | import | agreement``: people's labels of the review queue
(``faithfulness_pipeline.review``): the review page that takes them, labels made elsewhere (a table, or people's
span annotations in Phoenix) brought into the label store, and how far the reviewers agree. ``cli.review`` adds
these commands to its group."""

from __future__ import annotations

import os
import sys
from contextlib import closing
from typing import TYPE_CHECKING, Final, NoReturn

import click

from faithfulness_pipeline.cli.streams import unfailing_streams
from faithfulness_pipeline.core.agreement import Agreement, reviewer_agreement
from faithfulness_pipeline.core.errors import FaithfulnessPipelineError, InputError
from faithfulness_pipeline.review.imports import imported_labels
from faithfulness_pipeline.review.items import read_items, read_queue
from faithfulness_pipeline.review.session import ReviewSession, checked_reviewer
from faithfulness_pipeline.review.store import LabelStore, shown
from faithfulness_pipeline.settings.derive import from_env
from faithfulness_pipeline.settings.scoring import ScoringSettings
from faithfulness_pipeline.tables.read import read_all
from faithfulness_pipeline.traces.urls import scrubbed

if TYPE_CHECKING:
    from faithfulness_pipeline.review.phoenix_labels import AnnotationRule

#: Answers named in a line before "... and N more".
_NAMED: Final = 10
_STORE_HELP: Final = ("The label store: a SQLite file (*.sqlite, *.sqlite3, *.db; created if absent) or a "
                      "postgresql:// URL (the password in PGPASSWORD or ~/.pgpass rather than in the URL).")


def _failed(exc: FaithfulnessPipelineError) -> NoReturn:
    # an input refusal may quote a Phoenix URL with its password or api_key
    click.echo(f"error: {scrubbed(str(exc))}", err=True)
    sys.exit(2)


def _named(keys: list[str]) -> str:
    more = f" ... and {len(keys) - _NAMED} more" if len(keys) > _NAMED else ""
    return ", ".join(keys[:_NAMED]) + more


@click.command("serve")
@click.argument("queue", metavar="QUEUE")
@click.option("--scored", multiple=True, required=True, metavar="SCORED",
              help="Scored table(s) the queue was drawn from (files, folders, globs); repeat for several.")
@click.option("--raw", multiple=True, metavar="RAW",
              help="raw_conversations table(s) for a warehouse's scored table, which leaves the passages there.")
@click.option("--store", required=True, metavar="PATH|URL", help=_STORE_HELP)
@click.option("--reviewer", default=None, help="The reviewer's name when the page is opened without ?reviewer=.")
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to listen on; any but this machine's own needs --token.")
@click.option("--port", default=0, show_default=True, type=click.IntRange(0, 65535),
              help="Port to listen on (0: a free one, printed).")
@click.option("--token", default=None, help="A secret every request must carry (given once as ?token=, then kept "
              "in a cookie); required with a --host other than 127.0.0.1.")
def serve_command(queue: str, scored: tuple[str, ...], raw: tuple[str, ...], store: str, reviewer: str | None,
                  host: str, port: int, token: str | None) -> None:
    """Serve the review page of QUEUE (a review queue: `review sample`'s file or the Dagster review_queue table):
    one answer at a time, blind to the judge until labelled, each label written to --store at once."""
    # The web stack here only: every other command starts without it.
    from faithfulness_pipeline.review.app import build_app
    from faithfulness_pipeline.review.serve import bound_socket, check_binding, is_loopback, serve

    with unfailing_streams():
        try:
            check_binding(host, token)
            if reviewer is not None:
                checked_reviewer(reviewer)
            scoring = from_env(ScoringSettings, os.environ)
            items = read_items(read_queue([queue]), scored, raw, scoring)
            labels = LabelStore(store)
            listener = bound_socket(host, port)
        except FaithfulnessPipelineError as exc:
            _failed(exc)
        with closing(labels):
            app = build_app(ReviewSession(items, labels), token=token, reviewer=reviewer, host=host)

            def ready(url: str) -> None:
                first = url + ("" if reviewer is not None else "?reviewer=YOUR-NAME")
                if token is not None:  # the token itself is never printed: logs of this output outlive the run
                    first += ("&" if "?" in first else "?") + "token=YOUR-TOKEN"
                click.echo(f"review page: {url} ({len(items)} answers of {queue}; labels to {labels.location})")
                click.echo(f"open {first}" + ("" if is_loopback(host) else "  (reachable from other machines)"))
                sys.stdout.flush()

            serve(app, listener, ready)
        click.echo(f"review page stopped; every label given is in {labels.location}")


@click.command("import")
@click.argument("table", metavar="TABLE|PHOENIX")
@click.option("--store", required=True, metavar="PATH|URL", help=_STORE_HELP)
@click.option("--scored", multiple=True, required=True, metavar="SCORED",
              help="Scored table(s) the labels are of (files, folders, globs); repeat for several.")
@click.option("--raw", multiple=True, metavar="RAW",
              help="raw_conversations table(s) for a warehouse's scored table (the passages, for the content hash).")
@click.option("--reviewer", default=None, help="The reviewer of the labels whose row (or Phoenix annotation) names "
              "none.")
@click.option("--annotation-name", default=None, metavar="NAME",
              help="Phoenix: the annotation people mark hallucinations with. [default: hallucination]")
@click.option("--hallucinated-label", multiple=True, metavar="LABEL",
              help="Phoenix: a label that means hallucinated; repeat for several. [default: hallucinated]")
@click.option("--factual-label", multiple=True, metavar="LABEL",
              help="Phoenix: a label that means not hallucinated; repeat for several. [default: factual, "
              "not_hallucinated]")
@click.option("--score-threshold", type=float, default=None, metavar="SCORE",
              help="Phoenix: an annotation with a score and no label is hallucinated at this score or more. "
              "[default: 0.5]")
@click.option("--faithfulness-name", default=None, metavar="NAME",
              help="Phoenix: the annotation whose score (0-1) is label_faithfulness ('' for none). "
              "[default: faithfulness]")
def import_command(table: str, store: str, scored: tuple[str, ...], raw: tuple[str, ...], reviewer: str | None,
                   annotation_name: str | None, hallucinated_label: tuple[str, ...], factual_label: tuple[str, ...],
                   score_threshold: float | None, faithfulness_name: str | None) -> None:
    """Bring the labels of TABLE (a spreadsheet's export as Parquet, JSON Lines or CSV: row_key, or the id and turn
    columns, and label_hallucinated and/or label_faithfulness; optionally reviewer, labelled_at,
    inclusion_probability) into --store. A label naming no answer of the scored tables is named, not stored.

    Or people's span annotations of a Phoenix project (phoenix+http://HOST:6006/projects/NAME, optionally
    ?start=...&end=...; the key in PHOENIX_API_KEY), of the scored answers those spans became."""
    # Phoenix's client (httpx) only for a Phoenix project: every other command starts without it.
    from faithfulness_pipeline.review.phoenix_labels import AnnotationRule
    from faithfulness_pipeline.sources.phoenix import is_phoenix

    given = {"--annotation-name": annotation_name, "--hallucinated-label": hallucinated_label,
             "--factual-label": factual_label, "--score-threshold": score_threshold,
             "--faithfulness-name": faithfulness_name}
    with unfailing_streams():
        if is_phoenix(table):
            defaults = AnnotationRule()
            rule = AnnotationRule(
                name=annotation_name or defaults.name, hallucinated=hallucinated_label or defaults.hallucinated,
                factual=factual_label or defaults.factual,
                threshold=defaults.threshold if score_threshold is None else score_threshold,
                faithfulness=defaults.faithfulness if faithfulness_name is None else (faithfulness_name or None))
            _import_phoenix(table, store, scored, raw, reviewer, rule)
            return
        wrong = [flag for flag, value in given.items() if value not in (None, ())]
        if wrong:
            _failed(InputError(f"{', '.join(wrong)} read Phoenix's annotations: TABLE {table!r} is a table (a Phoenix "
                               "project is phoenix+http://HOST:6006/projects/NAME)"))
        try:
            scoring = from_env(ScoringSettings, os.environ)
            ids = frozenset(c for c in ("row_key", scoring.id_column, scoring.turn_column, scoring.key_column) if c)
            result = imported_labels(read_all(table, ids), scored, raw, scoring, reviewer)
            with closing(LabelStore(store)) as labels:
                written = labels.put(result.labels)
                location = labels.location
        except FaithfulnessPipelineError as exc:
            _failed(exc)
        reviewers = sorted({label.reviewer for label in result.labels})
        click.echo(f"imported {written} label(s) of {len({lb.row_key for lb in result.labels})} answer(s) by "
                   f"{len(reviewers)} reviewer(s) ({', '.join(reviewers)}) into {location}")
        if result.blank:
            click.echo(f"{result.blank} row(s) of {table} hold no label (neither label column filled in): skipped")
        if result.unmatched:
            click.echo(f"{len(result.unmatched)} label(s) name no scored answer and were not imported: "
                       f"{_named(result.unmatched)}", err=True)


def _import_phoenix(spec: str, store: str, scored: tuple[str, ...], raw: tuple[str, ...], reviewer: str | None,
                    rule: AnnotationRule) -> None:
    """``review import PHOENIX``: people's annotations of the project into the store, and what was left out."""
    from faithfulness_pipeline.review.phoenix_labels import named, read_phoenix_labels, store_labels
    from faithfulness_pipeline.traces.phoenix import PHOENIX_KEY_ENV, PhoenixClient
    from faithfulness_pipeline.traces.staging import phoenix_project

    try:
        if reviewer is not None:
            checked_reviewer(reviewer)
        scoring = from_env(ScoringSettings, os.environ)
        endpoint, project, start, end = phoenix_project(spec)
        with PhoenixClient(endpoint, os.environ.get(PHOENIX_KEY_ENV)) as client:
            found = read_phoenix_labels(client, project, (start, end), scored, raw, scoring, rule, reviewer)
            where = client.endpoint
        with closing(LabelStore(store)) as labels:
            stored = store_labels(labels, found.labels)
            location = labels.location
    except FaithfulnessPipelineError as exc:
        _failed(exc)
    reviewers = sorted({label.reviewer for label in found.labels})
    click.echo(f"phoenix: {found.read} of people's annotation(s) of project {project!r} at {where}")
    click.echo(f"imported {len(found.labels)} label(s) of {len({lb.row_key for lb in found.labels})} answer(s) by "
               f"{len(reviewers)} reviewer(s) ({', '.join(reviewers)}) into {location}: {stored.new} new, "
               f"{stored.changed} changed, {stored.unchanged} already there")
    if stored.kept:
        click.echo(f"{stored.kept} label(s) given later on the review page or by a table were kept over older "
                   "annotations of the same person")
    if found.by_trace:
        click.echo(f"{found.by_trace} annotation(s) of another span of a trace went to its one scored answer")
    if found.superseded:
        click.echo(f"{found.superseded} older annotation(s) of an answer by the same person: the newest kept")
    if found.not_people:
        kinds = ", ".join(f"{n} {kind}" for kind, n in sorted(found.not_people.items()))
        click.echo(f"skipped {sum(found.not_people.values())} annotation(s) that are not people's ({kinds})")
    if found.unknown:
        click.echo(f"{len(found.unknown)} annotation(s) hold a value that is no label here and were not imported "
                   f"(labels known: {', '.join(rule.hallucinated)} | {', '.join(rule.factual)}; or a score alone): "
                   f"{named(found.unknown)}", err=True)
    if found.unmatched:
        click.echo(f"{len(found.unmatched)} annotation(s) are of spans that are no scored answer and were not "
                   f"imported: {named(found.unmatched)}", err=True)


def render_agreement(agreement: Agreement) -> str:
    """The reviewers, each pair's agreement on the answers both labelled, and the answers they split on."""
    counts = ", ".join(f"{name} {n}" for name, n in agreement.reviewers.items())
    lines = [f"{len(agreement.reviewers)} reviewer(s): {counts or 'none'}"]
    if not agreement.pairs.height:
        lines.append("no answer is labelled by two reviewers: no agreement to measure")
    for pair in agreement.pairs.iter_rows(named=True):
        kappa = "n/a (one mark from both on every answer)" if pair["kappa"] is None else f"{pair['kappa']:.3f}"
        lines.append(f"{pair['reviewer_a']} & {pair['reviewer_b']}: {pair['answers']} answer(s) in common, "
                     f"{pair['agreeing']} agreeing ({pair['share_agreeing']:.3f}), Cohen's kappa {kappa}")
    split = agreement.split
    if split.height:
        named = [f"{row['row_key']} (hallucinated: {', '.join(row['hallucinated_by'])}; not: "
                 f"{', '.join(row['not_hallucinated_by'])})" for row in split.head(_NAMED).iter_rows(named=True)]
        more = f" ... and {split.height - _NAMED} more" if split.height > _NAMED else ""
        lines.append(f"{split.height} answer(s) the reviewers split on: " + "; ".join(named) + more)
    elif agreement.pairs.height:
        lines.append("no answer the reviewers split on")
    return "\n".join(lines)


@click.command("agreement")
@click.option("--store", required=True, metavar="PATH|URL", help="The label store (a SQLite file or a postgresql:// "
              "URL), or a table of labels with a reviewer column.")
def agreement_command(store: str) -> None:
    """How far the reviewers of --store agree: per pair, on the answers both labelled, how many, the share they
    marked alike and Cohen's kappa; and the answers they split on, named."""
    from faithfulness_pipeline.review.labels import read_labels

    with unfailing_streams():
        try:
            agreement = reviewer_agreement(read_labels(store))
        except FaithfulnessPipelineError as exc:
            _failed(exc)
        click.echo(f"labels of {shown(store)}")
        click.echo(render_agreement(agreement))
