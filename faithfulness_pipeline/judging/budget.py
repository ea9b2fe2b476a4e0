"""A spend cap (``max_cost_usd``): what a run may pay for requests, reserved before each one leaves.

One :class:`Budget` belongs to one judge, so it caps one CLI or API run, or one Dagster partition step
(each step builds its judge). A judge that sends requests holds a request's worst cost before sending it
(its prompt tokens as counted, and its ``max_tokens`` of reply, at the model's prices), and once the reply
is in, lets go of the hold and spends what the request really cost. The first request whose hold would
cross the cap closes the budget: nothing more is sent in the run (a smaller request is not squeezed in
later, so what is left is a clean tail of the run, not a scatter), requests in flight finish, and every
item not sent gets a result with source ``skipped`` (``core.port``): its row has ``status = skipped`` and
null scores, is never dropped and never counted as an error.

The holds keep the run's spend under the cap up to the accuracy of the token count (ours against the
provider's tokenizer) and of the prices. A judge with no price cannot hold anything: building one with a
cap is refused (:func:`need_price`).
"""

from __future__ import annotations

import threading

from faithfulness_pipeline.core.errors import ConfigError
from faithfulness_pipeline.core.money import dollars


class Budget:
    """What one judge may still spend: ``cap_usd`` less what was spent and what requests in flight hold."""

    def __init__(self, cap_usd: float) -> None:
        if not cap_usd > 0:
            raise ConfigError(f"max_cost_usd must be above 0, not {cap_usd}")
        self.cap_usd = cap_usd
        self._lock = threading.Lock()  # the batch judge settles from worker threads' results too
        self._spent = 0.0
        self._held = 0.0
        self._closed = False
        self._refused = 0

    def hold(self, usd: float, share: float = 1.0) -> bool:
        """Reserves ``usd`` for a request about to leave; False (and closed from now on) when it would cross
        the cap, or the budget is closed already: then the request must not be sent.

        ``share`` < 1 asks for a part of what is left of the cap only (the batch judge's claims step, which
        leaves the rest to the verdicts of the claims it gets): a request that would cross that part is
        refused without closing the budget."""
        with self._lock:
            limit = self._spent + (self.cap_usd - self._spent) * share if share < 1 else self.cap_usd
            if self._closed or self._spent + self._held + usd > limit:
                self._closed = self._closed or share >= 1
                self._refused += 1
                return False
            self._held += usd
            return True

    def release(self, usd: float) -> None:
        """Gives back a hold (the request is answered, failed or was never sent)."""
        with self._lock:
            self._held = max(0.0, self._held - usd)

    def spend(self, usd: float) -> None:
        """What a request really cost."""
        with self._lock:
            self._spent += usd

    @property
    def spent_usd(self) -> float:
        with self._lock:
            return self._spent

    @property
    def reached(self) -> bool:
        """Whether a request was refused: the run has items it did not send."""
        with self._lock:
            return self._refused > 0

    def reason(self) -> str:
        """What a row not judged because of the cap says (its ``error`` column)."""
        return (f"skipped: the spend cap of {dollars(self.cap_usd)} (max_cost_usd) was reached before this row "
                "was judged; run again with a larger cap to judge it (stored results are not paid again)")

    def note(self) -> str | None:
        """The run summary's line about the cap, None while it was never reached."""
        with self._lock:
            if not self._refused:
                return None
            spent, refused = self._spent, self._refused
        return (f"the spend cap of {dollars(self.cap_usd)} (max_cost_usd) was reached after {dollars(spent)}: "
                f"{refused} requests were not sent and their rows have status skipped")


def need_price(cap_usd: float | None, priced: bool, model: str) -> None:
    """Refuses a cap for a model without a price: nothing could be held against it."""
    if cap_usd is not None and not priced:
        raise ConfigError(
            f"--max-cost-usd (max_cost_usd) needs the price of {model}, which litellm does not know: set "
            "--input-cost-per-token and --output-cost-per-token (FP_JUDGE_INPUT_COST_PER_TOKEN, "
            "FP_JUDGE_OUTPUT_COST_PER_TOKEN)"
        )
