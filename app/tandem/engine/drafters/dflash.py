"""A DFlash drafter: block diffusion trained on the target's hidden rows, in a GGUF of its own
beside the target (`dflash-*.gguf` / `dspark-*.gguf`, architecture "dflash"; sidecar.py checks
it). One pass guesses a whole block.

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

import numpy as np
import numpy.typing as npt

from ..draft_policy import CostModel
from ..errors import GenerationError
from ..events import RoundEvent
from ..gguf_info import GGUFInfo
from ..llama_lib import llama_cpp
from ..model import DecodeListener, LoadedModel, common_prefix
from ..sampling import Dist, NonFiniteLogits, SamplerSettings
from ..sidecar import DFLASH as DFLASH_ARCH
from ..sidecar import read_facts
from ..sidecar_model import DECODE, SidecarModel, dflash_selector_top_k, set_embeddings_nextn
from . import DrafterKind, Proposal, draw
from .names import DFLASH
from .spec import BuildContext, Drafter, DrafterSpec, Needs, Offer, RoundView, timed_draft_cost

# Target positions waiting to be injected before they go in unasked (a long prefill).
_FLUSH_ROWS = 64


class DFlashHead:
    """One DFlash (DSpark, DFlash2) drafter beside one target, kept in step with its decodes."""

    def __init__(self, target: LoadedModel, path: Path, info: GGUFInfo) -> None:
        self.target = target
        self.path = path
        self.facts = facts = read_facts(info)
        self.slots_max = facts.max_draft + (0 if facts.anchor_first else 1)
        self.model = SidecarModel(target, path, facts, n_outputs=self.slots_max)
        ctx = self.model.ctx
        self.top_k = int(dflash_selector_top_k(self.model.model))  # DFlash2's selector: > 0
        if self.top_k > 0:
            set_embeddings_nextn(ctx, True, False)  # its lattice, one row per block position
        causal = info.get(f"{DFLASH_ARCH}.attention.causal")
        llama_cpp.llama_set_causal_attn(ctx, causal is True)  # (both ways unless it says)
        self.mask = facts.mask_token
        self.decode_seconds = 0.0
        self.following = False
        self.seen: list[int] = []  # the target's tokens: injected, then waiting
        self.injected = 0  # of them, how many are in its cache
        width = len(facts.layers) * self.model.n_embd_target
        self._waiting = np.zeros((_FLUSH_ROWS + 64, width), dtype=np.float32)  # row i: injected + i

    @property
    def label(self) -> str:
        return self.facts.label

    def close(self) -> None:
        self.model.close()

    # ------------------------------------------------------------------ following the target
    def set_following(self, on: bool) -> int:
        if on and not self.following:
            self.model.tap()
        self.following = on
        n = common_prefix(self.seen, self.target.cached)
        self.truncate(n)
        return n

    def on_decode(self, model: LoadedModel, pos0: int, tokens: Sequence[int]) -> None:
        """The target decoded `tokens` at positions pos0...: keep their rows for injection."""
        if not self.following or pos0 > len(self.seen):
            return
        self.truncate(pos0)
        rows = self.model.target_rows(len(tokens))
        at = pos0 - self.injected
        end = at + len(rows)
        if end > len(self._waiting):
            grown = np.zeros((max(2 * len(self._waiting), end), self._waiting.shape[1]), dtype=np.float32)
            grown[:at] = self._waiting[:at]
            self._waiting = grown
        self._waiting[at:end] = rows
        self.seen.extend(tokens)
        if len(self.seen) - self.injected > _FLUSH_ROWS:
            self._inject()

    def truncate(self, n: int) -> None:
        """The target kept its first n positions."""
        del self.seen[n:]
        if self.injected > n:
            self.model.cut(n)
            self.injected = n

    def _inject(self) -> int:
        """Put the waiting rows into its cache (n_batch at a time); how many."""
        model = self.model
        n = len(self.seen) - self.injected
        done = 0
        while done < n:
            chunk = min(n - done, model.n_batch)
            model.clear()
            rows = self._waiting[done : done + chunk]
            for i in range(chunk):
                model.add_embd(rows, i, self.injected + i)
            self.decode_seconds += model.run(DECODE, self.injected)
            self.injected += chunk
            done += chunk
        return done

    # ------------------------------------------------------------------ drafting
    def ready_for(self, history: Sequence[int]) -> bool:
        return self.following and len(self.seen) == len(history) - 1

    def block(self, history: Sequence[int], k: int) -> tuple[list[npt.NDArray[np.float32]], int, float]:
        """One pass over [last, <mask>...] for k guesses: each guess's logits row (DFlash2: its
        lattice row), how many target positions went in first, and the pass's seconds."""
        t0 = time.perf_counter()
        caught_up = self._inject()
        model = self.model
        n = len(history) - 1
        first = 0 if self.facts.anchor_first else 1
        slots = first + k
        assert self.mask is not None
        selector = self.top_k > 0
        model.clear()
        for i in range(slots):
            # (Every position outputs: llama.cpp's DFlash graph keeps all its rows, in order.)
            model.add_token(history[-1] if i == 0 else self.mask, n + i, output=not selector)
        self.decode_seconds += model.run(DECODE, self.injected)
        if selector:
            lattice = model.hidden(slots, model.n_embd)
            rows = [lattice[i] for i in range(first, slots)]
        else:
            rows = [model.logits(i) for i in range(first, slots)]
        return rows, caught_up, time.perf_counter() - t0

    def end_draft(self) -> None:
        """Drop the block's entries."""
        self.model.cut(self.injected)


