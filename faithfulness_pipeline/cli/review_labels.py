"""``faithfulness-pipeline review serve | import | agreement``: people's labels of the review queue
(``faithfulness_pipeline.review``): the review page that takes them, labels made elsewhere brought into the
label store, and how far the reviewers agree. ``cli.review`` adds these commands to its group."""

from __future__ import annotations

import os
import sys
from contextlib import closing
from typing import Final, NoReturn

import click

from faithfulness_pipeline.cli.streams import unfailing_streams
from faithfulness_pipeline.core.agreement import Agreement, reviewer_agreement
from faithfulness_pipeline.core.errors import FaithfulnessPipelineError
from faithfulness_pipeline.review.imports import imported_labels
from faithfulness_pipeline.review.items import read_items, read_queue
from faithfulness_pipeline.review.session import ReviewSession, checked_reviewer
from faithfulness_pipeline.review.store import LabelStore, shown
from faithfulness_pipeline.settings.derive import from_env
from faithfulness_pipeline.settings.scoring import ScoringSettings
from faithfulness_pipeline.tables.read import read_all

#: Answers named in a line before "... and N more".
_NAMED: Final = 10
_STORE_HELP: Final = ("The label store: a SQLite file (*.sqlite, *.sqlite3, *.db; created if absent) or a "
                      "postgresql:// URL (the password in PGPASSWORD or ~/.pgpass rather than in the URL).")


def _failed(exc: FaithfulnessPipelineError) -> NoReturn:
    click.echo(f"error: {exc}", err=True)
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
@click.argument("table", metavar="TABLE")
@click.option("--store", required=True, metavar="PATH|URL", help=_STORE_HELP)
@click.option("--scored", multiple=True, required=True, metavar="SCORED",
              help="Scored table(s) the labels are of (files, folders, globs); repeat for several.")
@click.option("--raw", multiple=True, metavar="RAW",
              help="raw_conversations table(s) for a warehouse's scored table (the passages, for the content hash).")
@click.option("--reviewer", default=None, help="The reviewer of the labels whose row names none (no reviewer column).")
def import_command(table: str, store: str, scored: tuple[str, ...], raw: tuple[str, ...],
                   reviewer: str | None) -> None:
    """Bring the labels of TABLE (a spreadsheet's export as Parquet, JSON Lines or CSV: row_key, or the id and turn
    columns, and label_hallucinated and/or label_faithfulness; optionally reviewer, labelled_at,
    inclusion_probability) into --store. A label naming no answer of the scored tables is named, not stored."""
    with unfailing_streams():
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
