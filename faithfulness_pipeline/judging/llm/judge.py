"""The product's judge: every LLM call goes through litellm, packed, limited, retried and costed.

Only the ``judging.llm`` modules import litellm, only inside functions (the import costs seconds;
importing them must not) and only through ``card.import_litellm`` (which keeps litellm from downloading
its price map). The judge is split by what each part holds:

- ``judge`` (this module): :class:`LiteLLMJudge`, built once per run: the key, the model card, the
  limiter, the sender and the sizing; the port, the result scope, stats and the dry run's estimate;
- ``runner``: :class:`PackRunner`, a plan's packs run through the limiter and the sender: the retry
  policy, splitting, and the usage of each request charged to its items;
- ``card``: the model card (window, output limit, prices) and the offline token counter (the settings
  themselves are ``settings.judge``; ``part_settings`` cuts them into what each part reads);
- ``secrets``: the API key, read from the environment, and the :class:`Redactor`;
- ``plans``: what a step's items become: packing entries, prompts (``prompts``), parsing (``parsing``),
  results; ``packing`` fits entries into requests;
- ``runner``'s parts: ``tries`` (how often a pack's items were tried), ``turns`` (what the calls share
  on the loop: counting turns, the bound on packs under way, a request's head start) and ``format_breaker``
  (a model that never writes the reply format is stopped after a few unusable replies);
- ``evidence``: how a verdict's pointer to a passage that does not exist is read (never a failed item);
- ``chat``: one request of a pack (messages, reply budget, schema, body), the same for batch lines;
- ``requests``: the one place a request is sent (``Sender``), with what came back (``replies``), a
  streamed reply's reading (``streams``), the streams given up when the run must stop (``in_flight``) and
  what a failure says (``failures``); ``limits`` the shared request limiter.

A result store is not this judge's business: the judge stack (``judging.stack``) wraps it (as it wraps
any judge), and this judge tells it each result the moment it validates and asks it, right before a
request leaves, whether its items were stored meanwhile (``core.port.Hooks``).

Per step (claims, then verdicts) a call to the judge:

1. answers what needs no request (empty answers, zero claims, empty context);
2. counts every remaining item's tokens with litellm's offline tokenizer and packs the items into
   requests under ``pack_tokens`` (truncating the passages of an item only when it alone exceeds the
   model's window, and saying so on its result). Packs leave while later items are still counted
   (:meth:`PackRunner.run`);
3. sends the packs concurrently through one shared :class:`RequestLimiter` (in-flight cap, RPM, TPM,
   429 pauses), with litellm's own retries off so that every 429 reaches the limiter;
4. validates each reply item by item and re-asks only for the items that failed, never with the very
   same request (smaller packs, or a repair message quoting what was wrong), until ``max_retries``;
   after that the item gets an error result. A model that has not yet written one usable reply gets fewer
   repairs, and a few unusable replies in a row stop the run (``format_breaker``).

Every item gets exactly one result. The usage of each request (tokens, a fractional call, cost), failed
attempts included, is shared out over the items that rode in it. The API key is handed to litellm and to
nothing else, and scrubbed from every error text.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import replace
from typing import Any, Final

from faithfulness_pipeline.core.errors import ConfigError
from faithfulness_pipeline.core.port import (
    CostEstimate,
    ExtractItem,
    ExtractResult,
    Hooks,
    JudgeStats,
    ResultScope,
    VerdictItem,
    VerdictResult,
)
from faithfulness_pipeline.judging.budget import Budget, need_price
from faithfulness_pipeline.judging.llm import prompts
from faithfulness_pipeline.judging.llm.card import ModelCard, import_litellm, model_card, token_counter
from faithfulness_pipeline.judging.llm.limits import Clock, RequestLimiter, Sleep
from faithfulness_pipeline.judging.llm.output_mode import OutputMode
from faithfulness_pipeline.judging.llm.packing import REPLY_SLACK_TOKENS, WINDOW_MARGIN, Count, Limits
from faithfulness_pipeline.judging.llm.part_settings import CardSettings, RateLimits, RequestSettings
from faithfulness_pipeline.judging.llm.plans import ExtractPlan, Plan, R, Sizing, VerdictPlan
from faithfulness_pipeline.judging.llm.requests import Receiving, Sender
from faithfulness_pipeline.judging.llm.runner import PackRunner
from faithfulness_pipeline.judging.llm.secrets import Redactor, judge_key, model_provider
from faithfulness_pipeline.judging.llm.server_limits import ask_server
from faithfulness_pipeline.settings.judge import JudgeSettings

log = logging.getLogger(__name__)


def _tpm_warning(tpm: int | None, limits: Limits) -> str | None:
    """What a ``tpm`` below one full pack costs: such a request takes the whole minute's budget and more,
    so the next one waits until the bucket has refilled what it overdrew."""
    pack = min(limits.pack_tokens, limits.usable_window)
    if tpm is None or tpm >= pack:
        return None
    wait_s = 60.0 * pack / tpm
    return (
        f"tpm {tpm} is below one full request of about {pack} prompt tokens (pack_tokens): each full "
        f"request waits about {wait_s:.0f} s ({wait_s / 60:.1f} min) for the tokens of the one before; raise "
        f"--tpm (FP_JUDGE_TPM) or lower --pack-tokens to at most {max(tpm, 256)}"
    )

def _limiter(rate_limits: RateLimits, clock: Clock | None, sleep: Sleep | None) -> RequestLimiter:
    """The one limiter of every request of the judge (``clock`` and ``sleep``: a test's, else the real ones)."""
    timing: dict[str, Any] = {}
    if clock is not None:
        timing["clock"] = clock
    if sleep is not None:
        timing["sleep"] = sleep
    return RequestLimiter(
        rate_limits.max_concurrency,
        rate_limits.rpm,
        rate_limits.tpm,
        backoff_base_s=rate_limits.backoff_base_s,
        backoff_max_s=rate_limits.backoff_max_s,
        **timing,
    )


#: The smallest item worth a request: a one-sentence answer and its reply, in tokens.
SHORTEST_ITEM_TOKENS: Final = 64


def _sizing(pack_tokens: int, card: ModelCard, count_tokens: Count) -> Sizing:
    """What packing needs of the model: its counter, its limits, and the tokens of each step's fixed frame."""
    limits = Limits(
        pack_tokens=pack_tokens,
        max_items=card.max_items_per_pack,
        context_window=card.context_window,
        max_output_tokens=card.max_output_tokens,
    )
    frame = {
        step: count_tokens(prompts.frame_text(step)) + 2 * prompts.MESSAGE_OVERHEAD_TOKENS
        + prompts.REPLY_PRIMING_TOKENS
        for step in ("extract", "verdict")
    }
    # Room for the instructions, the reply's slack and one short answer with its reply: a smaller window
    # would fail every row as "too long", whatever the rows hold.
    need = max(frame.values()) + REPLY_SLACK_TOKENS + SHORTEST_ITEM_TOKENS
    if limits.usable_window < need:
        least = math.ceil(need / (1 - WINDOW_MARGIN))
        raise ConfigError(
            f"a context window of {card.context_window} tokens cannot hold the judge's instructions "
            f"({max(frame.values())} tokens) and a reply: the judge needs at least {least}; set --context-window "
            "(context_window) to the model's real window, or use a model with a larger one"
        )
    return Sizing(count_tokens, limits, frame, card.priced)


class LiteLLMJudge:
    """The Judge port over litellm. Build it once per run (or process); ``await aclose()`` after a run.

    The API key is read from the environment variable the settings name (or the provider's usual one)
    unless it is given as ``api_key``. ``store`` and ``refresh`` are not this judge's business: the
    factory (``judging.factory``) puts a ``JudgeStack`` around it. ``receiving`` hears how many reply
    tokens just arrived, as they arrive, where replies are streamed (``ModelCard.stream``).
    """

    def __init__(
        self,
        settings: JudgeSettings,
        *,
        api_key: str | None = None,
        need_key: bool = True,
        clock: Clock | None = None,
        sleep: Sleep | None = None,
        receiving: Receiving | None = None,
    ) -> None:
        if not settings.model or not settings.model.strip():
            raise ConfigError("the litellm judge needs a model name (e.g. --model openai/gpt-4o-mini)")
        self.settings = settings
        self.model_name: str = settings.model
        self.prompt_version: str = prompts.PROMPT_VERSION
        # The key comes first: a missing one must fail before anything else is done.
        self.api_key_env, api_key = judge_key(self.model_name, settings.api_key_env, api_key, need_key=need_key,
                                               api_base=settings.api_base)
        #: where requests go: the configured base, else the provider's default where litellm knows one
        self.endpoint: str | None = settings.api_base or model_provider(self.model_name)[1]
        self.redact = Redactor(api_key)
        litellm = import_litellm()
        litellm.suppress_debug_info = True
        base = settings.api_base
        self.card = model_card(
            CardSettings.of(settings), self.model_name,
            None if base is None else lambda: ask_server(base, self.model_name, api_key=api_key,
                                                         timeout_s=settings.timeout_s),
        )
        need_price(settings.max_cost_usd, self.card.priced, self.model_name)
        #: the run's spend cap (None: none); the batch judge holds its batches against the same one
        self.budget = None if settings.max_cost_usd is None else Budget(settings.max_cost_usd)
        #: the structured output of the run's requests, stepped down (once per step) when the endpoint refuses
        self.output = OutputMode("schema" if self.card.json_schema else "prompt", fallback=self.card.schema_fallback)
        count_tokens = token_counter(self.model_name)
        self.limiter = _limiter(RateLimits.of(settings), clock, sleep)
        self.sizing = _sizing(settings.pack_tokens, self.card, count_tokens)
        self._stats = JudgeStats(cost_usd=0.0 if self.card.priced else None, notes=list(self.card.notes))
        if (slow := _tpm_warning(settings.tpm, self.sizing.limits)) is not None:
            log.warning("warning: %s", slow)
            self._stats.notes.append(slow)
        sender = Sender(
            RequestSettings.of(settings),
            api_key=api_key,
            api_key_env=self.api_key_env,
            limiter=self.limiter,
            count_tokens=count_tokens,
            redact=self.redact,
            stats=self._stats,
            output=self.output,
            stream=self.card.stream,
            receiving=receiving,
            working_url=self.card.working_url,
        )
        self._runner = PackRunner(
            sizing=self.sizing,
            card=self.card,
            limiter=self.limiter,
            sender=sender,
            stats=self._stats,
            redact=self.redact,
            max_retries=settings.max_retries,
            budget=self.budget,
        )

    # -------------------------------------------------------------------------------- the port

    async def extract_claims(
        self, items: Sequence[ExtractItem], hooks: Hooks[ExtractResult] | None = None
    ) -> list[ExtractResult]:
        free = [ExtractPlan.free(item) for item in items]
        plan = ExtractPlan(self.sizing, items, [i for i, r in enumerate(free) if r is None])
        return await self._call(plan, free, hooks or Hooks())

    async def judge_claims(
        self, items: Sequence[VerdictItem], hooks: Hooks[VerdictResult] | None = None
    ) -> list[VerdictResult]:
        free = [VerdictPlan.free(item) for item in items]
        plan = VerdictPlan(self.sizing, items, [i for i, r in enumerate(free) if r is None])
        return await self._call(plan, free, hooks or Hooks())

    async def _call(self, plan: Plan[R], free: list[R | None], hooks: Hooks[R]) -> list[R]:
        hooks.tick(len(free) - len(plan.indices))
        if plan.indices:
            await self._runner.run(plan, hooks)
        results = [plan.results.get(i) if r is None else r for i, r in enumerate(free)]
        out = [r for r in results if r is not None]
        if len(out) != len(results):  # a bug in this module, never a row outcome
            raise RuntimeError("the litellm judge left an item without a result")
        return out

    @property
    def overlap_rows(self) -> int:
        """Rows per extraction call when the pipeline overlaps steps (see ``core.port.Overlapping``).

        Big enough that a call's last, partly filled packs cost little (~16 extraction packs and ~60
        verdict packs of typical rows), small enough that verdicts of the first answers are sent while
        later answers' claims are still being extracted.
        """
        return 16 * self.card.max_items_per_pack

    def result_scope(self) -> ResultScope:
        """Everything that changes a reply is in the result keys; timeouts, concurrency and packing are not.

        The response format is the one the run starts with: where it steps down (``output_mode``), every
        run against the same endpoint steps down alike, so its results are still the ones a re-run would get.
        """
        settings = self.settings
        mode = "schema" if self.card.json_schema else "prompt"
        common = (self.model_name, (settings.api_base or "").rstrip("/"), f"t={settings.temperature}",
                  f"seed={settings.seed}", mode)
        window = f"window={self.card.context_window}"
        return ResultScope(
            extract=("extract", prompts.EXTRACT_PROMPT_VERSION, *common),
            verdict=("verdict", prompts.VERDICT_PROMPT_VERSION, *common, window),
            row=("row", prompts.EXTRACT_PROMPT_VERSION, prompts.VERDICT_PROMPT_VERSION, *common, window),
        )

    def stats(self) -> JudgeStats:
        s = self._stats
        notes = list(s.notes)
        c = self.limiter.counters
        if c.rate_limited:
            notes.append(f"{c.rate_limited} rate-limited replies (429); in-flight cap went down to {c.min_cap_seen}")
        if (repaired := self._runner.repairs.note()) is not None:
            notes.append(repaired)
        if (pointed := self._runner.pointers.note()) is not None:
            notes.append(pointed)
        notes += self.output.notes
        if self.budget is not None and (capped := self.budget.note()) is not None:
            notes.append(capped)
        # A copy: the counters go on counting, what was handed out stays as it was.
        return replace(s, notes=notes)

    async def aclose(self) -> None:
        await import_litellm().close_litellm_async_clients()

    # -------------------------------------------------------------------------------- dry run

    def estimate(self, extract: Sequence[ExtractItem], verdict: Sequence[VerdictItem]) -> CostEstimate:
        """Requests, tokens and cost that these items would spend, without calling anything.

        Replies are estimated at their typical size; retries are not included.
        """
        plans: list[Plan[Any]] = [
            ExtractPlan(self.sizing, extract, [i for i, it in enumerate(extract) if ExtractPlan.free(it) is None]),
            VerdictPlan(self.sizing, verdict, [i for i, it in enumerate(verdict) if VerdictPlan.free(it) is None]),
        ]
        requests = prompt = completion = 0
        for plan in plans:
            for pack in plan.packs():
                requests += 1
                prompt += pack.prompt_tokens
                completion += sum(plan.expected_output(i) for i in pack.indices)
        priced = self.card.cost(prompt, completion)
        batch = self.card.for_batches().cost(prompt, completion)
        return CostEstimate(
            requests=requests,
            prompt_tokens=prompt,
            completion_tokens=completion,
            cost_usd=None if priced is None else priced[0] + priced[1],
            notes=[*self.card.notes, "claims not yet extracted are estimated as the answer's sentences",
                   "completion tokens assume a reason for about one claim in five; replies are longer where most "
                   "claims are unsupported or contradicted, each with its reason"],
            batch_cost_usd=None if batch is None else batch[0] + batch[1],
        )
