"""One GGUF model loaded through llama.cpp's C API: loading it, and decoding.

`LoadedModel` owns a llama_model, a llama_context and one reusable llama_batch. Its other
concerns are parts of their own: its vocabulary (vocab.py: text and tokens) and the mirror of
its KV cache (kv_mirror.py: which tokens the cache holds, rollback and recurrent checkpoints).
It tells its listeners of every decode and knows no drafter.

Logits are requested only for the rows that need them and returned as a zero-copy numpy view
of llama.cpp's output buffer. The context is created with `n_outputs_max` set to the largest
verification batch, so llama.cpp never allocates a context-sized logits buffer.
"""

from __future__ import annotations

import contextlib
import ctypes
import math
import os
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Literal, Protocol

import numpy as np
import numpy.typing as npt

from ..config import LoadOptions
from ..errors import ContextOverflowError, GenerationError, ModelLoadError
from ..files.gguf_file import GGUFInfo, read_gguf
from ..files.memory import kv_cache_bytes
from . import devices, exact, exact_kernels, hidden_rows, llama_log, rpc, threads
from .kv_mirror import KvMirror
from .llama_lib import llama_cpp
from .vocab import Vocabulary

Outputs = Literal["none", "last", "all"]


class DecodeListener(Protocol):
    """Something kept in step with a model's decodes (the drafters that read the target's rows:
    drafters/heads/): told of every batch, from which position and which tokens; it reads the
    extra outputs it asked for from the model while the batch's outputs are valid."""

    decode_seconds: float  # its own time inside llama.cpp (a generation's clock counts it)

    def set_following(self, on: bool) -> int:
        """Start or stop taking the decodes' extra outputs (a generation that does not use it
        does not pay for them); returns how many of the model's cached tokens it has seen."""

    def on_decode(self, model: LoadedModel, pos0: int, tokens: Sequence[int], at: int = 0) -> None:
        """The model decoded `tokens` at positions pos0..., tokens at..at+len-1 of its batch."""

    def close(self) -> None:
        """Free what it holds over the model's weights (called before the model is freed)."""


# The three calls of the decode loop, bound directly: llama_get_logits returns the buffer's
# address as an int (so a cached numpy view can be checked against it for free).
_lib = llama_cpp._lib
_llama_decode = llama_cpp.llama_decode
_llama_synchronize = llama_cpp.llama_synchronize
_llama_get_logits = _lib["llama_get_logits"]  # a new function object: the bindings' stays as it is
_llama_get_logits.restype = ctypes.c_void_p
_llama_get_logits.argtypes = [ctypes.c_void_p]
_llama_get_sampled_token_ith = llama_cpp.llama_get_sampled_token_ith
_llama_get_sampled_logits_ith = llama_cpp.llama_get_sampled_logits_ith

_backend_lock = threading.Lock()
_backend_ready = False

# Prompt chunks of at least this many tokens tell the thread governor how steps go (smaller
# batches are too short to time against a steady state).
_PREFILL_TIMED = 16

# Every context's CPU threads, as the machine allows (threads.py): one count for the process.
GOVERNOR = threads.ThreadGovernor(lambda ctx, n: llama_cpp.llama_set_n_threads(ctx, n, n))


def ensure_backend() -> None:
    global _backend_ready
    with _backend_lock:
        if not _backend_ready:
            llama_log.install()
            llama_cpp.llama_backend_init()
            _backend_ready = True


def gpu_offload_supported() -> bool:
    """Whether this machine has a GPU llama.cpp can use. Not llama_supports_gpu_offload(): in a
    build with the RPC backend that is true on every machine, and a CPU-only one would then
    lose what only the CPU path does (greedy sampling inside the graph, the CPU memory fit)."""
    ensure_backend()
    return bool(devices.local_gpus())


