"""The draft model, finished by prompt lookup: the `auto` drafter's model rounds.

After every draft-model token, prompt lookup is asked whether the text so far continues
something earlier in the context; when it does, its tokens end the draft at no draft-model
cost. (The draft model must later catch up on them: the scheduler weighs that.)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ..events import RoundEvent
from . import Proposal
from .lookup import LookupDrafter
from .model import ModelDrafter
from .spec import Drafter, DrafterBase, Offer, RoundView


class HybridDrafter(DrafterBase):
    def __init__(self, model: ModelDrafter, lookup: LookupDrafter) -> None:
        self.kind = model.kind  # the round is the model's; `Proposal.looked_up` counts the tail
        self.model = model
        self.lookup = lookup
        # Set by the scheduler each round: the most tokens lookup may append, and the most
        # tokens the whole draft may have (the round's K cap and budget).
        self.tail_max = 0
        self.total_max = 0

    def begin(self, prompt: Sequence[int], should_stop: Callable[[], bool]) -> None:
        self.model.begin(prompt, should_stop)
        self.lookup.begin(prompt, should_stop)

    def draft(self, history: Sequence[int], k: int) -> Proposal:
        """Up to k draft-model tokens, then whatever lookup continues them with."""
        out = Proposal()
        if k <= 0:
            return out
        for tok, q in self.model.tokens(history, out):
            out.tokens.append(tok)
            out.qs.append(q)
            room = min(self.tail_max, self.total_max - len(out.tokens))
            tail = self.lookup.continuation(history, out.tokens, room)
            if tail:
                more = self.lookup.proposal_from(tail)
                out.tokens += more.tokens
                out.qs += more.qs
                out.looked_up = more.looked_up
                break
            if len(out.tokens) >= k:
                break
        return out

    def accept(self, keep: int) -> None:
        self.model.accept(keep)
        self.lookup.accept(keep)

    # ------------------------------------------------------------------ scheduling
    # It stands in the pool for the draft model (registry.build): it bids as the model does,
    # and runs a model round with a lookup tail when lookup may add one.
    def began(self, prompt: Sequence[int]) -> bool:
        return self.model.began(prompt)

    # (search: prompt lookup is in the pool too, and searches there)

    def offer(self, view: RoundView) -> Offer | None:
        return self.model.offer(view)

    def chosen(self, k: int, view: RoundView) -> Drafter:
        if not view.tail_k:
            return self.model
        self.tail_max = view.tail_k
        self.total_max = min(view.k_max, view.budget)
        return self

    def credit(self, rnd: RoundEvent) -> list[tuple[str, int, int]]:
        return [*self.model.credit(rnd), *self.lookup.credit(rnd)]


def compose(pool: list[Drafter]) -> list[Drafter]:
    """The pool with the draft model replaced by the hybrid, when prompt lookup is in it too."""
    model = next((d for d in pool if isinstance(d, ModelDrafter)), None)
    lookup = next((d for d in pool if isinstance(d, LookupDrafter)), None)
    if model is None or lookup is None:
        return pool
    hybrid = HybridDrafter(model, lookup)
    return [hybrid if d is model else d for d in pool]
