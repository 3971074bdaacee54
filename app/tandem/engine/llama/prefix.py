"""The longest common prefix of two token sequences: what a cache keeps of a new input, and how
the followers of a model's decodes find where it cut (its draft heads, trained drafters)."""

from __future__ import annotations

from collections.abc import Sequence


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """How many tokens `a` and `b` share from their start."""
    n, top = 0, min(len(a), len(b))
    while n < top and a[n] == b[n]:
        n += 1
    return n
