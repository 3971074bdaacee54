"""Where draft tokens come from: a draft model, or the text already in the context.

Both produce a `Proposal`: tokens plus, for sampling, the distribution each was drawn from
(q in the acceptance test min(1, p/q)). Verification does not care which drafter proposed.

* `ModelDrafter` runs the small draft model autoregressively. Its KV cache is kept in step with
  the history; each proposal starts by catching up, in one batch, on tokens it has not seen.
* `LookupDrafter` (prompt-lookup decoding) needs no model: it finds the latest earlier place
  where the last n tokens of the context occurred and proposes what followed them there. It
  costs microseconds and shines when the answer copies from the input (summaries, code edits,
  quotes). Its proposals are deterministic, so q is one-hot: a token d is then accepted with
  probability p(d) and a rejection draws from p with d removed, which keeps sampling exact.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from .draft_policy import CostModel
from .model import LoadedModel
from .sampling import Dist, SamplerSettings, distribution

DrafterKind = str  # "model" | "lookup"


@dataclass
class Proposal:
    tokens: list[int] = field(default_factory=list)
    qs: list[Dist | None] = field(default_factory=list)  # None when greedy


class ModelDrafter:
    kind: DrafterKind = "model"

    def __init__(
        self,
        model: LoadedModel,
        sampler: SamplerSettings,
        rng: random.Random,
        p_min: float,
        costs: CostModel,
        cancel: threading.Event | None,
    ) -> None:
        self.model = model
        self.sampler = sampler
        self.rng = rng
        self.p_min = p_min
        self.costs = costs
        self.cancel = cancel
        self.learn_costs = False  # set once the generation's first (cold) round is done

    def propose(self, history: Sequence[int], k: int) -> Proposal:
        out = Proposal()
        if k <= 0:
            return out
        model = self.model
        # Catch up in one batch on everything the draft has not seen yet: normally the last
        # token, plus the final draft token after a fully accepted round.
        behind = len(history) - len(model.cached)
        t0 = time.perf_counter()
        logits = model.decode(history[len(model.cached) :], "last")
        t_first = time.perf_counter() - t0
        steps = 0
        for j in range(k):
            assert logits is not None
            row = logits[0]
            if self.p_min > 0.0 and top_prob(row, self.sampler) < self.p_min:
                break
            tok, q = pick(row, self.sampler, self.rng)
            out.tokens.append(tok)
            out.qs.append(q)
            if j == k - 1 or model.is_eog(tok):
                break
            if self.cancel is not None and self.cancel.is_set():
                break
            logits = model.decode([tok], "last")
            steps += 1
        if self.learn_costs:
            rest = time.perf_counter() - t0 - t_first
            self.costs.observe_model_draft(behind, t_first, rest, steps)
        return out

    def rollback(self, keep: int) -> None:
        """After verification: keep at most `keep` tokens (history so far + accepted drafts)."""
        self.model.truncate(min(len(self.model.cached), keep))


class LookupDrafter:
    kind: DrafterKind = "lookup"

    def __init__(self, n_vocab: int, ngram_max: int = 4, ngram_min: int = 2) -> None:
        self.n_vocab = n_vocab
        self.ngram_max = ngram_max
        self.ngram_min = ngram_min

    def candidates(self, history: Sequence[int], k: int) -> list[int]:
        """Up to k tokens that followed the latest earlier occurrence of the longest suffix
        (ngram_max down to ngram_min tokens) of history. Empty when nothing matches."""
        if k <= 0 or len(history) <= self.ngram_min:
            return []
        arr = np.asarray(history, dtype=np.int64)
        for n in range(min(self.ngram_max, len(arr) - 1), self.ngram_min - 1, -1):
            pattern = arr[-n:]
            # Windows starting at 0 .. len-n-1: every earlier occurrence, not the suffix itself.
            windows = np.lib.stride_tricks.sliding_window_view(arr[:-1], n)
            hits = np.flatnonzero((windows == pattern).all(axis=1))
            if hits.size:
                start = int(hits[-1]) + n  # the most recent match: closest in topic
                return [int(t) for t in arr[start : start + k]]
        return []

    def propose(self, history: Sequence[int], k: int) -> Proposal:
        return self.proposal_from(self.candidates(history, k))

    def proposal_from(self, tokens: Sequence[int]) -> Proposal:
        """Candidates as a proposal: each drawn from a one-hot q (the lookup is deterministic)."""
        qs: list[Dist | None] = [
            Dist(np.array([t], dtype=np.int64), np.ones(1), self.n_vocab) for t in tokens
        ]
        return Proposal(list(tokens), qs)

    def rollback(self, keep: int) -> None:
        pass  # nothing cached


def top_prob(logits: np.ndarray, s: SamplerSettings) -> float:
    """The draft's confidence in its best token (plain softmax; after the sampler's
    truncation and temperature when sampling)."""
    if s.greedy:
        m = logits.max()
        return float(1.0 / np.exp(logits - m).sum())
    return distribution(logits, s).max_prob()


def pick(logits: np.ndarray, s: SamplerSettings, rng: random.Random) -> tuple[int, Dist | None]:
    if s.greedy:
        return int(np.argmax(logits)), None
    q = distribution(logits, s)
    return q.sample(rng), q
