"""Who drafts each round, and how much: `plan()` before a round, `observe()` after it.

The scheduler holds the drafters a generation may use and one policy per drafter
(draft_policy.py: adaptive K from measured acceptance and costs, or a fixed K). Each round:

* `plan(history, budget)`: with `auto`, compare the draft model's expected rate with prompt
  lookup's (when lookup has a match) and pick the faster; a draft-model round may be finished
  by lookup (the hybrid drafter). K comes from that drafter's policy, clipped to the budget.
* `observe(round)`: what the policies learn: acceptance for the drafter that ran, timings for
  the cost model (not from a generation's first round, which runs cold), and the recent share
  of the answer that lookup supplied.

Nothing here can change the output, only how much is drafted per round and by whom.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Sequence

from .config import DRAFT_MAX_LIMIT, GenerationConfig
from .draft_policy import AdaptivePolicy, CostModel, FixedPolicy, model_pays
from .drafters import Drafter, DrafterKind
from .drafters.hybrid import HybridDrafter
from .drafters.lookup import LookupDrafter
from .drafters.model import ModelDrafter
from .drafters.mtp import MtpDrafter
from .events import RoundEvent
from .model import LoadedModel
from .round import PLAIN, Plan

# Per round, how much the recent share of lookup-supplied tokens forgets (about 10 rounds).
_SHARE_DECAY = 0.9

Policy = AdaptivePolicy | FixedPolicy


class Scheduler:
    def __init__(
        self,
        target: LoadedModel,
        draft: LoadedModel | None,
        config: GenerationConfig,
        rng: random.Random,
        cancel: threading.Event | None,
        costs: CostModel,
    ) -> None:
        self.costs = costs
        self.model = (
            ModelDrafter(draft, config.sampler, rng, config.p_min, cancel) if draft is not None else None
        )
        self.lookup = LookupDrafter(target.n_vocab) if config.drafter in ("lookup", "auto") else None
        self.mtp = (
            MtpDrafter(target.mtp, config.sampler, rng, config.p_min, cancel)
            if target.mtp is not None and config.drafter in ("mtp", "auto")
            else None
        )
        self.hybrid = HybridDrafter(self.model, self.lookup) if self.model and self.lookup else None
        self.k_max = config.k_max
        self.policies: dict[DrafterKind, Policy] = {
            kind: AdaptivePolicy(self.k_max, costs, kind)
            if config.drafts_adaptively
            else FixedPolicy(self.k_max)
            for kind in ("model", "lookup", "mtp")
        }
        self.rounds_done = 0
        # Recent share of the answer that prompt lookup supplied (decayed token counts): it
        # decides whether the draft model is worth keeping in step (see _model_pays).
        self.lookup_tokens = 0.0
        self.all_tokens = 0.0
        self._last: Plan = PLAIN  # this round's plan, for observe()

    @property
    def drafters(self) -> list[Drafter]:
        return [d for d in (self.model, self.lookup, self.mtp) if d is not None]

    def begin(self, prompt: Sequence[int], should_stop: Callable[[], bool]) -> bool:
        """Get every drafter ready for a generation; False if `should_stop` cut that short."""
        for d in self.drafters:
            d.begin(prompt, should_stop)
        return self.model is None or self.model.ready_for(prompt)

    # ------------------------------------------------------------------ plan
    def plan(self, history: Sequence[int], budget: int) -> Plan:
        candidates: list[int] = []
        if self.lookup is not None:
            t0 = time.perf_counter()
            candidates = self.lookup.candidates(history, min(budget, DRAFT_MAX_LIMIT))
            if self.rounds_done:  # a generation's first round runs cold (caches, graphs)
                self.costs.observe_lookup(time.perf_counter() - t0)
        options: list[tuple[float, DrafterKind, int]] = []
        use_model = False
        if self.model is not None:
            # After plain or lookup rounds the model's next draft first catches up on them.
            behind = self.model.behind(history)
            owed = self.costs.catchup_time(behind - 2) if behind > 2 else 0.0
            k, rate = self.policies["model"].plan(budget, owed_s=owed)
            use_model = self._model_pays(rate)
            if use_model:
                options.append((rate, "model", k))
        if self.mtp is not None:
            # (It keeps in step with the target as the target decodes: nothing owed.)
            k, rate = self.policies["mtp"].plan(budget)
            options.append((rate, "mtp", k))
        tail_k = 0
        if self.lookup is not None:
            # Tokens drafted by lookup must later be caught up on by the draft model.
            debt = self.costs.catchup_time(1.0) if use_model else 0.0
            if candidates:
                tail_k, rate = self.policies["lookup"].plan(min(budget, len(candidates)), debt)
                options.append((rate, "lookup", tail_k))
            elif use_model:  # the most a hybrid round's lookup tail may add
                tail_k = self.policies["lookup"].plan(budget, debt)[0]
        self._last = self._choose(options, bool(candidates), tail_k, budget)
        return self._last

    def _choose(
        self, options: list[tuple[float, DrafterKind, int]], lookup_matched: bool, tail_k: int, budget: int
    ) -> Plan:
        if not options:
            return Plan(self.lookup, 0)
        kinds = [kind_ for _, kind_, _ in options]
        unmeasured = [(kind_, k_) for rate, kind_, k_ in options if rate == 0.0 and kind_ != "lookup"]
        if all(rate == 0.0 for rate, _, _ in options):
            # Fixed K, or costs not measured yet: lookup when it has a match, else the heads
            # (a step costs a fraction of a draft model's), else the model.
            kind: DrafterKind = "lookup" if lookup_matched else "mtp" if "mtp" in kinds else "model"
            k = next(k_ for _, kind_, k_ in options if kind_ == kind)
        elif unmeasured and len(unmeasured) < len(options) - ("lookup" in kinds):
            kind, k = unmeasured[0]  # measure it once: its rate is unknown until it drafts
        else:
            _, kind, k = max(options)
        if kind == "lookup":
            return Plan(self.lookup, k)
        if kind == "mtp":
            return Plan(self.mtp, k)
        if self.hybrid is not None and tail_k:
            self.hybrid.tail_max = tail_k
            self.hybrid.total_max = min(self.k_max, budget)
            return Plan(self.hybrid, k)
        return Plan(self.model, k)

    def _model_pays(self, model_rate: float) -> bool:
        """Whether to keep drafting with the model, given lookup's recent share of the answer
        (see draft_policy.model_pays). Without measured costs: yes."""
        plain = self.costs.verify_time(1)
        if self.lookup is None or model_rate <= 0.0 or self.all_tokens == 0.0 or plain is None:
            return True
        share = self.lookup_tokens / self.all_tokens
        return model_pays(share, plain, 1.0 / model_rate, self.costs.catchup_time(1.0))

    # ------------------------------------------------------------------ observe
    def observe(self, rnd: RoundEvent) -> None:
        plan = self._last
        if self.rounds_done:  # the first round runs cold: its timings would mislead
            # The verify batch alone: the rollback costs are a term of their own, paid only
            # by rounds that draft (a plain step is never undone).
            rollback_s = rnd.checkpoint_s + rnd.restore_s
            self.costs.observe_verify(rnd.drafted + 1, rnd.verify_s - rollback_s)
            if rnd.drafted:
                self.costs.observe_rollback(rnd.checkpoint_s, rnd.restore_s, rnd.accepted < rnd.drafted)
            if rnd.draft_passes:
                rest_s = rnd.draft_s - rnd.first_draft_s
                self.costs.observe_model_draft(
                    rnd.caught_up, rnd.first_draft_s, rest_s, rnd.draft_passes - 1, rnd.drafter or "model"
                )
        self.rounds_done += 1
        own = rnd.drafted - rnd.looked_up  # the draft model's tokens (a lookup round: 0)
        if plan.k:
            if plan.drafter is not None and plan.drafter.kind != "lookup":
                self.policies[plan.drafter.kind].observe(own, min(rnd.accepted, own))
            if rnd.looked_up and rnd.accepted >= own:
                self.policies["lookup"].observe(rnd.looked_up, rnd.accepted - own)
        else:  # no evidence this round: let α relax, for the drafters this run has
            for d in self.drafters:
                self.policies[d.kind].observe(0, 0)
        self.lookup_tokens = self.lookup_tokens * _SHARE_DECAY + max(0, rnd.accepted - own)
        self.all_tokens = self.all_tokens * _SHARE_DECAY + len(rnd.tokens)
