"""Run every prompt target-only and under each setting, alternating, in one process.

For each prompt, `runs` rounds; in each, the target alone and every setting run once, and the
order rotates from round to round so each configuration goes first equally often (drift hits
all alike). Runs never overlap: one generation at a time on the one loaded pair.

Each setting keeps its own learnt state (adaptive drafting's timings and long-run acceptance),
as if it were the only one a user ran: otherwise one setting's history would steer another's
choices (after `auto` answers full of plain rounds, the draft model's prior fades and its next
`model` answer drafts long).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from tandem.engine import CostModel, GenerationConfig, GenerationStats, RoundEvent
from tandem.session.collect import collect

from .prompts import BenchPrompt
from .settings import BenchSetting

if TYPE_CHECKING:
    from tandem.session.runner import Runner

BASELINE = "target only"


@dataclass
class RunRecord:
    prompt: int  # index into the prompt list
    setting: str  # a setting's name, or BASELINE
    run: int
    stats: GenerationStats
    ids: list[int]
    rounds: list[RoundEvent] = field(default_factory=list)


def run_once(
    runner: Runner,
    prompt: Sequence[int],
    cfg: GenerationConfig,
    speculative: bool,
    costs: CostModel | None = None,
) -> tuple[GenerationStats, list[int], list[RoundEvent]]:
    out = collect(runner.stream(prompt, cfg, speculative=speculative, costs=costs))
    return out.stats, out.ids, out.rounds


def run_bench(
    runner: Runner,
    prompts: Sequence[BenchPrompt],
    encoded: Sequence[list[int]],
    settings: Sequence[BenchSetting],
    baseline: GenerationConfig,
    runs: int,
    on_done: Callable[[int, list[RunRecord]], None] | None = None,
    learnt: dict[str, CostModel] | None = None,
) -> list[RunRecord]:
    """`learnt`: each setting's adaptive-drafting state, by name (filled in if empty)."""
    learnt = {} if learnt is None else learnt
    for s in settings:
        learnt.setdefault(s.name, CostModel())
    # Warm-up: a short run of each configuration, thrown away.
    warm = min(16, baseline.max_tokens)
    run_once(runner, encoded[0], replace(baseline, max_tokens=warm), False)
    for s in settings:
        run_once(runner, encoded[0], replace(s.config, max_tokens=warm), True, learnt[s.name])
    records: list[RunRecord] = []
    configs: list[tuple[str, GenerationConfig, bool]] = [(BASELINE, baseline, False)]
    configs += [(s.name, s.config, True) for s in settings]
    for i, tokens in enumerate(encoded):
        mine: list[RunRecord] = []
        for r in range(runs):
            shift = r % len(configs)
            for name, cfg, speculative in configs[shift:] + configs[:shift]:
                stats, ids, rounds = run_once(runner, tokens, cfg, speculative, learnt.get(name))
                mine.append(RunRecord(i, name, r, stats, ids, rounds))
        records += mine
        if on_done is not None:
            on_done(i, mine)
    return records