class DFlashDrafter:
    kind: DrafterKind = DFLASH

    def __init__(
        self,
        head: DFlashHead,
        sampler: SamplerSettings,
        rng: random.Random,
        p_min: float,
        cancel: threading.Event | None,
        costs: CostModel,
    ) -> None:
        self.head = head
        self.sampler = sampler
        self.rng = rng
        self.p_min = p_min
        self.cancel = cancel
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
                    f"{self.head.path.name} (a {self.head.label}) produced NaN or infinite logits: "
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

    def accept(self, keep: int) -> None:
        self.head.truncate(keep)

    # ------------------------------------------------------------------ scheduling
    def began(self, prompt: Sequence[int]) -> bool:
        return True

    def search(self, view: RoundView) -> None:
        pass

    def offer(self, view: RoundView) -> Offer | None:
        k, rate = view.policies[self.kind].plan(min(view.budget, self.head.facts.max_draft))
        return Offer(rate, k)

    def chosen(self, k: int, view: RoundView) -> Drafter:
        return self

    def credit(self, rnd: RoundEvent) -> list[tuple[str, int, int]]:
        own = rnd.drafted - rnd.looked_up
        return [(self.kind, own, min(rnd.accepted, own))]

    def listener(self) -> DecodeListener | None:
        return self.head


def head_of(target: LoadedModel) -> DFlashHead | None:
    """The DFlash drafter attached to the target, if any."""
    return next((x for x in target.listeners if isinstance(x, DFlashHead)), None)


def attach(target: LoadedModel, path: Path, info: GGUFInfo) -> DFlashHead:
    """Load a checked DFlash file beside the target, as one of its decode listeners."""
    head = DFlashHead(target, path, info)
    target.listeners.append(head)
    return head


def _build(ctx: BuildContext) -> Drafter | None:
    head = head_of(ctx.target)
    if head is None:
        return None
    return DFlashDrafter(head, ctx.config.sampler, ctx.rng, ctx.config.p_min, ctx.cancel, ctx.costs)


def _missing(target: LoadedModel, draft: LoadedModel | None) -> str | None:
    if head_of(target) is not None:
        return None
    return (
        f"no DFlash drafter is loaded for {target.path.name}: give the dflash-*.gguf (or dspark-*) "
        "trained for it as the draft (--draft), or draft another way (--drafter auto)"
    )


def _phrase(target: LoadedModel, draft: LoadedModel | None) -> str:
    head = head_of(target)
    return f"{head.path.name} ({head.label})" if head is not None else "a DFlash drafter"


SPEC = DrafterSpec(
    name=DFLASH,
    label="DFlash drafter",
    needs=Needs.SIDECAR,
    build=_build,
    missing=_missing,
    draft_cost=timed_draft_cost,
    untimed_rank=1,
    listens=("layer rows",),
    phrase=_phrase,
    note="its DFlash drafter",
    sidecar_archs=(DFLASH_ARCH,),
    load_sidecar=attach,
)
