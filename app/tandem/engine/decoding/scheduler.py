"""Who drafts each round, and how much: `plan()` before a round, `observe()` after it.

The scheduler holds the drafters a generation may use (every kind of its choice the pair
offers: drafters/registry.py) and one policy per kind (drafters/policy.py: adaptive K from
measured acceptance and costs, or a fixed K). It knows no kind by name. Each round:

* `plan(history, budget)`: each drafter may first look at the history (prompt lookup searches
  it), then offers a K and the rate it expects (tokens per second); the best offer wins. While
  rates are unmeasured, a drafter that has never drafted is tried once, and with no rate known
  at all the cheapest kind to try wins (the spec's `untimed_rank`). K is clipped to the budget.
* `observe(round)`: what the policies learn (the drafter that ran credits each kind), timings
  for the cost model (not from a generation's first round, which runs cold), and the recent
  share of the answer that free drafters (prompt lookup) supplied.

Nothing here can change the output, only how much is drafted per round and by whom.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from ..config import GenerationConfig
from ..drafters import registry
from ..drafters.policy import AdaptivePolicy, CostModel, FixedPolicy
from ..drafters.spec import BuildContext, Drafter, DrafterSpec, Policy, RoundView
from ..events import RoundEvent
from .round import PLAIN, Plan

if TYPE_CHECKING:
    from ..llama.model import DecodeListener, LoadedModel

# Per round, how much the recent share of free-drafter tokens forgets (about 10 rounds).
_SHARE_DECAY = 0.9


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
        self.drafters: list[Drafter] = registry.build(BuildContext(target, draft, config, rng, cancel, costs))
        self._specs: dict[str, DrafterSpec] = {}
        for d in self.drafters:
            s = registry.spec(d.kind)
            assert s is not None, d.kind
            self._specs[d.kind] = s
        self.k_max = config.k_max
        self.policies: dict[str, Policy] = {
            d.kind: AdaptivePolicy(self.k_max, costs, d.kind)
            if config.drafts_adaptively
            else FixedPolicy(self.k_max)
            for d in self.drafters
        }
        self._has_free = any(s.traits.free for s in self._specs.values())
        self.rounds_done = 0
        # Recent share of the answer that free drafters supplied (decayed token counts): it
        # decides whether a draft model is worth keeping in step (drafters/model.py).
        self.free_tokens = 0.0
        self.all_tokens = 0.0
        self._last: Plan = PLAIN  # this round's plan, for observe()
        self._probe = False  # this round is a probe (see plan)

    @property
    def listeners(self) -> list[DecodeListener]:
        """What this generation's drafters keep in step with the target's decodes."""
        return [x for d in self.drafters if (x := d.listener()) is not None]

    def begin(self, prompt: Sequence[int], should_stop: Callable[[], bool]) -> bool:
        """Get every drafter ready for a generation; False if `should_stop` cut that short."""
        for d in self.drafters:
            d.begin(prompt, should_stop)
        return all(d.began(prompt) for d in self.drafters)

    # ------------------------------------------------------------------ plan
    def plan(self, history: Sequence[int], budget: int, *, probe: bool = False) -> Plan:
        """This round's drafter and K. `probe`: a plain target step instead, asked for by the
        speedup meter (speedup.py): it times the target alone under this moment's conditions."""
        self._probe = probe
        if probe:
            self._last = PLAIN
            return PLAIN
        free_share = self.free_tokens / self.all_tokens if self._has_free and self.all_tokens else None
        view = RoundView(
            history, budget, self.k_max, self.costs, self.policies, not self.rounds_done, free_share
        )
        for d in self.drafters:
            d.search(view)
        offers = [(o.rate, d.kind, o.k, d) for d in self.drafters if (o := d.offer(view)) is not None]
        self._last = self._choose(offers, view)
        return self._last

    def _choose(self, offers: list[tuple[float, str, int, Drafter]], view: RoundView) -> Plan:
        if not offers:
            return PLAIN
        specs = self._specs
        drafting = [o for o in offers if specs[o[1]].traits.timed_by_drafting]
        unmeasured = [o for o in drafting if o[0] == 0.0]
        if all(o[0] == 0.0 for o in offers):
            # Fixed K, or costs not measured yet: the cheapest kind to try.
            best = min(offers, key=lambda o: specs[o[1]].traits.untimed_rank)
        elif unmeasured and len(unmeasured) < len(drafting):
            best = unmeasured[0]  # measure it once: its rate is unknown until it drafts
        else:
            best = max(offers, key=lambda o: o[:3])
        _, _, k, drafter = best
        return Plan(drafter.chosen(k, view), k)

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
            if rnd.draft_passes and plan.drafter is not None:
                rest_s = rnd.draft_s - rnd.first_draft_s
                self.costs.observe_model_draft(
                    rnd.caught_up, rnd.first_draft_s, rest_s, rnd.draft_passes - 1, plan.drafter.kind
                )
        self.rounds_done += 1
        own = rnd.drafted - rnd.looked_up  # the drafter's own tokens (a lookup round: 0)
        if plan.k and plan.drafter is not None:
            for kind, drafted, accepted in plan.drafter.credit(rnd):
                self.policies[kind].observe(drafted, accepted)
        elif not self._probe:  # no evidence this round: let α relax, for the drafters this run has
            for d in self.drafters:
                self.policies[d.kind].observe(0, 0)
        self.free_tokens = self.free_tokens * _SHARE_DECAY + max(0, rnd.accepted - own)
        self.all_tokens = self.all_tokens * _SHARE_DECAY + len(rnd.tokens)