def default_threads() -> int:
    n = threads.usable_cpus()
    # Decoding is memory-bound: past ~8 threads llama.cpp gets no faster, and on SMT machines
    # half the logical CPUs are the physical cores.
    return max(1, min(8, n if n <= 4 else n // 2))


class LoadedModel(KvMirror, Vocabulary):
    """A model plus context. Not thread-safe: one generation at a time drives it."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        options: LoadOptions | None = None,
        *,
        role: str = "model",
        info: GGUFInfo | None = None,
    ) -> None:
        ensure_backend()
        self.options = opts = options or LoadOptions()
        self.path: Path = Path(path).expanduser()
        self.role = role
        self.info = info or read_gguf(self.path)
        self.notes: list[str] = []
        # A draft whose tokenizer is not its target's: it drafts across tokenizers (pair.py sets
        # it from the tokenizer check; drafters/cross.py).
        self.foreign_tokenizer = False
        self._model: int | None = None
        self._ctx: int | None = None
        self._batch: Any = None  # llama_batch (a ctypes struct)
        # The devices the layers are offloaded to when some are RPC servers (rpc.py), NULL-
        # terminated for llama_model_params; None: llama.cpp's default, the local GPUs.
        self._devices: ctypes.Array[ctypes.c_void_p] | None = None
        offload_to: list[devices.Device] = []
        if opts.rpc_servers:
            handles = rpc.target_devices(opts.rpc_servers)
            self._devices = rpc.device_array(handles)
            offload_to = [devices.device(h) for h in handles]
            self.notes.append(f"{role}: layers offloaded to the RPC servers {', '.join(opts.rpc_servers)}")
        elif opts.n_gpu_layers != 0:
            ensure_backend()
            offload_to = devices.local_gpus()

        want_gpu = opts.n_gpu_layers != 0 and bool(offload_to)
        self.gpu_layers = opts.n_gpu_layers if want_gpu else 0
        try:
            self._load(self.gpu_layers)
        except ModelLoadError as exc:
            # Falling back to the CPU would load a model meant to be spread over several
            # machines on this one alone: say why it failed instead.
            if not want_gpu or self._devices is not None:
                raise
            # Not enough GPU memory (or a driver problem): fall back to the CPU, and say so. With
            # no devices at all: with 0 layers llama.cpp would still put its compute buffers on
            # the GPU that just failed (measured on Vulkan: the retry failed the same way).
            self.close()
            self.gpu_layers = 0
            self._devices = rpc.device_array([])
            self._load(0)
            reason = str(exc).split(". ")[0]  # (its advice is for the GPU that failed)
            self.notes.append(f"{role}: could not load on the GPU ({reason}); running on the CPU instead")
        # Where its layers run (the front-ends say it: the stats line, --json, the panel).
        self.devices: list[devices.Device] = offload_to if self.gpu_layers else []

        self._init_mirror(_has_recurrent_state(self._model))
        self._init_vocabulary()
        # The context of one sequence (with parallel sequences the cache holds n_seq of them).
        self.n_ctx = int(llama_cpp.llama_n_ctx(self._ctx)) // opts.n_seq
        self.n_batch = int(llama_cpp.llama_n_batch(self._ctx))
        # Time spent inside llama.cpp decoding: llama_decode, and until its outputs were read.
        self.decode_seconds = 0.0
        self._t_decode = 0.0
        self._greedy_chain: Any = None  # the attached in-graph greedy sampler (see decode_greedy)
        # In-graph greedy not used for this model: the backend cannot run it, or logits were
        # wanted once (see _greedy_in_graph); numpy's argmax instead.
        self._greedy_refused = False
        self._chains: list[Any] = []  # the chain attached (at most one), freed after the context
        self._logits_address: int | None = None
        self._logits_view: npt.NDArray[np.float32] = np.zeros((0, self.n_vocab), dtype=np.float32)
        self._alloc_batch(max(self.n_batch, opts.max_outputs))
        # Exact output (exact.py): this generation asks for it, so the decodes whose rows are
        # read run ggml's reference kernels (generation.py sets it; prefill stays fast).
        self.exact = False
        self._exact_plan: exact.ExactPlan | None = None
        self._reference: exact_kernels.ReferenceKernels | None = None  # bound with the plan
        # Told of every decode (DecodeListener); attached after loading (pair.py asks each drafter
        # kind whether it follows the target's decodes).
        self.listeners: list[DecodeListener] = []
        self._hidden_rows = False  # decodes also produce hidden rows (want_hidden_rows)

    # ------------------------------------------------------------------ loading
    def _load(self, n_gpu_layers: int) -> None:
        opts = self.options
        mparams = llama_cpp.llama_model_default_params()
        mparams.n_gpu_layers = n_gpu_layers if n_gpu_layers >= 0 else 999
        mparams.use_mmap = opts.use_mmap
        if self._devices is not None:
            mparams.devices = ctypes.addressof(self._devices)
        # The file's own MTP blocks, loaded when asked for and this build can run them (a
        # listener uses them: drafters/heads/mtp.py).
        self.mtp_loaded = opts.load_mtp and self.mtp_layers_in_file > 0 and hidden_rows.supported()
        mparams.load_mtp = self.mtp_loaded
        log_mark = llama_log.mark()
        model = llama_cpp.llama_model_load_from_file(str(self.path).encode(), mparams)
        if not model:
            raise ModelLoadError(self._explain_failure("load", log_mark))
        self._model = model
        cparams = llama_cpp.llama_context_default_params()
        train_ctx = int(llama_cpp.llama_model_n_ctx_train(model))
        cparams.n_ctx = min(opts.n_ctx, train_ctx) if train_ctx > 0 else opts.n_ctx
        cparams.n_batch = opts.n_batch
        cparams.n_ubatch = opts.n_batch
        cparams.n_seq_max = opts.n_seq
        cparams.n_outputs_max = opts.max_outputs
        if opts.n_seq > 1:
            # Parallel sequences (batch.py): one KV cache shared by all, so that a round of every
            # sequence's rows is one micro-batch (with a stream per sequence llama.cpp splits a
            # batch into equal shares per sequence); each has the context asked for.
            cparams.kv_unified = True
            cparams.n_ctx = cparams.n_ctx * opts.n_seq
            cparams.n_outputs_max = min(opts.n_batch, opts.max_outputs * opts.n_seq)
        if _has_recurrent_state(model):
            # Snapshots of the last positions of each batch (llama.cpp clamps this to 0 for the
            # architectures it cannot roll back); with the position before them they must fit
            # in a micro-batch and leave room in it (llama.cpp asserts n_ubatch > n_rs_seq + 1),
            # and a micro-batch is at most the context (a model trained on a tiny one).
            cparams.n_rs_seq = max(0, min(opts.rs_snapshots, min(opts.n_batch, cparams.n_ctx) - 2))
        if self._may_sample_in_graph(n_gpu_layers):
            # llama.cpp's in-graph sampler handles this many rows per sequence (the default, 1,
            # would refuse a verify batch); only then: it makes every step a few percent slower.
            cparams.n_outputs_max_per_seq = opts.max_outputs
        n_threads = opts.n_threads or default_threads()
        self.n_threads = n_threads  # the most CPU threads (the governor may use fewer: threads.py)
        cparams.n_threads = n_threads
        cparams.n_threads_batch = n_threads
        cparams.no_perf = True
        cparams.flash_attn_type = self._flash_attn_type()
        ctx = llama_cpp.llama_init_from_model(model, cparams)
        if not ctx:
            raise ModelLoadError(self._explain_failure("context", log_mark))
        self._ctx = ctx
        self.max_rows = int(cparams.n_outputs_max)  # logits rows one decode may ask for
        GOVERNOR.attach(ctx, n_threads)

    def _flash_attn_type(self) -> int:
        """What llama.cpp is told of flash attention: as asked, but where layers go to RPC
        servers "auto" only for head sizes every backend has kernels for (rpc.py)."""
        requested = self.options.flash_attn_type
        if not self.options.rpc_servers:
            return requested
        chosen, note = rpc.flash_attn_type(requested, self.info.head_sizes)
        if note is not None:
            self.notes.append(f"{self.role}: {note}")
        return chosen

    def _explain_failure(self, stage: str, log_mark: int) -> str:
        errors = llama_log.lines_since(log_mark, llama_log.LEVEL_WARN)
        text = " ".join(errors).lower()
        name = self.path.name
        if "unknown model architecture" in text:
            arch = self.info.architecture
            return (
                f"{name}: this llama.cpp build does not support the {arch!r} architecture. "
                "Update llama-cpp-python (python3 scripts/install.py --rebuild) or pick another model."
            )
        memory_words = (
            "out of memory",
            "failed to allocate",
            "cudamalloc",
            "unable to allocate",
            "cannot allocate memory",
            "mmap failed",
        )
        if any(w in text for w in memory_words):
            where = "GPU memory" if self.gpu_layers else "memory"
            doing = "load the model" if stage == "load" else f"create a {self.options.n_ctx}-token context"
            return (
                f"{name}: not enough {where} to {doing}. "
                "Try a smaller context (--ctx), fewer GPU layers (--gpu-layers), or a smaller model."
            )
        # The most specific line: what llama.cpp's GGUF reader objected to (it logs the reason,
        # then a generic "failed to load model"), else its "error loading model: <reason>".
        gguf = [e.split(":", 1)[1].strip() for e in errors if e.startswith("gguf_") and ":" in e]
        reasons = [
            e.split("error loading model:", 1)[1].strip() for e in errors if "error loading model:" in e
        ]
        if gguf:
            detail = f"its GGUF data is damaged ({gguf[0]})"
        else:
            detail = reasons[-1] if reasons else (errors[-1].strip() if errors else "no reason given")
        what = "load" if stage == "load" else "create a context for"
        return f"llama.cpp could not {what} {name}: {detail}"

    def _alloc_batch(self, capacity: int) -> None:
        self._batch = llama_cpp.llama_batch_init(capacity, 0, 1)
        b = self._batch
        self._batch_cap = capacity
        # numpy views over the batch's C arrays: filling them is one slice assignment each.
        self._tok = np.ctypeslib.as_array(b.token, shape=(capacity,))
        self._pos = np.ctypeslib.as_array(b.pos, shape=(capacity,))
        self._out = np.ctypeslib.as_array(b.logits, shape=(capacity,))
        self._token_ptr, self._pos_ptr = b.token, b.pos  # for a few tokens, cheaper than numpy
        self._out[:] = 0
        self._flags: Outputs = "none"  # what _out holds now: these flags for this many tokens
        self._flags_n = capacity
        np.ctypeslib.as_array(b.n_seq_id, shape=(capacity,))[:] = 1
        for i in range(capacity):  # every token belongs to sequence 0, once and for all
            b.seq_id[i][0] = 0

    def close(self) -> None:
        self._reference = None
        for listener in getattr(self, "listeners", ()):
            listener.close()  # (a context over this model's weights: freed before them)
        self.listeners = []
        if self._batch is not None:
            llama_cpp.llama_batch_free(self._batch)
            self._batch = None
        if self._ctx:
            GOVERNOR.detach(self._ctx)
            llama_cpp.llama_free(self._ctx)
            self._ctx = None
        for chain in getattr(self, "_chains", ()):
            llama_cpp.llama_sampler_free(chain)
        self._chains = []
        self._greedy_chain = None
        if self._model:
            llama_cpp.llama_model_free(self._model)
            self._model = None

    def __del__(self) -> None:  # pragma: no cover - safety net only
        with contextlib.suppress(Exception):
            self.close()

    # ------------------------------------------------------------------ facts
    @property
    def name(self) -> str:
        return self.info.name

    @property
    def model_ptr(self) -> int:
        """The llama_model (for a context of another type over the same weights: the MTP heads)."""
        assert self._model is not None
        return self._model

    @property
    def ctx(self) -> int:
        assert self._ctx is not None
        return self._ctx

    @property
    def mtp_layers_in_file(self) -> int:
        """How many multi-token-prediction blocks the GGUF carries (0: none)."""
        return self.info.mtp_layers

    @property
    def exact_plan(self) -> exact.ExactPlan:
        """Whether this model's output can be exact (every row of a batch as a one-token
        decode computes it), and the largest batch that keeps it: found on first use."""
        if self._exact_plan is None:
            self._exact_plan = self._plan_exactness()
        return self._exact_plan

    def _plan_exactness(self) -> exact.ExactPlan:
        if not exact_kernels.available():
            return exact.ExactPlan(why_not="this llama.cpp build does not let Tandem reach its CPU kernels")
        self._reference = ref = exact_kernels.ReferenceKernels(self.ctx)
        n_layer = int(llama_cpp.llama_model_n_layer(self._model))
        return exact.plan(
            backends=ref.backends,
            cpu_backends=ref.cpu_backends,
            flash_attn_off=self.options.flash_attn_type == 0,
            recurrent=self.recurrent,
            float_matrices=exact.float_matrices(self.info),
            buffers=exact_kernels.weight_buffers(self.model_ptr, (t.name for t in self.info.tensors)),
            invariant_gpus=ref.invariant_gpus,
            # (llama.cpp counts the output layer as one more: n_layer + 1 offloads every one)
            every_layer_on_gpu=self.gpu_layers < 0 or self.gpu_layers > n_layer,
            experts=exact.has_experts(self.info),
        )

    @property
    def size_bytes(self) -> int:
        return int(llama_cpp.llama_model_size(self._model))

    def kv_cache_bytes(self) -> int:
        """Bytes of this context's KV cache (F16 K and V for every layer and position), and of
        a recurrent model's state with the snapshots llama.cpp keeps of it."""
        return kv_cache_bytes(self.info, self.n_ctx, self.snapshots) * self.options.n_seq

    # ------------------------------------------------------------------ decoding
    def decode(
        self,
        tokens: Sequence[int],
        outputs: Outputs = "last",
        *,
        should_stop: Callable[[], bool] | None = None,
    ) -> npt.NDArray[np.float32] | None:
        """Append tokens to the KV cache. Returns logits rows (zero-copy view) as asked.

        "last": one row for the last token; "all": one row per token (at most max_outputs);
        "none": no logits (prompt prefill). The view is valid until the next decode call.
        A long input is decoded in n_batch chunks; `should_stop` is asked between chunks and
        returning True stops there (the cache then holds the chunks done, and None is returned).
        """
        if outputs != "none":
            self._greedy_in_graph(False)  # the logits must be copied out
        if not self._decode(tokens, outputs, should_stop) or outputs == "none":
            return None
        return self._logits(len(tokens) if outputs == "all" else 1)

    def decode_greedy(self, tokens: Sequence[int], outputs: Literal["last", "all"] = "last") -> list[int]:
        """Append tokens; the greedy choice (argmax) of each output row.

        On the CPU llama.cpp's greedy sampler picks it inside the graph (measured: 15 us a step
        less than reading the logits and numpy's argmax), and the winner's logit is checked in
        the row llama.cpp hands over with it. On a GPU the rows are read back and checked: its
        backend sampler (an argmax and a top-k per row, as graph nodes) cost more than the copy
        it saves (H200, 8B shape: a 9-token verify 10.0 ms on the device, 8.7 ms copied;
        docs/results/history.md). Either way a NaN or infinite winner is a GenerationError."""
        if self._greedy_chain is None and not self._greedy_in_graph(True):
            logits = self.decode(tokens, outputs)
            assert logits is not None
            best: list[int] = logits.argmax(axis=1).tolist()
            # NaN and +inf win an argmax: a look at each winner finds them (see non_finite).
            for row, token in enumerate(best):
                if not math.isfinite(logits[row, token]):
                    raise self.non_finite(len(self.cached) - len(best) + row)
            return best
        self._decode(tokens, outputs, None)
        ctx = self._ctx
        n = len(tokens) if outputs == "all" else 1
        first = 0 if outputs == "all" else -1
        best = [_llama_get_sampled_token_ith(ctx, first)]
        # The first getter waited for the computation (as llama_synchronize would): llama.cpp's
        # time ends here; the rest is reading. (Inlined: this runs once a token.)
        self.decode_seconds += time.perf_counter() - self._t_decode
        tops = [_llama_get_sampled_logits_ith(ctx, first)]
        for i in range(1, n):
            best.append(_llama_get_sampled_token_ith(ctx, i))
            tops.append(_llama_get_sampled_logits_ith(ctx, i))
        for row in range(n):
            token, top = best[row], tops[row]
            if not top:
                raise GenerationError(f"llama.cpp's greedy sampler gave no logits on the {self.role}")
            # (The row's winner: an argmax skips NaN, so a NaN row's first entry comes back.)
            if token < 0 or not math.isfinite(top[token]):
                raise self.non_finite(len(self.cached) - n + row)
        return best

    def _may_sample_in_graph(self, n_gpu_layers: int) -> bool:
        # (Parallel sequences read their rows from the logits: the sampler is per sequence.)
        return self.options.greedy_in_graph and n_gpu_layers == 0 and self.options.n_seq == 1

    def use_reference_kernels(self, on: bool) -> None:
        """ggml's reference kernels for the next decodes, or not (exact output for a caller
        driving the context itself: batch.py); a no-op where exactness is not possible."""
        if self.exact_plan.possible and self._reference is not None:
            self._reference.set(on)

    @property
    def device_label(self) -> str:
        """Where the layers run: "CPU", "CUDA0 (NVIDIA H100 80GB HBM3)", "Vulkan0 (llvmpipe…)",
        "RPC0 (host:port) + CUDA0 (…)"; "12 of 28 layers on …" when only some are offloaded."""
        if not self.devices:
            return "CPU"
        where = " + ".join(d.label for d in self.devices)
        n_layer = int(llama_cpp.llama_model_n_layer(self._model)) if self._model else 0
        if 0 < self.gpu_layers < n_layer:
            return f"{self.gpu_layers} of {n_layer} layers on {where}, the rest on the CPU"
        return where

    def non_finite(self, position: int) -> GenerationError:
        """The error for a row of logits holding NaN or infinity at `position`."""
        where = "on the GPU: the backend likely overflowed (try --gpu-layers 0, or another quantization)"
        return GenerationError(
            f"{self.path.name} (the {self.role}) produced NaN or infinite logits at position {position}, "
            + (where if self.gpu_layers else "on the CPU: its weights are likely damaged (try another file)")
        )

    def _greedy_in_graph(self, on: bool) -> bool:
        """Switch llama.cpp's in-graph greedy sampler on or off; whether it is on.

        Only for a model on the CPU (see decode_greedy; on Mesa's lavapipe, attaching or
        detaching a sampler after a context has decoded also crashed the driver).

        Switched off for good once logits are wanted (a sampled answer, a caller of decode):
        each switch makes llama.cpp rebuild its graphs and reallocate its compute buffers at the
        next decode (a session switching every answer grew by 8-21 MiB in 180 answers, held by
        the allocator), and a chain may be attached only once (llama.cpp asserts), so
        switching back would take a new chain each time. The one chain is freed with the
        context (a graph llama.cpp reserved may still point at it until then)."""
        if on == (self._greedy_chain is not None):
            return on
        if on:
            if self._greedy_refused or not self._may_sample_in_graph(self.gpu_layers):
                return False
            chain = llama_cpp.llama_sampler_chain_init(llama_cpp.llama_sampler_chain_default_params())
            llama_cpp.llama_sampler_chain_add(chain, llama_cpp.llama_sampler_init_greedy())
            if not llama_cpp.llama_set_sampler(self._ctx, 0, chain):
                llama_cpp.llama_sampler_free(chain)  # never attached: safe to free now
                self._greedy_refused = True
                return False
            self._greedy_chain = chain
            self._chains.append(chain)
            return True
        llama_cpp.llama_set_sampler(self._ctx, 0, None)
        self._greedy_chain = None
        self._greedy_refused = True  # for good: see above
        return False

    def _decode(
        self, tokens: Sequence[int], outputs: Outputs, should_stop: Callable[[], bool] | None
    ) -> bool:
        """Decode `tokens` in n_batch chunks; False if `should_stop` stopped it between chunks."""
        n = len(tokens)
        if n == 0:
            return False
        start = len(self.cached)
        if start + n > self.n_ctx:
            raise ContextOverflowError(
                f"the {self.role}'s context is full ({self.n_ctx} tokens): start a new chat, "
                "or use a larger context (--ctx)"
            )
        if outputs == "all" and n > self.options.max_outputs:
            raise ValueError(f"asked for {n} logits rows, the context allows {self.options.max_outputs}")
        ref = self._reference
        if ref is not None and (self.exact or ref.on):
            ref.set(self.exact and outputs != "none")  # (a prefill keeps the fast kernels)
        step = self.n_batch
        b = self._batch
        for chunk_start in range(0, n, step):
            if chunk_start and should_stop is not None and should_stop():
                return False
            chunk = tokens if n <= step else tokens[chunk_start : chunk_start + step]
            m = len(chunk)
            pos0 = start + chunk_start
            # Fill the batch. This runs once a round (a draft step, a verify batch), so it is
            # written for few tokens: element by element (numpy's per-call overhead would cost
            # more), and the output flags only rewritten when they change.
            if m <= 8:
                token, pos = self._token_ptr, self._pos_ptr
                for i, t in enumerate(chunk):
                    token[i] = t
                    pos[i] = pos0 + i
            else:
                self._tok[:m] = chunk
                self._pos[:m] = np.arange(pos0, pos0 + m, dtype=np.int32)
            flags = outputs if chunk_start + m == n or outputs == "all" else "none"
            if flags != self._flags or m != self._flags_n:
                self._out[:m] = 1 if flags == "all" else 0
                if flags == "last":
                    self._out[m - 1] = 1
                self._flags, self._flags_n = flags, m
            b.n_tokens = m
            if m >= _PREFILL_TIMED:  # a prompt's chunk: cores a neighbour holds are left to it
                GOVERNOR.before_prompt()
            t0 = time.perf_counter()
            rc = _llama_decode(self._ctx, b)
            if flags == "none" or rc != 0:
                _llama_synchronize(self._ctx)
                seconds = time.perf_counter() - t0
                self.decode_seconds += seconds
                if rc == 0 and m >= _PREFILL_TIMED:  # a prompt's chunk: the threads follow the machine
                    GOVERNOR.observe((self.role, m), seconds)
            else:
                # The outputs are read next, and llama.cpp's getters synchronize first: the
                # reader adds the time once it has them (see _outputs_read).
                self._t_decode = t0
            if rc != 0:
                self._resync_after_failure()
                if rc == 1:
                    raise ContextOverflowError(
                        f"the {self.role}'s KV cache has no room for {m} more tokens: "
                        "start a new chat or use a larger context (--ctx)"
                    )
                raise GenerationError(f"llama.cpp failed to decode on the {self.role} (code {rc})")
            self.cached.extend(chunk)
            for listener in self.listeners:
                listener.on_decode(self, pos0, chunk)
            if self.recurrent:
                # Snapshots exist for the states after this batch's tokens but its last.
                self._rollback_room = min(self.snapshots, m - 1)
        return True

    def want_hidden_rows(self, on: bool) -> None:
        """Whether decodes also produce each token's hidden row, for a listener to read
        (`hidden_rows`) when it is told of the batch; off costs nothing."""
        if on != self._hidden_rows:
            hidden_rows.switch(self.ctx, on)
            self._hidden_rows = on

    def hidden_rows(self, n: int, n_embd: int, at: int = 0) -> npt.NDArray[np.float32]:
        """The last batch's hidden rows of its tokens at..at+n-1 (a view valid until the next
        decode)."""
        return hidden_rows.rows(self.ctx, n, n_embd, at)

    def _outputs_read(self) -> None:
        """The last batch's time inside llama.cpp ends: its first output getter has returned
        (llama.cpp's getters wait for the computation, as llama_synchronize would)."""
        self.decode_seconds += time.perf_counter() - self._t_decode

    def output_rows(self, rows: int) -> npt.NDArray[np.float32]:
        """The first `rows` rows of llama.cpp's logits buffer, without copying (its getter waits
        for the computation). The buffer is allocated once for `max_rows` rows, so one numpy view
        over it serves every decode (building a view costs tens of microseconds: it is rebuilt
        only if the buffer moves); valid until the next decode."""
        address = _llama_get_logits(self._ctx)
        if address != self._logits_address:
            size = self.max_rows * self.n_vocab
            buffer = (ctypes.c_float * size).from_address(address)
            self._logits_view = np.ctypeslib.as_array(buffer).reshape(self.max_rows, self.n_vocab)
            self._logits_address = address
        return self._logits_view[:rows]

    def _logits(self, rows: int) -> npt.NDArray[np.float32]:
        view = self.output_rows(rows)
        self._outputs_read()  # its getter waited for the computation (as llama_synchronize would)
        return view


def _has_recurrent_state(model: object) -> bool:
    """Whether llama.cpp says the model holds a recurrent state (recurrent or hybrid)."""
    return bool(llama_cpp.llama_model_is_recurrent(model) or llama_cpp.llama_model_is_hybrid(model))
