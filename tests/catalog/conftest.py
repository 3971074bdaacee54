"""Fixtures for the catalog tests: a private HF cache and home, and a local fake hub.

Every test gets its own HF_HUB_CACHE, HF_HOME and HOME (so no real cache, token, LM Studio or
Ollama folder is read) and no HF_TOKEN / HF_HUB_OFFLINE / TANDEM_CATALOG from the caller.
Nothing here can reach the internet: HF_ENDPOINT points at the loopback fake hub, and
huggingface_hub's once-a-day telemetry lookup is switched off before it is imported.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

os.environ["HF_HUB_DISABLE_TELEMETRY"] = "1"  # read by huggingface_hub at import time

sys.path.insert(0, str(Path(__file__).parent))

import model_files
from hub_server import FakeHub

TINY_REPO = "test-org/tiny-GGUF"


@pytest.fixture
def hub(hf_env: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeHub]:
    server = FakeHub(lifetime_s=120).start()
    monkeypatch.setenv("HF_ENDPOINT", server.url)
    yield server
    server.stop()


@pytest.fixture(scope="session")
def tiny_files() -> tuple[Path, Path]:
    """Two small real GGUFs with the same tokenizer (SmolLM2's): a target and a draft."""
    return model_files.tiny_model("a", seed=1), model_files.tiny_model(
        "a-draft", seed=2, base_seed=1, noise=0.6
    )


@pytest.fixture
def tiny_hub(hub: FakeHub, tiny_files: tuple[Path, Path]) -> FakeHub:
    hub.add(TINY_REPO, "tiny-a.gguf", tiny_files[0])
    hub.add(TINY_REPO, "tiny-a-draft.gguf", tiny_files[1])
    return hub


TINY_CATALOG = """
[[pair]]
name = "tiny"
description = "two tiny random-weight models with SmolLM2's tokenizer"
shines_on = "tests"
draft_max = 4
context = 512

[pair.target]
repo_id = "test-org/tiny-GGUF"
filename = "tiny-a.gguf"

[pair.draft]
repo_id = "test-org/tiny-GGUF"
filename = "tiny-a-draft.gguf"
"""


@pytest.fixture
def tiny_catalog(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A user catalog with the pair `tiny`, given through TANDEM_CATALOG."""
    path = tmp_path / "my-pairs.toml"
    path.write_text(TINY_CATALOG)
    monkeypatch.setenv("TANDEM_CATALOG", str(path))
    return path


def link_or_copy(src: Path, dest: Path) -> Path:
    """Put `src`'s bytes at `dest` without copying 100 MB when a hard link will do."""
    import shutil

    dest.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(src, dest)
    except OSError:
        shutil.copyfile(src, dest)
    return dest
