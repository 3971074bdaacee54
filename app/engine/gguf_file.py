"""Read a GGUF file's header and metadata without loading its weights.

llama.cpp reports a bad file only after it starts loading, in log lines, and a truncated file
can fail late or with a vague message. Reading the header ourselves lets Tandem say exactly
what is wrong ("not a GGUF file", "truncated: 37% of the tensor data is missing") and compare
two tokenizers before any weights are touched.

Only the key/value metadata and the tensor table are parsed; tensor data is never read. Large
arrays the engine does not need (BPE merges, token scores) are skipped without decoding.
"""

from __future__ import annotations

import os
import struct
from array import array
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from .errors import ModelFileError

GGUF_MAGIC = b"GGUF"
DEFAULT_ALIGNMENT = 32

# GGUF metadata value types (gguf.h: enum gguf_type).
_U8, _I8, _U16, _I16, _U32, _I32, _F32, _BOOL, _STR, _ARR, _U64, _I64, _F64 = range(13)
_SCALAR = {
    _U8: ("<B", 1),
    _I8: ("<b", 1),
    _U16: ("<H", 2),
    _I16: ("<h", 2),
    _U32: ("<I", 4),
    _I32: ("<i", 4),
    _F32: ("<f", 4),
    _BOOL: ("<?", 1),
    _U64: ("<Q", 8),
    _I64: ("<q", 8),
    _F64: ("<d", 8),
}

# ggml tensor types: id -> (name, elements per block, bytes per block), from ggml.h/ggml-common.h.
GGML_TYPES: dict[int, tuple[str, int, int]] = {
    0: ("F32", 1, 4),
    1: ("F16", 1, 2),
    2: ("Q4_0", 32, 18),
    3: ("Q4_1", 32, 20),
    6: ("Q5_0", 32, 22),
    7: ("Q5_1", 32, 24),
    8: ("Q8_0", 32, 34),
    9: ("Q8_1", 32, 36),
    10: ("Q2_K", 256, 84),
    11: ("Q3_K", 256, 110),
    12: ("Q4_K", 256, 144),
    13: ("Q5_K", 256, 176),
    14: ("Q6_K", 256, 210),
    15: ("Q8_K", 256, 292),
    16: ("IQ2_XXS", 256, 66),
    17: ("IQ2_XS", 256, 74),
    18: ("IQ3_XXS", 256, 98),
    19: ("IQ1_S", 256, 50),
    20: ("IQ4_NL", 32, 18),
    21: ("IQ3_S", 256, 110),
    22: ("IQ2_S", 256, 82),
    23: ("IQ4_XS", 256, 136),
    24: ("I8", 1, 1),
    25: ("I16", 1, 2),
    26: ("I32", 1, 4),
    27: ("I64", 1, 8),
    28: ("F64", 1, 8),
    29: ("IQ1_M", 256, 56),
    30: ("BF16", 1, 2),
    34: ("TQ1_0", 256, 54),
    35: ("TQ2_0", 256, 66),
    39: ("MXFP4", 32, 17),
    40: ("NVFP4", 64, 36),
    41: ("Q1_0", 128, 18),
    42: ("Q2_0", 64, 18),
}

# general.file_type (llama_ftype) -> the name people use for the quantization.
FILE_TYPES = {
    0: "F32",
    1: "F16",
    2: "Q4_0",
    3: "Q4_1",
    7: "Q8_0",
    8: "Q5_0",
    9: "Q5_1",
    10: "Q2_K",
    11: "Q3_K_S",
    12: "Q3_K_M",
    13: "Q3_K_L",
    14: "Q4_K_S",
    15: "Q4_K_M",
    16: "Q5_K_S",
    17: "Q5_K_M",
    18: "Q6_K",
    19: "IQ2_XXS",
    20: "IQ2_XS",
    21: "Q2_K_S",
    22: "IQ3_XS",
    23: "IQ3_XXS",
    24: "IQ1_S",
    25: "IQ4_NL",
    26: "IQ3_S",
    27: "IQ3_M",
    28: "IQ2_S",
    29: "IQ2_M",
    30: "IQ4_XS",
    31: "IQ1_M",
    32: "BF16",
    36: "TQ1_0",
    37: "TQ2_0",
    38: "MXFP4_MOE",
}

