"""Read a GGUF file's header and metadata without loading its weights.

llama.cpp reports a bad file only after it starts loading, in log lines, and a truncated file
can fail late or with a vague message. Reading the header ourselves lets Tandem say exactly
what is wrong ("not a GGUF file", "truncated: 37% of the tensor data is missing") and compare
two tokenizers before any weights are touched.

Only the key/value metadata and the tensor table are parsed; tensor data is never read. Large
arrays the engine does not need (BPE merges, token scores) are skipped without decoding.

Tandem reads the header of every GGUF it finds (LM Studio, Ollama and Hugging Face folders
included), so a damaged or hostile file must cost little and end in a ModelFileError, never in
another exception: every count is checked against the bytes left in the file before anything is
allocated for it, the limits below bound what even a large file can make the parser do, and the
keys Tandem uses are type-checked here so that GGUFInfo's accessors (gguf_info.py, the view of
what was read) cannot fail on them.
"""

from __future__ import annotations

import os
import struct
from array import array
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from ..errors import ModelFileError
from .gguf_info import FILE_TYPES, GGML_TYPES, TOKENS_KEY, GGUFInfo, TensorInfo, TokenTable
from .native_checks import check_native

# The view is gguf_info.py; its names are importable from here too (one module to read a file).
__all__ = [
    "FILE_TYPES",
    "GGML_TYPES",
    "GGUFInfo",
    "TensorInfo",
    "TokenTable",
    "read_gguf",
]

GGUF_MAGIC = b"GGUF"
DEFAULT_ALIGNMENT = 32

# GGUF metadata value types (gguf.h: enum gguf_type).
_U8, _I8, _U16, _I16, _U32, _I32, _F32, _BOOL, _STR, _ARR, _U64, _I64, _F64 = range(13)
_SCALAR = {
    vtype: struct.Struct(fmt)
    for vtype, fmt in (
        (_U8, "<B"),
        (_I8, "<b"),
        (_U16, "<H"),
        (_I16, "<h"),
        (_U32, "<I"),
        (_I32, "<i"),
        (_F32, "<f"),
        (_BOOL, "<?"),
        (_U64, "<Q"),
        (_I64, "<q"),
        (_F64, "<d"),
    )
}
_INTEGER_TYPES = {_U8, _I8, _U16, _I16, _U32, _I32, _U64, _I64}
_UINT32 = _SCALAR[_U32]
_UINT64 = _SCALAR[_U64]

# --- Limits -----------------------------------------------------------------------------------
# Each count in a header is first checked against the bytes left in the file (an array of n u32
# needs 4n bytes, of n strings at least 8n), so a small file cannot make the parser allocate or
# loop for data that is not there. A large file can hold large counts, so these caps bound the
# work whatever the file: each is several times what real models need (figures from llama.cpp's
# models/ggml-vocab-*.gguf and current model families) and, all reached at once, they keep one
# header under 64 MiB and a second (measured: 37 MiB, 0.3 s; tests/engine/test_gguf_hostile.py).
MAX_METADATA_KEYS = 1 << 13  # real files have 15-50 keys (per-layer values are arrays, one key)
MAX_TENSORS = 1 << 14  # real models have up to ~2,000 (MoE files with experts one tensor each)
MAX_TOKENS = 1 << 20  # the largest vocabularies have 256-262k tokens (Command-R, Gemma 3 and 4)
MAX_TOKEN_TABLE_BYTES = 16 << 20  # their token texts plus 8-byte lengths take under 5 MiB
# Strings walked one by one in all arrays together: a vocabulary plus its BPE merges is at most
# ~780k (Gemma 4: 262k tokens, 515k merges); each costs a Python loop iteration.
MAX_ARRAY_STRINGS = 1 << 21
# Keys and string values, decoded to Python strings (up to 4 bytes a character): real files
# have under 20 KiB, nearly all of it the chat template.
MAX_TEXT_BYTES = 2 << 20
MAX_KEY_BYTES = 65_535  # the GGUF specification's limit for a key
# Arrays inside arrays: the format allows them, llama.cpp refuses them and no real file has one.
MAX_ARRAY_DEPTH = 4
MAX_NESTED_ARRAYS = 1 << 12
# Header bytes actually read (arrays of numbers are seeked over): real headers are under 20 MiB
# (Gemma 4's vocabulary and merges: 16 MB); this bounds the I/O of a header that sends the
# parser jumping through a huge file.
MAX_READ_BYTES = 128 << 20
GGML_MAX_DIMS = 4  # llama.cpp (ggml.h) refuses tensors with more dimensions...
GGML_MAX_NAME = 64  # ...or names of this many bytes or more (the C buffer holds 63 and a NUL)
_CHUNK = 1 << 20  # read size: the header is read in pieces, only what parsing reaches
# Integer arrays that are decoded (every other array is skipped), with the most entries read:
# which of the target's layers a trained drafter (EAGLE-3, DFlash) reads, a handful of ids; the
# per-layer values llama.cpp checks (native_checks.py), one per layer (llama.cpp has at most
# 512 layers and refuses an array of another length); the M-RoPE sections (4).
SMALL_INT_ARRAYS = {
    ".target_layers": 64,
    ".attention.head_count": 512,
    ".attention.head_count_kv": 512,
    ".expert_used_count": 512,
    ".rope.dimension_sections": 512,
}
SMALL_INT_ARRAY_SUFFIXES = tuple(SMALL_INT_ARRAYS)


