"""An EAGLE-3 drafter: a one-layer model trained on the target's own hidden rows, in a GGUF of
its own beside the target (`eagle3-*.gguf`, architecture "eagle3").

EAGLE-3 fuses the target's rows at three of its layers (the input of each) into one row g per
position (`fc`, llama.cpp's encoder pass), and drafts autoregressively with one decoder layer
whose entry at position p is (token x_{p+1}, g_p): from what the target made of x_0..x_p and
the token after it, it guesses the one after that. A draft step after the first feeds it its own
output row (the pre-norm hidden state) in place of g, as it was trained. It borrows the target's
token embeddings and LM head unless it has its own; with a reduced vocabulary of its own,
llama.cpp maps its logits onto the target's (`d2t`), the other tokens at minus infinity.

`Eagle3Head` keeps g (float16) for every position the target holds, encoding each target batch's
rows as they come (base.py: following the target, entries, drafting).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from ...config import DRAFT_MAX_LIMIT
from ...files.gguf_info import GGUFInfo
from ..spec import Words
from .base import FLUSH_ROWS, EntryHead, HeadDrafter, attached, put_rows
from .files import DrafterFacts, positive, read_trained
from .trained import TrainedHead, trained_spec

if TYPE_CHECKING:
    from ...llama.model import LoadedModel
    from .context import HeadContext

KIND = "eagle3"
ARCH = "eagle3"  # the GGUF architecture of its files
LAYERS = 3  # EAGLE-3 fuses exactly three of the target's layers
# Target rows encoded per encoder pass: llama.cpp's output buffer holds this many logits rows
# (128k-token vocabularies: 8 MiB), and the encoder is one small matmul a row.
ENCODE_CHUNK = 16


class Eagle3Head(TrainedHead, EntryHead):
    """One EAGLE-3 drafter beside one target, kept in step with the target's decodes."""

    offset = 1  # entry p: (x_{p+1}, g_p)
    min_seen = 1  # (g_0 at least)
    last_alone = True  # (its graph keeps the first rows of its logits)

    def __init__(
        self, target: LoadedModel, path: Path, info: GGUFInfo, *, weights: HeadContext | None = None
    ) -> None:
        from .context import HeadContext  # (llama.cpp's bindings: only once a head is made)

        self.path = path
        self.info = info
        self.facts = _read(info)
        context = HeadContext(
            target,
            path=path,
            n_outputs=ENCODE_CHUNK,
            what=path.name,
            layers=self.facts.layers,
            weights=weights,
        )
        super().__init__(target, context, context.n_embd)
        context.extra_rows(own=True)  # its encoder's rows, and each output entry's pre-norm row
        # The target's rows not encoded yet (row i: position _encoded + i's; see _store).
        width = len(self.facts.layers) * context.n_embd_target
        self._raw = np.zeros((FLUSH_ROWS + 64, width), dtype=np.float32)
        self._encoded = 0

    def _follow(self, on: bool) -> None:
        if on:
            self.context.tap()

    def _store(self, model: LoadedModel, pos0: int, n: int, at: int) -> None:
        """Keep the batch's rows of its three layers: g is made from them when entries are
        added (_rows_ready), not at every target decode. A verify's rows would otherwise cost a
        pass of the encoder each (one or two rows, where a pass encodes ENCODE_CHUNK), and a
        round that does not draft pays for nothing it reads."""
        self._encoded = min(self._encoded, pos0)
        self._raw = put_rows(self._raw, pos0 - self._encoded, self.context.target_rows(n, at))

    def truncate(self, n: int) -> None:
        super().truncate(n)
        self._encoded = min(self._encoded, n)

    def _rows_ready(self) -> None:
        n = len(self.track.seen) - self._encoded
        if n > 0:
            self._put(self._encoded, self._encode(self._raw[:n]))
            self._encoded += n

    def _encode(self, rows: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
        """g for each of the target's rows (its three layers' side by side: C-contiguous),
        ENCODE_CHUNK a pass."""
        ctx = self.context
        n, width = len(rows), ctx.n_embd
        out = np.empty((n, width), dtype=np.float32)
        # The encoder does not use positions, but llama.cpp wants them to follow its cache's.
        base = ctx.pos_max() + 1
        for start in range(0, n, ENCODE_CHUNK):
            end = min(n, start + ENCODE_CHUNK)
            ctx.clear()
            for i in range(start, end):
                ctx.add_embd(rows, i, base + i - start, output=True)
            self.decode_seconds += ctx.encode(self.entries)
            out[start:end] = ctx.hidden(end - start, width)
        return out


class Eagle3Drafter(HeadDrafter):
    kind = KIND


def head_of(target: LoadedModel) -> Eagle3Head | None:
    """The EAGLE-3 drafter attached to the target, if any."""
    return attached(target, Eagle3Head)


def _read(info: GGUFInfo) -> DrafterFacts:
    h = read_trained(info, ARCH, "EAGLE-3")
    if len(h.layers) != LAYERS:
        raise h.bad(f"EAGLE-3 reads exactly {LAYERS} target layers, its header lists {len(h.layers)}")
    hidden = positive(info, f"{ARCH}.target_hidden_size")
    if hidden is None:
        raise h.bad(f"its header does not say the target's width ({ARCH}.target_hidden_size)")
    if info.get(f"{ARCH}.block_count") != 1:
        raise h.bad(f"EAGLE-3 has one decoder layer, its header says {info.get(f'{ARCH}.block_count')}")
    return h.facts(KIND, "EAGLE-3", hidden, DRAFT_MAX_LIMIT)


SPEC = trained_spec(
    KIND,
    Words(
        label="EAGLE-3 drafter",
        help="an EAGLE-3 drafter trained for the target, given as --draft or beside it (eagle3-*.gguf)",
        note="its EAGLE-3 drafter",
    ),
    head=Eagle3Head,
    drafter=lambda head, ctx: Eagle3Drafter(head, ctx.config.sampler, ctx.rng, ctx.config.p_min, ctx.cancel),
    read=_read,
    arch=ARCH,
    prefixes=("eagle3-",),
    rank=0,  # (its single layer is the cheapest step)
)
