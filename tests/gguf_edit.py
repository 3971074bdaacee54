"""A GGUF with some metadata changed: the header rewritten byte by byte, the tensors copied.

The fuzz tests need hundreds of files that differ from a good one in one value (a head count of
0, a NaN epsilon, a token text twice); writing each through `gguf.GGUFWriter` would re-encode a
49k-token vocabulary every time. This walks the key/value section, replaces or drops the keys
asked for, and copies the tensor table and data after it (their offsets are relative to the
aligned start of the data, so only the padding before it changes): milliseconds a file.
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# GGUF value types (gguf.h).
U8, I8, U16, I16, U32, I32, F32, BOOL, STR, ARR, U64, I64, F64 = range(13)
_FORMATS = {U8: "<B", I8: "<b", U16: "<H", I16: "<h", U32: "<I", I32: "<i", F32: "<f", BOOL: "<?"}
_FORMATS |= {U64: "<Q", I64: "<q", F64: "<d"}


@dataclass(frozen=True)
class Typed:
    """A value with its GGUF type given (an array: `vtype` is the items' type)."""

    vtype: int
    value: Any
    array: bool = False


def _infer(value: Any) -> Typed:
    if isinstance(value, Typed):
        return value
    if isinstance(value, bool):
        return Typed(BOOL, value)
    if isinstance(value, int):
        return Typed(I32 if value < 0 else U32, value) if -(1 << 31) <= value < 1 << 32 else Typed(I64, value)
    if isinstance(value, float):
        return Typed(F32, value)
    if isinstance(value, str):
        return Typed(STR, value)
    items = list(value)
    item = _infer(items[0]).vtype if items else I32
    if item == U32 and any(v < 0 for v in items):
        item = I32
    return Typed(item, items, array=True)


def _scalar(vtype: int, value: Any) -> bytes:
    if vtype == STR:
        data = value.encode("utf-8") if isinstance(value, str) else bytes(value)
        return struct.pack("<Q", len(data)) + data
    if vtype == F32 and isinstance(value, float) and math.isnan(value):
        return struct.pack("<I", 0x7FC00000)
    return struct.pack(_FORMATS[vtype], value)


def encode(key: str, value: Any) -> bytes:
    """One key/value pair as GGUF writes it."""
    t = _infer(value)
    out = _scalar(STR, key)
    if t.array:
        out += struct.pack("<IIQ", ARR, t.vtype, len(t.value))
        return out + b"".join(_scalar(t.vtype, v) for v in t.value)
    return out + struct.pack("<I", t.vtype) + _scalar(t.vtype, t.value)


class _Walker:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def take(self, fmt: str) -> Any:
        (value,) = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += struct.calcsize(fmt)
        return value

    def string(self) -> bytes:
        n = self.take("<Q")
        s = self.data[self.pos : self.pos + n]
        self.pos += n
        return s

    def value(self, vtype: int) -> Any:
        if vtype == STR:
            return self.string()
        if vtype == ARR:
            item, count = self.take("<I"), self.take("<Q")
            if item in (STR, ARR):
                return [self.value(item) for _ in range(count)]
            return self._numbers(item, count)
        return self.take(_FORMATS[vtype])

    def _numbers(self, item: int, count: int) -> list[Any]:
        fmt = _FORMATS[item]
        size = struct.calcsize(fmt)
        values = list(struct.unpack_from(f"<{count}{fmt[1]}", self.data, self.pos))
        self.pos += size * count
        return values


def tokens_of(path: Path) -> list[bytes]:
    """The file's token texts, to edit (give them back as `Typed(STR, tokens, array=True)`)."""
    tokens = read_metadata(path)["tokenizer.ggml.tokens"]
    assert isinstance(tokens, list)
    return tokens


def read_metadata(path: Path) -> dict[str, Any]:
    """The file's metadata (strings as bytes, arrays as lists): for tests that derive a value."""
    w = _Walker(path.read_bytes())
    w.pos = 16
    n_kv = w.take("<Q")
    out: dict[str, Any] = {}
    for _ in range(n_kv):
        key = w.string().decode()
        out[key] = w.value(w.take("<I"))
    return out


def with_metadata(src: Path, dest: Path, changes: dict[str, Any]) -> Path:
    """A copy of `src` at `dest` whose metadata has `changes`: a key set to a value (its type
    inferred: int u32 or i32, float f32, bool, str, list an array; or `Typed`), or removed
    (None). New keys go at the end."""
    data = src.read_bytes()
    w = _Walker(data)
    magic, version, n_tensors, n_kv = struct.unpack_from("<4sIQQ", data, 0)
    assert magic == b"GGUF", src
    w.pos = 24
    pairs: list[bytes] = []
    alignment = 32
    seen: set[str] = set()
    for _ in range(n_kv):
        start = w.pos
        key = w.string().decode()
        vtype = w.take("<I")
        value = w.value(vtype)
        seen.add(key)
        if key == "general.alignment":
            alignment = value
        if key in changes:
            if changes[key] is not None:
                pairs.append(encode(key, changes[key]))
        else:
            pairs.append(data[start : w.pos])
    pairs += [encode(k, v) for k, v in changes.items() if k not in seen and v is not None]
    infos_start = w.pos
    for _ in range(n_tensors):
        w.string()
        n_dims = w.take("<I")
        w.pos += 8 * n_dims + 4 + 8
    infos = data[infos_start : w.pos]
    data_start = -(-w.pos // alignment) * alignment
    head = struct.pack("<4sIQQ", magic, version, n_tensors, len(pairs)) + b"".join(pairs) + infos
    pad = -len(head) % alignment
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_bytes(head + b"\0" * pad + data[data_start:])
    return dest
