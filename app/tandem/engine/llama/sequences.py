"""Several sequences in one llama.cpp context: one batch for all of them, a KV mirror each.

A model loaded with `LoadOptions.n_seq > 1` holds that many sequences in one KV cache (unified:
a round of every sequence's rows is one micro-batch). `SeqContext` fills a batch from pieces,
each a run of one sequence's tokens at its next positions with or without output rows, decodes
it in one `llama_decode`, and hands back each piece's logits rows; it mirrors which tokens each
sequence's cache holds and cuts a sequence back after a rejection (llama_memory_seq_rm).

A recurrent or hybrid model's sequence is cut back with llama.cpp's snapshots where they reach
(within the sequence's last decode: `_room`), else to the sequence's checkpoint (`checkpoint`:
a copy of its recurrent state, as kv_mirror.py keeps one for a single sequence), else emptied;
`keep` says when the sequence holds less than asked, and the caller reads the rest again.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, Protocol

import numpy as np
import numpy.typing as npt

from ..errors import ContextOverflowError, GenerationError
from .kv_mirror import Checkpoint, load_state, save_state
from .llama_lib import llama_cpp
from .prefix import common_prefix

if TYPE_CHECKING:
    from .model import LoadedModel


# Pieces of at most this many tokens are written into the batch element by element.
_ONE_BY_ONE = 16


@dataclass(frozen=True, slots=True)
class Piece:
    """A run of one sequence's tokens for the next batch; `outputs`: rows wanted for all of them
    (a verify), for the last one (a draft step), or none (a prompt's chunk)."""

    seq: int
    tokens: Sequence[int]
    outputs: str  # "all", "last" or "none"


class SeqListener(Protocol):
    """Told of what each sequence's cache gains and loses (a drafter that reads the target's
    rows: drafters/heads/batched.py)."""

    def seq_decoded(self, model: LoadedModel, seq: int, pos0: int, tokens: Sequence[int], at: int) -> None:
        """Sequence `seq`'s `tokens` were decoded at positions pos0..., tokens at... of the batch."""

    def seq_kept(self, seq: int, n: int) -> None:
        """Sequence `seq`'s cache was cut back to its first n tokens."""


class SeqContext:
    """The sequences of one loaded model (its context made with n_seq sequences). Not
    thread-safe: the batched loop drives it."""

    def __init__(self, model: LoadedModel) -> None:
        self.model = model
        self.n_seq = model.options.n_seq
        self.n_ctx = model.n_ctx  # per sequence
        self.capacity = model.n_batch  # tokens per decode (one micro-batch)
        self.max_rows = model.max_rows  # logits rows per decode
        self.cached: list[list[int]] = [[] for _ in range(self.n_seq)]
        self.listeners: list[SeqListener] = []
        # Seconds the last decode's listeners took (what follows the target is not the target's
        # cost: the cost tables leave it out).
        self.listened_s = 0.0
        self.recurrent = model.recurrent
        self.snapshots = model.snapshots if model.recurrent else 0
        # Positions llama.cpp's snapshots can undo in each sequence now (its last decode's tokens
        # but one; none after a rollback: a snapshot left from an older batch is stale, and
        # seq_rm cannot tell), and each sequence's checkpoint (length, state bytes).
        self._room = [0] * self.n_seq
        self._points: dict[int, Checkpoint] = {}
        self._mem = llama_cpp.llama_get_memory(model.ctx)
        self._batch = llama_cpp.llama_batch_init(self.capacity, 0, 1)
        b = self._batch
        self._tok = np.ctypeslib.as_array(b.token, shape=(self.capacity,))
        self._pos = np.ctypeslib.as_array(b.pos, shape=(self.capacity,))
        self._out = np.ctypeslib.as_array(b.logits, shape=(self.capacity,))
        np.ctypeslib.as_array(b.n_seq_id, shape=(self.capacity,))[:] = 1
        self._seq_ids = b.seq_id
        self._token_ptr, self._pos_ptr, self._out_ptr = b.token, b.pos, b.logits
        for seq in range(self.n_seq):  # (a context reused after a single-sequence run)
            llama_cpp.llama_memory_seq_rm(self._mem, seq, 0, -1)

    def close(self) -> None:
        if self._batch is not None:
            llama_cpp.llama_batch_free(self._batch)
            self._batch = None

    def needs_checkpoint(self, k: int) -> bool:
        """Whether a verify of k drafts (k + 1 tokens) must be preceded by `checkpoint`: its
        rejection would cut a recurrent state back past llama.cpp's snapshots."""
        return self.recurrent and k > self.snapshots

    def keep(self, seq: int, n: int) -> bool:
        """Keep the first n cached tokens of `seq`; False when its cache could not be cut there
        and holds fewer (cut back to its checkpoint, or emptied; `cached[seq]` says how many):
        the caller reads again what it needs."""
        cached = self.cached[seq]
        if n >= len(cached):
            return True
        mem = self._mem
        if not self.recurrent:
            got = n if llama_cpp.llama_memory_seq_rm(mem, seq, n, -1) else 0
            if not got:
                llama_cpp.llama_memory_seq_rm(mem, seq, 0, -1)
        elif n > 0 and len(cached) - n <= self._room[seq] and llama_cpp.llama_memory_seq_rm(mem, seq, n, -1):
            got = n
        else:
            got = self._restore(seq, n)
        self._room[seq] = 0
        del cached[got:]
        point = self._points.get(seq)
        if point is not None and point.length > got:
            del self._points[seq]  # (a checkpoint past what is kept describes nothing now)
        for listener in self.listeners:
            listener.seq_kept(seq, got)
        return got == n

    def checkpoint(self, seq: int) -> None:
        """Copy sequence `seq`'s recurrent state as it is now, for `keep` to come back to (the
        recurrent part only: a hybrid's attention cache is cut as usual). Nothing for a model
        without one."""
        if not self.recurrent:
            return
        old = self._points.get(seq)
        point = Checkpoint(len(self.cached[seq]), old.data if old is not None else None)
        if point.length and not save_state(self.model.ctx, seq, point):
            self._points.pop(seq, None)  # (keep then empties the sequence: slow, never wrong)
            return
        self._points[seq] = point

    def _restore(self, seq: int, n: int) -> int:
        """Bring `seq` back to its checkpoint when that holds at most n tokens, else empty it;
        the tokens it then holds."""
        point = self._points.get(seq)
        if point is not None and 0 < point.length <= n and load_state(self.model.ctx, self._mem, seq, point):
            return point.length
        llama_cpp.llama_memory_seq_rm(self._mem, seq, 0, -1)
        return 0

    def common_prefix(self, seq: int, tokens: Sequence[int]) -> int:
        return common_prefix(self.cached[seq], tokens)

    def time_decodes(
        self,
        seqs: Sequence[int],
        sizes: Sequence[int],
        outputs: str,
        record: Callable[[int, float], None],
        stopped: Callable[[], bool],
    ) -> None:
        """Time decodes of each size in `sizes` tokens (twice each) after a short context in
        each of `seqs` (free sequences, left empty), for a cost table: `outputs` "all", a
        verify (one row in each sequence, the rest on the first, as a round with drafts has
        them); "last", a draft step or catch-up (one sequence's tokens). Sizes past the
        context's limits are skipped; `stopped` ends it early."""
        tokens = [t % self.model.n_vocab for t in range(1000, 1080)]
        for seq in seqs:
            self.keep(seq, 0)
        # (The first decode also pays the page-ins.)
        self.prefill([Piece(seq, tokens[:8], "none") for seq in seqs])
        for n in sizes:
            if stopped():
                break
            if (n > self.max_rows and outputs == "all") or n > self.capacity:
                continue
            m = min(n, len(seqs)) if outputs == "all" else 1
            counts = [n - m + 1] + [1] * (m - 1)
            pieces = [Piece(seq, tokens[8 : 8 + c], outputs) for seq, c in zip(seqs, counts, strict=False)]
            for _ in range(2):
                t0 = time.perf_counter()
                self.decode(pieces)
                record(n, time.perf_counter() - t0 - self.listened_s)
                for p in pieces:
                    self.keep(p.seq, 8)
        for seq in seqs:
            self.keep(seq, 0)

    def prefill(self, pieces: Sequence[Piece]) -> None:
        """Decode pieces without outputs, in as many decodes as the micro-batch needs."""
        group: list[Piece] = []
        room = self.capacity
        for piece in pieces:
            tokens = list(piece.tokens)
            while tokens:
                m = min(room, len(tokens))
                group.append(Piece(piece.seq, tokens[:m], "none"))
                tokens = tokens[m:]
                room -= m
                if room == 0:
                    self.decode(group)
                    group, room = [], self.capacity
        if group:
            self.decode(group)

    def decode(self, pieces: Sequence[Piece]) -> list[npt.NDArray[np.float32] | None]:
        """Decode every piece in ONE llama_decode; each piece's logits rows (a view valid until
        the next decode), None for a piece without outputs. The caller keeps the batch within
        `capacity` tokens and `max_rows` outputs."""
        b = self._batch
        n = rows = 0
        for piece in pieces:
            m = len(piece.tokens)
            n += m
            rows += m if piece.outputs == "all" else piece.outputs == "last"
            if len(self.cached[piece.seq]) + m > self.n_ctx:
                raise ContextOverflowError(f"sequence {piece.seq} of the {self.model.role} is full")
        if n > self.capacity or rows > self.max_rows:
            raise ValueError(f"a batch of {n} tokens and {rows} rows is past this context's limits")
        n = rows = 0
        spans: list[tuple[int, int] | None] = []
        starts: list[tuple[int, int]] = []  # each piece's first position and place in the batch
        token, pos, out, seq_ids = self._token_ptr, self._pos_ptr, self._out_ptr, self._seq_ids
        for piece in pieces:
            tokens, seq, outputs = piece.tokens, piece.seq, piece.outputs
            m = len(tokens)
            p0 = len(self.cached[seq])
            starts.append((p0, n))
            if m <= _ONE_BY_ONE:
                # A round's pieces are a few tokens each (a verify, a draft step): written one
                # by one, as numpy's per-call costs more than the writes (model.py's _decode).
                flag = 1 if outputs == "all" else 0
                for i, t in enumerate(tokens, n):
                    token[i] = t
                    pos[i] = p0 + i - n
                    seq_ids[i][0] = seq
                    out[i] = flag
                if outputs == "last":
                    out[n + m - 1] = 1
            else:
                self._tok[n : n + m] = tokens
                self._pos[n : n + m] = np.arange(p0, p0 + m, dtype=np.int32)
                for i in range(n, n + m):
                    seq_ids[i][0] = seq
                self._out[n : n + m] = 1 if outputs == "all" else 0
                if outputs == "last":
                    self._out[n + m - 1] = 1
            if outputs == "all":
                spans.append((rows, rows + m))
                rows += m
            elif outputs == "last":
                spans.append((rows, rows + 1))
                rows += 1
            else:
                spans.append(None)
            n += m
        b.n_tokens = n
        rc = llama_cpp.llama_decode(self.model.ctx, b)
        if rc != 0:
            llama_cpp.llama_synchronize(self.model.ctx)
            # Whatever llama.cpp kept of a failed batch is unknown: the sequences start over.
            for seq in {p.seq for p in pieces}:
                llama_cpp.llama_memory_seq_rm(self._mem, seq, 0, -1)
                self.cached[seq] = []
                self._room[seq] = 0
                self._points.pop(seq, None)
                for listener in self.listeners:
                    listener.seq_kept(seq, 0)
            if rc == 1:
                raise ContextOverflowError(
                    f"the {self.model.role}'s KV cache has no room for {n} more tokens of parallel sequences"
                )
            raise GenerationError(f"llama.cpp failed to decode on the {self.model.role} (code {rc})")
        for piece in pieces:
            self.cached[piece.seq].extend(piece.tokens)
        if self.recurrent:  # (snapshots hold the states after each token of the batch but its last)
            for piece in pieces:
                self._room[piece.seq] = min(self.snapshots, len(piece.tokens) - 1)
        self.listened_s = 0.0
        if self.listeners:
            llama_cpp.llama_synchronize(self.model.ctx)  # (the decode's own time ends here)
            t0 = time.perf_counter()
            for listener in self.listeners:
                for piece, (p0, at) in zip(pieces, starts, strict=True):
                    listener.seq_decoded(self.model, piece.seq, p0, piece.tokens, at)
            self.listened_s = time.perf_counter() - t0
        if rows == 0:
            llama_cpp.llama_synchronize(self.model.ctx)
            return [None] * len(pieces)
        view = self.model.output_rows(rows)  # (its getter waits for the computation)
        return [None if span is None else view[span[0] : span[1]] for span in spans]


class OneSequence:
    """One sequence of a SeqContext as a drafter sees a draft model of its own (LoadedModel's
    calls that drafting uses): for a kind that drafts for several sequences one after another
    (drafters/cross.py), each sequence's decodes alone. A recurrent state is checkpointed and
    cut back as SeqContext does it: `truncate` leaves it holding fewer tokens when it cannot
    cut there, and the next draft's catch-up reads them again."""

    def __init__(self, ctx: SeqContext, seq: int, record: Callable[[int, float], None]) -> None:
        self.ctx = ctx
        self.seq = seq
        self.record = record  # (tokens, seconds) of each decode that gives a row
        model = ctx.model
        self.n_ctx = ctx.n_ctx
        self.n_vocab = model.n_vocab
        self.piece = model.piece
        self.tokenize = model.tokenize
        self.is_eog = model.is_eog
        self.non_finite = model.non_finite

    @property
    def cached(self) -> list[int]:
        return self.ctx.cached[self.seq]

    def keep_prefix_of(self, tokens: Sequence[int]) -> int:
        """Keep the longest cached prefix of `tokens`; its length."""
        n = self.ctx.common_prefix(self.seq, tokens)
        self.ctx.keep(self.seq, n)
        return n

    def truncate(self, n: int, *, replay: bool = True) -> None:
        self.ctx.keep(self.seq, n)

    def checkpoint(self, slot: str = "round") -> None:
        """The sequence's state now, for a rollback past llama.cpp's snapshots (one slot: the
        latest; a drafter's prompt slot is its catch-up's business here)."""
        if slot == "round":
            self.ctx.checkpoint(self.seq)

    def decode(
        self,
        tokens: Sequence[int],
        outputs: Literal["none", "last", "all"] = "last",
        *,
        should_stop: Callable[[], bool] | None = None,
    ) -> npt.NDArray[np.float32] | None:
        """Append tokens (the micro-batch's worth at a time); the last token's row for "last"
        (a drafter's step: "all" is not asked of a draft)."""
        ctx, seq = self.ctx, self.seq
        if outputs == "none":
            ctx.prefill([Piece(seq, tokens, "none")])
            return None
        cut = max(0, len(tokens) - ctx.capacity)  # (what one decode cannot hold goes first)
        if cut:
            ctx.prefill([Piece(seq, tokens[:cut], "none")])
        t0 = time.perf_counter()
        row = ctx.decode([Piece(seq, tokens[cut:], "last")])[0]
        self.record(len(tokens) - cut, time.perf_counter() - t0 - ctx.listened_s)
        return row

    def decode_greedy(self, tokens: Sequence[int], outputs: Literal["last", "all"] = "last") -> list[int]:
        row = self.decode(tokens, "last")
        assert row is not None
        best = int(row[0].argmax())
        if not np.isfinite(row[0, best]):  # (NaN and +inf win an argmax)
            raise self.non_finite(len(self.cached) - 1)
        return [best]
