"""How the fake server is slow and how it fails: the service time it models (:class:`Latency`) and the faults it
injects on the chat endpoint and on batch lines alike (429, 5xx, malformed JSON, truncated JSON, hangs, streamed
replies that go silent halfway, replies that trickle in a byte at a time), chosen deterministically from the
request body, so that runs are reproducible whatever the arrival order and a retry of the same body can succeed.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Set
from dataclasses import dataclass, field
from typing import Final


@dataclass(frozen=True)
class Latency:
    """Modelled service time: ``base_s + per_output_token_s * completion_tokens``, slept, never spun.

    ``max_in_flight`` caps how many requests the "model" works on at once; the rest wait in FIFO order
    (they are queued, not rejected), like a provider's server-side concurrency. ``pause_s``: a streamed reply
    goes silent for that long halfway, then goes on, as llama.cpp's streams all do while it reads another
    request's prompt (it generates for no slot meanwhile).
    """

    base_s: float = 0.0
    per_output_token_s: float = 0.0
    max_in_flight: int | None = None
    pause_s: float = 0.0

    def __post_init__(self) -> None:
        if self.base_s < 0 or self.per_output_token_s < 0 or self.pause_s < 0:
            raise ValueError("latencies must be >= 0")
        if self.max_in_flight is not None and self.max_in_flight < 1:
            raise ValueError("max_in_flight must be >= 1 or None")



#: Fault outcomes in the order their probability bands are laid on [0, 1).
#: A band added later goes last, so that the bands before it, and every seed's faults, stay where they were.
_FAULT_ORDER: Final = ("429", "429_no_retry_after", "5xx", "malformed", "partial", "hang", "stall", "trickle")


@dataclass(frozen=True)
class FaultPlan:
    """Probabilities of each fault; whatever is left over is a normal reply.

    The decision for a request is a pure function of ``(seed, canonical JSON body, n)`` where ``n`` counts
    how many times this exact body has been seen (1 for the first), so a retry of the same body can
    succeed and the same set of requests gets the same faults whatever their arrival order.
    """

    rate_429: float = 0.0
    retry_after_s: float | None = 1.0  # None -> 429 without a Retry-After header
    rate_429_no_retry_after: float = 0.0
    rate_5xx: float = 0.0
    rate_malformed: float = 0.0  # 200 whose content is not JSON at all
    rate_partial: float = 0.0  # 200 whose content is the responder's reply cut in its middle third
    rate_hang: float = 0.0  # never answers, until the client goes away or the server stops
    #: A streamed reply whose first half is sent, then nothing, until the client goes away or the server stops
    #: (a server that died mid-generation with the connection still open). A plain request just hangs.
    rate_stall: float = 0.0
    #: A reply (whole or streamed, as asked) whose bytes are sent one at a time, ``trickle_s`` apart: a server
    #: or proxy that is alive, never silent for long, and never done. Batch lines answer it as a normal reply.
    rate_trickle: float = 0.0
    trickle_s: float = 0.5
    seed: int = 0
    status_5xx: int = 500
    #: A provider's limit on requests in flight per key: a request that arrives while this many are open is
    #: refused with a 429 (and ``retry_after_s``), whatever its body. None: no limit.
    max_concurrent: int | None = None

    def __post_init__(self) -> None:
        if self.max_concurrent is not None and self.max_concurrent < 1:
            raise ValueError("max_concurrent must be >= 1 or None")
        rates = self._rates()
        if any(r < 0 or r > 1 for r in rates):
            raise ValueError("fault rates must lie in [0, 1]")
        if sum(rates) > 1 + 1e-9:
            raise ValueError(f"fault rates add up to {sum(rates)} > 1")
        if not 500 <= self.status_5xx <= 599:
            raise ValueError("status_5xx must be a 5xx status")
        if self.retry_after_s is not None and self.retry_after_s < 0:
            raise ValueError("retry_after_s must be >= 0 or None")
        if not self.trickle_s > 0:
            raise ValueError("trickle_s must be > 0")

    def _rates(self) -> tuple[float, ...]:
        return (
            self.rate_429,
            self.rate_429_no_retry_after,
            self.rate_5xx,
            self.rate_malformed,
            self.rate_partial,
            self.rate_hang,
            self.rate_stall,
            self.rate_trickle,
        )

    def decide(self, canonical_body: bytes, nth: int) -> str:
        """The outcome for the ``nth`` arrival of this body: "ok" or one of the fault names."""
        digest = hashlib.sha256(f"{self.seed}\x00{nth}\x00".encode() + canonical_body).digest()
        u = int.from_bytes(digest[:8], "big") / 2**64
        edge = 0.0
        for name, rate in zip(_FAULT_ORDER, self._rates(), strict=True):
            edge += rate
            if u < edge:
                return name
        return "ok"



#: Not JSON, and without braces, so that lenient "find the JSON object" parsers fail too.
MALFORMED_CONTENT: Final = "Sure! Here is my assessment: the statements look mostly fine to me, thanks for asking."


@dataclass(frozen=True)
class BatchTiming:
    """How long each phase lasts, in seconds (tests run a 24 h window in a fraction of a second)."""

    validating_s: float = 0.05
    per_line_s: float = 0.002  # before each line is answered, while in_progress
    finalizing_s: float = 0.05
    cancelling_s: float = 0.05  # from "cancelling" to "cancelled", once the current line is done

    def __post_init__(self) -> None:
        if min(self.validating_s, self.per_line_s, self.finalizing_s, self.cancelling_s) < 0:
            raise ValueError("batch phase durations must be >= 0")


@dataclass(frozen=True)
class BatchFaults:
    """Batch-level faults. Ordinals are 1-based and count the batches created since these faults were
    set (construction, ``set_batch_faults`` or ``reset_stats``), so "the next batch" is ordinal 1.

    * ``create_429``: the first N ``POST /v1/batches`` get a 429 with ``Retry-After: retry_after_s``
      (no header when None);
    * ``fail_validation``: these batches end "failed" after validating, whatever their input;
    * ``expire_after``: ordinal -> K: the batch expires once K of its lines are answered; the output
      and error files hold what was done, and every unanswered line is in the error file with the
      error code ``batch_expired``;
    * ``stall_after``: ordinal -> K: after K lines the batch makes no progress until it is cancelled
      (for deterministic cancel tests);
    * ``line_faults``: the FaultPlan for batch lines; None uses the server's chat FaultPlan.
    """

    create_429: int = 0
    retry_after_s: float | None = 0.05
    fail_validation: Set[int] = frozenset()
    expire_after: Mapping[int, int] = field(default_factory=dict)
    stall_after: Mapping[int, int] = field(default_factory=dict)
    line_faults: FaultPlan | None = None

    def __post_init__(self) -> None:
        # Accept any iterable of ordinals (a set literal, a list) and keep the object immutable.
        object.__setattr__(self, "fail_validation", frozenset(self.fail_validation))
        object.__setattr__(self, "expire_after", dict(self.expire_after))
        object.__setattr__(self, "stall_after", dict(self.stall_after))
        if self.create_429 < 0:
            raise ValueError("create_429 must be >= 0")
        if self.retry_after_s is not None and self.retry_after_s < 0:
            raise ValueError("retry_after_s must be >= 0 or None")
        ordinals: Iterable[int] = [*self.fail_validation, *self.expire_after, *self.stall_after]
        if any(n < 1 for n in ordinals):
            raise ValueError("batch ordinals are 1-based")
        if any(k < 0 for k in [*self.expire_after.values(), *self.stall_after.values()]):
            raise ValueError("line counts must be >= 0")
