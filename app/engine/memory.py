"""What a model needs in memory beyond its weights, from its GGUF metadata alone.

Used before loading (the catalog's fit estimate) and after (`LoadedModel.kv_cache_bytes`), so
both say the same.
"""

from __future__ import annotations

from .gguf_file import GGUFInfo


def kv_cache_bytes(info: GGUFInfo, n_ctx: int) -> int:
    """F16 K+V bytes for `n_ctx` tokens, from metadata (0 for models without attention)."""
    arch = info.architecture

    def number(key: str) -> int | None:
        value = info.get(f"{arch}.{key}")
        # Per-layer arrays (a few architectures) are not decoded by read_gguf: fall back.
        return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None

    n_layer = number("block_count")
    n_head = number("attention.head_count")
    if not n_layer or not n_head:
        return 0
    n_head_kv = number("attention.head_count_kv") or n_head
    embd = number("embedding_length") or 0
    head_dim = embd // n_head if embd else 0
    k_len = number("attention.key_length") or head_dim
    v_len = number("attention.value_length") or head_dim
    train_ctx = info.context_length
    ctx = min(n_ctx, train_ctx) if train_ctx else n_ctx
    return ctx * n_layer * n_head_kv * (k_len + v_len) * 2
