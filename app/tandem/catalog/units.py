"""Sizes for people: "4.92 GB" in, "4.9 GB" out, and parameter counts ("135M", "8.0B").

Decimal units (1 GB = 10^9 bytes) match what the Hugging Face hub and disk tools show, so a
size Tandem prints can be compared with the hub's file listing at a glance.
"""

from __future__ import annotations

import re

_UNITS = {
    "": 1,
    "B": 1,
    "K": 10**3,
    "KB": 10**3,
    "M": 10**6,
    "MB": 10**6,
    "G": 10**9,
    "GB": 10**9,
    "T": 10**12,
    "TB": 10**12,
    "KIB": 2**10,
    "MIB": 2**20,
    "GIB": 2**30,
    "TIB": 2**40,
}
_SIZE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([A-Za-z]*)\s*$")


def format_bytes(n: int | float) -> str:
    """`4.9 GB`, `808 MB`, `12 KB`: three significant digits at most."""
    n = float(n)
    for unit, scale in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if abs(n) >= scale:
            value = n / scale
            return f"{value:.1f} {unit}" if value < 100 else f"{value:.0f} {unit}"
    return f"{n:.0f} B"


def parse_bytes(text: str) -> int:
    """`24G`, `24 GiB`, `16000000000` -> bytes. Raises ValueError with the offending text."""
    m = _SIZE.match(text)
    unit = m.group(2).upper() if m else ""
    if not m or unit not in _UNITS:
        raise ValueError(f"not a size: {text!r} (try 24G, 24GiB or a number of bytes)")
    return int(float(m.group(1)) * _UNITS[unit])


def format_params(n: int) -> str:
    """A parameter count the way model names write it: 135M, 8.0B (? when unknown)."""
    if n >= 1e9:
        return f"{n / 1e9:.1f}B"
    if n >= 1e6:
        return f"{n / 1e6:.0f}M"
    return f"{n / 1e3:.0f}K" if n else "?"