# Arrays kept; every other array is skipped (merges alone can be 150k strings).
_TOKENS_KEY = "tokenizer.ggml.tokens"
_DECODED_ARRAYS = {_TOKENS_KEY}


class TokenTable(Sequence[str]):
    """The vocabulary as the raw GGUF string array plus an offset per token.

    A 150k-token vocabulary as Python strings costs ~10 MB; this costs its file bytes plus
    8 bytes a token, and comparing two vocabularies is one bytes comparison.
    """

    def __init__(self, raw: bytes, offsets: array[int]) -> None:
        self._raw = raw
        self._offsets = offsets  # start of token i's length prefix; one extra at the end

    def __len__(self) -> int:
        return len(self._offsets) - 1

    def __getitem__(self, i: int) -> str:  # type: ignore[override]
        if not -len(self) <= i < len(self):
            raise IndexError(i)
        i %= len(self)
        start = self._offsets[i] + 8  # skip the u64 length
        return self._raw[start : self._offsets[i + 1]].decode("utf-8", errors="replace")

    def __iter__(self) -> Iterator[str]:
        return (self[i] for i in range(len(self)))

    def span(self, start: int, stop: int) -> bytes:
        """The raw encoding of tokens [start, stop): equal spans mean equal token texts."""
        return self._raw[self._offsets[start] : self._offsets[stop]]


@dataclass(frozen=True)
class TensorInfo:
    name: str
    shape: tuple[int, ...]
    ggml_type: int
    offset: int  # relative to the start of the data section

    @property
    def n_bytes(self) -> int | None:
        """Size of the tensor's data, or None for a type this reader does not know."""
        info = GGML_TYPES.get(self.ggml_type)
        if info is None:
            return None
        _, block, size = info
        n = 1
        for d in self.shape:
            n *= d
        return n // block * size


@dataclass
class GGUFInfo:
    path: Path
    version: int
    file_size: int
    metadata: dict[str, Any]
    tensors: list[TensorInfo] = field(default_factory=list)
    data_offset: int = 0

    # --- convenience accessors -------------------------------------------------------------
    def get(self, key: str, default: Any = None) -> Any:
        return self.metadata.get(key, default)

    @property
    def architecture(self) -> str:
        return str(self.get("general.architecture", "unknown"))

    @property
    def name(self) -> str:
        return str(self.get("general.name") or self.path.stem)

    @property
    def tokens(self) -> TokenTable:
        tokens = self.get(_TOKENS_KEY)
        return tokens if isinstance(tokens, TokenTable) else TokenTable(b"", array("Q", [0]))

    @property
    def vocab_type(self) -> str:
        return str(self.get("tokenizer.ggml.model", "none"))

    @property
    def chat_template(self) -> str | None:
        value = self.get("tokenizer.chat_template")
        return str(value) if value else None

    @property
    def context_length(self) -> int | None:
        value = self.get(f"{self.architecture}.context_length")
        return int(value) if value is not None else None

    @property
    def quantization(self) -> str:
        ftype = self.get("general.file_type")
        if ftype is not None and int(ftype) in FILE_TYPES:
            return FILE_TYPES[int(ftype)]
        # Older files lack general.file_type: name the most common weight type instead.
        counts: dict[str, int] = {}
        for t in self.tensors:
            if len(t.shape) >= 2:
                name = GGML_TYPES.get(t.ggml_type, (f"type{t.ggml_type}", 1, 1))[0]
                counts[name] = counts.get(name, 0) + 1
        return max(counts, key=lambda k: counts[k]) if counts else "unknown"

    @property
    def n_params(self) -> int:
        total = 0
        for t in self.tensors:
            n = 1
            for d in t.shape:
                n *= d
            total += n
        return total

    @property
    def split_count(self) -> int:
        return int(self.get("split.count", 1) or 1)

    def without_vocab(self) -> GGUFInfo:
        """A copy without the decoded token list (megabytes of Python strings) once the
        tokenizer comparison is done."""
        meta = {k: v for k, v in self.metadata.items() if k not in _DECODED_ARRAYS}
        return GGUFInfo(self.path, self.version, self.file_size, meta, self.tensors, self.data_offset)

    def missing_data_bytes(self) -> int:
        """How many bytes of tensor data lie beyond the end of the file (0 if complete)."""
        end = self.data_offset
        for t in self.tensors:
            size = t.n_bytes
            if size is not None:
                end = max(end, self.data_offset + t.offset + size)
        return max(0, end - self.file_size)

    def data_size(self) -> int:
        """Bytes of tensor data the header promises in this file."""
        end = 0
        for t in self.tensors:
            size = t.n_bytes
            if size is not None:
                end = max(end, t.offset + size)
        return end


