"""A decode's extra output: each token's hidden row (the trunk's last state before the LM
head), which llama.cpp produces when `embeddings_nextn` is on. Listeners of a model's decodes
(model.py) may ask for it; the target's MTP heads (drafters/heads/mtp.py) are fed from it.

llama.cpp exports these calls from its staging header without C linkage, so they are bound by
their Itanium-mangled names on Linux/macOS when the C names are missing.
"""

from __future__ import annotations

import ctypes
from typing import Any

import numpy as np
import numpy.typing as npt

from ..errors import GenerationError
from .llama_lib import llama_cpp

_lib = llama_cpp._lib
_p = ctypes.c_void_p


def bind(name: str, mangled: str, restype: Any, argtypes: list[Any]) -> Any:
    """The C symbol, or its C++ (Itanium ABI) name; None when this build has neither."""
    for symbol in (name, mangled):
        try:
            f = _lib[symbol]  # a new function object: the bindings' own stay as they are
        except AttributeError:
            continue
        f.restype = restype
        f.argtypes = argtypes
        return f
    return None


set_embeddings_nextn = bind(
    "llama_set_embeddings_nextn",
    "_Z26llama_set_embeddings_nextnP13llama_contextbb",
    None,
    [_p, ctypes.c_bool, ctypes.c_bool],
)
_get_embeddings_nextn = bind(
    "llama_get_embeddings_nextn", "_Z26llama_get_embeddings_nextnP13llama_context", _p, [_p]
)
get_embeddings_nextn_ith = bind(
    "llama_get_embeddings_nextn_ith",
    "_Z30llama_get_embeddings_nextn_ithP13llama_contexti",
    _p,
    [_p, ctypes.c_int32],
)


def supported() -> bool:
    """Whether this llama.cpp build can produce hidden rows and run a model's MTP blocks (the
    staging calls are exported)."""
    return None not in (set_embeddings_nextn, _get_embeddings_nextn, get_embeddings_nextn_ith) and hasattr(
        llama_cpp, "llama_process"
    )


def switch(ctx: int, on: bool) -> None:
    """Whether a context's decodes also produce each token's hidden row."""
    set_embeddings_nextn(ctx, on, False)


def rows(ctx: int, n: int, n_embd: int, at: int = 0) -> npt.NDArray[np.float32]:
    """The last decode's hidden rows of its tokens at..at+n-1 (llama.cpp hands them back in the
    batch's order, whatever order its micro-batches ran in; a view, valid until the next
    decode)."""
    address = _get_embeddings_nextn(ctx)
    if not address:
        raise GenerationError("llama.cpp gave no hidden rows for the draft heads")
    start = address + at * n_embd * 4
    return np.ctypeslib.as_array((ctypes.c_float * (n * n_embd)).from_address(start)).reshape(n, n_embd)
