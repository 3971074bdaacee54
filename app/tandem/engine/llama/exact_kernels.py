"""Exact output's reach into llama.cpp (exact.py says what makes a row exact): a context's
backends, ggml's `use_ref` switch on its CPU backends, the batch-invariant switch on its Vulkan
backends (Tandem's build of llama.cpp: scripts/patches/vulkan-batch-invariant.patch), and the
buffers the weights sit in.

llama.cpp exposes neither the context's backends nor where a weight went, so two C++ accessors
are bound by their Itanium-mangled names (as hidden_rows.py does): llama_context::get_sched and
llama_model::get_tensor; the rest is ggml's C API and the CPU registry's `use_ref` setter.
"""

from __future__ import annotations

import ctypes
from collections.abc import Iterable
from typing import Any

from .llama_lib import llama_cpp

_p = ctypes.c_void_p
_lib: Any = llama_cpp._lib


def _c(name: str, restype: Any, argtypes: list[Any]) -> Any:
    """A binding of our own to a symbol of libllama or the ggml libraries; None when missing."""
    try:
        f = _lib[name]  # (dlsym on libllama's handle also searches the ggml libraries it links)
    except AttributeError:
        return None
    f.restype = restype
    f.argtypes = argtypes
    return f


# (C++ members: `this` is the first argument; Itanium names, so not on Windows: not available)
_get_sched = _c("_ZNK13llama_context9get_schedEv", _p, [_p])
_get_tensor = _c("_ZNK11llama_model10get_tensorEPKc", _p, [_p, ctypes.c_char_p])
_sched_n_backends = _c("ggml_backend_sched_get_n_backends", ctypes.c_int, [_p])
_sched_backend = _c("ggml_backend_sched_get_backend", _p, [_p, ctypes.c_int])
_backend_device = _c("ggml_backend_get_device", _p, [_p])
_backend_name = _c("ggml_backend_name", ctypes.c_char_p, [_p])
_dev_type = _c("ggml_backend_dev_type", ctypes.c_int, [_p])
_dev_reg = _c("ggml_backend_dev_backend_reg", _p, [_p])
_reg_proc = _c("ggml_backend_reg_get_proc_address", _p, [_p, ctypes.c_char_p])
_buffer_type = _c("ggml_backend_buffer_get_type", _p, [_p])
_buft_name = _c("ggml_backend_buft_name", ctypes.c_char_p, [_p])
_SET_USE_REF = ctypes.CFUNCTYPE(None, _p, ctypes.c_bool)
_SET_INVARIANT = _SET_USE_REF  # (same signature: backend, on)
_INVARIANT_PROC = b"ggml_backend_vk_set_batch_invariant"
_DEV_CPU = 0  # enum ggml_backend_dev_type

_BINDINGS: tuple[Any, ...] = (_get_sched, _get_tensor, _sched_n_backends, _sched_backend, _backend_device)
_BINDINGS += (_backend_name, _dev_type, _dev_reg, _reg_proc, _buffer_type, _buft_name)


def available() -> bool:
    """Whether this llama.cpp build has every call exactness needs."""
    return all(f is not None for f in _BINDINGS)


class ReferenceKernels:
    """The backends of one llama_context, and the switches that make a row's result independent
    of its batch: ggml's `use_ref` on the CPU backends, batch-invariant kernels on the Vulkan
    ones (where llama.cpp was built with Tandem's patch)."""

    def __init__(self, ctx: int) -> None:
        self.backends: list[str] = []  # every backend's name ("CPU", "CUDA0", "Vulkan0"...)
        self._cpu: list[tuple[Any, int]] = []  # (use_ref setter, backend) per CPU backend
        self._gpu: list[tuple[Any, int]] = []  # (batch-invariant setter, backend) per GPU backend
        self.invariant_gpus: list[str] = []  # the GPU backends that have the switch
        self.on = False
        sched = _get_sched(ctx)
        for i in range(_sched_n_backends(sched)):
            backend = _sched_backend(sched, i)
            device = _backend_device(backend)
            if device and _dev_type(device) == _DEV_CPU:
                self.backends.append("CPU")
                address = _reg_proc(_dev_reg(device), b"ggml_backend_cpu_set_use_ref")
                if address:
                    self._cpu.append((_SET_USE_REF(address), backend))
                continue
            name = (_backend_name(backend) or b"?").decode()
            self.backends.append(name)
            address = _reg_proc(_dev_reg(device), _INVARIANT_PROC) if device else None
            if address:
                self._gpu.append((_SET_INVARIANT(address), backend))
                self.invariant_gpus.append(name)

    @property
    def cpu_backends(self) -> int:
        return len(self._cpu)

    def set(self, on: bool) -> None:
        """Reference (CPU) and batch-invariant (Vulkan) kernels on or off: read when the next
        graph is computed, so nothing is rebuilt."""
        if on != self.on:
            for setter, backend in (*self._cpu, *self._gpu):
                setter(backend, on)
            self.on = on


def weight_buffers(model: int, names: Iterable[str]) -> set[str]:
    """The buffer types that hold the named tensors of a loaded llama_model ("CPU_Mapped",
    "CPU_REPACK", "CUDA0"...)."""
    found = set()
    for name in names:
        tensor = _get_tensor(model, name.encode())
        if not tensor:
            continue
        # struct ggml_tensor begins { enum ggml_type type; struct ggml_backend_buffer * buffer; }
        buffer = _p.from_address(tensor + ctypes.sizeof(_p)).value
        if buffer:
            found.add((_buft_name(_buffer_type(buffer)) or b"?").decode())
    return found