class _Reader:
    """Reads the header with ordinary buffered reads, only as far as parsing goes: the header
    is kilobytes to a few megabytes, the weights behind it gigabytes we never touch."""

    def __init__(self, fh: BinaryIO, path: Path, size: int) -> None:
        self.fh = fh
        self.buf = bytearray()
        self.pos = 0
        self.path = path
        self.size = size

    def _need(self, n: int) -> None:
        end = self.pos + n
        if end > self.size:
            raise ModelFileError(
                f"{self.path.name} is truncated: its header ends early "
                f"(needed byte {end:,} of a {self.size:,}-byte file). "
                "The download is incomplete or the file is damaged; download it again."
            )
        while len(self.buf) < end:
            chunk = self.fh.read(max(1 << 20, end - len(self.buf)))
            if not chunk:  # the file shrank while we read it
                raise ModelFileError(f"{self.path.name} could not be read to the end of its header")
            self.buf += chunk

    def scalar(self, vtype: int) -> Any:
        fmt, n = _SCALAR[vtype]
        self._need(n)
        (value,) = struct.unpack_from(fmt, self.buf, self.pos)
        self.pos += n
        return value

    def u32(self) -> int:
        return int(self.scalar(_U32))

    def u64(self) -> int:
        return int(self.scalar(_U64))

    def string(self) -> str:
        n = self.u64()
        self._need(n)
        raw = self.buf[self.pos : self.pos + n]
        self.pos += n
        return bytes(raw).decode("utf-8", errors="replace")

    def skip_string(self) -> None:
        n = self.u64()
        self._need(n)
        self.pos += n

    def value(self, vtype: int, key: str) -> Any:
        if vtype in _SCALAR:
            return self.scalar(vtype)
        if vtype == _STR:
            return self.string()
        if vtype == _ARR:
            item_type = self.u32()
            count = self.u64()
            if key not in _DECODED_ARRAYS:
                self._skip_array(item_type, count, key)
                return _SkippedArray(item_type, count)
            if item_type == _STR:
                return self._string_table(count)
            return [self.value(item_type, key) for _ in range(count)]
        raise ModelFileError(
            f"{self.path.name}: metadata key {key!r} has unknown value type {vtype}; "
            "the file is damaged or from a newer GGUF version"
        )

    def _string_table(self, count: int) -> TokenTable:
        start = self.pos
        offsets = array("Q", bytes(8 * (count + 1)))
        for i in range(count):
            offsets[i] = self.pos - start
            self.skip_string()
        offsets[count] = self.pos - start
        return TokenTable(bytes(self.buf[start : self.pos]), offsets)

    def _skip_array(self, item_type: int, count: int, key: str) -> None:
        if item_type in _SCALAR:
            n = _SCALAR[item_type][1] * count
            self._need(n)
            self.pos += n
        elif item_type == _STR:
            for _ in range(count):
                self.skip_string()
        else:
            for _ in range(count):
                self.value(item_type, key)


