"""The app stays up whatever its files and workers meet: a hostile GGUF in a scanned folder,
a worker failing on something unexpected, another instance saving the same settings."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from textual.pilot import Pilot
from textual.widgets import Static
from ui_helpers import run_app, wait_for

from catalogs import link_or_copy
from tandem.session.refs import PairRef
from tandem.ui.app import TandemApp
from tandem.ui.screens.picker import PickerScreen
from tandem.ui.settings import Settings, load_settings, save_changes, save_settings
from tandem.ui.storage import AppDirs

ROOT = Path(__file__).resolve().parents[2]


def hostile_gguf(path: Path) -> Path:
    """109 bytes claiming 2^40 tokens: it cost 527 MiB and a MemoryError before the header
    parser bounded its counts."""
    key = b"tokenizer.ggml.tokens"
    data = b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + struct.pack("<Q", len(key)) + key
    data += struct.pack("<IIQ", 9, 8, 2**40)  # an array of strings, 2^40 of them
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data.ljust(109, b"\0"))
    return path


@pytest.fixture
def lm_studio(hf_env: Path, tiny_target: Path) -> Path:
    """LM Studio's folder (under the test's HOME) with a hostile GGUF beside a good one."""
    root = hf_env.parent / "home" / ".lmstudio" / "models"
    hostile_gguf(root / "evil" / "repo" / "bad.gguf")
    link_or_copy(tiny_target, root / "pub" / "repo" / "good.gguf")
    return root


def test_a_hostile_gguf_in_a_scanned_folder_leaves_the_picker_up(dirs: AppDirs, lm_studio: Path) -> None:
    app = TandemApp(dirs=dirs)

    async def scenario(pilot: Pilot[None]) -> None:
        await wait_for(pilot, lambda: isinstance(app.screen, PickerScreen), 10, "picker")
        picker = app.screen
        assert isinstance(picker, PickerScreen)
        await wait_for(pilot, lambda: bool(picker.disk), 30, "disk scan")
        assert [m.gguf.path.name for m in picker.disk] == ["good.gguf"]  # the bad one is skipped
        assert app.is_running and app.screen is picker

    run_app(app, scenario)


def test_tandem_models_lists_past_a_hostile_gguf(lm_studio: Path) -> None:
    res = subprocess.run(
        [sys.executable, "-m", "tandem.cli.main", "models", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert res.returncode == 0 and "Traceback" not in res.stderr
    out = json.loads(res.stdout)
    assert [Path(m["path"]).name for m in out["models"]] == ["good.gguf"]
    skipped = {Path(s["path"]).name: s["reason"] for s in out["skipped"]}
    assert "not a usable GGUF" in skipped["bad.gguf"] or "truncated" in skipped["bad.gguf"]


def test_a_worker_failing_unexpectedly_is_shown_and_the_app_goes_on(
    dirs: AppDirs, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken_probe() -> tuple[bool, str]:
        raise RuntimeError("probe exploded")

    def broken_scan() -> list[object]:
        raise RecursionError("scan exploded")

    monkeypatch.setattr("tandem.ui.screens.picker.hub_reachable", broken_probe)
    monkeypatch.setattr("tandem.ui.picker.disk_tab.disk_models", broken_scan)
    app = TandemApp(dirs=dirs)

    async def scenario(pilot: Pilot[None]) -> None:
        await wait_for(pilot, lambda: isinstance(app.screen, PickerScreen), 10, "picker")
        picker = app.screen
        assert isinstance(picker, PickerScreen)
        # The probe's worker has no failure path of its own: the app's safety net reports it.
        await wait_for(
            pilot, lambda: any("probe exploded" in n.message for n in app._notifications), 20, "notice"
        )
        # The disk scan reports its own failure where the user looks, and the tab stays usable.
        error = picker.query_one("#error", Static)
        await wait_for(pilot, lambda: "scan exploded" in str(error.render()), 20, "error line")
        assert "unexpected error (RecursionError" in str(error.render())
        assert app.is_running and app.screen is picker

    run_app(app, scenario)


def test_two_instances_saving_settings_keep_each_other_s_changes(tmp_path: Path) -> None:
    path = tmp_path / "settings.toml"
    save_settings(path, Settings())
    first, _ = load_settings(path)  # both instances read the same file at start
    second, _ = load_settings(path)
    saved_first = save_changes(path, first, first.updated(temperature=0.7))
    saved_second = save_changes(path, second, second.updated(top_k=7))
    assert saved_first.temperature == 0.7
    on_disk, notes = load_settings(path)
    assert (on_disk.temperature, on_disk.top_k) == (0.7, 7) and notes == []
    assert saved_second == on_disk  # the second instance now sees the first one's change too


def test_settings_saved_in_the_app_merge_with_the_file(dirs: AppDirs, tiny_ref: PairRef) -> None:
    app = TandemApp(dirs=dirs, pair=tiny_ref)

    async def scenario(pilot: Pilot[None]) -> None:
        # Another instance changes the temperature after this one started...
        other, _ = load_settings(dirs.settings_file)
        save_changes(dirs.settings_file, other, other.updated(temperature=0.5))
        # ...and this one saves a change of its own.
        app._settings_saved(app.settings.updated(top_k=9))
        await pilot.pause()
        assert (app.settings.temperature, app.settings.top_k) == (0.5, 9)
        on_disk, _ = load_settings(dirs.settings_file)
        assert (on_disk.temperature, on_disk.top_k) == (0.5, 9)

    run_app(app, scenario)


def test_a_saved_chat_that_cannot_be_read_now_is_reported_and_left_in_place(
    dirs: AppDirs, tiny_ref: PairRef
) -> None:
    # A real read error without root's immunity to permissions: a folder where a chat file goes.
    blocked = dirs.conversations / "20261124-000000-blocked.json"
    blocked.mkdir(parents=True)
    app = TandemApp(dirs=dirs, pair=tiny_ref)

    async def scenario(pilot: Pilot[None]) -> None:
        await wait_for(
            pilot,
            lambda: any("could not be read right now" in n.message for n in app._notifications),
            10,
            "notice",
        )
        assert blocked.is_dir()  # left where it was, not moved to damaged/
        assert not (dirs.conversations / "damaged").exists()

    run_app(app, scenario)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="named pipes are POSIX")
def test_the_app_starts_past_app_files_that_are_not_files(dirs: AppDirs, tiny_ref: PairRef) -> None:
    """Named pipes for settings.toml, state.json and a saved chat (each read used
    to wait for a writer forever), and a chat linked to /dev/zero (2.6 GB read, then an uncaught
    MemoryError): the app starts with its defaults, sets the chats aside and says so."""
    dirs.settings_file.unlink()
    for path in (dirs.settings_file, dirs.state_file, dirs.conversations / "chat1.json"):
        path.parent.mkdir(parents=True, exist_ok=True)
        os.mkfifo(path)
    (dirs.conversations / "chat2.json").symlink_to("/dev/zero")
    started: list[TandemApp] = []

    def start() -> None:
        app = TandemApp(dirs=dirs, pair=tiny_ref)
        started.append(app)

        async def scenario(pilot: Pilot[None]) -> None:
            await wait_for(
                pilot,
                lambda: any("2 saved chat file(s)" in n.message for n in app._notifications),
                30,
                "notice",
            )

        run_app(app, scenario)

    # In a thread of its own: a regression blocks on a pipe, and fails here instead of hanging.
    thread = threading.Thread(target=start, daemon=True)
    thread.start()
    thread.join(120)
    assert not thread.is_alive(), "the app did not start"
    assert started and started[0].settings == Settings()
    moved = sorted(p.name.split(".")[0] for p in (dirs.conversations / "damaged").iterdir())
    assert moved == ["chat1", "chat2"]
