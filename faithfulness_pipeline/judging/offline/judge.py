"""The offline judge: a deterministic lexical baseline that needs no network and no API key.

:class:`OfflineJudge` puts the rules of :mod:`~faithfulness_pipeline.judging.offline.rules` behind the
judge port. Kept apart from those rules: the judge's names (``OFFLINE_*``, which key stored results) and
the process pool that shares a large batch between this process and worker processes, machinery that
changes no verdict.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import tempfile
import weakref
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Final, TypeVar

from faithfulness_pipeline.core.errors import ConfigError
from faithfulness_pipeline.core.port import (
    ClaimVerdict,
    ExtractItem,
    ExtractResult,
    Hooks,
    JudgeStats,
    ProgressCallback,
    ResultScope,
    Verdict,
    VerdictItem,
    VerdictResult,
)
from faithfulness_pipeline.judging.offline.rules import extract_claims, judge_claims

OFFLINE_MODEL_NAME = "offline-lexical-v1"
#: Bump whenever the algorithm or its constants change: stored results are keyed by it.
OFFLINE_PROMPT_VERSION = "offline-lexical-2"
#: What a run scored by this judge says about it (CLI summary, calibrate, the Dagster check and the demo):
#: it is the fallback when no model is set, and its agreement with people is a baseline, not the product's.
OFFLINE_FALLBACK_NOTE = (
    "scored by the offline baseline judge (lexical rules, no LLM) because no model is set (--model / "
    "FP_JUDGE_MODEL); it agrees with human labels only as a baseline (balanced accuracy about 0.6 on rows its "
    "rules were not fitted to; docs/judges.md, 'The offline baseline'): set a model for the product's scores"
)

#: Items handled between progress reports and event-loop yields; also the piece of a batch that
#: one process judges at a time when several share it.
_CHUNK = 256
#: Batches up to this many items are cut in pieces of ``_CHUNK``; larger ones in pieces that shrink
#: to ``_MIN_PIECE`` items where the workers' end and this process's end meet (see ``_piece``).
_FIXED_PIECES_UP_TO = 4 * _CHUNK
_MIN_PIECE = 32


#: Environment variable: how many processes (this one included) judge a large batch of claims.
PROCESSES_ENV = "FAITHFULNESS_OFFLINE_PROCESSES"
#: A batch with fewer items is done in this process alone: a worker process costs about a second
#: to start (it imports the package), which only a large batch repays.
PARALLEL_MIN_ITEMS = 2000
#: At most this many processes by default; the judge is CPU-bound, so more than the cores is waste.
_MAX_DEFAULT_PROCESSES = 4

#: A verdict as it crosses a process boundary: plain tuples pickle several times faster.
_WireVerdict = tuple[Verdict, bool, str | None, int | None]


def default_processes() -> int:
    """``FAITHFULNESS_OFFLINE_PROCESSES`` if set, else the usable cores (at most 4)."""
    raw = os.environ.get(PROCESSES_ENV, "").strip()
    if raw:
        try:
            value = int(raw)
        except ValueError:
            raise ConfigError(f"{PROCESSES_ENV} must be a whole number of processes, got {raw!r}") from None
        if value < 1:
            raise ConfigError(f"{PROCESSES_ENV} must be at least 1, got {value}")
        return value
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, min(cores, _MAX_DEFAULT_PROCESSES))


_Work = TypeVar("_Work")
_Wire = TypeVar("_Wire")
_Result = TypeVar("_Result")
#: One verdict item as it is sent to a worker: (claims, context).
_VerdictWork = tuple[tuple[str, ...], tuple[str, ...]]


def _judge_item(work: _VerdictWork) -> tuple[ClaimVerdict, ...]:
    return judge_claims(*work)


def _judge_in_worker(work: list[_VerdictWork]) -> list[tuple[_WireVerdict, ...]]:
    return [
        tuple((v.verdict, v.speculative, v.reason, v.evidence) for v in judge_claims(claims, context))
        for claims, context in work
    ]


def _from_wire(judged: list[tuple[_WireVerdict, ...]]) -> list[tuple[ClaimVerdict, ...]]:
    return [tuple(ClaimVerdict(*v) for v in verdicts) for verdicts in judged]


def _extract_in_worker(answers: list[str]) -> list[tuple[str, ...]]:
    return [extract_claims(answer) for answer in answers]


#: The fork server listens on a Unix socket at <temp dir>/pymp-XXXXXXXX/listener-XXXXXXXX (multiprocessing's
#: own naming), and a socket path holds at most 107 bytes: under a longer temp dir no worker could start.
SOCKET_PATH_MAX: Final = 107
FORK_SERVER_SOCKET_TAIL: Final = len("/pymp-XXXXXXXX/listener-XXXXXXXX")


def fork_server_fits() -> bool:
    """Whether a fork server can start here: the OS has it and the temporary folder is short enough for
    its socket's path (a long TMPDIR, as some CI runners and sandboxes set, is not)."""
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return False
    return len(os.fsencode(tempfile.gettempdir())) + FORK_SERVER_SOCKET_TAIL <= SOCKET_PATH_MAX