@dataclass(frozen=True)
class _SkippedArray:
    """Placeholder for an array that was not decoded; keeps its length for display."""

    item_type: int
    count: int

    def __len__(self) -> int:
        return self.count


def read_gguf(path: str | os.PathLike[str], *, check_data: bool = True) -> GGUFInfo:
    """Parse a GGUF file's header. Raises ModelFileError with a user-facing sentence."""
    p = Path(path).expanduser()
    if not p.exists():
        raise ModelFileError(f"model file not found: {p}")
    if p.is_dir():
        raise ModelFileError(f"{p} is a folder, not a GGUF file")
    try:
        size = p.stat().st_size
        with p.open("rb") as fh:
            if size < 24:
                head = fh.read(4)
                if head != GGUF_MAGIC:
                    raise ModelFileError(f"{p.name} is not a GGUF model file ({size} bytes)")
                raise ModelFileError(f"{p.name} is truncated ({size} bytes): download it again")
            info = _parse(_Reader(fh, p, size))
    except PermissionError as exc:
        raise ModelFileError(f"cannot read {p}: permission denied") from exc
    except OSError as exc:
        raise ModelFileError(f"cannot read {p}: {exc.strerror or exc}") from exc
    if check_data:
        missing = info.missing_data_bytes()
        if missing:
            need = info.data_offset + info.data_size()
            pct = 100.0 * missing / max(1, need)
            raise ModelFileError(
                f"{p.name} is truncated: {missing:,} bytes ({pct:.0f}%) of its tensor data are "
                f"missing (file is {size:,} bytes, expected {need:,}). "
                "The download is incomplete or the file is damaged; download it again."
            )
    return info


def _parse(r: _Reader) -> GGUFInfo:
    path, size = r.path, r.size
    r._need(4)
    magic = bytes(r.buf[:4])
    if magic != GGUF_MAGIC:
        hint = ""
        if magic in (b"ggml", b"ggjt", b"ggmf", b"lmgg", b"fmgg", b"tjgg"):
            hint = " It is an old GGML-format file: convert it to GGUF or download a GGUF build."
        elif magic[:2] == b"PK" or magic[:1] in (b"{", b"<"):
            hint = " (It looks like an archive, JSON or a web page, not model weights.)"
        raise ModelFileError(f"{path.name} is not a GGUF model file.{hint}")
    r.pos = 4
    version = r.u32()
    if version not in (2, 3):
        raise ModelFileError(
            f"{path.name} uses GGUF version {version}, which Tandem cannot read (2 and 3 are known)"
        )
    n_tensors = r.u64()
    n_kv = r.u64()
    # Sanity bounds catch garbage headers before we try to allocate for them.
    if n_tensors > 1_000_000 or n_kv > 1_000_000:
        raise ModelFileError(f"{path.name} has a damaged GGUF header")
    metadata: dict[str, Any] = {}
    for _ in range(n_kv):
        key = r.string()
        vtype = r.u32()
        metadata[key] = r.value(vtype, key)
    tensors: list[TensorInfo] = []
    for _ in range(n_tensors):
        name = r.string()
        n_dims = r.u32()
        if n_dims > 8:
            raise ModelFileError(f"{path.name} has a damaged tensor table ({name!r})")
        shape = tuple(r.u64() for _ in range(n_dims))
        ggml_type = r.u32()
        offset = r.u64()
        tensors.append(TensorInfo(name, shape, ggml_type, offset))
    alignment = int(metadata.get("general.alignment", DEFAULT_ALIGNMENT) or DEFAULT_ALIGNMENT)
    data_offset = (r.pos + alignment - 1) // alignment * alignment
    return GGUFInfo(path, version, size, metadata, tensors, data_offset)
