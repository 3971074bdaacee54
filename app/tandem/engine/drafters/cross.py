"""A draft model of another tokenizer: it drafts in its own tokens, its text is re-encoded into
the target's (Hugging Face's "universal assisted generation", here on llama.cpp).

The draft keeps `tokens`, its own encoding of the text so far (the target's prompt and answer),
and follows the target as a draft model does (it rolls back to where its cache and `tokens`
differ, and catches up in one batch). Each round:

1. **sync**: the text the target added since the last round (its accepted drafts and its own
   token) is re-encoded for the draft with a look-behind window (retokenize.py), so a word
   split between rounds is cut as a whole; the draft rolls back and catches up on what changed.
2. **draft**: the draft model writes on, greedily, token by token; after each token its text
   so far is encoded in the target's tokens, aligned with the end of the target's answer by
   text offsets. Only settled target tokens are proposed: the last one, whose text the draft's
   next token may still extend (" Hel" → " Hello"), is not, unless the draft ended its answer
   (then the target's end-of-turn token follows the text).
3. the target verifies target tokens as for any drafter.

Sampling stays exactly the target's: proposals carry a one-hot q (as prompt lookup's do), so a
token d is accepted with probability p(d) and a rejection draws from p without d. With
`shared_q`, the draft instead samples only among its tokens whose text is exactly one target
token, and the proposal carries that real q (transformers #35029): exact as well, since each
proposed token is then drawn from q itself; docs/results/history.md measures which accepts more.

The control tokens of the target's prompt (a chat template's markers) become the draft's own
control token of the same text where it has one, else plain text; the target's BOS becomes the
draft's. A round is priced per proposed target token, translation included (`Proposal.passes`
counts target tokens, `translate_s` the encoding time), so adaptive drafting stops when drafting
across tokenizers does not pay, as for every drafter.
"""

from __future__ import annotations

import random
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from ..errors import ContextOverflowError
from ..events import RoundEvent
from ..sampling import Dist, SamplerSettings
from ..text.retokenize import LOOK_BEHIND, complete_utf8, reencode, window
from . import Proposal
from .batched import Batching, BatchOffer, BatchProposerBase, BatchSetup, Lane
from .model import DraftLM, ModelDrafter
from .policy import model_pays
from .spec import BuildContext, Drafter, DrafterBase, DrafterSpec, Needs, Offer, RoundView, Traits, Words

if TYPE_CHECKING:
    from ..llama.model import LoadedModel

KIND = "cross"
GREEDY = SamplerSettings(temperature=0.0)
# Whether a sampled answer drafts with the shared-vocabulary q by default (see the module
# docstring); one-hot q accepted more on the measured pairs (docs/results/history.md).
SHARED_Q = False
# The most draft tokens one round writes per target token asked for (a draft whose tokens are
# shorter needs more of them: SmolLM2 writes about 1.3 per Gemma 3 token of English).
_DRAFT_PER_TARGET = 2


