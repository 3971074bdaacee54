"""Direct measurement of the three costs that decide the speedup, on a loaded pair.

    c = draft step / target step        v(n) = target batch of n tokens / target step

Each operation is timed `reps` times on the real models at the real context length, in
interleaved order (so drift affects all alike), and the median is kept. Afterwards each cache
still holds a prefix of what it held before (its mirror stays exact; the next generation
re-prefills whatever it needs).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from .model import LoadedModel


@dataclass(frozen=True)
class MeasuredCosts:
    target_step_s: float
    draft_step_s: float
    verify_s: dict[int, float] = field(default_factory=dict)  # batch size -> seconds

    @property
    def c(self) -> float:
        return self.draft_step_s / self.target_step_s

    def v(self, n: float) -> float:
        """Verify cost of n tokens in target steps; linear between measured sizes."""
        sizes = sorted(self.verify_s)
        if n in self.verify_s:
            return self.verify_s[int(n)] / self.target_step_s
        lo = max((s for s in sizes if s <= n), default=sizes[0])
        hi = min((s for s in sizes if s >= n), default=sizes[-1])
        if lo == hi:
            return self.verify_s[lo] / self.target_step_s
        w = (n - lo) / (hi - lo)
        return ((1 - w) * self.verify_s[lo] + w * self.verify_s[hi]) / self.target_step_s

    def predicted_speedup(self, tokens_per_round: float, mean_k: float) -> float:
        """E / (K·c + v(K+1)): a round's tokens over its cost in target steps, from the
        measured tokens per round and mean draft length."""
        return tokens_per_round / (mean_k * self.c + self.v(mean_k + 1))


def measure_costs(
    target: LoadedModel, draft: LoadedModel, context: Sequence[int], batch_sizes: Sequence[int], reps: int = 9
) -> MeasuredCosts:
    """Time single steps of both models and target batches of each size after `context`."""
    tokens = list(context)
    if len(tokens) < max(batch_sizes) + 2:
        raise ValueError("the context must be longer than the largest batch")
    base = tokens[: len(tokens) - max(batch_sizes)]
    probe = tokens[len(base) :]
    saved = {id(m): list(m.cached) for m in (target, draft)}
    for m in (target, draft):
        m.keep_prefix_of(base)
        m.decode(base[len(m.cached) :], "none")
    times: dict[str, list[float]] = {"t": [], "d": [], **{f"v{n}": [] for n in batch_sizes}}

    def timed(m: LoadedModel, n: int) -> float:
        t0 = time.perf_counter()
        m.decode(probe[:n], "all" if n > 1 else "last")
        dt = time.perf_counter() - t0
        m.truncate(len(base))
        return dt

    for _ in range(reps):
        times["t"].append(timed(target, 1))
        times["d"].append(timed(draft, 1))
        for n in batch_sizes:
            times[f"v{n}"].append(timed(target, n))
    for m in (target, draft):
        m.keep_prefix_of(saved[id(m)])
    med = {k: statistics.median(v) for k, v in times.items()}
    return MeasuredCosts(med["t"], med["d"], {n: med[f"v{n}"] for n in batch_sizes})
