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
from typing import TYPE_CHECKING, Literal

from ..drafters import registry
from ..llama.threads import release_team

if TYPE_CHECKING:
    from ..llama.model import LoadedModel


@dataclass(frozen=True)
class MeasuredCosts:
    target_step_s: float
    draft_step_s: float | None  # None without a draft model
    lookup_s: float  # one prompt-lookup search over the context
    verify_s: dict[int, float] = field(default_factory=dict)  # batch size -> seconds
    # Draft-model batches (last row's logits only): what a round's first draft step costs when
    # it catches up on n tokens. Size 1 is a lone step right after the target ran (slower than
    # draft_step_s, which is a step following another draft step).
    draft_batch_s: dict[int, float] = field(default_factory=dict)

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
        return _interpolate({1: self.target_step_s, **self.verify_s}, n) / self.target_step_s

    def catchup(self, n: int) -> float:
        """The draft model's first batch of a round, n tokens, in target steps (c when n = 1);
        linear between measured sizes and beyond the largest."""
        if self.draft_step_s is None or n <= 0:
            return 0.0
        points = {1: self.draft_step_s, **self.draft_batch_s}
        return _interpolate(points, n) / self.target_step_s

    def round_cost(
        self, drafter: str, drafted: int, caught_up: int = 1, looked_up: int = 0, draft_s: float = 0.0
    ) -> float:
        """A round's cost in target steps: drafting (the kind prices it: its spec's
        `draft_cost`; a draft-model round pays its first batch, catching up on `caught_up`
        tokens, then c per further token) plus verifying drafted + 1 tokens. `draft_s`: the
        drafting time the round measured, for a kind these measurements do not time."""
        kind = registry.spec(drafter)
        draft = 0.0 if kind is None else kind.traits.draft_cost(self, drafted, caught_up, looked_up, draft_s)
        return draft + self.v(drafted + 1)


def mean_costs(measured: Sequence[MeasuredCosts]) -> MeasuredCosts:
    """The mean of several measurements of the same pair, quantity by quantity.

    A benchmark measures its costs more than once, spread over its runs: a shared machine's
    speed drifts, and one measurement taken at the start can be several percent off for the
    runs that follow (enough to move efficiency = measured / predicted by as much)."""
    if not measured:
        raise ValueError("no measurements")
    first = measured[0]

    def mean(values: Sequence[float]) -> float:
        return statistics.fmean(values)

    drafts = [m.draft_step_s for m in measured if m.draft_step_s is not None]
    return MeasuredCosts(
        mean([m.target_step_s for m in measured]),
        mean(drafts) if drafts else None,
        mean([m.lookup_s for m in measured]),
        {n: mean([m.verify_s[n] for m in measured]) for n in first.verify_s},
        {n: mean([m.draft_batch_s[n] for m in measured]) for n in first.draft_batch_s},
    )


def _interpolate(points: dict[int, float], n: float) -> float:
    """Piecewise-linear through the points, extended past the largest by the last segment."""
    sizes = sorted(points)
    if n <= sizes[0] or len(sizes) == 1:
        return points[sizes[0]] if n <= sizes[0] else points[sizes[0]] * n / sizes[0]
    hi = next((s for s in sizes if s >= n), None)
    if hi is None:  # beyond the largest measured batch
        a, b = sizes[-2], sizes[-1]
        return points[b] + (n - b) * (points[b] - points[a]) / (b - a)
    lo = max(s for s in sizes if s <= n)
    if lo == hi:
        return points[lo]
    w = (n - lo) / (hi - lo)
    return (1 - w) * points[lo] + w * points[hi]


def measure_costs(
    target: LoadedModel,
    draft: LoadedModel | None,
    context: Sequence[int],
    batch_sizes: Sequence[int],
    reps: int = 9,
    *,
    greedy: bool = False,
) -> MeasuredCosts:
    """Time single steps of both models, a lookup search, and batches of each size (target:
    verification, all rows' output; draft: catch-up, the last row's). `greedy`: decode as a
    greedy generation does (each row's argmax only, in llama.cpp's graph), else with logits."""
    tokens = list(context)
    largest = max(batch_sizes, default=1)
    if len(tokens) < largest + 2:
        raise ValueError("the context must be longer than the largest batch")
    models = [target] if draft is None else [target, draft]
    # Each model's own tokens: a draft of another tokenizer (drafters/cross.py) reads the same
    # text in its own, as it does when it drafts (the target's ids are not its vocabulary).
    own = {id(target): tokens}
    if draft is not None:
        own[id(draft)] = tokens
        if draft.foreign_tokenizer:
            text = draft.tokenize(target.detokenize(tokens), add_special=False, parse_special=False)
            own[id(draft)] = (text * (1 + (largest + 2) // max(1, len(text))))[: max(len(text), largest + 2)]
    base = {k: t[: len(t) - largest] for k, t in own.items()}
    probe = {k: t[len(base[k]) :] for k, t in own.items()}
    saved = {id(m): list(m.cached) for m in models}
    for m in models:
        m.keep_prefix_of(base[id(m)])
        m.decode(base[id(m)][len(m.cached) :], "none")
        m.checkpoint("measure")  # a recurrent state comes back to `base` from a copy
    times: dict[str, list[float]] = {"t": [], "d": [], "d1": [], "l": []}
    for n in batch_sizes:
        times[f"v{n}"], times[f"d{n}"] = [], []

    def decode(m: LoadedModel, tokens: Sequence[int], rows: Literal["last", "all"]) -> None:
        if greedy:
            m.decode_greedy(tokens, rows)
        else:
            m.decode(tokens, rows)

    def timed(m: LoadedModel, n: int, rows: Literal["last", "all"] = "all") -> float:
        t0 = time.perf_counter()
        decode(m, probe[id(m)][:n], rows if n > 1 else "last")
        dt = time.perf_counter() - t0
        m.truncate(len(base[id(m)]))
        return dt

    def steps(m: LoadedModel, n: int) -> list[float]:
        """n single-token steps in a row, as the decoding loop runs them."""
        out = []
        for tok in probe[id(m)][:n]:
            t0 = time.perf_counter()
            decode(m, [tok], "last")
            out.append(time.perf_counter() - t0)
        m.truncate(len(base[id(m)]))
        return out

    for _ in range(reps):
        # A step right after the other model ran is slower (its weights are out of cache): a
        # round's first draft step is such a step, the rest follow each other. Both are timed.
        times["t"] += steps(target, 3)[1:]
        if draft is not None:
            first, *rest = steps(draft, 4)
            times["d1"].append(first)
            times["d"] += rest
        times["l"].append(registry.time_free_search(target.n_vocab, base[id(target)], largest))
        for n in batch_sizes:
            times[f"v{n}"].append(timed(target, n))
            if draft is not None:
                times[f"d{n}"].append(timed(draft, n, "last"))
    for m in models:
        m.keep_prefix_of(saved[id(m)])
    release_team()  # (the caller's thread may not be the one that answers: threads.release_team)
    med = {k: statistics.median(v) for k, v in times.items() if v}
    return MeasuredCosts(
        med["t"],
        med.get("d"),
        med["l"],
        {n: med[f"v{n}"] for n in batch_sizes},
        {n: med[f"d{n}"] for n in (1, *batch_sizes) if f"d{n}" in med},
    )