class CrossDrafter(DrafterBase):
    kind = KIND

    def __init__(
        self,
        target: LoadedModel,
        draft: DraftLM,
        sampler: SamplerSettings,
        rng: random.Random,
        p_min: float,
        cancel: threading.Event | None,
        *,
        shared_q: bool = False,
    ) -> None:
        self.target = target
        self.model = draft  # the draft model
        self.sampler = sampler
        self.shared: SharedVocab | None = None
        if shared_q and not sampler.greedy:
            self.shared = shared_vocab(target, draft)
            self.inner: ModelDrafter = _MaskedDrafter(draft, sampler, rng, p_min, cancel, self.shared)
        else:
            # One-hot q is accepted with probability p(d): the draft's best guess serves best.
            self.inner = ModelDrafter(draft, GREEDY, rng, p_min, cancel)
        self.tokens: list[int] = []  # the draft's encoding of history[:synced]
        self.floor = 0  # tokens[:floor] end with a control token: no look-behind across it
        self.synced = 0  # target tokens whose text `tokens` holds
        self.last = -1  # the target token at synced - 1 (detects a different history)
        self.held = b""  # the end of that text not in `tokens` yet: an incomplete character
        self.off = False  # the draft's context is full: no more drafting this generation
        self.ratio = 1.0  # draft tokens per target token (see _sync)
        self._controls: dict[int, list[int] | None] = {}  # target control token -> draft's own
        self._bos = draft.tokenize("", add_special=True, parse_special=False)  # the draft's BOS
        eot = target.eot_id
        self.target_end = eot if eot >= 0 else target.eos_id  # proposed after a draft's ending

    # ------------------------------------------------------------------ target -> draft
    def begin(self, prompt: Sequence[int], should_stop: Callable[[], bool]) -> None:
        self._restart()
        self._sync(prompt)
        if self._no_room(0):
            return
        self.inner.begin(self.tokens, should_stop)

    def began(self, prompt: Sequence[int]) -> bool:
        return self.off or self.inner.began(self.tokens)

    def _restart(self) -> None:
        self.tokens = list(self._bos)
        self.floor = len(self.tokens)
        self.synced, self.last, self.held, self.off = 0, -1, b"", False

    def _no_room(self, more: int) -> bool:
        """Whether the draft's context cannot hold its tokens and `more`: it stops drafting."""
        if len(self.tokens) + more + 2 > self.model.n_ctx:
            self.off = True
        return self.off

    def _sync(self, history: Sequence[int]) -> None:
        """Bring `tokens` up to the text of `history` (the answer only grows within a
        generation; anything else is encoded anew)."""
        if self.synced > len(history) or (self.synced and history[self.synced - 1] != self.last):
            self._restart()
        target, plain = self.target, bytearray()
        for t in history[self.synced :]:
            data = target.piece(t)
            if data:
                plain += data
            elif t != target.bos_id:  # (the draft has its own BOS, or none)
                own = self._control(t)
                if own is None:
                    plain += target.token_text(t).encode("utf-8")
                else:
                    self._append(bytes(plain))
                    plain.clear()
                    self.tokens += own
                    self.floor = len(self.tokens)
        self._append(bytes(plain))
        self.synced = len(history)
        self.last = history[-1] if history else -1
        # Draft tokens per target token for the same text (SmolLM2 writes 1.1 per Gemma token
        # of English, Gemma 0.9 per SmolLM2 token): how far to draft before translating.
        self.ratio = min(4.0, max(0.5, len(self.tokens) / max(1, self.synced)))

    def _append(self, data: bytes) -> None:
        """Append text to `tokens` through the look-behind window (whole characters only: an
        incomplete one waits in `held`)."""
        data = self.held + data
        cut = len(data)
        # Hold back a character that the next token may complete (at most 3 bytes of one).
        for back in range(1, min(4, len(data)) + 1):
            byte = data[-back]
            if byte >= 0xC0:  # a lead byte: is its character complete?
                cut = len(data) - back if back < (2 if byte < 0xE0 else 3 if byte < 0xF0 else 4) else cut
                break
            if byte < 0x80:
                break
        self.held = data[cut:]
        if not cut:
            return
        # (A byte that is not UTF-8 at all becomes U+FFFD: only the draft's view of it.)
        text = data[:cut].decode("utf-8", errors="replace").encode("utf-8")
        model = self.model
        start = window(self.tokens, model.piece, self.floor)
        found = reencode(self._encode_draft, model.piece, self.tokens[start:], text, fixed=False)
        if found is None:  # the draft's tokenizer changes this text: its best view of it
            self.tokens += self._encode_draft(text.decode("utf-8"))
        else:
            keep, more = found
            del self.tokens[start + keep :]
            self.tokens += more

    def _control(self, token: int) -> list[int] | None:
        """The draft's own control token with the text of the target's `token`, if it has one."""
        if token not in self._controls:
            text = self.target.token_text(token)
            ids = self.model.tokenize(text, add_special=False, parse_special=True) if text else []
            own = len(ids) == 1 and not self.model.piece(ids[0])
            self._controls[token] = ids if own else None
        return self._controls[token]

    def _encode_draft(self, text: str) -> list[int]:
        return self.model.tokenize(text, add_special=False, parse_special=False)

    def _encode_target(self, text: str) -> list[int]:
        return self.target.tokenize(text, add_special=False, parse_special=False)

    # ------------------------------------------------------------------ draft -> target
    def draft(self, history: Sequence[int], k: int) -> Proposal:
        out = Proposal()
        if k <= 0 or self.off:
            return out
        t0 = time.perf_counter()
        self._sync(history)
        sync_s = out.translate_s = time.perf_counter() - t0
        if self._no_room(1):
            return out
        model = self.model
        model.keep_prefix_of(self.tokens)  # roll back to where its cache and the text differ
        if len(model.cached) >= len(self.tokens):
            model.truncate(len(self.tokens) - 1)  # (its next token needs a row of logits)
        inner = Proposal()
        cap = min(k * _DRAFT_PER_TARGET + 2, model.n_ctx - len(self.tokens) - 1)
        try:
            if self.shared is not None:
                self._draft_shared(inner, out, k, cap)
            else:
                self._draft_text(history, inner, out, k, cap)
        except ContextOverflowError:
            self.off = True  # (the draft's context filled up: the target goes on alone)
            return Proposal()
        out.caught_up = inner.caught_up
        # Priced per target token proposed (see the docstring): the first batch (catch-up and
        # the re-encoding before it), then the rest spread over the other proposed tokens.
        out.passes = len(out.tokens)
        out.first_s = sync_s + inner.first_s
        return out

    def _draft_text(self, history: Sequence[int], inner: Proposal, out: Proposal, k: int, cap: int) -> None:
        """Greedy draft tokens, their text re-encoded for the target once there are likely
        enough of them, then after each further one until k target tokens are settled."""
        target = self.target
        # The target's look-behind: its answer's last tokens, not across a control token.
        floor = len(history)
        while floor > max(0, len(history) - LOOK_BEHIND) and target.piece(history[floor - 1]):
            floor -= 1
        before = history[window(history, target.piece, floor) :]
        text = bytearray()
        found: list[int] = []
        ended = whole = stale = False
        # The draft tokens likely to give k settled target tokens and one more: translating
        # sooner would only find too few (each translation encodes the window's text anew).
        need = min(cap, max(1, round((k + 1) * self.ratio)))
        for written, (tok, _) in enumerate(self.inner.tokens(self.tokens, inner), 1):
            if self.model.is_eog(tok):
                ended = True
                break
            text += self.model.piece(tok)
            stale = True
            if written >= need:
                t1 = time.perf_counter()
                found, whole = self._translate(before, bytes(text))
                out.translate_s += time.perf_counter() - t1
                stale = False
                if len(found) > k or written >= cap:
                    break
        if stale or (ended and text and not found):
            t1 = time.perf_counter()
            found, whole = self._translate(before, bytes(text))
            out.translate_s += time.perf_counter() - t1
        if not ended:
            found = found[:-1]  # the last one's text may still grow
        elif whole or not text:  # its text is final: all of it, then the end of the answer
            found = [*found, self.target_end]
        out.tokens = found[:k]
        if not self.sampler.greedy:
            n = target.n_vocab
            out.qs = [Dist(np.array([t], dtype=np.int64), np.ones(1), n) for t in out.tokens]
        else:
            out.qs = [None] * len(out.tokens)

    def _translate(self, before: Sequence[int], text: bytes) -> tuple[list[int], bool]:
        """The target tokens that continue the answer with the draft's `text` (which starts
        where the draft's tokens end: with the held bytes of an incomplete character), and
        whether they spell all of it (the end may be an incomplete character)."""
        held = self.held
        end = complete_utf8(text)
        if end < len(held) or not text.startswith(held):
            return [], False
        found = reencode(self._encode_target, self.target.piece, before, text[len(held) : end], fixed=True)
        return ([], False) if found is None else (found[1], end == len(text))

    def _draft_shared(self, inner: Proposal, out: Proposal, k: int, cap: int) -> None:
        """Sampled draft tokens among those that are one target token each, with their q."""
        shared = self.shared
        assert shared is not None
        n = self.target.n_vocab
        for tok, q in self.inner.tokens(self.tokens, inner):
            mapped = int(shared.to_target[tok])
            if mapped < 0 or q is None:
                break  # (an end of generation: masked otherwise)
            out.tokens.append(mapped)
            ids = shared.to_target[q.ids] if q.ids is not None else shared.to_target
            keep = ids >= 0
            out.qs.append(Dist(ids[keep].astype(np.int64), q.probs[keep], n))
            if len(out.tokens) >= min(k, cap):
                break

    def accept(self, keep: int) -> None:
        pass  # the next sync re-encodes what the target kept; the draft rolls back then

    # ------------------------------------------------------------------ scheduling
    def offer(self, view: RoundView) -> Offer | None:
        if self.off:
            return None
        costs = view.costs
        behind = len(view.history) - self.synced  # target tokens the draft has not read
        owed = costs.catchup_time(behind - 2, self.kind) if behind > 2 else 0.0
        k, rate = view.policies[self.kind].plan(view.budget, owed_s=owed)
        plain = costs.verify_time(1)
        if view.free_share is not None and rate > 0.0 and plain is not None:
            catchup = costs.catchup_time(1.0, self.kind)
            if not model_pays(view.free_share, plain, 1.0 / rate, catchup):
                return None
        view.in_step = True  # (what another drafter supplies, it must catch up on)
        view.catchup_debt += costs.catchup_time(1.0, self.kind)
        return Offer(rate, k)

    def credit(self, rnd: RoundEvent) -> list[tuple[str, int, int]]:
        return [(self.kind, rnd.drafted, rnd.accepted)]


