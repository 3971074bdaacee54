"""Whether a GGUF carries its own draft heads: multi-token-prediction ("nextn") blocks.

Qwen3.5/3.6, GLM-4.5+, DeepSeek V3 and others can ship MTP blocks after their trunk; the header
says how many (`{arch}.nextn_predict_layers`). Such a target drafts for itself (the engine's
`--drafter mtp`, and `auto` without a draft model), so the front-ends let it be chosen alone.
Only the header is read (read_gguf): a few milliseconds, never the weights.
"""

from __future__ import annotations

from pathlib import Path

from app.engine import mtp
from app.engine.errors import TandemError
from app.engine.gguf_file import GGUFInfo, read_gguf

BUILTIN_DRAFTER_LABEL = "built-in drafter"  # what the picker and `tandem pairs` call the heads


def mtp_layers(info: GGUFInfo) -> int:
    """How many MTP blocks the model has (0: none); the key the engine reads (model.py)."""
    value = info.get(f"{info.architecture}.nextn_predict_layers", 0)
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def has_heads(path: Path) -> bool:
    """Whether the GGUF at `path` has MTP blocks; raises ModelFileError for an unreadable file."""
    return mtp_layers(read_gguf(path, check_data=False)) > 0


def no_heads_message(path: Path) -> str:
    """Why `path` cannot draft with its own heads, in one line (the engine says the same when
    asked to; see generation.mtp_missing), with what to use instead."""
    return (
        f"{path.name} has no built-in draft heads (multi-token prediction layers): use a draft "
        "model (--draft) or prompt lookup (--drafter lookup)"
    )


def check_heads(path: Path) -> None:
    """Refuse, before anything is loaded, a target that has no draft heads to draft with, or
    whose heads this llama.cpp build cannot run."""
    if not has_heads(path):
        raise TandemError(no_heads_message(path))
    if not mtp.supported():
        raise TandemError(
            f"this llama.cpp build cannot run {path.name}'s draft heads: update it "
            "(python3 scripts/install.py --rebuild)"
        )
