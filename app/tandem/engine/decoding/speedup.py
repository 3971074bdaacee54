"""The speedup of a generation, measured under its own conditions.

A speedup compares two speeds; timed at different moments on a shared machine they compare
two machines. So the target alone is timed *during* the generation: a plain round (K = 0:
the target decodes one token, as it does alone) is a target-alone step. Rounds where the
policy drafts nothing are such steps for free; otherwise the meter asks for one now and then
(`probe_due`, a few per answer: ~1-2% of a fast answer's speed), and more often right after
the machine's speed changed.

The estimate: every round's tokens would have cost the target alone one step each, at the
step time measured nearest that round (the median of the three nearest plain steps), so a
neighbour who arrives mid-answer slows both sides of the ratio alike. Its uncertainty comes
from the scatter of the plain steps. It can never exceed the tokens per target pass: each
pass costs at least one target step.

Pure arithmetic over round records: the engine and the app's live panel feed it the same
RoundEvents (`wall_s`: the round's wall time, from the end of the round before).
"""

from __future__ import annotations

import bisect
import math
import statistics
from dataclasses import dataclass, replace

from ..stats import GenerationStats

# A probe after this many rounds without a plain step: often while few are timed, then rarely.
_PROBE_GAPS = ((2, 4), (4, 12), (8, 24))  # (plain steps timed fewer than, gap in rounds)
_PROBE_GAP_SETTLED = 48
# The scatter assumed for one step before there are enough to measure it (relative).
_PRIOR_SPREAD = 0.12
# Plain steps whose neighbours' medians differ by this factor: the machine's speed changed.
_CHANGE = 1.4


@dataclass(frozen=True, slots=True)
class SpeedupEstimate:
    speedup: float  # against the target alone, over this generation's own conditions
    low: float  # a ~95% interval (the scatter of the target-alone steps)
    high: float
    target_alone_tps: float  # the target alone's tokens/s over the same period
    plain_steps: int  # target-alone steps timed during the generation
    load_changed: bool  # the machine's speed changed mid-generation


class SpeedupMeter:
    """Rounds in, a speedup out: `add` each round, `estimate()` at any time.

    `speed_changed()` (the thread count followed the machine) starts a new period: its rounds
    are weighed only at steps timed in it, and it gets its own probes, quickly at first."""

    __slots__ = ("_period", "_rounds", "_since_plain", "_steps", "_t", "_tokens", "_want_soon")

    def __init__(self) -> None:
        self._rounds: list[tuple[float, int, int]] = []  # (time at its end, tokens, period)
        self._steps: list[tuple[float, float, int]] = []  # plain steps: (time, seconds, period)
        self._t = 0.0
        self._tokens = 0
        self._period = 0
        self._since_plain = 0
        self._want_soon = True  # the first warm round: no step timed yet

    def add(self, drafted: int, emitted: int, wall_s: float, *, timed: bool = True) -> None:
        """One round: `drafted` tokens proposed, `emitted` added to the answer, `wall_s` since
        the round before ended. `timed`: False for a round whose time says nothing of a step
        (the first, which runs cold)."""
        self._t += wall_s
        self._rounds.append((self._t, emitted, self._period))
        self._tokens += emitted
        if drafted == 0 and timed and emitted and wall_s > 0:
            self._steps.append((self._t, wall_s, self._period))
            self._since_plain = 0
            self._want_soon = False
        else:
            self._since_plain += 1

    def speed_changed(self) -> None:
        """The machine's speed changed (the thread count followed it): a new period, whose
        steps are timed from the next round on."""
        self._period += 1
        self._want_soon = True

    def probe_due(self) -> bool:
        """Whether the next round should be a plain step (the scheduler then drafts nothing)."""
        if not self._rounds:
            return False  # the first round runs cold: it would time nothing useful
        if self._want_soon:
            return True
        n = sum(1 for step in reversed(self._steps) if step[2] == self._period)
        gap = next((g for below, g in _PROBE_GAPS if n < below), _PROBE_GAP_SETTLED)
        return self._since_plain >= gap

    def estimate(self) -> SpeedupEstimate | None:
        """None until a target-alone step has been timed."""
        steps = self._steps
        if not steps or not self._rounds or self._t <= 0:
            return None
        by_period: dict[int, list[tuple[float, float]]] = {}
        for t, seconds, period in steps:
            by_period.setdefault(period, []).append((t, seconds))
        # Every round's tokens at the step time measured nearest it in its period (a period
        # without a timed step: the nearest period's).
        alone = 0.0
        for t, tokens, period in self._rounds:
            own = by_period.get(period) or by_period[min(by_period, key=lambda p: (abs(p - period), -p))]
            alone += tokens * _step_near(own, t)
        speedup = alone / self._t
        per_pass = self._tokens / len(self._rounds)
        spread = _spread([s for ss in by_period.values() for s in _residuals(ss)])
        margin = math.exp(2 * spread / math.sqrt(len(steps)))
        bound = max(per_pass, 1.0)
        medians = [statistics.median(s for _, s in ss) for ss in by_period.values()]
        return SpeedupEstimate(
            speedup=min(speedup, bound),
            low=min(speedup / margin, bound),
            high=min(speedup * margin, bound),
            target_alone_tps=self._tokens / alone if alone > 0 else 0.0,
            plain_steps=len(steps),
            load_changed=max(medians) / min(medians) >= _CHANGE
            or any(_changed(ss) for ss in by_period.values()),
        )


def _step_near(steps: list[tuple[float, float]], t: float) -> float:
    """The median of the timed step nearest to time t and its neighbours (steps in time order)."""
    j = bisect.bisect_left(steps, (t, -math.inf))
    if j == len(steps) or (j > 0 and t - steps[j - 1][0] <= steps[j][0] - t):
        j -= 1
    return _local_step(steps, j)


def _local_step(steps: list[tuple[float, float]], j: int) -> float:
    """The median of the plain step j and its neighbours in time."""
    lo, hi = max(0, j - 1), min(len(steps), j + 2)
    return statistics.median(s for _, s in steps[lo:hi])


def _residuals(steps: list[tuple[float, float]]) -> list[float]:
    """Each step against its local median (log scale); none while too few to tell."""
    if len(steps) < 3:
        return []
    return [math.log(s / _local_step(steps, j)) for j, (_, s) in enumerate(steps)]


def _spread(residuals: list[float]) -> float:
    """Relative scatter of the steps around their local medians; a prior while too few."""
    if len(residuals) < 3:
        return _PRIOR_SPREAD
    return max(statistics.pstdev(residuals), 0.02)


def _changed(steps: list[tuple[float, float]]) -> bool:
    """Whether the steps' speed moved within one period (a neighbour the threads did not see)."""
    if len(steps) < 4:
        return False
    local = [_local_step(steps, j) for j in range(1, len(steps) - 1)]
    return max(local) / min(local) >= _CHANGE


def with_speedup(stats: GenerationStats, meter: SpeedupMeter) -> GenerationStats:
    """The record with the meter's speedup (unchanged while no target-alone step is timed)."""
    est = meter.estimate()
    if est is None:
        return stats
    return replace(
        stats,
        speedup=est.speedup,
        speedup_low=est.low,
        speedup_high=est.high,
        target_alone_tps=est.target_alone_tps,
        speedup_steps=est.plain_steps,
        load_changed=est.load_changed or stats.threads_changed > 0,
    )
