"""A target's own draft heads: multi-token prediction ("nextn" layers).

Qwen3.5/3.6 (and their MoE variants), GLM-4.5+, DeepSeek V3 and others ship one or more MTP
blocks after their trunk. A block guesses the token after next from two things: the next
token's embedding and the trunk's last hidden state (before the LM head). llama.cpp runs the
blocks in a second context over the same weights (`LLAMA_CONTEXT_TYPE_MTP`), with its own small
KV cache (the MTP block attends over earlier positions like any decoder layer).

`MtpHead` keeps that context in step with the target:

* The head is one of the target's decode listeners (`attach`): while it follows, the target
  runs with `embeddings_nextn` on, so every decode also yields each token's hidden row, and the
  head stashes the rows (`on_decode`, which LoadedModel calls after each batch).
* Entry p of the MTP context is (token x_p, the target's hidden row h_{p-1}) at position p; it
  predicts x_{p+1}. Entries are added lazily: a draft's first batch catches up on the
  positions the target decoded since the last draft (normally the round's accepted tokens),
  with the first draft step in the same batch; a long prefill is caught up chunk by chunk.
* Further draft steps feed the head its own hidden output in place of the target's (the target
  has not seen the draft tokens yet), which is how the heads were trained to chain. Those
  entries are dropped after the draft: only entries built from the target's rows stay.

The bindings llama-cpp-python lacks are bound from the same library (hidden_rows.py: llama.cpp
exports them from its staging header, without C linkage).
"""

from __future__ import annotations

import ctypes
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from .errors import GenerationError, ModelLoadError
from .hidden_rows import get_embeddings_nextn_ith as _get_embeddings_nextn_ith
from .hidden_rows import set_embeddings_nextn as _set_embeddings_nextn
from .hidden_rows import supported
from .llama_lib import llama_cpp
from .model import GOVERNOR, LoadedModel, common_prefix, default_threads

_lib = llama_cpp._lib
_p = ctypes.c_void_p

_get_logits_ith = _lib["llama_get_logits_ith"]
_get_logits_ith.restype = _p
_get_logits_ith.argtypes = [_p, ctypes.c_int32]

_LLAMA_CONTEXT_TYPE_MTP = 1
_LLAMA_PROCESS_TYPE_DECODE = 1

# Target rows stashed beyond the head's entries before it catches up unasked (a long prefill).
_FLUSH_ROWS = 64


__all__ = [
    "MtpHead",
    "attach",
    "attach_file",
    "heads_of",
    "no_heads_message",
    "supported",
    "unsupported_message",
]


def no_heads_message(name: str) -> str:
    """Why a model without MTP blocks cannot draft for itself, with what to use instead."""
    return (
        f"{name} has no built-in draft heads (multi-token prediction layers): use a draft "
        "model (--draft) or prompt lookup (--drafter lookup)"
    )


def unsupported_message(name: str) -> str:
    """Why this llama.cpp build cannot run a model's heads (the staging calls are missing)."""
    return (
        f"this llama.cpp build cannot run {name}'s draft heads: update it "
        "(python3 scripts/install.py --rebuild)"
    )


def attach(target: LoadedModel) -> MtpHead | None:
    """Give a loaded target its heads when its MTP blocks were loaded: they follow its decodes
    as one of its listeners. None (with a note on the target) when they cannot run."""
    if not target.mtp_loaded:
        return None
    try:
        head = MtpHead(target, target.model_ptr, target.options.n_threads or default_threads())
    except ModelLoadError as exc:
        target.notes.append(f"{target.role}: its draft heads are not used: {exc}")
        return None
    target.listeners.append(head)
    return head


def attach_file(target: LoadedModel, path: Path, info: object) -> MtpHead:
    """Load MTP heads from a file of their own (`mtp-*.gguf`: the target's architecture, its MTP
    block, embeddings and head, no trunk; checked against the target: sidecar.py) and attach
    them to the target, as its own heads would be."""
    if not supported():
        raise ModelLoadError(unsupported_message(path.name))
    mparams = llama_cpp.llama_model_default_params()
    mparams.n_gpu_layers = 999 if target.gpu_layers else 0
    mparams.use_mmap = target.options.use_mmap
    mparams.load_mtp = True
    model = llama_cpp.llama_model_load_from_file(str(path).encode(), mparams)
    if not model:
        raise ModelLoadError(f"llama.cpp could not load the MTP heads in {path.name}")
    try:
        head = MtpHead(target, model, target.options.n_threads or default_threads(), source=path)
    except BaseException:
        llama_cpp.llama_model_free(model)
        raise
    target.listeners.append(head)
    return head


def heads_of(target: LoadedModel) -> MtpHead | None:
    """The target's heads, when they were attached."""
    return next((x for x in target.listeners if isinstance(x, MtpHead)), None)


