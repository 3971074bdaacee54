"""Direct measurement of the costs that decide the speedup, on a loaded pair.

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

from .drafters import LookupDrafter
from .model import LoadedModel


@dataclass(frozen=True)
class MeasuredCosts:
    target_step_s: float
    draft_step_s: float | None  # None without a draft model
    lookup_s: float  # one prompt-lookup search over the context
    verify_s: dict[int, float] = field(default_factory=dict)  # batch size -> seconds

    @property
    def c(self) -> float | None:
        return None if self.draft_step_s is None else self.draft_step_s / self.target_step_s

    @property
    def c_lookup(self) -> float:
        return self.lookup_s / self.target_step_s

    def v(self, n: float) -> float:
        """Verify cost of n tokens in target steps; linear between measured sizes."""
        if n <= 1:
            return 1.0
        sizes = sorted(self.verify_s)
        lo = max((s for s in sizes if s <= n), default=sizes[0])
        hi = min((s for s in sizes if s >= n), default=sizes[-1])
        if lo == hi:
            return self.verify_s[lo] / self.target_step_s
        w = (n - lo) / (hi - lo)
        return ((1 - w) * self.verify_s[lo] + w * self.verify_s[hi]) / self.target_step_s

    def round_cost(self, drafter: str, drafted: int) -> float:
        """A round's cost in target steps: drafting plus verifying drafted + 1 tokens."""
        if drafter == "model" and drafted:
            draft = drafted * (self.c or 0.0)
        elif drafter == "lookup":
            draft = self.c_lookup
        else:
            draft = 0.0
        return draft + self.v(drafted + 1)


def measure_costs(
    target: LoadedModel,
    draft: LoadedModel | None,
    context: Sequence[int],
    batch_sizes: Sequence[int],
    reps: int = 9,
) -> MeasuredCosts:
    """Time single steps of both models, a lookup search, and target batches of each size."""
    tokens = list(context)
    largest = max(batch_sizes, default=1)
    if len(tokens) < largest + 2:
        raise ValueError("the context must be longer than the largest batch")
    base = tokens[: len(tokens) - largest]
    probe = tokens[len(base) :]
    models = [target] if draft is None else [target, draft]
    saved = {id(m): list(m.cached) for m in models}
    for m in models:
        m.keep_prefix_of(base)
        m.decode(base[len(m.cached) :], "none")
    lookup = LookupDrafter(target.n_vocab)
    times: dict[str, list[float]] = {"t": [], "d": [], "l": [], **{f"v{n}": [] for n in batch_sizes}}

    def timed(m: LoadedModel, n: int) -> float:
        t0 = time.perf_counter()
        m.decode(probe[:n], "all" if n > 1 else "last")
        dt = time.perf_counter() - t0
        m.truncate(len(base))
        return dt

    for _ in range(reps):
        times["t"].append(timed(target, 1))
        if draft is not None:
            times["d"].append(timed(draft, 1))
        t0 = time.perf_counter()
        lookup.candidates(base, largest)
        times["l"].append(time.perf_counter() - t0)
        for n in batch_sizes:
            times[f"v{n}"].append(timed(target, n))
    for m in models:
        m.keep_prefix_of(saved[id(m)])
    med = {k: statistics.median(v) for k, v in times.items() if v}
    return MeasuredCosts(med["t"], med.get("d"), med["l"], {n: med[f"v{n}"] for n in batch_sizes})
