"""A DFlash drafter: block diffusion trained on the target's hidden rows, in a GGUF of its own
beside the target (`dflash-*.gguf` / `dspark-*.gguf`, architecture "dflash"). One pass guesses a
whole block.

Its attention cache holds, at each position the target has decoded, keys and values made from
the target's rows at a few of its layers ("injected": `fc`, then each layer's key and value
projections, llama.cpp's decode of a batch of rows). A draft decodes the block
[last, <mask> x K] at the positions after them, attending both ways (not causally): the mask at
position n + i comes out as the guess for that position. The block's entries are dropped after
the draft. Variants (llama.cpp's): DSpark adds a Markov head that biases each position by the
guess before it, and guesses from the last token's own slot on (anchor-first: K slots for K
tokens); DFlash2 adds a selector that walks a lattice of each position's best candidates (its
guesses are a path, not a distribution: in a sampled answer each is a one-hot q, which keeps
the acceptance test exact).

K is at most the block's open positions. Rows are injected lazily: those of every target batch
wait (a bounded buffer) and go in with the next draft, one batch, so a verify batch's rejected
tokens cost nothing; a long prefill is injected as it goes.

Sampling is exact as for any drafter: q at each position is its distribution there after the
same sampler settings as the target's, each token drawn from its own (the positions are guessed
together, so none depends on another's draw).
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from ...config import DRAFT_MAX_LIMIT
from ...errors import GenerationError
from ...files.gguf_info import GGUFInfo
from ...sampling import Dist, NonFiniteLogits, SamplerSettings
from .. import Proposal, draw
from ..policy import CostModel
from ..spec import (
    Offer,
    RoundView,
    Words,
)
from .base import FLUSH_ROWS, HeadDrafterBase, attached, put_rows
from .files import DrafterFacts, read_trained
from .trained import TrainedHead, trained_spec

if TYPE_CHECKING:
    from ...llama.model import LoadedModel
    from .context import HeadContext

KIND = "dflash"
ARCH = "dflash"  # the GGUF architecture of its files (DFlash, DSpark, DFlash2)
# DFlash draws a block [last, <mask> x (B - 1)]: at least one mask; real drafters use 7-16.
MIN_BLOCK_SIZE = 2
MAX_BLOCK_SIZE = 256
DEFAULT_BLOCK_SIZE = 16  # llama.cpp's when the header does not say


class DFlashHead(TrainedHead):
    """One DFlash (DSpark, DFlash2) drafter beside one target, kept in step with its decodes.
    Its entries are the target's positions whose rows went into its cache (`injected`)."""

    one_pass = True  # (a block: every guess in one pass)

    def __init__(
        self, target: LoadedModel, path: Path, info: GGUFInfo, *, weights: HeadContext | None = None
    ) -> None:
        from .context import HeadContext  # (llama.cpp's bindings: only once a head is made)

        self.path = path
        self.info = info
        self.facts = facts = _read(info)
        self.slots_max = facts.max_draft + (0 if facts.anchor_first else 1)
        context = HeadContext(
            target, path=path, n_outputs=self.slots_max, what=path.name, layers=facts.layers, weights=weights
        )
        super().__init__(target, context)
        self.top_k = context.selector_top_k()  # DFlash2's selector: > 0
        if self.top_k > 0:
            context.extra_rows(own=False)  # its lattice, one row per block position
        causal = info.get(f"{ARCH}.attention.causal")
        context.attend_both_ways(causal is not True)  # (both ways unless it says)
        self.mask = facts.mask_token
        width = len(facts.layers) * context.n_embd_target
        self._waiting = np.zeros((FLUSH_ROWS + 64, width), dtype=np.float32)  # row i: injected + i

    @property
    def injected(self) -> int:
        return self.entries

    @property
    def pass_max(self) -> int:
        return self.slots_max

    def lag(self, history: Sequence[int]) -> int:
        return len(self.track.seen) - self.injected + 1

    def time_pass(self, n: int) -> float:
        """A block of n slots (its first pass after a catch-up costs about as much)."""
        ctx = self.context
        ctx.clear()
        for i in range(n):
            ctx.add_token(self.mask or 0, i, output=self.top_k == 0)
        try:
            return ctx.decode(0)
        finally:
            ctx.cut(0)

    def _follow(self, on: bool) -> None:
        if on:
            self.context.tap()

    def _take(self, model: LoadedModel, pos0: int, tokens: Sequence[int], at: int) -> None:
        """Keep the batch's rows for injection."""
        self.truncate(pos0)
        rows = self.context.target_rows(len(tokens), at)
        self._waiting = put_rows(self._waiting, pos0 - self.injected, rows)
        self.track.seen.extend(tokens)
        if len(self.track.seen) - self.injected > FLUSH_ROWS:
            self._inject()

    def truncate(self, n: int) -> None:
        track = self.track
        del track.seen[n:]
        if self.injected > n:
            self.context.cut(n)
            del track.entry_tokens[n:]

    def _inject(self) -> int:
        """Put the waiting rows into its cache (n_batch at a time); how many."""
        ctx, track = self.context, self.track
        n = len(track.seen) - self.injected
        done = 0
        while done < n:
            chunk = min(n - done, ctx.n_batch)
            ctx.clear()
            rows = self._waiting[done : done + chunk]
            at = self.injected
            for i in range(chunk):
                ctx.add_embd(rows, i, at + i)
            self.decode_seconds += ctx.decode(at)
            track.entry_tokens.extend(track.seen[at : at + chunk])
            done += chunk
        return done

    # ------------------------------------------------------------------ drafting
    def block(self, history: Sequence[int], k: int) -> tuple[list[npt.NDArray[np.float32]], int, float]:
        """One pass over [last, <mask>...] for k guesses: each guess's logits row (DFlash2: its
        lattice row), how many target positions went in first, and the pass's seconds."""
        t0 = time.perf_counter()
        caught_up = self._inject()
        ctx = self.context
        n = len(history) - 1
        first = 0 if self.facts.anchor_first else 1
        slots = first + k
        assert self.mask is not None
        selector = self.top_k > 0
        ctx.clear()
        for i in range(slots):
            # (Every position outputs: llama.cpp's DFlash graph keeps all its rows, in order.)
            ctx.add_token(history[-1] if i == 0 else self.mask, n + i, output=not selector)
        self.decode_seconds += ctx.decode(self.injected)
        if selector:
            lattice = ctx.hidden(slots, ctx.n_embd)
            rows = [lattice[i] for i in range(first, slots)]
        else:
            rows = [ctx.logits(i) for i in range(first, slots)]
        return rows, caught_up, time.perf_counter() - t0


