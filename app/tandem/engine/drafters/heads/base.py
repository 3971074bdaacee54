"""What the drafters that read the target's rows share: MTP heads, EAGLE-3 and DFlash.

Each of them runs in a llama.cpp context of its own beside the target (context.py) and is one
of the target's decode listeners: while a generation drafts with it, every target batch hands
over rows (the trunk's hidden rows for MTP heads, the input rows of a few layers for a trained
drafter), and the head keeps what it needs of them for every position the target holds, so
that however far back the target is cut (a new turn, a rollback) it can go on from there.

* `Track`: what a head knows of the target's sequence (whether it follows, the tokens whose
  rows it holds, the tokens of its own cache's entries), in one object.
* `Head`: following the target (set_following, on_decode, truncate), ready_for and end_draft,
  the same for every kind; a kind says how it takes a batch's rows (`_take`) and cuts its cache.
* `EntryHead`: a head whose cache holds one entry per position, a token and a row (MTP, EAGLE-3):
  entries are added lazily, a draft's first step catching up in one batch on what the target
  accepted since the last draft; further steps feed the head its own row; those are dropped.
* `HeadDrafter`: drafting autoregressively with such a head, and its part in scheduling.

Rollback is by token comparison (`truncate`, and every target decode says from which position
it wrote), so multi-turn reuse, regenerate and cancel need nothing special.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import numpy as np
import numpy.typing as npt

from ...config import DRAFT_MAX_LIMIT
from ...errors import GenerationError
from ...llama.prefix import common_prefix
from ...sampling import NonFiniteLogits, SamplerSettings
from .. import Proposal, draw
from ..spec import DrafterBase

if TYPE_CHECKING:
    from typing_extensions import Self

    from ...llama.model import LoadedModel
    from .context import HeadContext

# Target positions a head takes rows for beyond its entries before it catches up unasked (a
# long prefill goes in chunk by chunk, rather than all at the first draft).
FLUSH_ROWS = 64


def put_rows(buffer: npt.NDArray[Any], i: int, rows: npt.NDArray[np.float32]) -> npt.NDArray[Any]:
    """`rows` written into `buffer` from row i on; the buffer, grown (doubled at least, its
    first i rows kept) when they do not fit: a head's rows by position, or rows waiting."""
    end = i + len(rows)
    if end > len(buffer):
        grown = np.zeros((max(2 * len(buffer), end), buffer.shape[1]), dtype=buffer.dtype)
        grown[:i] = buffer[:i]
        buffer = grown
    buffer[i:end] = rows
    return buffer


@dataclass
class Track:
    """What a head knows of one target sequence: one object, so that a head could follow
    several sequences with one of these each."""

    following: bool = False  # the target hands its rows over
    seen: list[int] = field(default_factory=list)  # the target's tokens whose rows it holds
    # The tokens of its cache's entries (entry p's token is x_{p + Head.offset}).
    entry_tokens: list[int] = field(default_factory=list)


