"""How long to draft for each of several sequences, given what a batch costs (batch.py).

With one sequence a verify of K + 1 rows costs little more than one step, which is what makes
drafting pay. With many, the batch is already wide: its cost grows with every row added, and
a draft is worth its rows only while the tokens it is expected to add outweigh them. So the
costs are measured as functions of the whole batch (CostTable: seconds by tokens, measured at
start by BatchEngine.calibrate and kept up to date by the rounds):

* a verify: one llama_decode of every sequence's rows;
* a draft step (the draft model's): one decode of the sequences still drafting, its first
  step carrying each sequence's catch-up (what the draft model has not read yet).

`pick` chooses which kind drafts for each sequence (from the offers of drafters/batched.py);
`choose` then gives each sequence its K to maximise the round's expected tokens per second: every
sequence starts at 0 and the increment that raises the rate most is taken until none does (a
sequence's n-th draft adds α^n expected tokens; it costs what one more row adds to the verify
and its tokens add to that draft step). A draft that does not pay alone is still taken when the
run it starts does (a model's catch-up is paid once, a kernel's step up is crossed once).
With enough sequences no increment pays, and the round is plain batched decoding.

And no request pays for another's drafts: a draft is taken only while every sequence still
expects the tokens per second a round without drafts would give it (`fair`; less FAIR_SLACK,
a round's timing noise). Where no single draft is fair, one more for every sequence may be. Without
this, on a CPU where each row costs, the round's rate rose while the requests that could not
draft slowed down: SmolLM2 on 2 cores, 4 clients, the bench's prompts, a summary drafting long
accepted runs finished in 0.9 s while an answer beside it that drafted nothing took 1.9 s
instead of 1.5 s, and the clients' work as a whole took longer than without drafting.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

# How much better than the round's own rate a draft's tokens per second must be to be taken.
MARGIN = 1.5
# The share of its rate a sequence may lose to the drafts of others: a round's timing noise.
FAIR_SLACK = 0.02


# The names of the verify's and the draft model's tables in `BatchCosts.calibrated` and in JSON
# (a kind's own table is under the kind's name).
VERIFY, DRAFT = "verify", "draft"


class CostTable:
    """Seconds of a decode by its tokens: a recent average per size seen, interpolated between
    sizes and extended along the last two beyond them. Not a line: on a CPU the kernels change
    with the batch (SmolLM2 F16 with 4 sequences cached: 1 row 8.2 ms, 2 rows 12.3, 4 13.6, 5
    14.1, 8 21.0, 16 25.5), and a line through them prices the next row wrongly by 3x."""

    def __init__(self, step_s: float, per_token_s: float, keep: float = 0.7) -> None:
        self.keep = keep
        self._prior = (step_s, per_token_s)
        self._seen: dict[int, float] = {}

    def add(self, n: int, seconds: float) -> None:
        old = self._seen.get(n)
        self._seen[n] = seconds if old is None else self.keep * old + (1 - self.keep) * seconds

    def at(self, n: float) -> float:
        seen = self._seen
        if not seen:
            return self._prior[0] + self._prior[1] * (n - 1)
        if n in seen:
            return seen[int(n)]
        sizes = sorted(seen)
        if n < sizes[0]:
            return seen[sizes[0]] * max(n, 1) / sizes[0] if sizes[0] > 1 else seen[sizes[0]]
        below = [x for x in sizes if x < n]
        above = [x for x in sizes if x > n]
        if above:
            lo, hi = below[-1], above[0]
            w = (n - lo) / (hi - lo)
            return (1 - w) * seen[lo] + w * seen[hi]
        if len(sizes) == 1:
            return seen[sizes[0]] + self._prior[1] * (n - sizes[0])
        lo, hi = sizes[-2], sizes[-1]
        slope = max(0.0, (seen[hi] - seen[lo]) / (hi - lo))
        return seen[hi] + slope * (n - hi)


@dataclass(frozen=True, slots=True)
class Want:
    """One sequence's part in choosing: its expected acceptance per draft, the most it may draft
    this round, whether its drafts cost draft steps (a free kind's, found already, do not), and
    a K it asked for (None: chosen here)."""

    alpha: float
    k_max: int
    stepped: bool
    fixed: int | None = None
    lag: int = 1  # tokens its drafter decodes in its first step (its catch-up, last included)
    alone: bool = False  # its steps are decodes of its own, not shared with other sequences
    table: str | None = None  # whose steps it takes (None: the draft model's; else a kind's own)
    one_pass: bool = False  # its drafts are one pass whatever K (DFlash's block): a step in all


# Where two kinds can draft for a sequence, one taking draft steps is weighed at this share of
# the tokens it is expected to add against a free one (prompt lookup): its steps cost.
STEPPED_WEIGHT = 0.5


@dataclass(frozen=True, slots=True)
class Bid:
    """A kind's offer for one sequence, as the choice between kinds sees it: its acceptance
    per draft, the most it drafts, whether it is free (found already, no draft steps)."""

    alpha: float
    k: int
    free: bool


def pick(bids: list[Bid], k_max: int, adaptive: bool) -> int:
    """Which kind drafts for a sequence this round (an index into `bids`; -1: none). By the
    tokens each is expected to add (a free one's found run against a stepped one's K, weighed
    by STEPPED_WEIGHT; a tie to the free one). With a fixed K (a seeded sampling run, whose
    output must repeat whatever runs beside it) by what was found alone, never by what other
    sequences taught: a free run as long as K, else a stepped kind, else the longest free run."""
    if not bids:
        return -1
    if not adaptive:
        for i, b in enumerate(bids):
            if b.free and b.k >= k_max:
                return i
        for i, b in enumerate(bids):
            if not b.free:
                return i
        return max(range(len(bids)), key=lambda i: bids[i].k)

    def worth(i: int) -> tuple[float, bool]:
        b = bids[i]
        return b.alpha * b.k * (1.0 if b.free else STEPPED_WEIGHT), b.free

    return max(range(len(bids)), key=worth)


class BatchCosts:
    """The learnt costs of one pair's batches (seconds)."""

    def __init__(self, step_s: float = 0.01, draft_ratio: float = 0.3) -> None:
        # Priors until measured (BatchEngine.calibrate measures at start): a verify row costs a
        # tenth of a step, a draft step `draft_ratio` of one.
        self.verify = CostTable(step_s, step_s * 0.1)
        self._prior = (step_s * draft_ratio, step_s * draft_ratio * 0.1)  # (every draft table's)
        self.draft = CostTable(*self._prior)
        self._own: dict[str, CostTable] = {}  # the steps of kinds with a context of their own
        # The tables BatchEngine.calibrate has timed at every size it measures (VERIFY, DRAFT or
        # a kind's name): a process given them (session/learnt.py) does not time them again.
        self.calibrated: set[str] = set()

    def table(self, name: str | None) -> CostTable:
        """The steps of the draft model (None), or of the kind `name`'s own context (its heads)."""
        if name is None:
            return self.draft
        if name not in self._own:
            self._own[name] = CostTable(*self._prior)
        return self._own[name]

    def record_for(self, name: str | None) -> Callable[[int, float], None]:
        return self.table(name).add

    def tables(self) -> dict[str, CostTable]:
        """Every table by the name `calibrated` uses."""
        return {VERIFY: self.verify, DRAFT: self.draft, **self._own}

    def choose(self, wants: list[Want], other_tokens: int = 0) -> list[int]:
        """K per sequence maximising expected tokens / seconds of the round; `other_tokens`: rows
        the batch carries anyway (prompt chunks)."""
        plan = _Plan(self, wants, other_tokens)
        for i, w in enumerate(wants):  # a K asked for is taken as it is
            for _ in range(w.fixed or 0):
                plan.take(i)
        plan.settle()  # (the drafts asked for are the round the others are measured against)
        free = [i for i, w in enumerate(wants) if w.fixed is None and w.k_max > 0]
        while free:
            # A draft is taken when its expected tokens per second beat the round's by MARGIN:
            # a mispriced row (timing noise, a sequence's cache out of the CPU's) must not make
            # drafting slower than not drafting.
            best_i, best = -1, MARGIN * plan.rate()
            for i in free:
                gain, cost = plan.step(i)
                if not plan.fair(i, gain, cost):
                    continue
                worth = gain / cost if cost > 0 else float("inf")
                if worth > best:
                    best_i, best = i, worth
            # One more draft for every sequence still drafting: fair where no single one is (a
            # row that slows the others is paid for by their own drafts).
            if len(free) > 1:
                level = plan.copy()
                for i in free:
                    level.take(i)
                added = level.seconds - plan.seconds
                worth = (level.tokens - plan.tokens) / added if added > 0 else float("inf")
                if level.fair() and worth > best:
                    plan = level
                    free = [i for i in free if plan.ks[i] < wants[i].k_max]
                    continue
            if best_i < 0:
                # A single draft may not pay where a run of them does (a model's catch-up, a
                # kernel's step up): look a run ahead for each before giving up.
                best_i = plan.run_that_pays(free)
                if best_i < 0:
                    break
            plan.take(best_i)
            if plan.ks[best_i] >= wants[best_i].k_max:
                free.remove(best_i)
        return plan.ks

    def rate(self, wants: list[Want], ks: list[int], other_tokens: int = 0) -> float:
        """Expected tokens per second of a round with these K (for tests and the benchmark)."""
        plan = _Plan(self, wants, other_tokens)
        for i, k in enumerate(ks):
            for _ in range(k):
                plan.take(i)
        return plan.rate()


class _Plan:
    """A round being planned: each sequence's K, its expected tokens, its seconds (the verify of
    every row, and each draft step's tokens: the first carries the catch-ups)."""

    def __init__(self, costs: BatchCosts, wants: list[Want], other_tokens: int) -> None:
        self.costs = costs
        self.wants = wants
        self.ks = [0] * len(wants)
        self.rows = len(wants) + other_tokens
        self.steps: dict[int, int] = {}  # draft step -> tokens decoded in it
        self.seconds = costs.verify.at(self.rows) if wants else 1.0
        self.each = [1.0] * len(wants)  # each sequence's expected tokens
        # A prompt being read in the round is slowed by drafts too, and gains nothing from them.
        self.reading = other_tokens > 0
        # The round every sequence's rate is kept at (settle): its seconds, and their tokens.
        self.ref_s = self.seconds
        self.ref_each = list(self.each)

    @property
    def tokens(self) -> float:
        return sum(self.each)

    def rate(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else 0.0

    def step(self, i: int) -> tuple[float, float]:
        """(expected tokens, seconds) one more draft of sequence i adds."""
        w, k = self.wants[i], self.ks[i]
        verify = self.costs.verify
        cost = verify.at(self.rows + 1) - verify.at(self.rows)
        if w.stepped:
            j = k + 1
            had = 0 if w.alone else self.steps.get(j, 0)
            add = w.lag if j == 1 else 0 if w.one_pass else 1
            if add:
                draft = self.costs.table(w.table)
                cost += draft.at(had + add) - (draft.at(had) if had else 0.0)
        return w.alpha ** (k + 1), max(cost, 0.0)

    def copy(self) -> _Plan:
        other = _Plan.__new__(_Plan)
        other.__dict__.update(self.__dict__, ks=list(self.ks), steps=dict(self.steps), each=list(self.each))
        return other

    def settle(self) -> None:
        """Keep every sequence's rate at least what this plan gives it, from now on."""
        self.ref_s = self.seconds
        self.ref_each = list(self.each)

    def fair(self, i: int = -1, gain: float = 0.0, cost: float = 0.0) -> bool:
        """Whether, with sequence i's next draft (`gain` tokens, `cost` seconds; none: the plan as
        it is), every sequence still expects its rate in the settled round, less FAIR_SLACK."""
        least = 1.0 if self.reading else float("inf")
        for j, (e, ref) in enumerate(zip(self.each, self.ref_each, strict=True)):
            least = min(least, (e + gain if j == i else e) / ref)
        return self.seconds + cost <= self.ref_s * least / (1 - FAIR_SLACK)

    def take(self, i: int) -> None:
        gain, cost = self.step(i)
        self.each[i] += gain
        w, k = self.wants[i], self.ks[i]
        if w.stepped and not w.alone:
            j = k + 1
            self.steps[j] = self.steps.get(j, 0) + (w.lag if j == 1 else 1)
        self.rows += 1
        self.seconds += cost
        self.ks[i] = k + 1

    def run_that_pays(self, free: list[int]) -> int:
        """The sequence whose run of further drafts (some of it) beats the round's rate by
        MARGIN, if one does."""
        rate0 = self.rate()
        for i in free:
            trial = self.copy()
            for _ in range(self.ks[i], self.wants[i].k_max):
                gain, cost = trial.step(i)
                if not trial.fair(i, gain, cost):
                    break  # (longer runs of i only slow the others more)
                trial.take(i)
                added = trial.seconds - self.seconds
                if trial.tokens - self.tokens > MARGIN * rate0 * added:
                    return i
        return -1


# ------------------------------------------------------------------ kept between processes
# What BatchCosts is written as (session/learnt.py keeps it per pair, machine and sequences):
# plain JSON values only, and read back only if every field is what this module writes.
_MOST_SIZES = 4096


def batch_costs_to_json(c: BatchCosts) -> dict[str, object]:
    """`c`'s measured tables as JSON values (see batch_costs_from_json)."""
    tables = {name: {str(n): s for n, s in t._seen.items()} for name, t in c.tables().items() if t._seen}
    return {"tables": tables, "calibrated": sorted(n for n in c.calibrated if n in tables)}


def batch_costs_from_json(x: object) -> BatchCosts | None:
    """What batch_costs_to_json wrote, or None for anything else (a damaged or hostile file:
    the engine then times its decodes again)."""
    try:
        if not isinstance(x, dict):
            raise ValueError(x)
        tables, calibrated = x.get("tables"), x.get("calibrated")
        if not isinstance(tables, dict) or not isinstance(calibrated, list) or len(tables) > 64:
            raise ValueError(x)
        costs = BatchCosts()
        for name, seen in tables.items():
            if not isinstance(name, str) or not name or not isinstance(seen, dict) or len(seen) > _MOST_SIZES:
                raise ValueError(name)
            table = costs.table(None if name == DRAFT else name) if name != VERIFY else costs.verify
            for n, seconds in seen.items():
                size = int(n)
                if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
                    raise ValueError(seconds)
                if not 1 <= size <= _MOST_SIZES or not math.isfinite(seconds) or not 0.0 < seconds < 3600.0:
                    raise ValueError(n)
                table._seen[size] = float(seconds)
        if not all(isinstance(name, str) and name in tables for name in calibrated):
            raise ValueError(calibrated)
        costs.calibrated = set(calibrated)
        return costs
    except (ValueError, TypeError, OverflowError):
        return None
