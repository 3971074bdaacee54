"""What a kind does for the sequences of a batch (decoding/batch.py: `tandem serve --parallel`).

The batched engine never names a kind: it asks each kind's proposer what it can draft for a
sequence this round (`offer`), its scheduler (decoding/batch_costs.py) picks one per sequence
and gives each its K, and every proposer then drafts for all the sequences it was given at once
(`propose`: the draft model in one llama.cpp batch a step, whatever the number of sequences).

A kind that drafts for several sequences declares it in its spec (`Batching.build`), drafting
for them in one llama.cpp call a step or one after another (`shares_steps`: the heads, a
context each sequence); one that cannot says why (`Batching.why_not`), and a request for it
beside other sequences is refused with that reason, never served by another kind in silence.
(Every kind serves several today: a recurrent draft model's sequences are checkpointed,
llama/sequences.py.)

Compositions: a stepped kind that `takes_tail` (the draft model) may have its draft finished by
a free kind of the same sequence that `continues` it (prompt lookup: after each draft step, does
the text so far continue something earlier in the context?), as the single sequence's hybrid
drafter does (hybrid.py). The engine wires them by these traits, never by name.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from ..config import GenerationConfig
from ..sampling import Dist
from . import Proposal

if TYPE_CHECKING:
    from ..llama.model import LoadedModel
    from ..llama.sequences import SeqContext


@dataclass(frozen=True, slots=True)
class BatchOffer:
    """What a proposer can draft for one sequence this round: at most `k_max` tokens, found
    already when `found` is set (a free kind: what it found is the offer), the first step
    decoding `lag` tokens (its catch-up on the history, the last token included)."""

    k_max: int
    found: tuple[int, ...] | None = None
    lag: int = 1


@dataclass
class Lane:
    """One sequence's part in a round's drafting: what it asks (k) and what it got."""

    seq: int
    history: Sequence[int]
    config: GenerationConfig
    rng: random.Random
    offer: BatchOffer  # what its proposer offered it this round
    k: int
    drafts: list[int] = field(default_factory=list)
    qs: list[Dist | None] = field(default_factory=list)  # (empty when greedy)
    caught_up: int = 0  # tokens its proposer decoded before its first draft step (one: in step)
    # A free kind's continuation of the draft so far (drafts, most tokens) -> its tokens, and the
    # most it may add (0: none): the engine gives them to a proposer that `takes_tail`.
    tail: Callable[[Sequence[int], int], Proposal] | None = None
    tail_max: int = 0
    looked_up: int = 0  # drafts its tail added

    def finish(self, room: int) -> bool:
        """After a draft step: append what the tail continues the draft with, at most `room`
        tokens (and tail_max); True when it did (the draft ends there)."""
        n = min(room, self.tail_max)
        if self.tail is None or n <= 0:
            return False
        more = self.tail(self.drafts, n)
        if not more.tokens:
            return False
        self.drafts += more.tokens
        if not self.config.sampler.greedy:  # (q of each drafted token; one-hot for a lookup's)
            self.qs += more.qs
        self.looked_up = len(more.tokens)
        return True


@dataclass(frozen=True)
class BatchSetup:
    """What a batched engine gives the kinds: its pair, the target's sequences (whose decodes a
    kind may follow: SeqContext.listeners), and where a proposer records what its decodes cost
    ((tokens, seconds) into the scheduler's table of the name given: None, the draft model's)."""

    target: LoadedModel
    draft: LoadedModel | None
    seqs: SeqContext
    record_for: Callable[[str | None], Callable[[int, float], None]]

    @property
    def record(self) -> Callable[[int, float], None]:
        """Into the draft model's steps."""
        return self.record_for(None)


class BatchProposer(Protocol):
    kind: str
    # It finds its tokens before the plan, at no draft step (prompt lookup): its offer is what
    # it found, and the scheduler prices its drafts as verify rows alone.
    free: bool
    # Its steps for several sequences are one decode (the draft model's); False: one after
    # another, each sequence's alone (the scheduler prices them so).
    shares_steps: bool
    # Whose steps it takes (None: the draft model's; else its own context's, by this name),
    # and whether a draft is one pass whatever its length (DFlash's block).
    table: str | None
    one_pass: bool
    alpha_prior: float  # acceptance per draft expected before a sequence has drafted with it
    # Its drafts may be finished by a free kind's continuation (Lane.tail); it continues drafts.
    takes_tail: bool
    continues: bool

    def calibrate(self, seqs: Sequence[int], stopped: Callable[[], bool]) -> None:
        """Time its decodes at the sizes rounds use, in the free sequences `seqs`, left empty."""

    def admit(self, seq: int, prompt: Sequence[int], reuse: bool) -> None:
        """Sequence `seq` starts answering `prompt`; `reuse`: what its cache holds may be kept
        (a request of the same cache group left it)."""

    def offer(self, seq: int, history: Sequence[int], k_max: int) -> BatchOffer | None:
        """What it can draft for `seq` this round, up to k_max tokens; None: nothing."""

    def propose(self, lanes: Sequence[Lane]) -> float:
        """Draft for every lane (its k tokens at most, with q when sampling); the seconds spent."""

    def keep(self, seq: int, n: int) -> None:
        """The target kept `seq`'s history[:n]: drop anything beyond it."""

    def release(self, seq: int) -> None:
        """Sequence `seq`'s answer ended (its cache may serve a next request: see admit)."""

    def continuation(self, seq: int, history: Sequence[int], drafts: Sequence[int], k: int) -> Proposal:
        """(`continues`) Up to k tokens that continue history + drafts for `seq`, with q."""

    def close(self) -> None: ...


class BatchProposerBase:
    """The calls a proposer without state of its own in llama.cpp does not need."""

    free = False
    shares_steps = True
    table: str | None = None
    one_pass = False
    alpha_prior = 0.5
    takes_tail = False
    continues = False

    def calibrate(self, seqs: Sequence[int], stopped: Callable[[], bool]) -> None:
        pass

    def admit(self, seq: int, prompt: Sequence[int], reuse: bool) -> None:
        pass

    def keep(self, seq: int, n: int) -> None:
        pass

    def release(self, seq: int) -> None:
        pass

    def continuation(self, seq: int, history: Sequence[int], drafts: Sequence[int], k: int) -> Proposal:
        return Proposal()

    def close(self) -> None:
        pass


@dataclass(frozen=True)
class Batching:
    """How a kind serves the sequences of a batch: `build` its proposer for one engine (None:
    the pair gives it nothing to draft with), or, when it cannot (build None), `why_not`."""

    build: Callable[[BatchSetup], BatchProposer | None] | None = None
    why_not: str = ""