class Head:
    """One drafter beside one target, kept in step with the target's decodes (a
    DecodeListener). Subclasses say how a batch's rows are taken and when entries go."""

    # Entry p of its cache holds token x_{p + offset} (MTP: x_p with h_{p-1}; EAGLE-3: x_{p+1}
    # with g_p), and it can draft once it holds `min_seen` positions' rows.
    offset = 0
    min_seen = 0
    # A draft is one pass whatever its length (DFlash's block), not a pass a token.
    one_pass = False

    def __init__(self, target: LoadedModel, context: HeadContext) -> None:
        self.target = target
        self.context = context
        self.track = Track()
        self.decode_seconds = 0.0  # its own time inside llama.cpp (a generation's clock counts it)

    @property
    def following(self) -> bool:
        return self.track.following

    @property
    def seen(self) -> list[int]:
        return self.track.seen

    @property
    def entries(self) -> int:
        """Entries in its cache built from the target's rows."""
        return len(self.track.entry_tokens)

    @property
    def subject(self) -> str:
        """Who drafted, in a message: "x.gguf (an EAGLE-3 drafter)"."""
        raise NotImplementedError

    @property
    def max_draft(self) -> int:
        """The most tokens it drafts in a round."""
        return DRAFT_MAX_LIMIT

    @property
    def pass_max(self) -> int:
        """The most entries one of its passes takes."""
        return self.context.n_batch

    def beside(self) -> Self:
        """A head of the same kind and weights in a context of its own, for another sequence of
        the target (heads/batched.py)."""
        raise NotImplementedError

    def close(self) -> None:
        self.context.close()

    def lag(self, history: Sequence[int]) -> int:
        """The entries its next draft's first pass decodes (its catch-up, the last token's)."""
        raise NotImplementedError

    def time_pass(self, n: int) -> float:
        """The seconds of a pass of n entries (from position 0 of its cache, left empty)."""
        raise NotImplementedError

    # ------------------------------------------------------------------ following the target
    def follow_always(self) -> None:
        """Take the target's rows from now on (a head of a batch's sequence: see batched.py)."""
        self._follow(True)
        self.track.following = True

    def stop_following(self) -> None:
        self._follow(False)
        self.track.following = False

    def set_following(self, on: bool) -> int:
        """Start or stop taking the target's rows (a plain-target run does not pay for them).
        Returns how many of the target's cached tokens the head has rows for: when following,
        the target must drop the rest (decoded while the head was not following)."""
        if on != self.track.following:
            self._follow(on)
            self.track.following = on
        n = common_prefix(self.track.seen, self.target.cached)
        self.truncate(n)
        return n

    def on_decode(self, model: LoadedModel, pos0: int, tokens: Sequence[int], at: int = 0) -> None:
        """The target decoded `tokens` at positions pos0..., tokens at... of its batch (another
        sequence's may come first): take their rows."""
        if not self.track.following or pos0 > len(self.track.seen):
            return  # (rows missing in between: set_following cuts the target back)
        self._take(model, pos0, tokens, at)

    def truncate(self, n: int) -> None:
        """The target kept its first n positions."""
        raise NotImplementedError

    def ready_for(self, history: Sequence[int]) -> bool:
        """Whether it can draft after `history`: it has the target's rows for all but the last
        token (the target holds exactly those)."""
        seen = len(self.track.seen)
        return self.track.following and seen == len(history) - 1 and seen >= self.min_seen

    def end_draft(self) -> None:
        """Drop the draft's entries: built from its own guesses, not the target's rows."""
        self.context.cut(self.entries)

    # ------------------------------------------------------------------ the kind's part
    def _follow(self, on: bool) -> None:
        """Switch the target's outputs this head reads on or off."""
        raise NotImplementedError

    def _take(self, model: LoadedModel, pos0: int, tokens: Sequence[int], at: int) -> None:
        """Keep what it needs of a target batch's rows (tokens at pos0..., the batch's from at)."""
        raise NotImplementedError