class _Reader:
    """Reads the header through a window on the file, only as far as parsing goes: the header is
    kilobytes to megabytes, the weights behind it gigabytes we never touch.

    `buf` holds the file's bytes [base, base + len(buf)) and `pos` is where parsing is. When the
    window runs out, the bytes before `pos` are dropped and the next chunk read; an array of
    numbers is skipped by moving `pos`, so the next read seeks past it instead of reading it.
    Memory is about one chunk plus what is kept (the token table, the text values).
    """

    def __init__(self, fh: BinaryIO, path: Path, size: int) -> None:
        self.fh = fh
        self.buf = bytearray()
        self.base = 0
        self.pos = 0
        self.path = path
        self.size = size
        # What is left of the limits for this file.
        self.read_left = MAX_READ_BYTES
        self.strings_left = MAX_ARRAY_STRINGS
        self.nested_left = MAX_NESTED_ARRAYS
        self.text_left = MAX_TEXT_BYTES

    # --- errors ----------------------------------------------------------------------------
    def unusable(self, reason: str) -> ModelFileError:
        return ModelFileError(f"{self.path.name} is not a usable GGUF file: {reason}")

    def truncated(self, end: int) -> ModelFileError:
        return ModelFileError(
            f"{self.path.name} is truncated: its header ends early "
            f"(needed byte {end:,} of a {self.size:,}-byte file). "
            "The download is incomplete or the file is damaged; download it again."
        )

    def check_left(self, n: int, what: str) -> None:
        """Refuse a count whose data cannot be in the file, before anything is allocated for it."""
        left = self.size - self.pos
        if n > left:
            raise ModelFileError(
                f"{self.path.name} is truncated or damaged: {what} would need {n:,} bytes but only "
                f"{left:,} are left in the file. "
                "The download is incomplete or the file is damaged; download it again."
            )

    # --- the window --------------------------------------------------------------------------
    def _need(self, n: int) -> None:
        if self.pos + n > self.base + len(self.buf):
            self._fill(self.pos + n)

    def _fill(self, end: int) -> None:
        """Make the window reach `end`, keeping the bytes from `pos` on."""
        if end > self.size:
            raise self.truncated(end)
        have = self.base + len(self.buf)  # the file's position: the window ends where reading did
        if self.pos >= have:
            # Nothing in the window is needed any more: start a new one at pos, reading nothing
            # in between (a skipped array).
            self.buf = bytearray()
            self.base = have = self.pos
            self.fh.seek(self.pos)
        elif self.pos > self.base:
            del self.buf[: self.pos - self.base]  # O(1) in CPython: it moves the buffer's start
            self.base = self.pos
        want = min(self.size, max(end, have + _CHUNK)) - have
        self._spend(want)
        while want > 0:
            chunk = self.fh.read(want)
            if not chunk:  # the file shrank while we read it
                raise ModelFileError(f"{self.path.name} could not be read to the end of its header")
            self.buf += chunk
            want -= len(chunk)

    def _spend(self, n: int) -> None:
        self.read_left -= n
        if self.read_left < 0:
            raise self.unusable(
                f"its metadata is larger than the {MAX_READ_BYTES >> 20} MiB Tandem reads "
                "(real models have under 20 MiB)"
            )

    # --- values ------------------------------------------------------------------------------
    def scalar(self, vtype: int) -> Any:
        s = _SCALAR[vtype]
        pos = self.pos
        if pos + s.size > self.base + len(self.buf):
            self._fill(pos + s.size)
        (value,) = s.unpack_from(self.buf, pos - self.base)
        self.pos = pos + s.size
        return value

    def u32(self) -> int:
        return int(self.scalar(_U32))

    def u64(self) -> int:
        return int(self.scalar(_U64))

    def string(self, what: str, *, is_key: bool = False) -> str:
        """A string kept as text: all of them together are limited to MAX_TEXT_BYTES."""
        n = self.u64()
        if is_key and n > MAX_KEY_BYTES:
            raise self.unusable(f"{what} is {n:,} bytes long; GGUF allows at most {MAX_KEY_BYTES:,}")
        if n > self.text_left:
            raise self.unusable(
                f"{what} is {n:,} bytes long, and Tandem reads at most {MAX_TEXT_BYTES >> 20} MiB of "
                "text in a header (real models have under 100 KiB)"
            )
        self.check_left(n, what)
        self.text_left -= n
        self._need(n)
        start = self.pos - self.base
        self.pos += n
        with memoryview(self.buf) as view:  # decoded in place: no copy of a long value
            return str(view[start : start + n], "utf-8", errors="replace")

    def value(self, vtype: int, key: str) -> Any:
        if vtype in _SCALAR:
            return self.scalar(vtype)
        if vtype == _STR:
            return self.string(f"the value of {key!r}")
        if vtype == _ARR:
            item_type = self.u32()
            count = self.u64()
            if key == TOKENS_KEY:
                if item_type != _STR:
                    raise self.unusable(f"{key} is not an array of strings")
                return self._strings(count, key, keep=True)
            if key.endswith(SMALL_INT_ARRAY_SUFFIXES) and item_type in _INTEGER_TYPES:
                most = next(n for suffix, n in SMALL_INT_ARRAYS.items() if key.endswith(suffix))
                if count > most:
                    real = (
                        "real drafters read 3 to 8 layers"
                        if most < 512
                        else "llama.cpp has at most 512 layers"
                    )
                    raise self.unusable(f"{key} has {count:,} entries; Tandem reads at most {most} ({real})")
                self.check_left(count * _SCALAR[item_type].size, f"the array {key!r}")
                return tuple(int(self.scalar(item_type)) for _ in range(count))
            self._skip_array(item_type, count, key, 1)
            return _SkippedArray(item_type, count)
        raise self.unknown_type(vtype, key)

    def unknown_type(self, vtype: int, key: str) -> ModelFileError:
        return self.unusable(
            f"metadata key {key!r} has unknown value type {vtype} "
            "(the file is damaged or from a newer GGUF version)"
        )

    def _skip_array(self, item_type: int, count: int, key: str, depth: int) -> None:
        s = _SCALAR.get(item_type)
        if s is not None:
            self.check_left(count * s.size, f"the array {key!r} ({count:,} values)")
            self.pos += count * s.size  # not read: the next read seeks past it
        elif item_type == _STR:
            self._strings(count, key, keep=False)
        elif item_type == _ARR:
            # Each inner array costs a call (and a stack frame): their depth and number are
            # limited, and each needs at least its 12-byte type and count.
            if depth >= MAX_ARRAY_DEPTH:
                raise self.unusable(f"{key!r} nests arrays more than {MAX_ARRAY_DEPTH} deep")
            self.check_left(12 * count, f"the array {key!r} ({count:,} arrays)")
            if count > self.nested_left:
                raise self.unusable(
                    f"{key!r} holds more arrays inside arrays than the {MAX_NESTED_ARRAYS:,} Tandem "
                    "reads (real models have none)"
                )
            self.nested_left -= count
            for _ in range(count):
                inner_type = self.u32()
                self._skip_array(inner_type, self.u64(), key, depth + 1)
        else:
            raise self.unknown_type(item_type, key)

    def _strings(self, count: int, key: str, *, keep: bool) -> TokenTable | None:
        """Walk an array of `count` strings reading only their 8-byte lengths; with `keep`, return
        them as a TokenTable (read again in one piece once their extent is known, so the window
        never holds them all and long strings are seeked over in both cases)."""
        if keep and count > MAX_TOKENS:
            raise self.unusable(
                f"{key} has {count:,} tokens, more than the {MAX_TOKENS:,} Tandem reads "
                "(the largest real vocabularies have about 260,000)"
            )
        if count > self.strings_left:
            raise self.unusable(
                f"{key!r} has {count:,} strings; Tandem reads at most {MAX_ARRAY_STRINGS:,} in all "
                "arrays together (real models have under 800,000)"
            )
        self.check_left(8 * count, f"the array {key!r} ({count:,} strings)")
        self.strings_left -= count
        offsets = array("Q", [0]) * (count + 1) if keep else None
        start = self.pos
        unpack = _UINT64.unpack_from
        done = 0
        while done < count:
            self._need(8)
            buf, base = self.buf, self.base
            p = self.pos - base
            last = len(buf) - 8  # the last window offset where a whole length fits
            # The hot loops (hundreds of thousands of strings in real files): locals only.
            if offsets is not None:
                rel = base - start
                for i in range(done, count):
                    if p > last:
                        break
                    offsets[i] = p + rel
                    (n,) = unpack(buf, p)
                    p += 8 + n
                else:
                    i = count
            else:
                # `i` is read after the loop: where the window ran out.
                for i in range(done, count):  # noqa: B007
                    if p > last:
                        break
                    (n,) = unpack(buf, p)
                    p += 8 + n
                else:
                    i = count
            done = i
            self.pos = base + p
        if self.pos > self.size:
            raise self.truncated(self.pos)
        if offsets is None:
            return None
        n_bytes = self.pos - start
        if n_bytes > MAX_TOKEN_TABLE_BYTES:
            raise self.unusable(
                f"{key} holds {n_bytes:,} bytes of token text, more than the {MAX_TOKEN_TABLE_BYTES >> 20} "
                "MiB Tandem reads (real vocabularies hold under 5 MiB)"
            )
        offsets[count] = n_bytes
        self._spend(n_bytes)
        # Read the table in one piece; the window restarts after it.
        self.fh.seek(start)
        raw = self.fh.read(n_bytes)
        if len(raw) != n_bytes:
            raise ModelFileError(f"{self.path.name} could not be read to the end of its header")
        self.buf = bytearray()
        self.base = self.pos
        return TokenTable(raw, offsets)


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
    if not p.is_file():  # a FIFO or device found while scanning: opening it could block forever
        raise ModelFileError(f"{p} is not a regular file, so not a GGUF model file")
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
    except (
        struct.error,
        ArithmeticError,
        LookupError,
        MemoryError,
        RecursionError,
        TypeError,
        ValueError,
    ) as exc:
        # The checks above should leave nothing for these; if a header still finds a way, the
        # file is unusable and scanning a folder must go on, so it is still one sentence.
        raise ModelFileError(
            f"{p.name} is not a usable GGUF file: its header could not be parsed "
            f"({type(exc).__name__}: {exc})"
        ) from exc
    check_native(info)  # (values llama.cpp would abort or hang on: native_checks.py)
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
    if n_kv > MAX_METADATA_KEYS:
        raise r.unusable(
            f"it declares {n_kv:,} metadata keys, more than the {MAX_METADATA_KEYS:,} Tandem reads "
            "(real models have under 100)"
        )
    if n_tensors > MAX_TENSORS:
        raise r.unusable(
            f"it declares {n_tensors:,} tensors, more than the {MAX_TENSORS:,} Tandem reads "
            "(real models have a few thousand at most)"
        )
    # The smallest key/value pair is 13 bytes (8-byte key length, 4-byte type, 1-byte value),
    # the smallest tensor entry 24 (name length, dimension count, type, offset).
    r.check_left(13 * n_kv + 24 * n_tensors, f"its {n_kv:,} metadata keys and {n_tensors:,} tensors")
    metadata: dict[str, Any] = {}
    types: dict[str, int] = {}
    for i in range(n_kv):
        key = r.string(f"metadata key {i}", is_key=True)
        if key in metadata:
            raise r.unusable(f"metadata key {key!r} appears twice")  # llama.cpp refuses it too
        vtype = r.u32()
        types[key] = vtype
        metadata[key] = r.value(vtype, key)
    _check_known_keys(r, metadata, types)
    tensors: list[TensorInfo] = []
    names: set[str] = set()
    for i in range(n_tensors):
        tensors.append(_tensor_info(r, i, names))
    alignment = int(metadata.get("general.alignment", DEFAULT_ALIGNMENT))
    data_offset = (r.pos + alignment - 1) // alignment * alignment
    return GGUFInfo(path, version, size, metadata, tensors, data_offset)


