"""What a GGUF header says, once read (gguf_file.read_gguf): the metadata, the tensor table
and the token table, with the accessors the engine and the catalog use.

Nothing here reads a file; the bounded reader that builds these is gguf_file.py.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

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
TOKENS_KEY = "tokenizer.ggml.tokens"
DECODED_ARRAYS = {TOKENS_KEY}


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

    def first_repeat(self) -> tuple[int, int] | None:
        """The first two ids whose texts are the same as llama.cpp reads them (None: every
        text differs): llama.cpp takes each text as a C string (up to its first NUL byte), an
        empty one as "[EMPTY_<id>]", and asserts no two are alike.

        A vocabulary can hold a million tokens: their texts are hashed into one array, sorted,
        and only equal hashes compared (a million tokens: 0.25 s and 25 MiB)."""
        n = len(self)
        if n < 2:
            return None
        raw, offsets = self._raw, self._offsets
        starts = np.frombuffer(offsets, dtype=np.uint64)
        lengths = starts[1:] - starts[:-1]
        lengths -= np.uint64(8)
        plain = not bool((lengths == 0).any()) and not _nul_in_texts(raw, lengths)
        del lengths
        pairs = zip(offsets, islice(offsets, 1, None), strict=False)
        # (Rare: an empty or NUL-holding text, taken as llama.cpp reads it, token by token.)
        exact = (self._as_read(i) for i in range(n))
        texts = (raw[a + 8 : b] for a, b in pairs) if plain else exact
        hashes = np.fromiter(map(hash, texts), dtype=np.int64, count=n)
        order = np.argsort(hashes, kind="stable")  # equal hashes: ids in order
        ranked = hashes[order]
        found: tuple[int, int] | None = None
        for k in np.flatnonzero(ranked[1:] == ranked[:-1]):
            first, second = int(order[k]), int(order[k + 1])
            if self._as_read(first) != self._as_read(second):
                continue  # (two texts of one hash)
            if found is None or second < found[1]:
                found = (first, second)
        return None if found is None else self._earliest(found, hashes)

    def _earliest(self, found: tuple[int, int], hashes: npt.NDArray[np.int64]) -> tuple[int, int]:
        """`found`'s second id with the first id of its text (a run of three or more)."""
        text = self._as_read(found[1])
        same = np.flatnonzero(hashes == hashes[found[1]])
        first = next(int(i) for i in same if self._as_read(int(i)) == text)
        return first, found[1]

    def _as_read(self, i: int) -> bytes:
        """Token i's text as llama.cpp keeps it (see first_repeat)."""
        text = self._raw[self._offsets[i] + 8 : self._offsets[i + 1]].split(b"\0", 1)[0]
        return text or b"[EMPTY_%d]" % i

    def span(self, start: int, stop: int) -> bytes:
        """The raw encoding of tokens [start, stop): equal spans mean equal token texts."""
        return self._raw[self._offsets[start] : self._offsets[stop]]


def _nul_in_texts(raw: bytes, lengths: npt.NDArray[np.uint64]) -> bool:
    """Whether a NUL byte lies inside a token's text, not in the 8-byte lengths before them:
    the zeros of the whole table, less the zero bytes of the lengths."""
    return raw.count(0) > int(np.count_nonzero(lengths.astype("<u8").view(np.uint8) == 0))


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
        tokens = self.get(TOKENS_KEY)
        return tokens if isinstance(tokens, TokenTable) else TokenTable(b"", array("Q", [0]))

    @property
    def vocab_type(self) -> str:
        return str(self.get("tokenizer.ggml.model", "none"))

    @property
    def chat_template(self) -> str | None:
        value = self.get("tokenizer.chat_template")
        return str(value) if value else None

    @property
    def mtp_layers(self) -> int:
        """How many multi-token-prediction ("nextn") blocks follow the trunk (0: none): the
        model's own draft heads (drafters/heads/mtp.py)."""
        value = self.get(f"{self.architecture}.nextn_predict_layers", 0)
        return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0

    @property
    def head_sizes(self) -> tuple[int, int] | None:
        """The attention heads' key and value sizes as llama.cpp derives them (n_embd_head_k and
        _v: the key/value lengths where given, else the width over layer 0's heads); None where
        layer 0 has no heads or the width is missing or 0."""

        def integer(value: Any) -> int | None:
            return value if isinstance(value, int) and not isinstance(value, bool) else None

        arch = self.architecture
        heads = self.get(f"{arch}.attention.head_count")
        if isinstance(heads, tuple) and heads:  # per layer, read as llama.cpp's uint32
            heads = heads[0] & 0xFFFFFFFF if integer(heads[0]) is not None else None
        n_head, width = integer(heads), integer(self.get(f"{arch}.embedding_length"))
        if n_head is None or n_head <= 0 or not width:
            return None
        key = integer(self.get(f"{arch}.attention.key_length")) or width // n_head
        return key, integer(self.get(f"{arch}.attention.value_length")) or width // n_head

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
        meta = {k: v for k, v in self.metadata.items() if k not in DECODED_ARRAYS}
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
