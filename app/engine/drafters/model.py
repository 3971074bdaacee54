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
from collections.abc import Callable, Sequence
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
    looked_up: int = 0  # of tokens, how many (at the end) came from prompt lookup
    caught_up: int = 0  # tokens the draft model decoded in its first (catch-up) batch


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

    def propose(
        self,
        history: Sequence[int],
        k: int,
        extend: Callable[[Sequence[int]], Proposal] | None = None,
    ) -> Proposal:
        """Up to k tokens from the draft model. With `extend` (the auto drafter), after each
        draft token prompt lookup is asked for a continuation of history + drafts; when it has
        one, its tokens end the proposal: they cost no draft steps at all."""
        out = Proposal()
        if k <= 0:
            return out
        model = self.model
        # Catch up in one batch on everything the draft has not seen yet: normally the last
        # token, plus the final draft token after a fully accepted round.
        behind = self.behind(history)
        out.caught_up = behind
        t0 = time.perf_counter()
        logits = model.decode(history[len(model.cached) :], "last")
        t_first = time.perf_counter() - t0
        steps = 0
        for j in range(k):
            assert logits is not None
            drawn = self._draw(logits[0])
            if drawn is None:
                break  # the draft is unsure here: a rejection is likely, stop before it
            tok, q = drawn
            out.tokens.append(tok)
            out.qs.append(q)
            if model.is_eog(tok):
                break
            if extend is not None:
                more = extend(out.tokens)
                if more.tokens:
                    out.tokens += more.tokens
                    out.qs += more.qs
                    out.looked_up = more.looked_up
                    break
            if j == k - 1:
                break
            if self.cancel is not None and self.cancel.is_set():
                break
            logits = model.decode([tok], "last")
            steps += 1
        if self.learn_costs:
            rest = time.perf_counter() - t0 - t_first
            self.costs.observe_model_draft(behind, t_first, rest, steps)
        return out

    def _draw(self, row: np.ndarray) -> tuple[int, Dist | None] | None:
        """The next draft token (and q when sampling), or None when the draft's confidence in
        its best token is below p-min. When sampling, q is built once for both."""
        if self.sampler.greedy:
            if self.p_min > 0.0 and top_prob(row, self.sampler) < self.p_min:
                return None
            return int(np.argmax(row)), None
        q = distribution(row, self.sampler)
        if q.max_prob() < self.p_min:
            return None
        return q.sample(self.rng), q

    def behind(self, history: Sequence[int]) -> int:
        """Tokens of history the draft model has not decoded (its next catch-up batch)."""
        return len(history) - len(self.model.cached)

    def rollback(self, keep: int) -> None:
        """After verification: keep at most `keep` tokens (history so far + accepted drafts)."""
        self.model.truncate(min(len(self.model.cached), keep))


class LookupDrafter:
    """Prompt lookup over an index of the context's n-grams.

    The index maps each n-gram (ngram_min..ngram_max tokens) to the position just after its
    latest occurrence that has a continuation, and is extended as the history grows, so a
    search is a few dictionary lookups whatever the context length: cheap enough to run after
    every draft-model step (the auto drafter's hybrid rounds)."""

    kind: DrafterKind = "lookup"

    def __init__(self, n_vocab: int, ngram_max: int = 4, ngram_min: int = 2) -> None:
        self.n_vocab = n_vocab
        self.ngram_max = ngram_max
        self.ngram_min = ngram_min
        self._latest: dict[tuple[int, ...], int] = {}
        self._end = 0  # n-grams ending before this position are indexed
        self._last = -1  # the token at _end - 1 when indexed: detects a different history

    def _sync(self, history: Sequence[int]) -> None:
        # A generation's history only grows. Anything else (a shorter or different history)
        # rebuilds the index; a stale index could only cost speed, never change the output.
        if self._end > len(history) or (self._end and history[self._end - 1] != self._last):
            self._latest.clear()
            self._end = 0
        latest, lo, hi = self._latest, self.ngram_min, self.ngram_max
        # Only n-grams followed by at least one token: they end at len(history) - 1 at most.
        for end in range(max(self._end, lo), len(history)):
            for n in range(lo, min(hi, end) + 1):
                latest[tuple(history[end - n : end])] = end
        self._end = max(self._end, len(history))
        if self._end:
            self._last = history[self._end - 1]

    def continuation(self, history: Sequence[int], tail: Sequence[int], k: int) -> list[int]:
        """Up to k tokens that followed the latest earlier occurrence in `history` of the
        longest suffix (ngram_max down to ngram_min tokens) of history + tail."""
        if k <= 0:
            return []
        self._sync(history)
        suffix = [*history[-self.ngram_max :], *tail][-self.ngram_max :]
        for n in range(min(self.ngram_max, len(suffix)), self.ngram_min - 1, -1):
            start = self._latest.get(tuple(suffix[-n:]))
            if start is not None:
                return list(history[start : start + k])
        return []

    def candidates(self, history: Sequence[int], k: int) -> list[int]:
        """Up to k tokens that followed the latest earlier occurrence of the longest suffix
        (ngram_max down to ngram_min tokens) of history. Empty when nothing matches."""
        return self.continuation(history, (), k)

    def propose(self, history: Sequence[int], k: int) -> Proposal:
        return self.proposal_from(self.candidates(history, k))

    def proposal_from(self, tokens: Sequence[int]) -> Proposal:
        """Candidates as a proposal: each drawn from a one-hot q (the lookup is deterministic)."""
        qs: list[Dist | None] = [
            Dist(np.array([t], dtype=np.int64), np.ones(1), self.n_vocab) for t in tokens
        ]
        return Proposal(list(tokens), qs, looked_up=len(tokens))

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
