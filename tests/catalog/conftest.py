"""Fixtures for the catalog tests (the fake hub, `tiny_hub` and `tiny_catalog` are shared ones,
in tests/conftest.py). Tests that use the network get a private HF cache and home (`hf_env`)
and a loopback fake hub: nothing here can reach the internet."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def tiny_files(tiny_target: Path, tiny_draft: Path) -> tuple[Path, Path]:
    """Two small real GGUFs with the same tokenizer (SmolLM2's): a target and a draft."""
    return tiny_target, tiny_draft
