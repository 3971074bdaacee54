"""Where draft tokens come from. Every drafter has the same three calls, so the round
(app/engine/round.py) never asks which one it holds:

    begin(prompt)       a generation starts: get ready for this prompt (a draft model prefills it)
    draft(history, k)   propose up to k tokens that would follow `history`
    accept(keep)        the target kept history[:keep] (last token + accepted drafts): roll back

* `ModelDrafter` (model.py): a small draft model, autoregressively.
* `LookupDrafter` (lookup.py): prompt lookup, continuing an n-gram found earlier in the context.
* `HybridDrafter` (hybrid.py): the draft model until prompt lookup can finish the draft.

The next drafters (a model's own multi-token-prediction heads) implement the same protocol;
which drafter runs a round, and with which K, is the scheduler's business (scheduler.py).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol

from ..sampling import Dist

# Who drafted a round (events and the cost model use the same names).
DrafterKind = Literal["model", "lookup"]


@dataclass(slots=True)
class Proposal:
    """A drafter's guesses for one round, and what producing them cost."""

    tokens: list[int] = field(default_factory=list)
    # The distribution each token was drawn from (q in the acceptance test min(1, p/q));
    # None when decoding greedily.
    qs: list[Dist | None] = field(default_factory=list)
    looked_up: int = 0  # of the tokens, how many (at the end) came from prompt lookup
    caught_up: int = 0  # tokens the draft model decoded in its first (catch-up) batch
    first_s: float = 0.0  # seconds of the draft model's first batch (catch-up + first step)
    passes: int = 0  # draft-model decode calls this round (the first batch included)


class Drafter(Protocol):
    kind: DrafterKind

    def begin(self, prompt: Sequence[int], should_stop: Callable[[], bool]) -> None:
        """A generation starts with `prompt` (all but its last token: the target decodes that
        one in the first round). `should_stop` is asked between long pieces of work."""

    def draft(self, history: Sequence[int], k: int) -> Proposal:
        """Up to k tokens to follow `history` (prompt + answer so far)."""

    def accept(self, keep: int) -> None:
        """After verification the target keeps history[:keep]; drop anything beyond it."""
