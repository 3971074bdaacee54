"""Catalog files for the tests: the pair `tiny` (two tiny real GGUFs served by the fake hub)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

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
