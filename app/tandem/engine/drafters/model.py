"""The draft model: a small model with the target's tokenizer, run autoregressively.

Its KV cache is kept in step with the history: each draft starts by catching up, in one
batch, on the tokens it has not decoded (normally the last token; after a fully accepted round
also the final draft token, which it proposed but never decoded; more after rounds it sat out).

A recurrent or hybrid draft model decodes its drafts one token at a time, which leaves
llama.cpp's snapshots nothing to roll back to: its state is checkpointed once it has caught up
(then it holds the whole history, always a prefix of the next one), just before it decodes a
token the target may reject, and restored after a rejection. It does not re-decode what the
target kept: its next catch-up batch does, with the round's new tokens, in one batch.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Literal, Protocol

import numpy as np
import numpy.typing as npt

from ..sampling import Dist, NonFiniteLogits, SamplerSettings
from . import Proposal, draw
from .batched import Batching, BatchOffer, BatchProposerBase, BatchSetup, Lane
from .policy import model_pays
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
    from ..errors import GenerationError
    from ..llama.model import LoadedModel

KIND = "model"


class DraftLM(Protocol):
    """What drafting uses of a draft model: a LoadedModel, or one sequence of a batched one
    (llama/sequences.OneSequence)."""

    n_ctx: int
    n_vocab: int

    @property
    def cached(self) -> list[int]: ...
    def keep_prefix_of(self, tokens: Sequence[int]) -> int: ...
    def truncate(self, n: int, *, replay: bool = True) -> None: ...
    def checkpoint(self, slot: str = "round") -> None: ...
    def decode(
        self,
        tokens: Sequence[int],
        outputs: Literal["none", "last", "all"] = "last",
        *,
        should_stop: Callable[[], bool] | None = None,
    ) -> npt.NDArray[np.float32] | None: ...
    def decode_greedy(self, tokens: Sequence[int], outputs: Literal["last", "all"] = "last") -> list[int]: ...
    def is_eog(self, token: int) -> bool: ...
    def piece(self, token: int) -> bytes: ...
    def tokenize(self, text: str, *, add_special: bool = True, parse_special: bool = True) -> list[int]: ...
    def non_finite(self, position: int) -> GenerationError: ...


class ModelDrafter(DrafterBase):
    kind = KIND

    def __init__(
        self,
        model: DraftLM,
        sampler: SamplerSettings,
        rng: random.Random,
        p_min: float,
        cancel: threading.Event | None,
    ) -> None:
        self.model = model
        self.sampler = sampler
        self.rng = rng
        self.p_min = p_min
        self.cancel = cancel
        # Greedy without p-min needs only each step's argmax, never the probabilities.
        self._argmax_only = sampler.greedy and p_min <= 0.0

    def begin(self, prompt: Sequence[int], should_stop: Callable[[], bool]) -> None:
        # Reuse the longest cached prefix (multi-turn chats), prefill the rest.
        reused = self.model.keep_prefix_of(prompt)
        self.model.decode(prompt[reused:], "none", should_stop=should_stop)
        if self.ready_for(prompt):
            self.model.checkpoint("prompt")  # (a recurrent state: regenerating starts from here)

    def ready_for(self, prompt: Sequence[int]) -> bool:
        """Whether `begin` completed (a cancelled prefill leaves a shorter cache)."""
        return len(self.model.cached) >= len(prompt)

    began = ready_for

    def draft(self, history: Sequence[int], k: int) -> Proposal:
        out = Proposal()
        if k <= 0:
            return out
        for tok, q in self.tokens(history, out):
            out.tokens.append(tok)
            out.qs.append(q)
            if len(out.tokens) >= k:
                break
        return out

    def tokens(self, history: Sequence[int], out: Proposal) -> Iterator[tuple[int, Dist | None]]:
        """Draft tokens one at a time, with q when sampling. The model decodes a token only
        when the next one is asked for, so a caller that stops after j tokens pays j steps
        (the catch-up batch included); costs are recorded in `out`. Ends at an end-of-generation
        token, when the draft is less than p-min sure of its next token, or on cancel."""
        model = self.model
        pending = list(history[len(model.cached) :])  # the catch-up batch (normally one token)
        out.caught_up = len(pending)
        t0 = time.perf_counter()
        while pending:
            drawn = self._next(pending)
            out.passes += 1
            if out.passes == 1:
                out.first_s = time.perf_counter() - t0
            if drawn is None:
                return  # the draft is unsure here: a rejection is likely, stop before it
            yield drawn
            if model.is_eog(drawn[0]) or (self.cancel is not None and self.cancel.is_set()):
                return
            if out.passes == 1:
                # The drafts' state may need undoing (recurrent models); a cost of the round,
                # counted with its first batch.
                t_ckpt = time.perf_counter()
                model.checkpoint()
                out.first_s += time.perf_counter() - t_ckpt
            pending = [drawn[0]]

    def _next(self, tokens: list[int]) -> tuple[int, Dist | None] | None:
        """Decode `tokens`; the next draft token after them (see _draw)."""
        if self._argmax_only:  # greedy without p-min: llama.cpp picks it
            return self.model.decode_greedy(tokens)[0], None
        logits = self.model.decode(tokens, "last")
        assert logits is not None
        return self._draw(logits[0])

    def _draw(self, row: np.ndarray) -> tuple[int, Dist | None] | None:
        """The next draft token (and q when sampling), or None when the draft is less than
        p-min sure of it."""
        try:
            return draw(row, self.sampler, self.rng, self.p_min)
        except NonFiniteLogits:
            raise self.model.non_finite(len(self.model.cached) - 1) from None

    def behind(self, history: Sequence[int]) -> int:
        """Tokens of history the draft model has not decoded (its next catch-up batch)."""
        return len(history) - len(self.model.cached)

    def accept(self, keep: int) -> None:
        # It never decoded its own final proposal, so it may hold fewer than `keep` tokens. A
        # recurrent state goes back to its checkpoint: the next catch-up re-decodes the rest.
        self.model.truncate(min(len(self.model.cached), keep), replay=False)

    # ------------------------------------------------------------------ scheduling
    def offer(self, view: RoundView) -> Offer | None:
        costs = view.costs
        # After plain or lookup rounds the model's next draft first catches up on them.
        behind = self.behind(view.history)
        owed = costs.catchup_time(behind - 2, self.kind) if behind > 2 else 0.0
        k, rate = view.policies[self.kind].plan(view.budget, owed_s=owed)
        if not self._pays(rate, view):
            return None
        # Tokens another drafter supplies must later be caught up on: charged to it.
        view.in_step = True
        view.catchup_debt += costs.catchup_time(1.0, self.kind)
        return Offer(rate, k)

    def _pays(self, rate: float, view: RoundView) -> bool:
        """Whether to keep drafting with the model, given the recent share of the answer that
        free drafters supplied (see policy.model_pays). Without measured costs: yes."""
        plain = view.costs.verify_time(1)
        if view.free_share is None or rate <= 0.0 or plain is None:
            return True
        return model_pays(view.free_share, plain, 1.0 / rate, view.costs.catchup_time(1.0, self.kind))


class ModelBatch(BatchProposerBase):
    """The draft model for the sequences of a batch, loaded with as many sequences as the
    target: one decode a step for every sequence drafting with it, the first carrying each
    one's catch-up. Each sequence's cache is a prefix of its history (see keep)."""

    kind = KIND
    alpha_prior = 0.5
    takes_tail = True  # (a free kind may finish its draft: Lane.tail)

    def __init__(self, setup: BatchSetup) -> None:
        from ..llama.sequences import SeqContext  # (llama.cpp's bindings, loaded by then)

        assert setup.draft is not None
        self.ctx = SeqContext(setup.draft)
        self.record = setup.record

    def calibrate(self, seqs: Sequence[int], stopped: Callable[[], bool]) -> None:
        # A draft step or a catch-up: one sequence's tokens (a step across sequences is as many).
        self.ctx.time_decodes(seqs, (1, 2, 3, 4, 6, 8, 16, 32, 64), "last", self.record, stopped)

    def admit(self, seq: int, prompt: Sequence[int], reuse: bool) -> None:
        self.ctx.keep(seq, self.ctx.common_prefix(seq, prompt) if reuse else 0)

    def offer(self, seq: int, history: Sequence[int], k_max: int) -> BatchOffer | None:
        ctx = self.ctx
        if len(history) > ctx.n_ctx:
            # Its context (its own, often shorter than the target's: a 32k draft beside a 128k
            # target) is full: this answer goes on without it.
            ctx.keep(seq, 0)
            return None
        # (Its cache ends at the history's end + K - 1 drafts.)
        k = min(k_max, ctx.n_ctx - len(history) + 1)
        return BatchOffer(k, lag=max(1, len(history) - len(ctx.cached[seq]))) if k > 0 else None

    def propose(self, lanes: Sequence[Lane]) -> float:
        from ..llama.sequences import Piece

        t0 = time.perf_counter()
        ctx = self.ctx
        going = list(lanes)  # (each with K > 0: the engine gives no lane otherwise)
        # Step one: each sequence's catch-up (what its cache misses of the history), the part
        # beyond its share of the micro-batch decoded first.
        share = ctx.capacity // len(going)
        pieces = []
        behind = []
        for lane in going:
            history = lane.history
            have = len(ctx.cached[lane.seq])  # (a prefix of the history)
            if have == len(history):  # (never all: the last token is decoded to draft from it)
                have -= 1
            ctx.keep(lane.seq, have)
            have = len(ctx.cached[lane.seq])  # (a recurrent state may have gone back further)
            cut = max(have, len(history) - share)
            if cut > have:
                behind.append(Piece(lane.seq, history[have:cut], "none"))
            lane.caught_up = len(history) - have
            pieces.append(Piece(lane.seq, history[cut:], "last"))
        if behind:
            ctx.prefill(behind)
        first = True
        while going:
            t1 = time.perf_counter()
            rows = ctx.decode(pieces)
            self.record(sum(len(p.tokens) for p in pieces), time.perf_counter() - t1)
            nxt: list[Lane] = []
            pieces = []
            for lane, row in zip(going, rows, strict=True):
                assert row is not None
                config = lane.config
                try:
                    got = draw(row[-1], config.sampler, lane.rng, config.p_min)
                except NonFiniteLogits:
                    got = None  # (the draft's nonsense ends its draft; the target's would not)
                if got is None:
                    continue
                token, q = got
                lane.drafts.append(token)
                if q is not None:
                    lane.qs.append(q)
                if lane.finish(lane.offer.k_max - len(lane.drafts)):
                    continue  # (a free kind finished the draft: no more steps)
                if len(lane.drafts) < lane.k:
                    nxt.append(lane)
                    pieces.append(Piece(lane.seq, [token], "last"))
                    if first:
                        # Its state holds the history now; the drafts each take a decode of
                        # their own, and a recurrent state is rolled back within one only.
                        ctx.checkpoint(lane.seq)
            going = nxt
            first = False
        return time.perf_counter() - t0

    def keep(self, seq: int, n: int) -> None:
        # It never decoded its own final proposal, so it may hold fewer than n tokens.
        self.ctx.keep(seq, min(n, len(self.ctx.cached[seq])))

    def close(self) -> None:
        self.ctx.close()


def _build_batch(setup: BatchSetup) -> ModelBatch | None:
    if setup.draft is None or setup.draft.foreign_tokenizer:
        return None
    return ModelBatch(setup)


def _build(ctx: BuildContext) -> Drafter | None:
    if ctx.draft is None or ctx.draft.foreign_tokenizer:
        return None
    return ModelDrafter(ctx.draft, ctx.config.sampler, ctx.rng, ctx.config.p_min, ctx.cancel)


def _missing(target: LoadedModel, draft: LoadedModel | None) -> str | None:
    if draft is None:
        return "the model drafter needs a draft model: load one, or use prompt lookup"
    if draft.foreign_tokenizer:  # (cross.py drafts with it)
        return (
            f"{draft.path.name} has another tokenizer than the target: it drafts across tokenizers "
            "(--drafter cross, or auto)"
        )
    return None


def _draft_cost(costs: CostView, drafted: int, caught_up: int, looked_up: int, draft_s: float) -> float:
    """Its first batch (catching up on `caught_up` tokens, more than one after rounds drafted by
    others), then c per further token of its own (a lookup tail costs no draft steps)."""
    if not drafted:
        return 0.0
    own = drafted - looked_up
    return costs.catchup(max(1, caught_up)) + max(0, own - 1) * (costs.c or 0.0)


SPEC = DrafterSpec(
    name=KIND,
    words=Words(
        label="draft model",
        help="the draft model (--draft)",
        note="the draft model",
        phrase=lambda target, draft: draft.path.name if draft is not None else "",
    ),
    needs=Needs.DRAFT_MODEL,
    build=_build,
    missing=_missing,
    traits=Traits(draft_cost=_draft_cost, untimed_rank=2),
    batching=Batching(build=_build_batch),
)