def start_method() -> str:
    """How worker processes start: from a fork server where one fits, else as fresh interpreters."""
    return "forkserver" if fork_server_fits() else "spawn"


class OfflineJudge:
    """Deterministic lexical judge (implements :class:`~faithfulness_pipeline.core.port.Judge`).

    It costs nothing: every result carries zero usage and the stats stay at zero requests.
    The judgement of an item depends on that item alone, so results can be cached per item, and a
    large batch can be split across processes without changing any result: with ``processes`` > 1
    (default: :func:`default_processes`), batches of at least ``parallel_min_items`` verdict items
    are shared between this process and ``processes - 1`` worker processes, and every result is put
    back in its item's place; claim extraction is shared the same way.

    Workers start from a fork server and import the package; like every multiprocessing program,
    a script that scores large tables this way needs an ``if __name__ == "__main__":`` guard (the
    workers import the main module). ``FAITHFULNESS_OFFLINE_PROCESSES=1`` keeps everything in one
    process. If a worker dies, its pieces and all later ones are judged in this process.
    """

    model_name: str = OFFLINE_MODEL_NAME
    prompt_version: str = OFFLINE_PROMPT_VERSION

    def __init__(self, processes: int | None = None, parallel_min_items: int = PARALLEL_MIN_ITEMS) -> None:
        # The caveat travels with the judge's counts, so every summary of a run says what scored it.
        self._stats = JudgeStats(notes=[OFFLINE_FALLBACK_NOTE])
        self._processes = default_processes() if processes is None else processes
        if self._processes < 1:
            raise ConfigError(f"processes must be at least 1, got {self._processes}")
        self._parallel_min_items = parallel_min_items
        self._pool: ProcessPoolExecutor | None = None
        self._pool_failed = False
        self._worker_pieces = 0

    @property
    def processes(self) -> int:
        """How many processes (this one included) share a large batch of verdict items."""
        return self._processes

    @property
    def worker_pieces(self) -> int:
        """How many pieces (of up to 256 items) worker processes have done so far."""
        return self._worker_pieces

    def _pool_for(self, n_items: int) -> ProcessPoolExecutor | None:
        if self._processes < 2 or self._pool_failed or n_items < self._parallel_min_items:
            return None
        if multiprocessing.current_process().daemon:
            # A daemonic process may not start children (a Celery prefork worker's step, a multiprocessing
            # pool's task): everything is judged here, as with FAITHFULNESS_OFFLINE_PROCESSES=1.
            return None
        if self._pool is None:
            # forkserver: workers start from a clean process, not a fork of this one (which may hold
            # polars' threads and locks).
            try:
                self._pool = ProcessPoolExecutor(
                    max_workers=self._processes - 1, mp_context=multiprocessing.get_context(start_method())
                )
            except (OSError, ValueError, RuntimeError):
                self._drop_pool()
                return None
            weakref.finalize(self, self._pool.shutdown, wait=False, cancel_futures=True)
        return self._pool

    def _drop_pool(self) -> None:
        """After a worker failure every piece is judged here: same results, only slower."""
        self._pool_failed = True
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None

    async def extract_claims(
        self, items: Sequence[ExtractItem], hooks: Hooks[ExtractResult] | None = None
    ) -> list[ExtractResult]:
        progress = hooks.progress if hooks is not None else None
        claims = await self._share([it.answer for it in items], extract_claims, _extract_in_worker, list, progress)
        return [ExtractResult(it.id, found, source="offline") for it, found in zip(items, claims, strict=True)]

    async def judge_claims(
        self, items: Sequence[VerdictItem], hooks: Hooks[VerdictResult] | None = None
    ) -> list[VerdictResult]:
        work = [(it.claims, it.context) for it in items]
        progress = hooks.progress if hooks is not None else None
        verdicts = await self._share(work, _judge_item, _judge_in_worker, _from_wire, progress)
        return [VerdictResult(id=it.id, verdicts=v, source="offline") for it, v in zip(items, verdicts, strict=True)]

    def result_scope(self) -> ResultScope:
        """Its results depend on the item and the algorithm's version alone."""
        return ResultScope(
            extract=("extract", OFFLINE_MODEL_NAME, OFFLINE_PROMPT_VERSION),
            verdict=("verdict", OFFLINE_MODEL_NAME, OFFLINE_PROMPT_VERSION),
            row=("row", OFFLINE_MODEL_NAME, OFFLINE_PROMPT_VERSION),
        )

    async def _share(
        self,
        work: list[_Work],
        here: Callable[[_Work], _Result],
        there: Callable[[list[_Work]], list[_Wire]],
        received: Callable[[list[_Wire]], list[_Result]],
        progress: ProgressCallback | None,
    ) -> list[_Result]:
        """``[here(w) for w in work]``, in pieces; with workers, they do ``there`` on pieces from the
        front while this process works from the back, so neither waits for the other."""
        total = len(work)
        done: dict[int, list[_Result]] = {}  # by the piece's first item
        running: dict[int, tuple[int, Future[list[_Wire]]]] = {}  # first item -> (end, future)
        depth = 2 * (self._processes - 1)  # pieces queued per worker: it never waits for this process
        front, back = 0, total
        while front < back or running:
            pool = self._pool_for(total)
            while pool is not None and front < back and len(running) < depth:
                end = front + self._piece(back - front, total, shared=True)
                try:
                    running[front] = (end, pool.submit(there, work[front:end]))
                except (BrokenProcessPool, RuntimeError, OSError):  # OSError: the workers could not start
                    self._drop_pool()
                    break
                front = end
            if front < back:
                start = back - self._piece(back - front, total, shared=self._pool is not None)
                done[start] = [here(w) for w in work[start:back]]
                await _report(progress, back - start)
                back = start
            elif running:
                futures = [asyncio.wrap_future(f) for _, f in running.values()]
                await asyncio.wait(futures, return_when=FIRST_COMPLETED)
            for start in [i for i, (_, f) in running.items() if f.done()]:
                end, future = running.pop(start)
                if not future.cancelled() and future.exception() is None:
                    done[start] = received(future.result())
                    self._worker_pieces += 1
                else:
                    # A worker died (killed, out of memory), a piece could not be sent, or the judge
                    # has a bug: the piece is done here, where a bug raises as it would without
                    # workers, and so is every piece after it.
                    self._drop_pool()
                    done[start] = [here(w) for w in work[start:end]]
                await _report(progress, end - start)
            if self._pool is None and running:
                for start in list(running):  # pieces a dropped pool still held
                    end, future = running.pop(start)
                    future.cancel()
                    done[start] = [here(w) for w in work[start:end]]
                    await _report(progress, end - start)
        return [result for start in sorted(done) for result in done[start]]

    def _piece(self, left: int, total: int, *, shared: bool) -> int:
        """How many of the ``left`` items not yet given out the next piece takes.

        A large batch shared with workers is cut finer as its two ends meet: whoever finishes first
        then waits for at most a few small pieces, not for two full ones (with typical RAG rows a
        full piece is a tenth of a second of one core, and a pipeline chunk makes two batches).
        """
        if not shared or total <= _FIXED_PIECES_UP_TO:
            return min(_CHUNK, left)
        return min(left, max(_MIN_PIECE, min(_CHUNK, left // (2 * self._processes))))

    def stats(self) -> JudgeStats:
        return self._stats

    async def aclose(self) -> None:
        if self._pool is not None:
            pool, self._pool = self._pool, None
            await asyncio.to_thread(pool.shutdown, wait=True, cancel_futures=True)


async def _report(progress: ProgressCallback | None, n: int) -> None:
    if progress is not None:
        progress(n)
    await asyncio.sleep(0)  # let other tasks (progress bars, a concurrent step) run between chunks
