"""An EAGLE-3 drafter: a one-layer model trained on the target's own hidden rows, in a GGUF of
its own beside the target (`eagle3-*.gguf`, architecture "eagle3"; sidecar.py checks it).

EAGLE-3 fuses the target's rows at three of its layers (the input of each) into one row g per
position (`fc`, llama.cpp's encoder pass), and drafts autoregressively with one decoder layer
whose entry at position p is (token x_{p+1}, g_p): from what the target made of x_0..x_p and
the token after it, it guesses the one after that. Its own attention cache holds the entries of
the positions the target has decoded; a draft step after the first feeds it its own output row
(the pre-norm hidden state) in place of g, as it was trained, and those entries are dropped
after the draft. It borrows the target's token embeddings and LM head unless it has its own;
with a reduced vocabulary of its own, llama.cpp maps its logits onto the target's (`d2t`), the
other tokens at minus infinity.

`Eagle3Head` keeps its cache in step with the target, as the MTP heads do (engine/mtp.py): it
is one of the target's decode listeners and, while a generation drafts with it, encodes the
rows of every target batch into g (kept, float16, for every position the target holds, so that
however far back the target is cut the head can go on); entries are added lazily, a round's
first step catching up in one batch on what the target accepted since the last draft.

Sampling is exact as for any drafter: q is its distribution after the same sampler settings as
the target's.
"""

from __future__ import annotations

import ctypes
import random
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt

from ..errors import GenerationError
from ..events import RoundEvent
from ..gguf_info import GGUFInfo
from ..model import DecodeListener, LoadedModel, common_prefix
from ..sampling import NonFiniteLogits, SamplerSettings
from ..sidecar import EAGLE3 as EAGLE3_ARCH
from ..sidecar import read_facts
from ..sidecar_model import DECODE, ENCODE, SidecarModel, get_nextn_ith, set_embeddings_nextn
from . import DrafterKind, Proposal, draw
from .names import EAGLE3
from .spec import BuildContext, Drafter, DrafterSpec, Needs, Offer, RoundView, timed_draft_cost

# Target rows encoded per encoder pass: llama.cpp's output buffer holds this many logits rows
# (128k-token vocabularies: 8 MiB), and the encoder is one small matmul a row.
ENCODE_CHUNK = 16
# Target positions encoded beyond the head's entries before it catches up unasked (a prefill).
_FLUSH_ROWS = 64


