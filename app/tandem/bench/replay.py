"""Replay draft-length policies on recorded acceptance, timed by the measured cost model.

A measured speedup mixes two things: the choices a policy makes, and the machine's noise (single
runs on a shared 2-core machine vary by +-10%). Replaying separates them. With greedy decoding,
whether the draft model's token is accepted at an output position depends only on the text
before it, so one recorded generation says, for every position, whether the draft agreed with
the target. Any policy can then be replayed round by round on that sequence, exactly as the
engine would run it (the same policy classes, budget and stopping rules), and each round charged
what the cost model says it costs. The result is what each policy would achieve if every
operation took its measured mean time: a prediction, not a measurement, but free of noise, so
small differences between policies show.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from tandem.engine import AdaptivePolicy, CostModel, FixedPolicy, MeasuredCosts, RoundEvent

Policy = AdaptivePolicy | FixedPolicy


@dataclass
class Trace:
    """One greedy generation: per output position, whether the draft model agreed."""

    category: str
    match: list[bool]
    eog: bool  # the last position is the end-of-generation token (not counted as output)
    kind: str  # the drafter kind whose rounds these were (its spec prices a replayed round)


def trace_from_rounds(category: str, rounds: Iterable[RoundEvent], generated: int, eog: bool) -> Trace:
    """From a draft-model run's rounds: accepted drafts agreed, a rejection's position did not.
    A bonus token's position was never drafted; it is counted as agreeing (a fully accepted
    round is usually followed by more agreement)."""
    match: list[bool] = []
    kind = ""
    for r in rounds:
        match += [True] * r.accepted
        match.append(r.accepted == r.drafted and r.drafted > 0)
        kind = kind or r.drafter
    return Trace(category, match[: generated + (1 if eog else 0)], eog, kind)


def costs_from_report(report: dict[str, Any]) -> MeasuredCosts:
    """A `tandem bench --json` report's costs, in target steps (one target step = 1 s)."""
    costs = report["costs"]
    return MeasuredCosts(
        target_step_s=1.0,
        draft_step_s=float(costs["c"]),
        lookup_s=float(costs["c_lookup"]),
        verify_s={int(n): float(x) for n, x in costs["v"].items()},
        draft_batch_s={int(n): float(x) for n, x in costs["catchup"].items()},
    )


class ReplayCostModel(CostModel):
    """What the adaptive policy plans with: the measured costs (in target steps, so one target
    step = 1 s) instead of the engine's online estimates."""

    def __init__(self, costs: MeasuredCosts) -> None:
        super().__init__()
        self.measured = costs

    def draft_time(self, kind: str, k: int) -> float | None:
        return 0.0 if k == 0 else self.measured.catchup(1) + (k - 1) * (self.measured.c or 0.0)

    def verify_time(self, n: int) -> float | None:
        return self.measured.v(n)

    @property
    def plain_step_known(self) -> bool:
        return True


def replay(trace: Trace, policy: Policy, costs: MeasuredCosts, max_tokens: int) -> tuple[int, float]:
    """(tokens generated, cost in target steps) of one generation under `policy`.

    The engine's rules: K never overshoots max tokens; a draft stops after proposing the end of
    generation; a round emits the accepted drafts and one target token; the draft model is one
    token behind after a rejection, two after a fully accepted round, one more after each round
    it sat out (and its next round pays for catching up on those).
    """
    match, n = trace.match, len(trace.match)
    pos = generated = 0
    cost = 0.0
    behind = 1
    while pos < n and generated < max_tokens:
        owed = costs.catchup(behind) - costs.catchup(2) if behind > 2 else 0.0
        k, _ = policy.plan(max(0, max_tokens - generated - 1), owed_s=owed)
        drafted = k
        if pos + k >= n and trace.eog and all(match[pos:n]):
            drafted = n - pos  # the draft proposes the end itself and stops there
        accepted = 0
        while accepted < drafted and pos + accepted < n and match[pos + accepted]:
            accepted += 1
        cost += costs.round_cost(trace.kind if drafted else "", drafted, caught_up=behind)
        policy.observe(drafted, accepted)
        behind = (2 if accepted == drafted else 1) if drafted else behind + 1
        pos += accepted + 1
        generated = min(pos, n - (1 if trace.eog else 0))
    return min(generated, max_tokens), cost


def replay_all(
    traces: Sequence[Trace],
    policies: dict[str, Callable[[CostModel], Policy]],
    costs: MeasuredCosts,
    max_tokens: int,
) -> dict[str, dict[str, float]]:
    """Per policy, per category (and "overall"): mean predicted speedup over the traces.

    Each policy gets its own cost model, and the traces are replayed twice with it: the first
    pass stands in for the bench's warm-up and earlier prompts (the long-run acceptance the
    adaptive policy starts each generation from)."""
    out: dict[str, dict[str, float]] = {}
    for name, make in policies.items():
        model = ReplayCostModel(costs)
        per: dict[str, list[float]] = {}
        for final in (False, True):
            for t in traces:
                generated, cost = replay(t, make(model), costs, max_tokens)
                if final and cost > 0:
                    per.setdefault(t.category, []).append(generated / cost)
        out[name] = {cat: statistics.mean(v) for cat, v in per.items()}
        out[name]["overall"] = statistics.mean(x for v in per.values() for x in v)
    return out