# ---------------------------------------------------------------------- the shared vocabulary
class SharedVocab:
    """The draft's tokens whose text is exactly one target token, and that token (-1: none)."""

    def __init__(self, to_target: npt.NDArray[np.int64]) -> None:
        self.to_target = to_target
        self.mask = to_target >= 0
        self.size = int(self.mask.sum())


_shared: weakref.WeakKeyDictionary[DraftLM, tuple[int, SharedVocab]] = weakref.WeakKeyDictionary()


def shared_vocab(target: LoadedModel, draft: DraftLM) -> SharedVocab:
    """The pair's shared vocabulary (each text once: the first draft token with it), built
    from both vocabularies on first use and remembered with the draft model."""
    known = _shared.get(draft)
    if known is not None and known[0] == id(target):
        return known[1]
    by_text: dict[bytes, int] = {}
    for t in range(target.n_vocab):
        data = target.piece(t)
        if data:
            by_text.setdefault(data, t)
    to_target = np.full(draft.n_vocab, -1, dtype=np.int64)
    seen: set[bytes] = set()
    for d in range(draft.n_vocab):
        data = draft.piece(d)
        if data and data not in seen:
            seen.add(data)
            to_target[d] = by_text.get(data, -1)
    vocab = SharedVocab(to_target)
    _shared[draft] = (id(target), vocab)
    return vocab