def _tensor_info(r: _Reader, i: int, names: set[str]) -> TensorInfo:
    """One tensor table entry, refused where llama.cpp (gguf.cpp) would refuse it."""

    def damaged(what: str) -> ModelFileError:
        return r.unusable(f"its tensor table is damaged (tensor {i} {what})")

    n = r.u64()
    if n >= GGML_MAX_NAME:
        raise damaged(f"has a {n:,}-byte name; llama.cpp allows at most {GGML_MAX_NAME - 1}")
    r._need(n + 4)
    at = r.pos - r.base
    name = r.buf[at : at + n].decode("utf-8", errors="replace")
    (n_dims,) = _UINT32.unpack_from(r.buf, at + n)
    r.pos += n + 4
    if name in names:
        raise damaged(f"{name!r} appears twice")
    names.add(name)
    if n_dims > GGML_MAX_DIMS:
        raise damaged(f"{name!r} has {n_dims:,} dimensions; llama.cpp allows at most {GGML_MAX_DIMS}")
    # The dimensions, type and offset in one unpack: real files have thousands of tensors.
    rest = _TENSOR_REST[n_dims]
    r._need(rest.size)
    *shape, ggml_type, offset = rest.unpack_from(r.buf, r.pos - r.base)
    r.pos += rest.size
    n_elements = 1
    for d in shape:
        n_elements *= d
    # llama.cpp reads dimensions as int64 and refuses a total that does not fit one.
    if n_elements >= 1 << 63 or any(d >= 1 << 63 for d in shape):
        raise damaged(f"{name!r} has an impossible shape {tuple(shape)}")
    return TensorInfo(name, tuple(shape), ggml_type, offset)


