"""What a model needs in memory beyond its weights, from its GGUF metadata alone.

Used before loading (the catalog's fit estimate) and after (`LoadedModel.kv_cache_bytes`), so
both say the same. A recurrent or hybrid model (recurrence.py) also holds a recurrent state,
and llama.cpp keeps `n_rs_seq` snapshots of it for the architectures it can roll back.
"""

from __future__ import annotations

from ..config import ADAPTIVE_K_MAX
from .gguf_info import GGUFInfo
from .recurrence import SNAPSHOT_ARCHS, state_kind


def _number(info: GGUFInfo, key: str) -> int | None:
    value = info.get(f"{info.architecture}.{key}")
    # Per-layer arrays (a few architectures) are not decoded by read_gguf: fall back.
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def kv_cache_bytes(info: GGUFInfo, n_ctx: int, snapshots: int = ADAPTIVE_K_MAX) -> int:
    """Bytes of a context's sequence memory for `n_ctx` tokens: F16 K+V of the attention
    layers, plus a recurrent model's state and its `snapshots` copies (LoadOptions.rs_snapshots,
    where llama.cpp keeps them). 0 for a model without either."""
    return _attention_bytes(info, n_ctx) + recurrent_state_bytes(info, snapshots)


def _attention_bytes(info: GGUFInfo, n_ctx: int) -> int:
    if state_kind(info.architecture) == "recurrent":
        return 0
    n_layer = _number(info, "block_count")
    n_head = _number(info, "attention.head_count")
    if not n_layer or not n_head:
        return 0
    # A hybrid's head_count_kv is a per-layer array (0 on its recurrent layers) that read_gguf
    # does not decode: every layer is then counted as attention, an estimate on the safe side.
    n_head_kv = _number(info, "attention.head_count_kv") or n_head
    embd = _number(info, "embedding_length") or 0
    head_dim = embd // n_head if embd else 0
    k_len = _number(info, "attention.key_length") or head_dim
    v_len = _number(info, "attention.value_length") or head_dim
    train_ctx = info.context_length
    ctx = min(n_ctx, train_ctx) if train_ctx else n_ctx
    return ctx * n_layer * n_head_kv * (k_len + v_len) * 2


def recurrent_state_bytes(info: GGUFInfo, snapshots: int = ADAPTIVE_K_MAX) -> int:
    """F32 recurrent state of one sequence (llama.cpp's n_embd_r + n_embd_s per layer), times
    1 + snapshots where llama.cpp keeps snapshots; 0 for attention models.

    Mamba-style layers (Mamba, Jamba, Granite 4, Nemotron-H, Qwen3.5's gated delta net...):
    a convolution window and an SSM state; LFM2: a short-convolution window; RWKV: token
    shift and WKV state. Every layer is counted (hybrids' per-layer kinds are arrays that are
    not decoded), which over-estimates a hybrid's by its share of attention layers."""
    arch = info.architecture
    if state_kind(arch) == "attention":
        return 0
    n_layer = _number(info, "block_count") or 0
    n_embd = _number(info, "embedding_length") or 0
    if (l_cache := _number(info, "shortconv.l_cache")) is not None:  # LFM2
        per_layer = n_embd * (l_cache - 1)
    elif (head_size := _number(info, "wkv.head_size")) is not None:  # RWKV
        per_layer = (_number(info, "token_shift_count") or 2) * n_embd + n_embd * head_size
    else:
        d_conv = _number(info, "ssm.conv_kernel") or 0
        d_inner = _number(info, "ssm.inner_size") or 0
        d_state = _number(info, "ssm.state_size") or 0
        n_group = _number(info, "ssm.group_count") or 1
        per_layer = max(0, d_conv - 1) * (d_inner + 2 * n_group * d_state) + d_state * d_inner
    copies = 1 + (snapshots if arch in SNAPSHOT_ARCHS else 0)
    return per_layer * 4 * n_layer * copies
