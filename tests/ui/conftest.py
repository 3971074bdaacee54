"""Fixtures for the app's tests: isolated user directories and real model pairs on disk.

Every test gets its own config/data directories (nothing touches the real ones), and the
settings there fix K and turn adaptive drafting off, so which tokens are drafted, corrected
or bonus is the same on every run (greedy decoding with a fixed K depends on the models only).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from ui_helpers import FIXED

import model_files
from tandem.session.refs import PairRef
from tandem.ui.settings import Settings, save_settings
from tandem.ui.storage import AppDirs


@pytest.fixture(autouse=True)
def ui_env(hf_env: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every app test runs in the clean environment (tests/conftest.py's hf_env), offline unless
    it starts a fake hub, with a fixed memory size so fit verdicts do not depend on what is free."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TANDEM_MEMORY", "24G")
    # The app lowers its UI thread's priority for good (priority.py); in pytest that thread is
    # the one every later test runs on. test_priority.py checks the lowering in child processes.
    monkeypatch.setenv("TANDEM_UI_NICE", "0")
    return hf_env


@pytest.fixture
def dirs(tmp_path: Path) -> AppDirs:
    d = AppDirs.under(tmp_path)
    save_settings(d.settings_file, FIXED)
    return d


@pytest.fixture
def write_settings(dirs: AppDirs) -> Callable[[Settings], None]:
    return lambda s: save_settings(dirs.settings_file, s)


@pytest.fixture(scope="session")
def tiny_ref(tiny_target: Path, tiny_draft: Path) -> PairRef:
    return PairRef(tiny_target, tiny_draft)


@pytest.fixture(scope="session")
def tiny_close_ref(tiny_target: Path) -> PairRef:
    """The tiny target with a draft that agrees with it more often."""
    return PairRef(tiny_target, model_files.tiny_close_draft())


@pytest.fixture(scope="session")
def smollm2_ref(smollm2_f16: Path, smollm2_q4_1: Path) -> PairRef:
    return PairRef(smollm2_f16, smollm2_q4_1)


@pytest.fixture(scope="session")
def incompatible_draft() -> Path:
    return model_files.tiny_model("word-level-vocab", seed=1, vocab_edit="word-level")