class EntryHead(Head):
    """A head whose cache holds an entry per position: a token and a target row (MTP heads:
    x_p with h_{p-1}; EAGLE-3: x_{p+1} with g_p). The rows are kept (float16) for every
    position the target holds; entries are added lazily."""

    # EAGLE-3's graph keeps the first rows of its logits: the entry whose logits are wanted
    # goes in a pass of its own (as llama.cpp's own driver does).
    last_alone = False

    def __init__(self, target: LoadedModel, context: HeadContext, width: int) -> None:
        super().__init__(target, context)
        self._rows = np.zeros((64, width), dtype=np.float16)  # row p: position p's

    def lag(self, history: Sequence[int]) -> int:
        return max(1, len(history) - self.offset - self.entries)

    def time_pass(self, n: int) -> float:
        ctx = self.context
        rows = np.zeros((n, self._rows.shape[1]), dtype=np.float32)
        ctx.clear()
        for i in range(n):
            ctx.add_token(0, i, row=rows, i=i, output=i == n - 1)
        try:
            return ctx.decode(0)
        finally:
            ctx.cut(0)

    def _rows_of(self, model: LoadedModel, n: int, at: int) -> npt.NDArray[np.float32]:
        """The rows this head keeps for n tokens of the target's last batch, from its at-th."""
        raise NotImplementedError

    def _take(self, model: LoadedModel, pos0: int, tokens: Sequence[int], at: int) -> None:
        track, o = self.track, self.offset
        # Entry p's row depends on x_0..x_{p+o-1}, its token on x_{p+o}: with an offset the
        # first token is in no entry's token, so a new first token invalidates them all.
        first_changed = o > 0 and pos0 == 0 and track.seen[:1] != list(tokens[:1])
        self._store(model, pos0, len(tokens), at)
        del track.seen[pos0:]
        track.seen.extend(tokens)
        keep = 0 if first_changed else common_prefix(track.entry_tokens, track.seen[o:])
        if keep == len(track.seen) - o:  # the entry after them too (checked against the next history)
            keep = min(self.entries, keep + 1)
        self._keep_entries(keep)
        if len(track.seen) - o - self.entries > FLUSH_ROWS:
            # A long prefill: catch up now, chunk by chunk, rather than all at the first draft.
            self._extend(track.seen, len(track.seen) - o, output=False)

    def _store(self, model: LoadedModel, pos0: int, n: int, at: int) -> None:
        """Keep the rows of n tokens of the target's last batch (its at-th on) for positions
        pos0...: by default as the head reads them, at once (_rows_of)."""
        self._put(pos0, self._rows_of(model, n, at))

    def _put(self, pos0: int, rows: npt.NDArray[np.float32]) -> None:
        self._rows = put_rows(self._rows, pos0, rows)

    def _rows_ready(self) -> None:
        """Make every row taken readable (a kind that makes its rows late: EAGLE-3's)."""

    def truncate(self, n: int) -> None:
        del self.track.seen[n:]
        # (MTP: entry n, the token after them, may still hold: checked against the next history.)
        self._keep_entries(min(self.entries, n + 1 - self.offset))

    def _keep_entries(self, n: int) -> None:
        if n < self.entries:
            self.context.cut(n)
            del self.track.entry_tokens[n:]

    def _extend(self, tokens: Sequence[int], upto: int, *, output: bool) -> int:
        """Add the entries for positions entries..upto-1 (entry p: tokens[p + offset] with row
        p + offset - 1, zeros before the first), n_batch at a time; the batch index of the last
        one (its logits are kept when `output`)."""
        ctx, o = self.context, self.offset
        p, idx = self.entries, -1
        self._rows_ready()
        while p < upto:
            end = min(upto, p + ctx.n_batch)
            # Float32, contiguous for the batch's pointers.
            rows = np.zeros((end - p, self._rows.shape[1]), dtype=np.float32)
            lo = max(p - 1 + o, 0)
            rows[lo - (p - 1 + o) :] = self._rows[lo : end - 1 + o]
            ctx.clear()
            for i in range(end - p):
                last = output and p + i == upto - 1
                idx = ctx.add_token(tokens[p + i + o], p + i, row=rows, i=i, output=last)
            self.decode_seconds += ctx.decode(p)
            self.track.entry_tokens.extend(tokens[p + o : end + o])
            p = end
        return idx

    # ------------------------------------------------------------------ drafting
    def first_step(self, history: Sequence[int]) -> tuple[npt.NDArray[np.float32], int]:
        """Catch up on the target's new rows and add the round's last token's entry: the logits
        for the first draft token, and how many entries were added."""
        o = self.offset
        n = len(history) - o
        # (The last entry is built anew when it exists: its logits were overwritten since.)
        self._keep_entries(min(common_prefix(self.track.entry_tokens, history[o:]), n - 1))
        before = self.entries
        if self.last_alone:
            self._extend(history, n - 1, output=False)
        idx = self._extend(history, n, output=True)
        return self.context.logits(idx), n - before

    def next_step(self, token: int, pos: int) -> npt.NDArray[np.float32]:
        """One more draft step: `token` at `pos`, with the head's own row from the step before
        in place of the target's; the logits for the token after it."""
        ctx = self.context
        own = ctx.own_row()
        ctx.clear()
        idx = ctx.add_token(token, pos, row=own, output=True)
        self.decode_seconds += ctx.decode(self.entries)
        return ctx.logits(idx)


H = TypeVar("H", bound=Head)


class HeadDrafterBase(DrafterBase, Generic[H]):
    """A drafter over a head: it rolls back as the target does, and it is what follows the
    target's decodes for a generation that uses it."""

    def __init__(
        self,
        head: H,
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

    def accept(self, keep: int) -> None:
        self.head.truncate(keep)

    def listener(self) -> H:
        return self.head


class HeadDrafter(HeadDrafterBase[EntryHead]):
    """Drafting autoregressively with an EntryHead: the first step catches up, each further
    step feeds the head its own row. Greedy, or q = the head's distribution after the same
    sampler settings as the target's, so the acceptance test keeps the output the target's."""

    def draft(self, history: Sequence[int], k: int) -> Proposal:
        out = Proposal()
        head = self.head
        if k <= 0 or not head.ready_for(history):
            return out
        t0 = time.perf_counter()
        try:
            logits, out.caught_up = head.first_step(history)
            out.passes = 1
            pos = len(history) - head.offset  # where the first draft token's entry goes
            while True:
                try:
                    drawn = draw(logits, self.sampler, self.rng, self.p_min)
                except NonFiniteLogits:
                    raise GenerationError(
                        f"{head.subject} produced NaN or infinite logits: draft with --drafter lookup "
                        "or a draft model instead"
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
                logits = head.next_step(token, pos)
                pos += 1
                out.passes += 1
        finally:
            head.end_draft()
        return out


def attached(target: LoadedModel, cls: type[H]) -> H | None:
    """The head of this class attached to the target, if any."""
    return next((x for x in target.listeners if isinstance(x, cls)), None)
