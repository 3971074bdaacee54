"""The compute devices llama.cpp sees (ggml's backend registry): which are GPUs, their names,
their memory. One place for these bindings: model loading (which devices hold the layers), the
memory fit (what a GPU has free) and the RPC backend (a target spread over other machines) ask
here.

A device is a GPU to Tandem when ggml says so (`GGML_BACKEND_DEVICE_TYPE_GPU`, else integrated
GPUs): CUDA, Metal, ROCm, Vulkan (Mesa's CPU driver lavapipe too, when ggml is told to use it:
the GPU lane of the tests). RPC devices are never local GPUs (they are registered by hand, for
one target only: rpc.py).

The symbols are looked up through llama-cpp-python's handle on libllama: dlsym on that handle
also searches the libraries it links (libggml, libggml-base), so no second copy is loaded.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import Any

from .llama_lib import llama_cpp

DEV_CPU = 0  # enum ggml_backend_dev_type: CPU 0, GPU 1, IGPU 2, ACCEL 3, META 4
DEV_GPU = 1
DEV_IGPU = 2

_lib: Any = llama_cpp._lib
_p = ctypes.c_void_p


def fn(name: str, restype: Any, argtypes: list[Any]) -> Any:
    """A binding of our own to a ggml symbol (a new function object: the bindings' own, where
    llama-cpp-python has one, stay as they are)."""
    f = _lib[name]
    f.restype = restype
    f.argtypes = argtypes
    return f


_dev_count = fn("ggml_backend_dev_count", ctypes.c_size_t, [])
_dev_get = fn("ggml_backend_dev_get", _p, [ctypes.c_size_t])
_dev_type = fn("ggml_backend_dev_type", ctypes.c_int, [_p])
_dev_name = fn("ggml_backend_dev_name", ctypes.c_char_p, [_p])
_dev_description = fn("ggml_backend_dev_description", ctypes.c_char_p, [_p])
_dev_memory = fn(
    "ggml_backend_dev_memory", None, [_p, ctypes.POINTER(ctypes.c_size_t), ctypes.POINTER(ctypes.c_size_t)]
)
_dev_reg = fn("ggml_backend_dev_backend_reg", _p, [_p])
reg_name = fn("ggml_backend_reg_name", ctypes.c_char_p, [_p])


@dataclass(frozen=True)
class Device:
    """A device as ggml describes it: "CUDA0", "NVIDIA H100 80GB HBM3"; "Vulkan0", "llvmpipe…"."""

    handle: int
    name: str
    description: str
    backend: str  # the backend registry's name: "CUDA", "Vulkan", "Metal", "RPC", "CPU"...

    @property
    def label(self) -> str:
        """How the front-ends name it: "Vulkan0 (llvmpipe (LLVM 15.0.6, 256 bits))"."""
        if not self.description or self.description == self.name:
            return self.name
        return f"{self.name} ({self.description})"

    def memory(self) -> tuple[int, int]:
        """(free, total) bytes as the backend reports them (CUDA asks the driver; Vulkan reads
        the memory heaps, their budget where the driver has one)."""
        free, total = ctypes.c_size_t(0), ctypes.c_size_t(0)
        _dev_memory(self.handle, ctypes.byref(free), ctypes.byref(total))
        return int(free.value), int(total.value)


def _text(raw: bytes | None) -> str:
    return (raw or b"").decode("utf-8", "replace").strip()


def device(handle: int) -> Device:
    return Device(
        handle, _text(_dev_name(handle)), _text(_dev_description(handle)), _text(reg_name(_dev_reg(handle)))
    )


def local_gpus() -> list[Device]:
    """This machine's GPUs as llama.cpp picks them by default: discrete GPUs, else integrated
    ones; never an RPC device (those are only ever in the registry when registered by hand)."""
    gpus: list[Device] = []
    igpus: list[Device] = []
    for i in range(_dev_count()):
        handle = _dev_get(i)
        if _text(reg_name(_dev_reg(handle))) == "RPC":
            continue
        kind = _dev_type(handle)
        if kind == DEV_GPU:
            gpus.append(device(handle))
        elif kind == DEV_IGPU:
            igpus.append(device(handle))
    return gpus or igpus


def gpu_memory() -> tuple[int, int, str] | None:
    """(free, total, description) summed over the local GPUs (llama.cpp spreads layers over all
    of them), or None without one, or when the backend reports no memory."""
    gpus = local_gpus()
    sizes = [g.memory() for g in gpus]
    free, total = sum(s[0] for s in sizes), sum(s[1] for s in sizes)
    if not gpus or total <= 0:
        return None
    names = gpus[0].label if len(gpus) == 1 else f"{len(gpus)}× {gpus[0].label}"
    return free, total, names