class _MaskedDrafter(ModelDrafter):
    """The draft model sampling only among the shared vocabulary's tokens."""

    def __init__(
        self,
        model: DraftLM,
        sampler: SamplerSettings,
        rng: random.Random,
        p_min: float,
        cancel: threading.Event | None,
        shared: SharedVocab,
    ) -> None:
        super().__init__(model, sampler, rng, p_min, cancel)
        self._argmax_only = False
        self._outside = ~shared.mask

    def _draw(self, row: np.ndarray) -> tuple[int, Dist | None] | None:
        masked = row.copy()
        masked[self._outside] = -np.inf
        return super()._draw(masked)


# ---------------------------------------------------------------------- several sequences
class CrossBatch(BatchProposerBase):
    """Drafting across tokenizers for the sequences of a batch, one after another: a
    CrossDrafter per sequence over its own sequence of the draft model (its texts in both
    tokenizers are one sequence's; the re-encoding, not the draft's decodes, is the work)."""

    kind = KIND
    shares_steps = False
    alpha_prior = 0.4

    def __init__(self, setup: BatchSetup) -> None:
        from ..llama.sequences import SeqContext  # (llama.cpp's bindings, loaded by then)

        assert setup.draft is not None
        self.target = setup.target
        self.ctx = SeqContext(setup.draft)
        self.record = setup.record
        self._of: dict[int, CrossDrafter] = {}

    def calibrate(self, seqs: Sequence[int], stopped: Callable[[], bool]) -> None:
        self.ctx.time_decodes(seqs, (1, 2, 4, 8, 16, 32, 64), "last", self.record, stopped)

    def admit(self, seq: int, prompt: Sequence[int], reuse: bool) -> None:
        from ..llama.sequences import OneSequence

        if not reuse:
            self.ctx.keep(seq, 0)  # (its first draft keeps what it shares with the text)
        one = OneSequence(self.ctx, seq, self.record)
        # One-hot q (the draft's own greedy tokens): its random stream is not drawn from.
        drafter = CrossDrafter(self.target, one, GREEDY, random.Random(0), 0.0, None)
        drafter._restart()  # (begin's start, without its prefill: the first draft catches up)
        self._of[seq] = drafter

    def offer(self, seq: int, history: Sequence[int], k_max: int) -> BatchOffer | None:
        drafter = self._of[seq]
        if drafter.off:
            return None
        return BatchOffer(k_max, lag=max(1, round((len(history) - drafter.synced) * drafter.ratio)))

    def propose(self, lanes: Sequence[Lane]) -> float:
        t0 = time.perf_counter()
        for lane in lanes:
            drafter = self._of[lane.seq]
            drafter.sampler = lane.config.sampler  # (for q: one-hot when sampling)
            got = drafter.draft(lane.history, lane.k)
            lane.drafts = got.tokens
            lane.qs = [q for q in got.qs if q is not None]
            lane.caught_up = got.caught_up
        return time.perf_counter() - t0

    def release(self, seq: int) -> None:
        self._of.pop(seq, None)

    def close(self) -> None:
        self.ctx.close()


