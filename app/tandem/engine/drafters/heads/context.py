"""A llama.cpp context beside the target, for the drafters that read the target's rows.

The target's MTP heads run in a context of type MTP over the target's own weights; MTP heads in
a file of their own, and the trained drafters (EAGLE-3, DFlash), load their file's weights and
borrow the target's token embeddings and LM head where they have none (`ctx_other`). Each kind
fills batches of entries here (a token, a token with a row as its embedding, or a row alone),
runs them, and reads logits or the extra output rows; a trained drafter also switches on the
target's layer taps (`embeddings_layer_inp`) and reads the target's rows at its layers.

llama.cpp exports the staging calls these need (src/llama-ext.h) without C linkage: they are
bound by their Itanium-mangled names, as hidden_rows.py binds the nextn calls. This is the only
module of the heads that holds llama.cpp bindings: the kinds import it when a head is made, so
the registry (and the catalog that asks it what a file is) loads without llama.cpp.
"""

from __future__ import annotations

import ctypes
import time
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from ...errors import GenerationError, ModelLoadError
from ...llama import hidden_rows, llama_log
from ...llama.hidden_rows import bind
from ...llama.llama_lib import llama_cpp
from ...llama.model import GOVERNOR, LoadedModel, default_threads

_lib = llama_cpp._lib
_p = ctypes.c_void_p

_set_layer_inp = bind(
    "llama_set_embeddings_layer_inp",
    "_Z30llama_set_embeddings_layer_inpP13llama_contextjb",
    None,
    [_p, ctypes.c_uint32, ctypes.c_bool],
)
_get_layer_inp = bind(
    "llama_get_embeddings_layer_inp",
    "_Z30llama_get_embeddings_layer_inpP13llama_contextj",
    _p,
    [_p, ctypes.c_uint32],
)
_target_layer_ids = bind(
    "llama_model_target_layer_ids",
    "_Z28llama_model_target_layer_idsPK11llama_model",
    ctypes.POINTER(ctypes.c_int32),
    [_p],
)
_target_layer_ids_n = bind(
    "llama_model_target_layer_ids_n",
    "_Z30llama_model_target_layer_ids_nPK11llama_model",
    ctypes.c_uint32,
    [_p],
)
_dflash_selector_top_k = bind(
    "llama_model_dflash_selector_top_k",
    "_Z33llama_model_dflash_selector_top_kPK11llama_model",
    ctypes.c_int32,
    [_p],
)
_get_embeddings_nextn = bind(
    "llama_get_embeddings_nextn", "_Z26llama_get_embeddings_nextnP13llama_context", _p, [_p]
)
_get_nextn_ith = hidden_rows.get_embeddings_nextn_ith
_set_embeddings_nextn = hidden_rows.set_embeddings_nextn

_get_logits_ith = _lib["llama_get_logits_ith"]
_get_logits_ith.restype = _p
_get_logits_ith.argtypes = [_p, ctypes.c_int32]

ENCODE = 0  # llama_process_type
DECODE = 1
_CONTEXT_TYPE_MTP = 1  # llama_context_type: a context over a model's MTP blocks


def heads_supported() -> bool:
    """Whether this llama.cpp build can run a model's MTP heads (hidden_rows.py's calls)."""
    return hidden_rows.supported()


def files_supported() -> bool:
    """Whether this llama.cpp build has the calls trained drafters in files of their own need."""
    calls = (
        _set_layer_inp,
        _get_layer_inp,
        _target_layer_ids,
        _target_layer_ids_n,
        _dflash_selector_top_k,
        _get_embeddings_nextn,
        _get_nextn_ith,
        _set_embeddings_nextn,
    )
    return None not in calls and hasattr(llama_cpp, "llama_process")


