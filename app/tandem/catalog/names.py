"""What a GGUF's file name says: the parts of a split model, and its quantization."""

from __future__ import annotations

import re

# `name-00001-of-00003.gguf`: llama.cpp's split naming (llama_split_path); the first part is the
# one handed to llama.cpp, which finds the others next to it.
SPLIT = re.compile(r"^(?P<prefix>.*)-(?P<no>\d{5})-of-(?P<count>\d{5})\.gguf$")
_QUANT_TOKEN = re.compile(r"^(?:I?Q\d+(?:_[0-9A-Z]+)*|BF16|F16|F32|MXFP4)$", re.IGNORECASE)


def display_name(filename: str) -> str:
    """The file's name without folders or the split suffix."""
    name = filename.rsplit("/", 1)[-1]
    m = SPLIT.match(name)
    return (m.group("prefix") if m else name.removesuffix(".gguf")) if name else filename


def split_parts(filename: str) -> tuple[str, ...]:
    """`x-00001-of-00003.gguf` -> the three part names; any other name -> itself."""
    folder, _, name = filename.rpartition("/")
    m = SPLIT.match(name)
    if not m:
        return (filename,)
    count = int(m.group("count"))
    prefix = f"{folder}/" if folder else ""
    return tuple(f"{prefix}{m.group('prefix')}-{i:05d}-of-{count:05d}.gguf" for i in range(1, count + 1))


def split_info(filename: str) -> tuple[int, int] | None:
    """(part number, part count) for a split part's name, else None."""
    m = SPLIT.match(filename.rsplit("/", 1)[-1])
    return (int(m.group("no")), int(m.group("count"))) if m else None


def quantization_from_name(filename: str) -> str:
    """`Meta-Llama-3.1-8B-Instruct-Q4_K_M.gguf` -> `Q4_K_M`; `unknown` when the name says nothing."""
    for token in reversed(re.split(r"[-.]", display_name(filename))):
        if _QUANT_TOKEN.match(token):
            return token.upper()
    return "unknown"