class MtpHead:
    """The MTP context of one target, kept in step with the target's decodes.

    The target's hidden rows are kept for every position it holds (float16: n_ctx x n_embd x 2
    bytes, 40 MiB for a 5120-wide model at 4096 tokens), so that however far back the target
    is cut (a new turn, a rollback), the head can go on from there."""

    def __init__(
        self, target: LoadedModel, model: int, n_threads: int, *, source: Path | None = None
    ) -> None:
        self.target = target
        # Heads loaded from a file of their own (attach_file): its path, and the model it owns.
        self.source = source
        self.layers = int(llama_cpp.llama_model_n_layer_nextn(model))
        self.n_embd = int(llama_cpp.llama_model_n_embd_out(model))
        self.n_vocab = target.n_vocab
        cparams = llama_cpp.llama_context_default_params()
        cparams.ctx_type = _LLAMA_CONTEXT_TYPE_MTP
        cparams.n_ctx = target.n_ctx
        cparams.n_batch = target.n_batch
        cparams.n_ubatch = target.n_batch
        cparams.n_seq_max = 1
        cparams.n_outputs_max = 1  # a draft step, or a catch-up batch's last entry
        cparams.n_threads = n_threads
        cparams.n_threads_batch = n_threads
        cparams.no_perf = True
        cparams.flash_attn_type = target.options.flash_attn_type
        ctx = llama_cpp.llama_init_from_model(model, cparams)
        if not ctx:
            raise ModelLoadError(f"llama.cpp could not create a context for {target.path.name}'s draft heads")
        self._own_model = model if source is not None else None
        self._ctx: int | None = ctx
        GOVERNOR.attach(ctx, n_threads)  # (its threads follow the machine with the target's)
        # Hidden rows only for the entries that output (a draft step's): the head's own guess
        # of the target's row, fed to the next step.
        _set_embeddings_nextn(ctx, True, True)
        self._mem = llama_cpp.llama_get_memory(ctx)
        self._batch: Any = llama_cpp.llama_batch_ext_init(ctx)
        self.n_batch = int(llama_cpp.llama_n_batch(ctx))
        self.seen: list[int] = []  # the target's tokens whose hidden rows the head holds
        self._rows = np.zeros((64, self.n_embd), dtype=np.float16)  # row p: position p's
        # Tokens of the MTP context's entries: entry p is (x_p, h_{p-1}) at position p. It may
        # hold one more than `seen`: the round's last token, which the target decodes next.
        self.entry_tokens: list[int] = []
        self.following = False  # the target hands its rows over (set_following)
        self.decode_seconds = 0.0
        self._pos = ctypes.c_int32(0)
        self._own = np.zeros(self.n_embd, dtype=np.float32)  # a draft step's own hidden row

    def close(self) -> None:
        if self._batch is not None:
            llama_cpp.llama_batch_ext_free(self._batch)
            self._batch = None
        if self._ctx:
            GOVERNOR.detach(self._ctx)
            llama_cpp.llama_free(self._ctx)
            self._ctx = None
        if self._own_model:
            llama_cpp.llama_model_free(self._own_model)
            self._own_model = None

    @property
    def entries(self) -> int:
        return len(self.entry_tokens)

    # ------------------------------------------------------------------ following the target
    def set_following(self, on: bool) -> int:
        """Start or stop taking the target's hidden rows (a plain-target run does not pay for
        them). Returns how many of the target's cached tokens the head has rows for: when
        following, the target must drop the rest (decoded while the head was not following)."""
        if on != self.following:
            self.target.want_hidden_rows(on)
            self.following = on
        n = common_prefix(self.seen, self.target.cached)
        self.truncate(n)
        return n

    def on_decode(self, model: LoadedModel, pos0: int, tokens: Sequence[int]) -> None:
        """The target decoded `tokens` at positions pos0...: keep their hidden rows."""
        m = len(tokens)
        if not self.following or pos0 > len(self.seen):
            return  # (rows missing in between: set_following cuts the target back)
        rows = model.hidden_rows(m, self.n_embd)
        end = pos0 + m
        if end > len(self._rows):
            grown = np.zeros((max(2 * len(self._rows), end), self.n_embd), dtype=np.float16)
            grown[:pos0] = self._rows[:pos0]
            self._rows = grown
        self._rows[pos0:end] = rows
        del self.seen[pos0:]
        self.seen.extend(tokens)
        keep = common_prefix(self.entry_tokens, self.seen)
        if keep == len(self.seen):  # the entry after them too (checked against the next history)
            keep = min(self.entries, keep + 1)
        self._keep_entries(keep)
        if end - self.entries > _FLUSH_ROWS:
            # A long prefill: catch up now, chunk by chunk, rather than all at the first draft.
            self._extend(self.seen, end, output=False)

    def truncate(self, n: int) -> None:
        """The target kept its first n positions."""
        del self.seen[n:]
        # Entry n (the token after them) may still hold: checked against the next history.
        self._keep_entries(min(self.entries, n + 1))

    def _keep_entries(self, n: int) -> None:
        if n < self.entries:
            llama_cpp.llama_memory_seq_rm(self._mem, 0, n, -1)
            del self.entry_tokens[n:]

    def _extend(self, tokens: Sequence[int], upto: int, *, output: bool) -> int:
        """Add the entries for positions entries..upto-1 (tokens from `tokens`), in n_batch
        chunks; the batch index of the last one (its logits are kept when `output`)."""
        p, idx = self.entries, -1
        while p < upto:
            end = min(upto, p + self.n_batch)
            # Rows h_{p-1}..h_{end-2} as float32, contiguous for the batch's pointers (a zero
            # row before the first position).
            rows = np.zeros((end - p, self.n_embd), dtype=np.float32)
            lo = max(p - 1, 0)
            rows[lo - (p - 1) :] = self._rows[lo : end - 1]
            base = rows.ctypes.data
            batch = self._batch
            llama_cpp.llama_batch_ext_clear(batch)
            for i in range(end - p):
                idx = llama_cpp.llama_batch_ext_add_token(batch, 0, tokens[p + i])
                self._pos.value = p + i
                llama_cpp.llama_batch_ext_set_pos(batch, idx, ctypes.byref(self._pos))
                row = ctypes.cast(base + i * self.n_embd * 4, ctypes.POINTER(ctypes.c_float))
                embd = llama_cpp.llama_embd(row, 1, self.n_embd)
                llama_cpp.llama_batch_ext_set_embd_token(batch, idx, embd)
            if output and end == upto:
                llama_cpp.llama_batch_ext_set_output_logits(batch, idx, True)
            self._process(p)
            self.entry_tokens.extend(tokens[p:end])
            p = end
        return idx

    def _process(self, keep: int) -> None:
        t0 = time.perf_counter()
        rc = llama_cpp.llama_process(self._ctx, _LLAMA_PROCESS_TYPE_DECODE, self._batch)
        llama_cpp.llama_synchronize(self._ctx)
        self.decode_seconds += time.perf_counter() - t0
        if rc != 0:
            llama_cpp.llama_memory_seq_rm(self._mem, 0, keep, -1)
            del self.entry_tokens[keep:]
            raise GenerationError(f"llama.cpp failed to run the draft heads (code {rc})")

    # ------------------------------------------------------------------ drafting
    def ready_for(self, history: Sequence[int]) -> bool:
        """Whether the head can draft after `history`: it has the target's rows for all but
        the last token (the target holds exactly those)."""
        return self.following and len(self.seen) == len(history) - 1

    def first_step(self, history: Sequence[int]) -> tuple[npt.NDArray[np.float32], int]:
        """Catch up on the target's new rows and the round's last token, in one batch: the
        logits for the first draft token, and how many entries that batch added."""
        # (The last entry is built anew when it exists: its logits were overwritten since.)
        self._keep_entries(min(common_prefix(self.entry_tokens, history), len(history) - 1))
        before = self.entries
        idx = self._extend(history, len(history), output=True)
        return self._logits(idx), len(history) - before

    def next_step(self, token: int, pos: int) -> npt.NDArray[np.float32]:
        """One more draft step: `token` at `pos`, with the head's own hidden row from the step
        before in place of the target's; the logits for the token after it."""
        h = _get_embeddings_nextn_ith(self._ctx, -1)
        if not h:
            raise GenerationError("llama.cpp gave no hidden row from the draft heads")
        # Copied: the pointer is into the output buffer this very decode rewrites.
        ctypes.memmove(self._own.ctypes.data, h, self.n_embd * 4)
        batch = self._batch
        llama_cpp.llama_batch_ext_clear(batch)
        idx = llama_cpp.llama_batch_ext_add_token(batch, 0, token)
        self._pos.value = pos
        llama_cpp.llama_batch_ext_set_pos(batch, idx, ctypes.byref(self._pos))
        row = self._own.ctypes.data_as(ctypes.POINTER(ctypes.c_float))
        llama_cpp.llama_batch_ext_set_embd_token(batch, idx, llama_cpp.llama_embd(row, 1, self.n_embd))
        llama_cpp.llama_batch_ext_set_output_logits(batch, idx, True)
        self._process(self.entries)
        return self._logits(idx)

    def end_draft(self) -> None:
        """Drop the draft steps' entries: built from the head's own rows, not the target's."""
        llama_cpp.llama_memory_seq_rm(self._mem, 0, self.entries, -1)

    def _logits(self, idx: int) -> npt.NDArray[np.float32]:
        address = _get_logits_ith(self._ctx, idx)
        if not address:
            raise GenerationError("llama.cpp gave no logits from the draft heads")
        return np.ctypeslib.as_array((ctypes.c_float * self.n_vocab).from_address(address))
