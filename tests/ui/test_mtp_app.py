"""The app with a target that drafts with its own heads (multi-token prediction): the picker
calls them the "built-in drafter" (a catalog pair with `draft = "mtp"`, a GGUF on disk), the
settings offer the mtp drafter, the chat colours their accepted guesses, and what cannot work
(a target without heads alone, the model drafter without a draft) is said, never a crash."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from textual.pilot import Pilot
from textual.widgets import DataTable, Select, Static
from ui_helpers import in_lm_studio, picker, run_app, send, wait_for, wait_ready

from catalogs import MTP_FILE, MTP_ONLY_CATALOG, MTP_REPO, install_catalog, mtp_target, no_heads_target
from hub_server import FakeHub
from tandem.engine import Origin
from tandem.engine.drafters.heads.mtp import head_of
from tandem.session.files import read_json
from tandem.session.refs import PairRef
from tandem.ui.app import TandemApp
from tandem.ui.screens.picker import PickerScreen
from tandem.ui.screens.settings import SettingsScreen
from tandem.ui.settings import load_settings
from tandem.ui.storage import AppDirs
from tandem.ui.widgets.chat_log import AnswerView
from tandem.ui.widgets.stats import StatsPanel


def _origins(app: TandemApp) -> set[Origin]:
    return {o for _, o in list(app.chat.query(AnswerView))[-1].tokens.pieces}


def test_the_picker_lists_a_pair_drafted_by_its_heads_as_built_in_and_loads_it_alone(
    dirs: AppDirs, hub: FakeHub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    gate = threading.Event()  # the download runs until the test has seen it
    hub.add(MTP_REPO, MTP_FILE, mtp_target()).gate = gate
    install_catalog(tmp_path, MTP_ONLY_CATALOG, monkeypatch)
    app = TandemApp(dirs=dirs)

    async def scenario(pilot: Pilot[None]) -> None:
        await wait_for(pilot, lambda: isinstance(app.screen, PickerScreen), 10)
        p = picker(app)
        await wait_for(pilot, lambda: p.listing is not None and p.online is True, 20, "catalog")
        table = p.query_one("#catalog", DataTable)
        assert str(table.get_row_at(0)[0]) == "tiny-mtp ★ built-in drafter hybrid"
        details = str(p.query_one("#catalog-details", Static).render())
        assert (
            "Draft:  built-in drafter: the target's own multi-token-prediction heads (no draft file)"
            in details
        )
        assert "the target, built-in drafter" in str(p.query_one("#intro", Static).render())
        table.focus()
        await pilot.pause()
        await pilot.press("enter")
        await wait_for(pilot, lambda: p.download is not None, 20, "download start")
        assert not p.query_one("#dl-row-draft").display  # one file: no draft row
        gate.set()
        await wait_for(pilot, lambda: app.loaded is not None, 60, "download and load")
        assert app.loaded.ref.name == "tiny-mtp" and app.loaded.ref.draft is None
        assert head_of(app.loaded.pair.target) is not None and hub.gets(MTP_FILE)
        assert read_json(dirs.state_file)["last_pair"]["draft"] == ""
        # The chat drafts with the heads (auto: the heads or prompt lookup, round by round).
        await send(pilot, "Tell me a story about the sea")
        assert {Origin.DRAFT, Origin.TARGET} <= _origins(app)
        view = app.chat.query_one(StatsPanel).view
        assert view.drafter == "auto" and view.mtp_rounds > 0  # the heads drafted some rounds

    run_app(app, scenario)
    # The next start reopens it, without a draft.
    again = TandemApp(dirs=dirs)

    async def second(pilot: Pilot[None]) -> None:
        await wait_ready(pilot)
        assert (
            again.loaded is not None
            and again.loaded.ref.name == "tiny-mtp"
            and again.loaded.ref.draft is None
        )

    run_app(again, second)


def test_choosing_the_mtp_drafter_in_the_settings(dirs: AppDirs) -> None:
    app = TandemApp(dirs=dirs, pair=PairRef(mtp_target(), None))

    async def scenario(pilot: Pilot[None]) -> None:
        await wait_ready(pilot)
        await pilot.press("f4")
        await wait_for(pilot, lambda: isinstance(app.screen, SettingsScreen), 10)
        select = app.screen.query_one("#drafter", Select)
        assert ("built-in heads (MTP)", "mtp") in select._options  # type: ignore[attr-defined]
        # As a user would: open the list, go down to the heads (auto, model, lookup, mtp), pick.
        select.focus()
        await pilot.press("enter")
        await pilot.pause()
        await pilot.press("down", "down", "down", "enter")
        await pilot.pause()
        assert select.value == "mtp"
        await pilot.press("ctrl+s")
        await wait_for(pilot, lambda: app.screen is app.chat, 10, "saved")
        assert app.settings.drafter == "mtp" and load_settings(dirs.settings_file)[0].drafter == "mtp"
        panel = app.chat.query_one(StatsPanel)
        assert panel.view.drafter == "mtp"
        await send(pilot, "Tell me a story about the sea")
        assert {Origin.DRAFT, Origin.TARGET} <= _origins(app)
        view = panel.view
        assert view.drafter == "mtp" and view.drafted > 0 and view.mtp_rounds > 0 and not view.lookup_rounds

        # The model drafter needs a draft model this pair does not have: said, and the app goes on.
        await pilot.press("f4")
        await wait_for(pilot, lambda: isinstance(app.screen, SettingsScreen), 10)
        app.screen.query_one("#drafter", Select).value = "model"
        await pilot.press("ctrl+s")
        await wait_for(pilot, lambda: app.screen is app.chat, 10, "saved")
        await send(pilot, "And another one")
        await wait_for(
            pilot,
            lambda: any("the model drafter needs a draft model" in n.message for n in app._notifications),
            20,
            "the notice",
        )
        assert app.loaded is not None and app.chat.job is None

    run_app(app, scenario)


def test_a_gguf_on_disk_with_heads_offers_its_built_in_drafter(
    dirs: AppDirs, hf_env: Path, tiny_target: Path
) -> None:
    models = in_lm_studio("test/qwen", {MTP_FILE: mtp_target()})
    app = TandemApp(dirs=dirs)

    async def scenario(pilot: Pilot[None]) -> None:
        await wait_for(pilot, lambda: isinstance(app.screen, PickerScreen), 10)
        p = picker(app)
        await wait_for(pilot, lambda: p.disk, 20, "disk")
        disk = p.query_one("#disk", DataTable)
        (row,) = [disk.get_row_at(i) for i in range(disk.row_count)]
        assert row[0] == MTP_FILE and row[-1] == "built-in"
        disk.focus()
        disk.move_cursor(row=0)
        await pilot.pause()
        drafts = p.query_one("#drafts", DataTable)
        assert drafts.row_count == 1 and drafts.get_row_at(0)[0] == "built-in drafter"
        await pilot.press("enter")  # no other draft: loads it alone
        await wait_for(pilot, lambda: app.loaded is not None, 30, "load")
        assert app.loaded.ref == PairRef(models / MTP_FILE, None)

    run_app(app, scenario)


def test_a_target_without_heads_alone_is_refused_and_the_app_goes_on(dirs: AppDirs) -> None:
    app = TandemApp(dirs=dirs, pair=PairRef(no_heads_target(), None))

    async def scenario(pilot: Pilot[None]) -> None:
        await wait_for(
            pilot, lambda: isinstance(app.screen, PickerScreen), 20, "the picker, after the failure"
        )
        await wait_for(
            pilot,
            lambda: any(
                "has no built-in draft heads" in n.message and "pick a pair with a draft model" in n.message
                for n in app._notifications
            ),
            20,
            "the notice (notifications arrive as messages)",
        )
        p = picker(app)  # the picker opened in its place, and works
        await wait_for(pilot, lambda: p.listing is not None, 20, "catalog")
        assert app.loaded is None and app.loading is None

    run_app(app, scenario)
