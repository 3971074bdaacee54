"""The heads (MTP, EAGLE-3, DFlash) for the sequences of a batch: `tandem serve --parallel N`.

A head's llama.cpp context follows one sequence of the target's decodes (context.py), so the
proposer holds a head per sequence, each in a context of its own over the same weights (a
trained drafter's file is loaded once, by the head attached to the target), and drafts for the
sequences one after another (`shares_steps` False: the scheduler prices each alone).

Every head follows every decode of its sequence (the target's SeqContext tells it, with the
place of the sequence's tokens in the batch: llama.cpp hands the rows back in the batch's
order), whatever the request drafts with: a head is in step with its sequence's cache at every
round, a cache reused by the next request included, and nothing is read twice. That costs
each decode a copy of its rows (and, every FLUSH_ROWS positions, a catch-up pass), which the
target's cost tables leave out (SeqContext.listened_s): it is paid whatever K is.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Generic, TypeVar

from ..batched import Batching, BatchOffer, BatchProposerBase, BatchSetup, Lane
from ..policy import CostModel
from ..spec import BuildContext, Drafter

if TYPE_CHECKING:
    from ...llama.model import LoadedModel
    from .base import Head

H = TypeVar("H", bound="Head")

# The passes timed at start (entries a pass adds: a catch-up, or one step's).
CALIBRATE_SIZES = (1, 2, 4, 8, 16, 32)


class HeadsBatch(BatchProposerBase, Generic[H]):
    """One kind of head for every sequence of a batched engine."""

    shares_steps = False
    alpha_prior = 0.6  # (trained on the target's own rows: they agree more than a draft model)

    def __init__(
        self, setup: BatchSetup, first: H, kind: str, drafter: Callable[[H, BuildContext], Drafter]
    ) -> None:
        self.kind = kind
        self.table = kind  # (its passes cost what its own context's do: a table of their own)
        self.one_pass = first.one_pass
        self.record = setup.record_for(kind)
        self._first = first
        self._target = setup.target
        self._draft = setup.draft
        self._drafter = drafter
        self._costs = CostModel()  # (a drafter's own observations: unused beside the batch's)
        self._seqs = setup.seqs
        self.heads: list[H] = []
        try:
            for _ in range(setup.seqs.n_seq):
                self.heads.append(first.beside())
        except BaseException:
            self.close()
            raise
        for head in self.heads:
            head.follow_always()
        setup.seqs.listeners.append(self)

    # ------------------------------------------------------------------ the target's decodes
    def seq_decoded(self, model: LoadedModel, seq: int, pos0: int, tokens: Sequence[int], at: int) -> None:
        self.heads[seq].on_decode(model, pos0, tokens, at)

    def seq_kept(self, seq: int, n: int) -> None:
        self.heads[seq].truncate(n)

    # ------------------------------------------------------------------ the proposer
    def calibrate(self, seqs: Sequence[int], stopped: Callable[[], bool]) -> None:
        head = self.heads[seqs[0]]  # (empty: the target's calibration leaves its sequence so)
        for n in CALIBRATE_SIZES:
            if stopped() or n > head.pass_max:
                break
            for _ in range(2):
                self.record(n, head.time_pass(n))

    def offer(self, seq: int, history: Sequence[int], k_max: int) -> BatchOffer | None:
        head = self.heads[seq]
        if not head.ready_for(history):
            return None
        return BatchOffer(min(k_max, head.max_draft), lag=head.lag(history))

    def propose(self, lanes: Sequence[Lane]) -> float:
        start = time.perf_counter()
        for lane in lanes:
            t0 = time.perf_counter()
            head = self.heads[lane.seq]
            ctx = BuildContext(self._target, self._draft, lane.config, lane.rng, None, self._costs)
            got = self._drafter(head, ctx).draft(lane.history, lane.k)
            lane.drafts = got.tokens
            lane.qs = [q for q in got.qs if q is not None]
            lane.caught_up = got.caught_up
            if got.first_s:
                # Its first pass carried the catch-up (and the whole block, for a kind of one
                # pass: DFlash); each further pass one entry.
                self.record(max(1, got.caught_up + self.one_pass), got.first_s)
            if got.passes > 1:
                self.record(1, (time.perf_counter() - t0 - got.first_s) / (got.passes - 1))
        return time.perf_counter() - start

    def close(self) -> None:
        if self in self._seqs.listeners:
            self._seqs.listeners.remove(self)
        if self.heads and not self._first.following:
            self.heads[0].stop_following()  # (the target's outputs as a single answer left them)
        for head in self.heads:
            head.close()
        self.heads = []


def batching(
    kind: str, find: Callable[[LoadedModel], H | None], drafter: Callable[[H, BuildContext], Drafter]
) -> Batching:
    """A kind's Batching: heads like the one `find` finds attached to the target, for every
    sequence (none when the target has none), drafting with `drafter`."""

    def build(setup: BatchSetup) -> HeadsBatch[H] | None:
        first = find(setup.target)
        return None if first is None else HeadsBatch(setup, first, kind, drafter)

    return Batching(build=build)
