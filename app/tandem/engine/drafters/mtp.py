"""The target's own draft heads (multi-token prediction): no second model.

The heads live in the target's GGUF and run in a small context of their own over the target's
weights (app/engine/mtp.py keeps it in step with the target). A draft's first step catches up,
in one batch, on the target's hidden rows for the tokens it accepted since the last draft, and
guesses the token after the round's last; each further step feeds the head its own hidden
output in place of the target's. A head step costs one decoder block and the LM head, so a
draft token is cheap next to a separate draft model's, and nothing has to be loaded twice.

Sampling works as for a draft model: q is the heads' own distribution after the same sampler
settings as the target's, so the acceptance test keeps the output exactly the target's.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Sequence

from ..errors import GenerationError
from ..events import RoundEvent
from ..model import DecodeListener, LoadedModel
from ..mtp import MtpHead, attach, attach_file, heads_of, no_heads_message, unsupported_message
from ..sampling import NonFiniteLogits, SamplerSettings
from ..sidecar import mtp_only
from . import DrafterKind, Proposal, draw
from .names import MTP
from .spec import BuildContext, Drafter, DrafterSpec, Needs, Offer, RoundView, timed_draft_cost


class MtpDrafter:
    kind: DrafterKind = MTP

    def __init__(
        self,
        head: MtpHead,
        sampler: SamplerSettings,
        rng: random.Random,
        p_min: float,
        cancel: threading.Event | None,
    ) -> None:
        self.head = head
        self.sampler = sampler
        self.rng = rng
        self.p_min = p_min
        self.cancel = cancel

    def begin(self, prompt: Sequence[int], should_stop: Callable[[], bool]) -> None:
        pass  # (the head followed the target's prefill: see generation.py)

    def draft(self, history: Sequence[int], k: int) -> Proposal:
        out = Proposal()
        head = self.head
        if k <= 0 or not head.ready_for(history):
            return out
        t0 = time.perf_counter()
        try:
            logits, out.caught_up = head.first_step(history)
            out.passes = 1
            pos = len(history)
            while True:
                try:
                    drawn = draw(logits, self.sampler, self.rng, self.p_min)
                except NonFiniteLogits:
                    name = head.target.path.name
                    raise GenerationError(
                        f"{name}'s draft heads produced NaN or infinite logits: draft with "
                        "--drafter lookup or a draft model instead"
                    ) from None
                if out.passes == 1:
                    out.first_s = time.perf_counter() - t0
                if drawn is None:
                    break  # the heads are unsure here: a rejection is likely
                token, q = drawn
                out.tokens.append(token)
                out.qs.append(q)
                if len(out.tokens) >= k or (self.cancel is not None and self.cancel.is_set()):
                    break
                if head.target.is_eog(token):
                    break
                logits = head.next_step(token, pos)
                pos += 1
                out.passes += 1
        finally:
            head.end_draft()
        return out

    def accept(self, keep: int) -> None:
        self.head.truncate(keep)

    # ------------------------------------------------------------------ scheduling
    def began(self, prompt: Sequence[int]) -> bool:
        return True

    def search(self, view: RoundView) -> None:
        pass

    def offer(self, view: RoundView) -> Offer | None:
        # (It keeps in step with the target as the target decodes: nothing owed.)
        k, rate = view.policies[self.kind].plan(view.budget)
        return Offer(rate, k)

    def chosen(self, k: int, view: RoundView) -> Drafter:
        return self

    def credit(self, rnd: RoundEvent) -> list[tuple[str, int, int]]:
        own = rnd.drafted - rnd.looked_up
        return [(self.kind, own, min(rnd.accepted, own))]

    def listener(self) -> DecodeListener | None:
        return self.head


def _build(ctx: BuildContext) -> Drafter | None:
    head = heads_of(ctx.target)
    if head is None:
        return None
    return MtpDrafter(head, ctx.config.sampler, ctx.rng, ctx.config.p_min, ctx.cancel)


def _missing(target: LoadedModel, draft: LoadedModel | None) -> str | None:
    """Why the target has no draft heads to draft with, in one line (None: it has)."""
    if heads_of(target) is not None:
        return None
    name = target.path.name
    if target.mtp_layers_in_file == 0:
        return no_heads_message(name)
    if not target.options.load_mtp:
        return f"{name}'s draft heads were not loaded: load them to draft with mtp"
    if target.notes:
        return f"{name}'s draft heads could not be used: " + "; ".join(target.notes)
    return unsupported_message(name)


SPEC = DrafterSpec(
    name=MTP,
    label="built-in heads (MTP)",
    needs=Needs.HEADS,
    build=_build,
    missing=_missing,
    draft_cost=timed_draft_cost,
    untimed_rank=1,
    attach=attach,
    listens=("hidden rows",),
    phrase=lambda target, draft: _phrase(target),
    note="the target's built-in draft heads (MTP)",
    unusable=lambda target: None if target.mtp_layers_in_file == 0 else _missing(target, None),
    # The heads exported as a file of their own (`mtp-*.gguf`), given as the draft file.
    sidecar_claims=mtp_only,
    load_sidecar=attach_file,
)


def _phrase(target: LoadedModel) -> str:
    head = heads_of(target)
    if head is not None and head.source is not None:
        return f"{head.source.name} (its MTP heads)"
    return "its built-in MTP draft heads"
