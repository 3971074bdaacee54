"""Prompt lookup: no model, just the text already in the context.

It finds the latest earlier place where the last n tokens of the context occurred and proposes
what followed them there. It costs microseconds and shines when the answer copies from the
input (summaries, code edits, quotes). Its proposals are deterministic, so q is one-hot: a token
d is then accepted with probability p(d) and a rejection draws from p with d removed, which
keeps sampling exact.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from ..config import DRAFT_MAX_LIMIT
from ..events import RoundEvent
from ..sampling import Dist
from . import Proposal
from .batched import Batching, BatchOffer, BatchProposerBase, BatchSetup, Lane
from .spec import (
    BuildContext,
    CostView,
    Drafter,
    DrafterBase,
    DrafterSpec,
    Needs,
    Offer,
    RoundView,
    Traits,
    Words,
)

if TYPE_CHECKING:
    from ..llama.model import LoadedModel

KIND = "lookup"


class LookupDrafter(DrafterBase):
    """Prompt lookup over an index of the context's n-grams.

    The index maps each n-gram (ngram_min..ngram_max tokens) to the position just after its
    latest occurrence that has a continuation, and is extended as the history grows, so a
    search is a few dictionary lookups whatever the context length: cheap enough to run after
    every draft-model step (the hybrid drafter)."""

    kind = KIND

    def __init__(self, n_vocab: int, ngram_max: int = 4, ngram_min: int = 2) -> None:
        self.n_vocab = n_vocab
        self.ngram_max = ngram_max
        self.ngram_min = ngram_min
        self._latest: dict[tuple[int, ...], int] = {}
        self._end = 0  # n-grams ending before this position are indexed
        self._last = -1  # the token at _end - 1 when indexed: detects a different history
        self.found: list[int] = []  # this round's candidates (see offer)

    # (begin, accept: nothing to do. The index follows the history by itself, see _sync, and
    # holds nothing the target's rollback could invalidate.)

    def draft(self, history: Sequence[int], k: int) -> Proposal:
        return self.proposal_from(self.candidates(history, k))

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

    def proposal_from(self, tokens: Sequence[int]) -> Proposal:
        """Candidates as a proposal: each drawn from a one-hot q (the lookup is deterministic)."""
        qs: list[Dist | None] = [
            Dist(np.array([t], dtype=np.int64), np.ones(1), self.n_vocab) for t in tokens
        ]
        return Proposal(list(tokens), qs, looked_up=len(tokens))

    # ------------------------------------------------------------------ scheduling
    def search(self, view: RoundView) -> None:
        """Before the offers: look for a match (timed: a search is what a lookup round costs)."""
        t0 = time.perf_counter()
        self.found = self.candidates(view.history, min(view.budget, DRAFT_MAX_LIMIT))
        if not view.first_round:  # a generation's first round runs cold (caches, graphs)
            view.costs.observe_search(self.kind, time.perf_counter() - t0)

    def offer(self, view: RoundView) -> Offer | None:
        # Tokens it drafts must later be caught up on by a drafter that keeps in step.
        policy = view.policies[self.kind]
        debt = view.catchup_debt if view.in_step else 0.0
        if self.found:
            view.tail_k, rate = policy.plan(min(view.budget, len(self.found)), debt)
            return Offer(rate, view.tail_k)
        if view.in_step:  # the most a composition's tail may add
            view.tail_k = policy.plan(view.budget, debt)[0]
        return None

    def credit(self, rnd: RoundEvent) -> list[tuple[str, int, int]]:
        own = rnd.drafted - rnd.looked_up
        if rnd.looked_up and rnd.accepted >= own:
            return [(self.kind, rnd.looked_up, rnd.accepted - own)]
        return []


class LookupBatch(BatchProposerBase):
    """Prompt lookup for the sequences of a batch: an index per sequence, searched when the
    round is planned (what it finds is its offer)."""

    kind = KIND
    free = True
    continues = True
    alpha_prior = 0.4

    def __init__(self, n_vocab: int) -> None:
        self.n_vocab = n_vocab
        self._of: dict[int, LookupDrafter] = {}

    def admit(self, seq: int, prompt: Sequence[int], reuse: bool) -> None:
        self._of[seq] = LookupDrafter(self.n_vocab)

    def offer(self, seq: int, history: Sequence[int], k_max: int) -> BatchOffer | None:
        found = self._of[seq].candidates(history, k_max)
        return BatchOffer(len(found), tuple(found)) if found else None

    def propose(self, lanes: Sequence[Lane]) -> float:
        for lane in lanes:  # (the run found when the round was planned, cut to its K)
            lane.drafts = list((lane.offer.found or ())[: lane.k])
            if not lane.config.sampler.greedy:
                lane.qs = list(self._of[lane.seq].proposal_from(lane.drafts).qs)
        return 0.0

    def continuation(self, seq: int, history: Sequence[int], drafts: Sequence[int], k: int) -> Proposal:
        lookup = self._of[seq]
        return lookup.proposal_from(lookup.continuation(history, drafts, k))

    def release(self, seq: int) -> None:
        self._of.pop(seq, None)


def _build_batch(setup: BatchSetup) -> LookupBatch:
    return LookupBatch(setup.target.n_vocab)


def _build(ctx: BuildContext) -> Drafter:
    return LookupDrafter(ctx.target.n_vocab)


def _missing(target: LoadedModel, draft: LoadedModel | None) -> str | None:
    return None


def _time_search(n_vocab: int, history: Sequence[int], k: int) -> float:
    """One search over `history`, timed (its index built first: a round's search finds it
    built, and extends it by a round's tokens)."""
    lookup = LookupDrafter(n_vocab)
    lookup.candidates(history[:-1], k)
    t0 = time.perf_counter()
    lookup.candidates(history, k)
    return time.perf_counter() - t0


def _draft_cost(costs: CostView, drafted: int, caught_up: int, looked_up: int, draft_s: float) -> float:
    return costs.c_lookup  # one search, whatever it found


SPEC = DrafterSpec(
    name=KIND,
    words=Words(
        label="prompt lookup",
        help="prompt lookup (continue an n-gram found earlier in the context; no model)",
        note="prompt lookup",
        phrase=lambda target, draft: "prompt lookup",
    ),
    needs=Needs.NOTHING,
    build=_build,
    missing=_missing,
    traits=Traits(
        draft_cost=_draft_cost, untimed_rank=0, timed_by_drafting=False, free=True, time_search=_time_search
    ),
    batching=Batching(build=_build_batch),
)
