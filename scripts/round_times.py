"""Timing a drafter's rounds as the engine itself reports them (RoundEvent), for the cost
scripts (mtp_cost.py, trained_cost.py): the target alone and speculative generations at each
fixed K, alternated run by run on one loaded pair."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from tandem.engine import GenerationConfig, ModelPair
from tandem.engine.config import DrafterChoice
from tandem.session.collect import collect


@dataclass
class RoundTimes:
    """Seconds per operation, by the K drafted (only rounds that drafted all K count; each
    generation's first round, which runs cold, is skipped)."""

    ks: tuple[int, ...]
    steps: list[float] = field(default_factory=list)  # plain target steps
    first: dict[int, list[float]] = field(default_factory=dict)  # a round's first draft pass
    rest: dict[int, list[float]] = field(default_factory=dict)  # each further draft pass
    verify: dict[int, list[float]] = field(default_factory=dict)  # the verify, rollback excluded
    caught: list[int] = field(default_factory=list)  # tokens caught up on by first passes

    def __post_init__(self) -> None:
        for times in (self.first, self.rest, self.verify):
            for k in self.ks:
                times.setdefault(k, [])

    @property
    def step(self) -> float:
        """The median plain target step: the unit of every cost."""
        return statistics.median(self.steps)


def alternate(
    pair: ModelPair, prompt: list[int], kind: DrafterChoice, ks: tuple[int, ...], tokens: int, runs: int
) -> RoundTimes:
    """`runs` alternations of the target alone and `kind` drafting at each fixed K."""
    times = RoundTimes(ks)
    for run in range(runs):
        base = collect(pair.generate(prompt, GenerationConfig(max_tokens=tokens), speculative=False))
        times.steps += [r.verify_s for r in base.rounds[1:]]  # a plain round's verify is one step
        for k in ks:
            cfg = GenerationConfig(max_tokens=tokens, drafter=kind, adaptive=False, draft_max=k)
            out = collect(pair.generate(prompt, cfg))
            for r in out.rounds[1:]:
                if r.drafted == k:
                    times.first[k].append(r.first_draft_s)
                    if r.draft_passes > 1:
                        times.rest[k].append((r.draft_s - r.first_draft_s) / (r.draft_passes - 1))
                    times.verify[k].append(r.verify_s - r.checkpoint_s - r.restore_s)
                    times.caught.append(r.caught_up)
        print(f"  run {run + 1}/{runs} done", flush=True)
    return times
