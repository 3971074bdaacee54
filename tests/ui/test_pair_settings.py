"""A catalog pair's settings apply alike in `tandem run --pair`, `tandem chat --pair` and the
picker, and the panel shows K as the engine runs it (tests/session pins the rest of what the
front-ends share)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from textual.pilot import Pilot
from ui_helpers import FIXED, run_app, send, wait_for, wait_ready

from hub_server import FakeHub
from tandem.cli.chat_cmd import app_for
from tandem.cli.main import build_parser
from tandem.cli.options import chat_options
from tandem.engine.config import FIXED_K
from tandem.session.refs import PairRef
from tandem.ui.app import TandemApp
from tandem.ui.screens.picker import PickerScreen
from tandem.ui.settings import Settings, save_settings
from tandem.ui.storage import AppDirs

ROOT = Path(__file__).resolve().parents[2]


def _app_settings(dirs: AppDirs) -> None:
    # The app's own settings leave context, K and p-min unchosen (the defaults' None).
    save_settings(dirs.settings_file, Settings(max_tokens=8, n_threads=1))


def test_a_catalog_pair_s_settings_apply_alike_in_run_chat_and_the_picker(
    tiny_hub: FakeHub, distinct_catalog: Path, tmp_path: Path
) -> None:
    # tandem run --pair (it downloads the pair first, --yes)
    cmd = [
        sys.executable,
        "-m",
        "tandem.cli.main",
        "run",
        "--pair",
        "tiny",
        "--yes",
        "--json",
        "-n",
        "8",
        "Hi",
    ]
    res = subprocess.run([*cmd, "--threads", "1"], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert res.returncode == 0, res.stderr
    run = json.loads(res.stdout)["config"]
    assert (run["context"], run["draft_max"], run["p_min"]) == (768, 3, 0.15)

    # tandem chat --pair: the app the chat command starts
    dirs = AppDirs.under(tmp_path / "chat-app")
    _app_settings(dirs)
    args = build_parser().parse_args(["chat", "--pair", "tiny"])
    app = app_for(chat_options(args), dirs=dirs)

    async def chat_scenario(pilot: Pilot[None]) -> None:
        await wait_ready(pilot)
        assert app.loaded is not None and app.loaded.pair.context_size == 768
        cfg = app.generation_config()
        assert (cfg.k_max, cfg.p_min) == (3, 0.15)

    run_app(app, chat_scenario)

    # the picker, on a first run
    dirs = AppDirs.under(tmp_path / "picker-app")
    _app_settings(dirs)
    picked = TandemApp(dirs=dirs)

    async def picker_scenario(pilot: Pilot[None]) -> None:
        await wait_for(pilot, lambda: isinstance(picked.screen, PickerScreen), 10, "picker")
        screen = picked.screen
        assert isinstance(screen, PickerScreen)
        await wait_for(pilot, lambda: screen.listing is not None, 20, "catalog")
        table = screen.query_one("#catalog")
        table.focus()
        await pilot.pause()
        await pilot.press("enter")  # downloaded already: loads it
        await wait_ready(pilot)
        assert picked.loaded is not None and picked.loaded.pair.context_size == 768
        cfg = picked.generation_config()
        assert (cfg.k_max, cfg.p_min) == (3, 0.15)

    run_app(picked, picker_scenario)


def test_the_panel_shows_k_as_the_engine_runs_it(dirs: AppDirs, tiny_close_ref: PairRef) -> None:
    # Seeded sampling with adaptive drafting asked for: the engine drafts a fixed K = 5.
    save_settings(dirs.settings_file, FIXED.updated(draft_max=None, adaptive=True, temperature=0.8, seed=3))
    app = TandemApp(dirs=dirs, pair=tiny_close_ref)

    async def scenario(pilot: Pilot[None]) -> None:
        await wait_ready(pilot)
        before = app.chat.stats_view()
        assert (before.k_max, before.adaptive) == (FIXED_K, False)  # before any answer
        await send(pilot, "Hello")
        after = app.chat.stats_view()
        assert (after.k_max, after.adaptive) == (FIXED_K, False)
        assert app.chat.live.start is not None and app.chat.live.start.draft_max == FIXED_K

    run_app(app, scenario)