_TENSOR_REST = [struct.Struct(f"<{n}QIQ") for n in range(GGML_MAX_DIMS + 1)]


# Keys Tandem reads, and the types its accessors (and compat.py, catalog/fit.py, model.py) need.
_INTEGER_KEYS = (
    "general.file_type",
    "split.count",
    "tokenizer.ggml.bos_token_id",
    "tokenizer.ggml.eos_token_id",
)
_ARCH_INTEGER_KEYS = (
    "context_length",
    "block_count",
    "embedding_length",
    "attention.key_length",
    "attention.value_length",
)
_ARCH_PER_LAYER_KEYS = ("attention.head_count", "attention.head_count_kv")  # or an array, one per layer
_BOOL_KEYS = ("tokenizer.ggml.add_bos_token", "tokenizer.ggml.add_eos_token")
_STRING_KEYS = ("general.architecture", "general.name", "tokenizer.ggml.model", "tokenizer.chat_template")


def _check_known_keys(r: _Reader, metadata: dict[str, Any], types: dict[str, int]) -> None:
    def wrong(key: str, expected: str) -> ModelFileError:
        return r.unusable(f"{key} is {_describe(metadata[key])}, not {expected}")

    # gguf.cpp refuses a general.alignment that is not a u32 power of two (so not 0 either).
    alignment = metadata.get("general.alignment")
    if alignment is not None and (
        types["general.alignment"] != _U32 or alignment <= 0 or alignment & (alignment - 1)
    ):
        raise wrong("general.alignment", "a power of two stored as an unsigned 32-bit integer")
    arch = metadata.get("general.architecture")
    arch_keys = [f"{arch}.{k}" for k in _ARCH_INTEGER_KEYS] if isinstance(arch, str) else []
    for key in (*_INTEGER_KEYS, *arch_keys):
        if key in metadata and types[key] not in _INTEGER_TYPES:
            raise wrong(key, "an integer")
    if isinstance(arch, str):
        for key in (f"{arch}.{k}" for k in _ARCH_PER_LAYER_KEYS):
            if key in metadata and types[key] not in _INTEGER_TYPES and types[key] != _ARR:
                raise wrong(key, "an integer or an array (one per layer)")
    for key in _BOOL_KEYS:
        if key in metadata and types[key] != _BOOL:
            raise wrong(key, "true or false")
    for key in _STRING_KEYS:
        if key in metadata and types[key] != _STR:
            raise wrong(key, "text")


def _describe(value: Any) -> str:
    if isinstance(value, bool):
        return f"a boolean ({value})"
    if isinstance(value, int):
        return f"the integer {value}"
    if isinstance(value, float):
        return f"the number {value!r}"
    if isinstance(value, str):
        return f"the text {value[:40]!r}"
    return "an array"
