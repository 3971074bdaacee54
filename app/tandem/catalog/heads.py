"""Whether a GGUF carries its own draft heads: multi-token-prediction ("nextn") blocks.

Qwen3.5/3.6, GLM-4.5+, DeepSeek V3 and others can ship MTP blocks after their trunk; the header
says how many (`{arch}.nextn_predict_layers`). Such a target drafts for itself (the engine's
`--drafter mtp`, and `auto` without a draft model), so the front-ends let it be chosen alone
(whether it may, before loading, is the session's preflight). Only the header is read
(read_gguf): a few milliseconds, never the weights.
"""

from __future__ import annotations

from pathlib import Path

from tandem.engine.files.gguf_file import read_gguf

BUILTIN_DRAFTER_LABEL = "built-in drafter"  # what the picker and `tandem pairs` call the heads


def has_heads(path: Path) -> bool:
    """Whether the GGUF at `path` has MTP blocks; raises ModelFileError for an unreadable file."""
    return read_gguf(path, check_data=False).mtp_layers > 0
