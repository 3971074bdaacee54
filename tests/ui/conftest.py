"""Fixtures for the app's tests: isolated user directories and real model pairs on disk.

Every test gets its own config/data directories (nothing touches the real ones), and the
settings there fix K and turn adaptive drafting off, so which tokens are drafted, corrected
or bonus is the same on every run (greedy decoding with a fixed K depends on the models only).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parent.parent))

import model_files

from app.ui.session import PairRef
from app.ui.settings import Settings, save_settings
from app.ui.storage import AppDirs

FIXED = Settings(draft_max=4, adaptive=False, max_tokens=48, n_ctx=1024)


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
    return PairRef(tiny_target, model_files.tiny_model("a-draft-close", seed=2, base_seed=1, noise=0.2))


@pytest.fixture(scope="session")
def smollm2_ref(smollm2_f16: Path, smollm2_q4_1: Path) -> PairRef:
    return PairRef(smollm2_f16, smollm2_q4_1)


@pytest.fixture(scope="session")
def incompatible_draft() -> Path:
    return model_files.tiny_model("swapped-vocab", seed=1, vocab_edit="swap")
