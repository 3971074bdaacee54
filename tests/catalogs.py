"""Catalog files for the tests: the pair `tiny` (two tiny real GGUFs served by the fake hub), and
`tiny-mtp` (one tiny GGUF that drafts with its own heads)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

import model_files

TINY_REPO = "test-org/tiny-GGUF"

TINY_CATALOG = f"""
[[pair]]
name = "tiny"
description = "two tiny random-weight models with SmolLM2's tokenizer"
shines_on = "tests"
draft_max = 4
context = 512

[pair.target]
repo_id = "{TINY_REPO}"
filename = "tiny-a.gguf"

[pair.draft]
repo_id = "{TINY_REPO}"
filename = "tiny-a-draft.gguf"
"""

# The same pair as the only one, and the default (the app's first run suggests it).
TINY_ONLY_CATALOG = 'include_builtin = false\ndefault = "tiny"\n' + TINY_CATALOG

# The same again with settings no default has: context 768, draft_max 3, p_min 0.15.
DISTINCT_CATALOG = TINY_ONLY_CATALOG.replace("draft_max = 4", "draft_max = 3\np_min = 0.15").replace(
    "context = 512", "context = 768"
)


def install_catalog(folder: Path, text: str, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Write a user catalog and point TANDEM_CATALOG at it."""
    path = folder / "pairs.toml"
    path.write_text(text)
    monkeypatch.setenv("TANDEM_CATALOG", str(path))
    return path


def link_or_copy(src: Path, dest: Path) -> Path:
    """Put `src`'s bytes at `dest` without copying 100 MB when a hard link will do."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(src, dest)
    except OSError:
        shutil.copyfile(src, dest)
    return dest


# A pair drafted by its target's own heads (`draft = "mtp"`): the tiny random Qwen3.5 with one
# MTP block (model_files.tiny_mtp_model), the only file to fetch.
MTP_REPO = "test-org/tiny-mtp-GGUF"
MTP_FILE = "tiny-qwen35-mtp.gguf"
MTP_CATALOG = f"""
[[pair]]
name = "tiny-mtp"
description = "a tiny random Qwen3.5 drafted by its own MTP heads"
shines_on = "tests"
draft = "mtp"
draft_max = 4
context = 512
hybrid = true

[pair.target]
repo_id = "{MTP_REPO}"
filename = "{MTP_FILE}"
"""

# The same pair as the only one, and the default.
MTP_ONLY_CATALOG = 'include_builtin = false\ndefault = "tiny-mtp"\n' + MTP_CATALOG


def mtp_target() -> Path:
    """The tiny Qwen3.5 with its own draft heads (the engine's tests use the same file)."""
    return model_files.tiny_mtp_model("qwen35-mtp-s16", seed=7)


def no_heads_target() -> Path:
    """A tiny model with the same tokenizer and no draft heads."""
    return model_files.tiny_stateful_model("llama-d", "llama", seed=31)