def _build_batch(setup: BatchSetup) -> CrossBatch | None:
    if setup.draft is None or not setup.draft.foreign_tokenizer:
        return None
    return CrossBatch(setup)


# ---------------------------------------------------------------------- the kind
def _build(ctx: BuildContext) -> Drafter | None:
    if ctx.draft is None or not ctx.draft.foreign_tokenizer:
        return None
    config = ctx.config
    return CrossDrafter(
        ctx.target, ctx.draft, config.sampler, ctx.rng, config.p_min, ctx.cancel, shared_q=SHARED_Q
    )


def _missing(target: LoadedModel, draft: LoadedModel | None) -> str | None:
    if draft is None:
        return "the cross-tokenizer drafter needs a draft model of another tokenizer: load one"
    if not draft.foreign_tokenizer:
        return f"{draft.path.name} shares the target's tokenizer: it drafts directly (--drafter model)"
    return None


SPEC = DrafterSpec(
    name=KIND,
    words=Words(
        label="cross-tokenizer draft",
        help="a draft model of another tokenizer, its text re-encoded into the target's tokens",
        note="the draft model, across tokenizers",
        phrase=lambda target, draft: f"{draft.path.name} (across tokenizers)" if draft is not None else "",
    ),
    needs=Needs.DRAFT_MODEL,
    build=_build,
    missing=_missing,
    traits=Traits(untimed_rank=2),
    batching=Batching(build=_build_batch),
    across_tokenizers=True,
)
