"""Turning logits into tokens: greedy choice, sampling, and speculative acceptance.

Truncation order follows llama.cpp's default sampler chain so that settings mean what llama.cpp
users expect: top-k, then top-p and min-p on the softmax of the raw logits, then temperature on
the survivors. Both models' distributions go through the very same function, which is what
makes rejection sampling lossless (Leviathan et al. 2023, Chen et al. 2023): accept a draft
token d with probability min(1, p(d)/q(d)); on rejection draw from norm(max(0, p - q)).

Everything is vectorised over the vocabulary; a distribution keeps only its surviving ids.
Randomness is a seeded `random.Random`: only uniform draws are needed (inverse-CDF sampling
and the accept test), and numpy.random would cost ~7 MB of resident memory for nothing.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

# A temperature below this samples as greedy decoding does (the argmax): at 1e-6 a token 1e-4
# logits below the best is e^-100 times as likely, and far below it (1e-320) the logits divided
# by the temperature overflow to infinity, every probability is NaN and every draft rejected.
MIN_TEMPERATURE = 1e-6

# For top-p without top-k we first look at the most likely tokens only; if they already hold
# top_p of the mass the answer is exact, otherwise we fall back to a full sort.
_TOP_P_PREFILTER = 1024


class NonFiniteLogits(ValueError):
    """A row of logits holds NaN or +inf (an fp16 overflow on a GPU backend, broken weights):
    no token can be chosen from it. The engine reports it as a GenerationError naming the model
    and the position (LoadedModel.non_finite)."""


@dataclass(frozen=True)
class SamplerSettings:
    temperature: float = 0.0  # 0 (or below MIN_TEMPERATURE) = greedy (argmax); the rest is then ignored
    top_k: int = 40  # 0 = off
    top_p: float = 0.95  # 1 = off
    min_p: float = 0.05  # 0 = off
    seed: int | None = None

    # Whether this is greedy decoding (argmax); stored rather than a property because every
    # round asks (see __post_init__).
    greedy: bool = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "greedy", self.temperature < MIN_TEMPERATURE or self.top_k == 1)

    def validate(self) -> None:
        # Written so that NaN fails every check (a comparison with NaN is always False).
        if not (self.temperature >= 0.0 and math.isfinite(self.temperature)):
            raise ValueError("temperature must be 0 (greedy) or a positive number")
        if self.top_k < 0:
            raise ValueError("top-k must be 0 (off) or positive")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError("top-p must be in (0, 1]")
        if not 0.0 <= self.min_p < 1.0:
            raise ValueError("min-p must be in [0, 1)")


@dataclass(frozen=True)
class Dist:
    """A probability distribution over `ids` (None: the whole vocabulary, in id order)."""

    ids: IntArray | None
    probs: FloatArray
    n_vocab: int

    def prob_of(self, token: int) -> float:
        if self.ids is None:
            return float(self.probs[token]) if 0 <= token < len(self.probs) else 0.0
        hit = np.flatnonzero(self.ids == token)
        return float(self.probs[hit[0]]) if hit.size else 0.0

    def probs_at(self, ids: IntArray | None, n_full: int) -> FloatArray:
        """This distribution's probabilities at `ids` (None: ids 0..n_full-1)."""
        dense = np.zeros(max(n_full, self.n_vocab), dtype=np.float64)
        if self.ids is None:
            dense[: len(self.probs)] = self.probs
        else:
            dense[self.ids] = self.probs
        return dense[:n_full] if ids is None else dense[ids]

    def token_at(self, index: int) -> int:
        return int(index if self.ids is None else self.ids[index])

    def sample(self, rng: random.Random) -> int:
        cdf = np.cumsum(self.probs)
        i = int(np.searchsorted(cdf, rng.random() * cdf[-1], side="right"))
        return self.token_at(min(i, len(self.probs) - 1))

    def max_prob(self) -> float:
        return float(self.probs.max())


def _softmax(x: FloatArray) -> FloatArray:
    e = np.exp(x - x.max())
    return e / e.sum()  # type: ignore[no-any-return]


def distribution(logits: npt.NDArray[np.float32], s: SamplerSettings) -> Dist:
    """The sampling distribution for one row of logits under settings `s` (temperature > 0)."""
    n = logits.shape[-1]
    ids: IntArray | None
    if 0 < s.top_k < n:
        ids = np.argpartition(logits, n - s.top_k)[n - s.top_k :].astype(np.int64)
        vals = logits[ids].astype(np.float64)
    else:
        ids = None
        vals = logits.astype(np.float64)
    # NaN and +inf sort to the top (and NaN propagates through max), so one look at the largest
    # kept value finds them: the distribution would be empty or meaningless.
    if not math.isfinite(vals.max()):
        raise NonFiniteLogits("NaN or infinite logits")

    if s.top_p < 1.0 or s.min_p > 0.0:
        p1 = _softmax(vals)
        keep = _top_p_keep(p1, s.top_p) if s.top_p < 1.0 else None
        if s.min_p > 0.0:
            # min-p: tokens at least min_p times as likely as the best one survive.
            floor = s.min_p * p1.max()
            keep = np.flatnonzero(p1 >= floor) if keep is None else keep[p1[keep] >= floor]
        if keep is not None:
            keep = np.sort(keep)
            vals = vals[keep]
            ids = keep.astype(np.int64) if ids is None else ids[keep]

    probs = _softmax(vals / s.temperature)
    return Dist(ids, probs, n)


def _top_p_keep(p: FloatArray, top_p: float) -> IntArray:
    """Indices of the smallest set of most likely entries whose mass reaches top_p."""
    n = len(p)
    cand: IntArray
    if n > _TOP_P_PREFILTER:
        cand = np.argpartition(p, n - _TOP_P_PREFILTER)[n - _TOP_P_PREFILTER :].astype(np.int64)
        if p[cand].sum() < top_p:  # rare: a very flat distribution
            cand = np.arange(n, dtype=np.int64)
    else:
        cand = np.arange(n, dtype=np.int64)
    order = cand[np.argsort(-p[cand], kind="stable")]
    cum = np.cumsum(p[order])
    cut = int(np.searchsorted(cum, top_p, side="left")) + 1
    return order[: min(cut, len(order))]


def residual(p: Dist, q: Dist) -> Dist:
    """norm(max(0, p - q)), the distribution to draw from after a rejection."""
    r = np.maximum(p.probs - q.probs_at(p.ids, p.n_vocab), 0.0)
    total = r.sum()
    if total <= 0.0:  # p == q where p has mass: any draw from p is exact
        return p
    return Dist(p.ids, r / total, p.n_vocab)


def accept_draft(p: Dist, q: Dist, token: int, rng: random.Random) -> bool:
    """Rejection-sampling test: accept `token` (drawn from q) with probability min(1, p/q)."""
    q_tok = q.prob_of(token)
    if q_tok <= 0.0:
        return False
    return bool(rng.random() * q_tok < p.prob_of(token))