class DFlashDrafter(HeadDrafterBase[DFlashHead]):
    kind = KIND

    def __init__(
        self,
        head: DFlashHead,
        sampler: SamplerSettings,
        rng: random.Random,
        p_min: float,
        cancel: threading.Event | None,
        costs: CostModel,
    ) -> None:
        super().__init__(head, sampler, rng, p_min, cancel)
        self.costs = costs
        self._warm = False  # a generation's first block runs cold: its time would mislead

    def begin(self, prompt: Sequence[int], should_stop: Callable[[], bool]) -> None:
        self._warm = False

    def draft(self, history: Sequence[int], k: int) -> Proposal:
        out = Proposal()
        head = self.head
        k = min(k, head.facts.max_draft)
        if k <= 0 or not head.ready_for(history):
            return out
        try:
            rows, out.caught_up, seconds = head.block(history, k)
            guesses = self._walk(rows) if head.top_k > 0 else self._draw(rows)
        finally:
            head.end_draft()
        for token, q in guesses:
            out.tokens.append(token)
            out.qs.append(q)
            if head.target.is_eog(token):
                break  # (nothing follows an end of generation)
        out.first_s = seconds
        # (No draft passes: a block costs one pass whatever K, priced per block below, not per
        # step as the scheduler prices a draft model's.)
        if self._warm:
            self.costs.observe_block(self.kind, k, seconds)
        self._warm = True
        return out

    def _draw(self, rows: list[npt.NDArray[np.float32]]) -> list[tuple[int, Dist | None]]:
        guesses: list[tuple[int, Dist | None]] = []
        for row in rows:
            try:
                drawn = draw(row, self.sampler, self.rng, self.p_min)
            except NonFiniteLogits:
                raise GenerationError(
                    f"{self.head.subject} produced NaN or infinite logits: "
                    "draft with --drafter lookup or a draft model instead"
                ) from None
            if drawn is None:
                break  # unsure from here on: a rejection is likely
            guesses.append(drawn)
        return guesses

    def _walk(self, rows: list[npt.NDArray[np.float32]]) -> list[tuple[int, Dist | None]]:
        """DFlash2: the selector's path through each position's top-k candidates (a row holds
        the candidates' ids, then top-k scores per predecessor); p-min on the softmax of the
        chosen step's scores. Its guesses are deterministic: q is one-hot when sampling."""
        top_k = self.head.top_k
        n_vocab = self.head.target.n_vocab
        guesses: list[tuple[int, Dist | None]] = []
        predecessor = 0
        for row in rows:
            scores = row[top_k + predecessor * top_k : top_k + (predecessor + 1) * top_k].astype(np.float64)
            if not np.all(np.isfinite(scores)):
                raise GenerationError(f"{self.head.path.name} (DFlash2) gave NaN or infinite scores")
            predecessor = int(np.argmax(scores))
            if self.p_min > 0.0 and 1.0 / float(np.exp(scores - scores[predecessor]).sum()) < self.p_min:
                break
            token = int(row[predecessor])
            if not 0 <= token < n_vocab:
                raise GenerationError(f"{self.head.path.name} (a DFlash2 drafter) proposed token {token}")
            q = None if self.sampler.greedy else Dist(np.array([token], dtype=np.int64), np.ones(1), n_vocab)
            guesses.append((token, q))
        return guesses

    def offer(self, view: RoundView) -> Offer | None:
        k, rate = view.policies[self.kind].plan(min(view.budget, self.head.facts.max_draft))
        return Offer(rate, k)


