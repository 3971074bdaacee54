"""How long to draft for each of several sequences, given what a batch costs (batch.py).

With one sequence a verify of K + 1 rows costs little more than one step, which is what makes
drafting pay. With many, the batch is already wide: its cost grows with every row added, and
a draft is worth its rows only while the tokens it is expected to add outweigh them. So the
costs are learnt as functions of the whole batch:

* a verify (one llama_decode of every sequence's rows, prompt chunks included): seconds =
  a + b · tokens, fitted by recency-weighted least squares over the rounds;
* a draft model's step (one decode of the sequences still drafting): a + b · tokens, its
  first step carrying each sequence's catch-up (what the draft model has not read yet).

`choose` gives each sequence its K to maximise the round's expected tokens per second: every
sequence starts at 0 and the increment that raises the rate most is taken until none does (a
sequence's n-th draft adds α^n expected tokens; it costs b verify seconds and its tokens in
the draft step, plus the step's own cost when it is the first to draft that deep). A draft that
does not pay alone is still taken when the run it starts does (a model's catch-up is paid once).
With enough sequences no increment pays, and the round is plain batched decoding.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


class LinearFit:
    """y ≈ a + b·x, least squares with older points weighing less (`keep`: the weight left to
    a point after one more), from a prior pseudo-point pair until points come in."""

    def __init__(self, a: float, b: float, keep: float = 0.98) -> None:
        self.keep = keep
        # The prior: two points on the line, weighing one point between them.
        self._w = self._x = self._y = self._xx = self._xy = 0.0
        self._add(1.0, a + b, 0.5)
        self._add(9.0, a + 9 * b, 0.5)
        self.points = 0

    def _add(self, x: float, y: float, w: float) -> None:
        self._w += w
        self._x += w * x
        self._y += w * y
        self._xx += w * x * x
        self._xy += w * x * y

    def add(self, x: float, y: float) -> None:
        k = self.keep
        self._w, self._x, self._y, self._xx, self._xy = (
            self._w * k,
            self._x * k,
            self._y * k,
            self._xx * k,
            self._xy * k,
        )
        self._add(x, y, 1.0)
        self.points += 1

    def line(self) -> tuple[float, float]:
        """(a, b): b never below 0 and a never below 0 (costs do not fall with more work)."""
        w, sx, sy = self._w, self._x, self._y
        var = self._xx - sx * sx / w
        b = (self._xy - sx * sy / w) / var if var > 1e-12 else 0.0
        b = max(0.0, b)
        a = max(0.0, (sy - b * sx) / w)
        return a, b

    def at(self, x: float) -> float:
        a, b = self.line()
        return a + b * x


@dataclass(frozen=True, slots=True)
class Want:
    """One sequence's part in choosing: its expected acceptance per draft, the most it may draft
    this round, whether its drafts cost draft-model steps (lookup's are free), and a K it asked
    for (None: chosen here)."""

    alpha: float
    k_max: int
    model: bool
    fixed: int | None = None
    lag: int = 1  # tokens the draft model decodes in its first step (its catch-up, last included)


class BatchCosts:
    """The learnt costs of one pair's batches (seconds)."""

    def __init__(self, step_s: float = 0.01, draft_ratio: float = 0.3) -> None:
        # Priors until measured: a verify row costs a tenth of a step, a draft step `draft_ratio`.
        self.verify = LinearFit(step_s, step_s * 0.1)
        self.draft = LinearFit(step_s * draft_ratio, step_s * draft_ratio * 0.1)

    def choose(self, wants: list[Want], other_tokens: int = 0) -> list[int]:
        """K per sequence maximising expected tokens / seconds of the round; `other_tokens`: rows
        the batch carries anyway (prompt chunks)."""
        n = len(wants)
        ks = [0] * n
        if n == 0:
            return ks
        va, vb = self.verify.line()
        da, db = self.draft.line()
        deepest = max(max(w.k_max, w.fixed or 0) for w in wants)
        depth: list[int] = [0] * (deepest + 2)
        tokens = float(n)
        seconds = va + vb * (n + other_tokens)

        def cost(w: Want, k: int) -> float:
            """Seconds the (k+1)-th draft of `w` adds to the round."""
            c = vb
            if w.model:
                c += db * (w.lag if k == 0 else 1) + (da if depth[k + 1] == 0 else 0.0)
            return c

        def take(i: int) -> None:
            nonlocal tokens, seconds
            w, k = wants[i], ks[i]
            seconds += cost(w, k)
            tokens += w.alpha ** (k + 1)
            if w.model:
                depth[k + 1] += 1
            ks[i] = k + 1

        for i, w in enumerate(wants):  # a K asked for is taken as it is
            for _ in range(w.fixed or 0):
                take(i)
        free = [i for i, w in enumerate(wants) if w.fixed is None and w.k_max > 0]
        while free:
            best_i, best_rate = -1, tokens / seconds
            for i in free:
                rate = (tokens + wants[i].alpha ** (ks[i] + 1)) / (seconds + cost(wants[i], ks[i]))
                if rate > best_rate * (1 + 1e-9):
                    best_i, best_rate = i, rate
            if best_i < 0:
                # A single draft may not pay where a run of them does (a model's catch-up, the
                # step's own cost): look a run ahead for each before giving up.
                best_i = self._run_pays(wants, ks, free, tokens, seconds, cost)
                if best_i < 0:
                    break
            take(best_i)
            if ks[best_i] >= wants[best_i].k_max:
                free.remove(best_i)
        return ks

    @staticmethod
    def _run_pays(
        wants: list[Want],
        ks: list[int],
        free: list[int],
        tokens: float,
        seconds: float,
        cost: Callable[[Want, int], float],
    ) -> int:
        """The sequence whose whole remaining run of drafts raises the rate, if one does."""
        rate0 = tokens / seconds
        for i in free:
            w = wants[i]
            t, sec = tokens, seconds
            for k in range(ks[i], w.k_max):
                t += w.alpha ** (k + 1)
                sec += cost(w, k)
                if t / sec > rate0 * (1 + 1e-9):
                    return i
        return -1

    def rate(self, wants: list[Want], ks: list[int], other_tokens: int = 0) -> float:
        """Expected tokens per second of a round with these K (for tests and the benchmark)."""
        va, vb = self.verify.line()
        da, db = self.draft.line()
        tokens = sum(_expected(w.alpha, k) for w, k in zip(wants, ks, strict=True))
        seconds = va + vb * (len(wants) + sum(ks) + other_tokens)
        depth: dict[int, int] = {}
        for w, k in zip(wants, ks, strict=True):
            if w.model and k:
                seconds += db * (w.lag + k - 1)
                for j in range(1, k + 1):
                    depth[j] = depth.get(j, 0) + 1
        return tokens / (seconds + da * len(depth))


def _expected(alpha: float, k: int) -> float:
    """Tokens a round of k drafts adds: 1 + α + … + α^k."""
    if alpha >= 1.0:
        return float(k + 1)
    return (1.0 - alpha ** (k + 1)) / (1.0 - alpha)