class Eagle3Head:
    """One EAGLE-3 drafter beside one target, kept in step with the target's decodes."""

    def __init__(self, target: LoadedModel, path: Path, info: GGUFInfo) -> None:
        self.target = target
        self.path = path
        self.facts = read_facts(info)
        self.model = SidecarModel(target, path, self.facts, n_outputs=ENCODE_CHUNK)
        # Its encoder's rows, and each output entry's pre-norm row (a draft step's own g).
        set_embeddings_nextn(self.model.ctx, True, True)
        self.n_embd = self.model.n_embd
        self.decode_seconds = 0.0
        self.following = False
        self.seen: list[int] = []  # the target's tokens whose g rows the head holds
        self._g = np.zeros((64, self.n_embd), dtype=np.float16)  # row p: g_p
        # Entry p is (x_{p+1}, g_p) at position p: entry_tokens[p] = x_{p+1}. There may be one
        # entry for every position seen: the last one's token is the round's last, which the
        # target decodes next (checked against the next history).
        self.entry_tokens: list[int] = []
        self._own = np.zeros((1, self.n_embd), dtype=np.float32)  # a draft step's own row

    @property
    def label(self) -> str:
        return self.facts.label

    @property
    def entries(self) -> int:
        return len(self.entry_tokens)

    def close(self) -> None:
        self.model.close()

    # ------------------------------------------------------------------ following the target
    def set_following(self, on: bool) -> int:
        """Start or stop encoding the target's rows; how many of the target's cached tokens
        the head has rows for (following, the target drops the rest: decoded unseen)."""
        if on and not self.following:
            self.model.tap()
        self.following = on
        n = common_prefix(self.seen, self.target.cached)
        self.truncate(n)
        return n

    def on_decode(self, model: LoadedModel, pos0: int, tokens: Sequence[int]) -> None:
        """The target decoded `tokens` at positions pos0...: encode their rows into g."""
        if not self.following or pos0 > len(self.seen):
            return  # (rows missing in between: set_following cuts the target back)
        m = len(tokens)
        first_changed = pos0 == 0 and self.seen[:1] != list(tokens[:1])
        g = self._encode(self.model.target_rows(m))
        end = pos0 + m
        if end > len(self._g):
            grown = np.zeros((max(2 * len(self._g), end), self.n_embd), dtype=np.float16)
            grown[:pos0] = self._g[:pos0]
            self._g = grown
        self._g[pos0:end] = g
        del self.seen[pos0:]
        self.seen.extend(tokens)
        keep = 0 if first_changed else common_prefix(self.entry_tokens, self.seen[1:])
        if keep == len(self.seen) - 1:  # (the entry after them is checked against the history)
            keep = min(self.entries, keep + 1)
        self._keep_entries(keep)
        if len(self.seen) - 1 - self.entries > _FLUSH_ROWS:
            # A long prefill: catch up now, chunk by chunk, rather than all at the first draft.
            self._extend(self.seen, len(self.seen) - 1, output=False)

    def truncate(self, n: int) -> None:
        """The target kept its first n positions."""
        del self.seen[n:]
        self._keep_entries(min(self.entries, n))

    def _keep_entries(self, n: int) -> None:
        if n < self.entries:
            self.model.cut(n)
            del self.entry_tokens[n:]

    def _encode(self, rows: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
        """g for each target row (the fused rows of its three layers), ENCODE_CHUNK a pass."""
        model = self.model
        out = np.empty((len(rows), self.n_embd), dtype=np.float32)
        # The encoder does not use positions, but llama.cpp wants them to follow its cache's.
        base = model.pos_max() + 1
        for start in range(0, len(rows), ENCODE_CHUNK):
            end = min(len(rows), start + ENCODE_CHUNK)
            model.clear()
            for i in range(start, end):
                model.add_embd(rows, i, base + i - start, output=True)
            self.decode_seconds += model.run(ENCODE, self.entries)
            out[start:end] = model.hidden(end - start, self.n_embd)
        return out

    def _extend(self, tokens: Sequence[int], upto: int, *, output: bool) -> int:
        """Add the entries for positions entries..upto-1 (entry p: tokens[p + 1] and g_p), in
        n_batch chunks; the batch index of the last one (its logits are kept when `output`)."""
        model = self.model
        p, idx = self.entries, -1
        while p < upto:
            end = min(upto, p + model.n_batch)
            rows = np.ascontiguousarray(self._g[p:end], dtype=np.float32)
            model.clear()
            for i in range(end - p):
                last = output and p + i == upto - 1
                idx = model.add_token(tokens[p + i + 1], p + i, row=rows, i=i, output=last)
            self.decode_seconds += model.run(DECODE, p)
            self.entry_tokens.extend(tokens[p + 1 : end + 1])
            p = end
        return idx

    # ------------------------------------------------------------------ drafting
    def ready_for(self, history: Sequence[int]) -> bool:
        """Whether it can draft after `history`: it has g for all but the last token (the
        target holds exactly those), and at least one."""
        return self.following and len(self.seen) == len(history) - 1 and len(self.seen) > 0

    def first_step(self, history: Sequence[int]) -> tuple[npt.NDArray[np.float32], int]:
        """Catch up on the target's new rows, then add the round's last token's entry: the
        logits for the first draft token, and how many entries were added.

        Two passes when there is something to catch up on: llama.cpp's EAGLE-3 graph computes
        logits for every entry of a batch and keeps the first rows, as many as are asked for,
        so the entry whose logits are wanted goes alone (as llama.cpp's own driver does)."""
        n = len(history) - 1
        # (The last entry is built anew when it exists: its logits were overwritten since.)
        self._keep_entries(min(common_prefix(self.entry_tokens, history[1:]), n - 1))
        before = self.entries
        self._extend(history, n - 1, output=False)
        idx = self._extend(history, n, output=True)
        return self.model.logits(idx), n - before

    def next_step(self, token: int, pos: int) -> npt.NDArray[np.float32]:
        """One more draft step: `token` at `pos`, with the head's own row from the step before
        in place of g; the logits for the token after it."""
        h = get_nextn_ith(self.model.ctx, -1)
        if not h:
            raise GenerationError(f"llama.cpp gave no hidden row from {self.path.name}")
        # Copied: the pointer is into the output buffer this very decode rewrites.
        self._own[0] = np.ctypeslib.as_array((ctypes.c_float * self.n_embd).from_address(h))
        model = self.model
        model.clear()
        idx = model.add_token(token, pos, row=self._own, output=True)
        self.decode_seconds += model.run(DECODE, self.entries)
        return model.logits(idx)

    def end_draft(self) -> None:
        """Drop the draft steps' entries: built from its own rows, not the target's."""
        self.model.cut(self.entries)


class Eagle3Drafter:
    kind: DrafterKind = EAGLE3

    def __init__(
        self,
        head: Eagle3Head,
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
            pos = len(history) - 2  # the last entry's position: (last, g_{n-1}); d_i goes after it
            while True:
                try:
                    drawn = draw(logits, self.sampler, self.rng, self.p_min)
                except NonFiniteLogits:
                    raise GenerationError(
                        f"{head.path.name} (an EAGLE-3 drafter) produced NaN or infinite logits: "
                        "draft with --drafter lookup or a draft model instead"
                    ) from None
                if out.passes == 1:
                    out.first_s = time.perf_counter() - t0
                if drawn is None:
                    break  # unsure here: a rejection is likely
                token, q = drawn
                out.tokens.append(token)
                out.qs.append(q)
                if len(out.tokens) >= k or (self.cancel is not None and self.cancel.is_set()):
                    break
                if head.target.is_eog(token):
                    break
                pos += 1
                logits = head.next_step(token, pos)
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


def head_of(target: LoadedModel) -> Eagle3Head | None:
    """The EAGLE-3 drafter attached to the target, if any."""
    return next((x for x in target.listeners if isinstance(x, Eagle3Head)), None)


def attach(target: LoadedModel, path: Path, info: GGUFInfo) -> Eagle3Head:
    """Load a checked EAGLE-3 file beside the target, as one of its decode listeners."""
    head = Eagle3Head(target, path, info)
    target.listeners.append(head)
    return head


def _build(ctx: BuildContext) -> Drafter | None:
    head = head_of(ctx.target)
    if head is None:
        return None
    return Eagle3Drafter(head, ctx.config.sampler, ctx.rng, ctx.config.p_min, ctx.cancel)


def _missing(target: LoadedModel, draft: LoadedModel | None) -> str | None:
    if head_of(target) is not None:
        return None
    return (
        f"no EAGLE-3 drafter is loaded for {target.path.name}: give the eagle3-*.gguf trained for "
        "it as the draft (--draft), or draft another way (--drafter auto)"
    )


def _phrase(target: LoadedModel, draft: LoadedModel | None) -> str:
    head = head_of(target)
    return f"{head.path.name} ({head.label})" if head is not None else "an EAGLE-3 drafter"


SPEC = DrafterSpec(
    name=EAGLE3,
    label="EAGLE-3 drafter",
    needs=Needs.SIDECAR,
    build=_build,
    missing=_missing,
    draft_cost=timed_draft_cost,
    untimed_rank=1,
    listens=("layer rows",),
    phrase=_phrase,
    note="its EAGLE-3 drafter",
    sidecar_archs=(EAGLE3_ARCH,),
    load_sidecar=attach,
)