class HeadContext:
    """One drafter's llama.cpp context beside one target. Not thread-safe (the target's
    generation drives it).

    `path` None: the target's own MTP blocks, over its weights; else the file's weights (`mtp`:
    MTP heads alone, else a trained drafter reading `layers` of the target), or those another
    context of the same file loaded (`weights`: a head for another sequence, heads/batched.py).
    `what` names it in messages ("the draft heads", or the file's name)."""

    def __init__(
        self,
        target: LoadedModel,
        *,
        path: Path | None,
        n_outputs: int,
        what: str,
        mtp: bool = False,
        layers: tuple[int, ...] = (),
        weights: HeadContext | None = None,
    ) -> None:
        self.target = target
        self.what = what
        self.layers = layers
        self._model: Any = None  # the weights it owns (None: it runs the target's)
        self._ctx: Any = None
        self._batch: Any = None
        mark = llama_log.mark()
        if weights is not None:
            model = weights._weights  # (owned by that context: closed after this one)
        elif path is None:
            model = target.model_ptr
        else:
            mparams = llama_cpp.llama_model_default_params()
            mparams.n_gpu_layers = 999 if target.gpu_layers else 0  # beside the target
            mparams.use_mmap = target.options.use_mmap
            mparams.load_mtp = mtp
            model = llama_cpp.llama_model_load_from_file(str(path).encode(), mparams)
            if not model:
                if mtp:
                    raise ModelLoadError(f"llama.cpp could not load the MTP heads in {path.name}")
                raise ModelLoadError(_explain(path.name, "load", mark))
            self._model = model
        self._weights: Any = model  # the llama_model it runs (its own, or the target's)
        try:
            if layers:
                n = int(_target_layer_ids_n(model))
                ids = _target_layer_ids(model)
                read = tuple(int(ids[i]) for i in range(n)) if n and ids else ()
                if read != layers:  # (read from the same header: never expected)
                    raise ModelLoadError(f"llama.cpp reads other target layers from {what} than its header")
            if mtp:
                self.n_embd = int(llama_cpp.llama_model_n_embd_out(model))
            else:
                self.n_embd = int(llama_cpp.llama_model_n_embd(model))
            self.n_embd_target = int(llama_cpp.llama_model_n_embd(target.model_ptr))
            threads = target.options.n_threads or default_threads()
            cparams = llama_cpp.llama_context_default_params()
            if mtp:
                cparams.ctx_type = _CONTEXT_TYPE_MTP
            else:
                cparams.ctx_other = target.ctx  # its missing embeddings and head are the target's
            cparams.n_ctx = target.n_ctx
            cparams.n_batch = target.n_batch
            cparams.n_ubatch = target.n_batch
            cparams.n_seq_max = 1
            cparams.n_outputs_max = n_outputs
            cparams.n_threads = threads
            cparams.n_threads_batch = threads
            cparams.no_perf = True
            cparams.flash_attn_type = target.options.flash_attn_type
            ctx = llama_cpp.llama_init_from_model(model, cparams)
            if not ctx:
                if mtp:
                    raise ModelLoadError(
                        f"llama.cpp could not create a context for {target.path.name}'s draft heads"
                    )
                raise ModelLoadError(_explain(what, "context", mark))
            self._ctx = ctx
            GOVERNOR.attach(ctx, threads)  # (its threads follow the machine with the target's)
            self._batch = llama_cpp.llama_batch_ext_init(ctx)
        except BaseException:
            self.close()
            raise
        self.mem = llama_cpp.llama_get_memory(self._ctx)
        self.n_batch = int(llama_cpp.llama_n_batch(self._ctx))
        self.n_vocab = target.n_vocab
        self._pos = (ctypes.c_int32 * 4)(0, 0, 0, 0)
        self._own = np.zeros((1, self.n_embd), dtype=np.float32)  # a draft step's own row
        self._tapped = False

    def close(self) -> None:
        if self._batch is not None:
            llama_cpp.llama_batch_ext_free(self._batch)
            self._batch = None
        if self._ctx:
            GOVERNOR.detach(self._ctx)
            llama_cpp.llama_free(self._ctx)
            self._ctx = None
        if self._model:
            llama_cpp.llama_model_free(self._model)
            self._model = None

    # ------------------------------------------------------------------ switches
    def selector_top_k(self) -> int:
        """DFlash2's selector: candidates per position (0: it has none)."""
        return int(_dflash_selector_top_k(self._weights))

    def mtp_blocks(self) -> int:
        """How many MTP blocks the weights it runs have."""
        return int(llama_cpp.llama_model_n_layer_nextn(self._weights))

    def extra_rows(self, *, own: bool) -> None:
        """Make its runs also output rows (llama.cpp's nextn embeddings): for the entries that
        output logits only (`own`: a draft step's own hidden row), or for every entry."""
        _set_embeddings_nextn(self._ctx, True, own)

    def attend_both_ways(self, on: bool) -> None:
        """Whether its attention is not causal (a DFlash block attends both ways)."""
        llama_cpp.llama_set_causal_attn(self._ctx, not on)

    # ------------------------------------------------------------------ the target's rows
    def tap(self) -> None:
        """Make the target's decodes yield the rows of this drafter's layers, from now on.

        Switched on once and left on: each switch makes llama.cpp reserve its compute graphs
        again at the next decode (see LoadedModel._greedy_in_graph), and while no generation
        follows them they cost only a copy of a few rows per decode."""
        if not self._tapped:
            for layer in self.layers:
                _set_layer_inp(self.target.ctx, layer, True)
            self._tapped = True

    def target_rows(self, n: int, at: int = 0) -> npt.NDArray[np.float32]:
        """The last target batch's rows at this drafter's layers for its tokens at..at+n-1
        (in the batch's order: llama.cpp puts them back in it): each layer's n_embd values side
        by side, as the drafter's `fc` reads them. A copy (the next decode rewrites them)."""
        width = self.n_embd_target
        out = np.empty((n, len(self.layers) * width), dtype=np.float32)
        for k, layer in enumerate(self.layers):
            address = _get_layer_inp(self.target.ctx, layer)
            if not address:
                raise GenerationError(f"llama.cpp gave no rows of the target's layer {layer}")
            start = address + at * width * 4
            rows = np.ctypeslib.as_array((ctypes.c_float * (n * width)).from_address(start))
            out[:, k * width : (k + 1) * width] = rows.reshape(n, width)
        return out

    # ------------------------------------------------------------------ batches
    def clear(self) -> None:
        llama_cpp.llama_batch_ext_clear(self._batch)

    def add_embd(self, rows: npt.NDArray[np.float32], i: int, pos: int, *, output: bool = False) -> int:
        """An entry made of row i of `rows` (C-contiguous float32, kept alive by the caller
        until the batch runs) at `pos`."""
        width = rows.shape[1]
        ptr = ctypes.cast(rows.ctypes.data + i * width * 4, ctypes.POINTER(ctypes.c_float))
        idx = int(llama_cpp.llama_batch_ext_add_embd(self._batch, 0, llama_cpp.llama_embd(ptr, 1, width)))
        self._check(idx)
        self._set_pos(idx, pos)
        if output:
            llama_cpp.llama_batch_ext_set_output_embd(self._batch, idx, True)
        return idx

    def add_token(
        self,
        token: int,
        pos: int,
        *,
        row: npt.NDArray[np.float32] | None = None,
        i: int = 0,
        output: bool = False,
    ) -> int:
        """An entry of `token` at `pos`, with row i of `row` (C-contiguous float32) as its
        embedding: the target's row the head reads beside the token."""
        idx = int(llama_cpp.llama_batch_ext_add_token(self._batch, 0, token))
        self._check(idx)
        self._set_pos(idx, pos)
        if row is not None:
            width = row.shape[1]
            ptr = ctypes.cast(row.ctypes.data + i * width * 4, ctypes.POINTER(ctypes.c_float))
            embd = llama_cpp.llama_embd(ptr, 1, width)
            if not llama_cpp.llama_batch_ext_set_embd_token(self._batch, idx, embd):
                raise GenerationError(f"llama.cpp refused an entry of {self.what} ({width} values)")
        if output:
            llama_cpp.llama_batch_ext_set_output_logits(self._batch, idx, True)
        return idx

    def _set_pos(self, idx: int, pos: int) -> None:
        # Four values: llama.cpp reads as many as the model has per embedding entry (M-RoPE
        # drafters of Qwen3.5-style targets: the temporal position thrice, then 0), one for a
        # token entry.
        self._pos[0] = self._pos[1] = self._pos[2] = pos
        llama_cpp.llama_batch_ext_set_pos(self._batch, idx, self._pos)

    def _check(self, idx: int) -> None:
        if idx < 0:
            raise GenerationError(f"llama.cpp refused a batch entry for {self.what} (code {idx})")

    def decode(self, keep: int) -> float:
        """Run the batch; the seconds it took. On failure the context's cache keeps its first
        `keep` positions and GenerationError says so."""
        return self._run(DECODE, keep)

    def encode(self, keep: int) -> float:
        """Run the batch through the encoder (EAGLE-3's `fc`): as `decode`."""
        return self._run(ENCODE, keep)

    def _run(self, kind: int, keep: int) -> float:
        t0 = time.perf_counter()
        rc = llama_cpp.llama_process(self._ctx, kind, self._batch)
        llama_cpp.llama_synchronize(self._ctx)
        seconds = time.perf_counter() - t0
        if rc != 0:
            llama_cpp.llama_memory_seq_rm(self.mem, 0, keep, -1)
            raise GenerationError(f"llama.cpp failed to run {self.what} (code {rc})")
        return seconds

    # ------------------------------------------------------------------ outputs
    def logits(self, idx: int) -> npt.NDArray[np.float32]:
        """The logits of batch entry idx of the last run (a view, valid until the next run)."""
        address = _get_logits_ith(self._ctx, idx)
        if not address:
            raise GenerationError(f"llama.cpp gave no logits from {self.what}")
        return np.ctypeslib.as_array((ctypes.c_float * self.n_vocab).from_address(address))

    def hidden(self, n: int, width: int) -> npt.NDArray[np.float32]:
        """The last run's extra output rows (llama.cpp's nextn embeddings), n of them."""
        address = _get_embeddings_nextn(self._ctx)
        if not address:
            raise GenerationError(f"llama.cpp gave no hidden rows from {self.what}")
        return np.ctypeslib.as_array((ctypes.c_float * (n * width)).from_address(address)).reshape(n, width)

    def own_row(self) -> npt.NDArray[np.float32]:
        """The last run's output entry's own hidden row, copied (the pointer is into the
        output buffer the next run rewrites): the next draft step's row, (1, n_embd)."""
        h = _get_nextn_ith(self._ctx, -1)
        if not h:
            raise GenerationError(f"llama.cpp gave no hidden row from {self.what}")
        ctypes.memmove(self._own.ctypes.data, h, self.n_embd * 4)
        return self._own

    def pos_max(self) -> int:
        """The last position in its cache (-1: empty)."""
        return int(llama_cpp.llama_memory_seq_pos_max(self.mem, 0))

    def cut(self, n: int) -> None:
        """Drop the context's cache from position n on."""
        llama_cpp.llama_memory_seq_rm(self.mem, 0, n, -1)


def _explain(name: str, stage: str, mark: int) -> str:
    errors = llama_log.lines_since(mark, llama_log.LEVEL_WARN)
    reasons = [e.split("error loading model:", 1)[1].strip() for e in errors if "error loading model:" in e]
    detail = reasons[-1] if reasons else (errors[-1].strip() if errors else "no reason given")
    what = "load" if stage == "load" else "create a context for"
    return f"llama.cpp could not {what} {name}: {detail}"