def head_of(target: LoadedModel) -> DFlashHead | None:
    """The DFlash drafter attached to the target, if any."""
    return attached(target, DFlashHead)


def _read(info: GGUFInfo) -> DrafterFacts:
    h = read_trained(info, ARCH, "DFlash")
    bad, tensors = h.bad, h.tensors
    block = info.get(f"{ARCH}.block_size", DEFAULT_BLOCK_SIZE)
    if not isinstance(block, int) or isinstance(block, bool) or not MIN_BLOCK_SIZE <= block <= MAX_BLOCK_SIZE:
        raise bad(f"its block size is {block!r}; a block has {MIN_BLOCK_SIZE} to {MAX_BLOCK_SIZE} positions")
    mask = info.get("tokenizer.ggml.mask_token_id")
    n_vocab = len(info.tokens)
    if not isinstance(mask, int) or isinstance(mask, bool) or not 0 <= mask < max(n_vocab, 1):
        raise bad(f"it has no valid mask token (tokenizer.ggml.mask_token_id is {mask!r})")
    dspark = "markov_w1.weight" in tensors
    selector = "selector_hidden.weight" in tensors
    variant = "DSpark" if dspark else "DFlash2" if selector else "DFlash"
    anchor = dspark and info.get(f"{ARCH}.sample_from_anchor", True) is not False
    slots = block if anchor else block - 1  # the block's open positions
    # The drafter's rows are fused from the target's at its own width (fc: layers x n_embd).
    max_draft = max(1, min(DRAFT_MAX_LIMIT, slots))
    return h.facts(KIND, variant, h.n_embd, max_draft, block_size=block, anchor_first=anchor, mask_token=mask)


SPEC = trained_spec(
    KIND,
    Words(
        label="DFlash drafter",
        help="a DFlash (DSpark) drafter trained for the target, given as --draft or beside it "
        "(dflash-*.gguf, dspark-*.gguf)",
        note="its DFlash drafter",
    ),
    head=DFlashHead,
    drafter=lambda head, ctx: DFlashDrafter(
        head, ctx.config.sampler, ctx.rng, ctx.config.p_min, ctx.cancel, ctx.costs
    ),
    read=_read,
    arch=ARCH,
    prefixes=("dflash-", "dspark-"),
    rank=1,  # (its block is the cheapest pass)
)
