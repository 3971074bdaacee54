"""Demo, settings, help, saved chats and the command palette, against real models."""

from __future__ import annotations

from textual.pilot import Pilot
from textual.widgets import Input, Select, Static, Switch
from ui_helpers import FIXED, run_app, send, wait_for, wait_ready

from tandem.session.refs import PairRef
from tandem.ui.app import TandemApp
from tandem.ui.screens.demo import DemoPane, DemoScreen, first_difference
from tandem.ui.screens.help import HelpScreen
from tandem.ui.screens.settings import SettingsScreen
from tandem.ui.settings import load_settings
from tandem.ui.storage import AppDirs


def test_demo_runs_target_alone_then_speculative(dirs: AppDirs, tiny_close_ref: PairRef) -> None:
    app = TandemApp(dirs=dirs, pair=tiny_close_ref)

    async def scenario(pilot: Pilot[None]) -> None:
        await wait_ready(pilot)
        await pilot.press("f3")
        await wait_for(pilot, lambda: isinstance(app.screen, DemoScreen), 10)
        demo = app.screen
        assert isinstance(demo, DemoScreen)
        await pilot.press("enter")
        await wait_for(pilot, lambda: demo.stage == "speculative" and demo.job is None, 60, "demo")
        base, spec = demo.results["baseline"], demo.results["speculative"]
        # One after the other: the speculative run started after the target-alone run ended.
        assert base.mode == "baseline" and spec.mode == "speculative"
        assert base.generated == spec.generated == 32
        verdict = str(demo.query_one("#verdict", Static).render())
        assert "Speedup" in verdict and "identical output" in verdict
        assert demo.query_one("#baseline", DemoPane).ids == demo.query_one("#speculative", DemoPane).ids
        await pilot.press("escape")
        await pilot.pause()
        assert app.screen is app.chat

    run_app(app, scenario)


def test_demo_escape_stops_and_does_not_start_the_second_run(
    dirs: AppDirs, smollm2_ref: PairRef, write_settings: object
) -> None:
    assert callable(write_settings)
    write_settings(FIXED.updated(max_tokens=2000, n_threads=None))
    app = TandemApp(dirs=dirs, pair=smollm2_ref)

    async def scenario(pilot: Pilot[None]) -> None:
        await wait_ready(pilot)
        await pilot.press("f3")
        await wait_for(pilot, lambda: isinstance(app.screen, DemoScreen), 10)
        demo = app.screen
        assert isinstance(demo, DemoScreen)
        # A long answer: each key press waits until the process is idle (Textual's pilot, up to
        # 1 s) while the engine keeps it busy, and a short answer would end before Escape lands.
        demo.query_one("#demo-prompt", Input).value = "List 200 animals, one per line, numbered."
        await pilot.press("enter")
        pane = demo.query_one("#baseline", DemoPane)
        await wait_for(pilot, lambda: len(pane.ids) > 5, 60, "tokens")
        await pilot.press("escape")
        await wait_for(pilot, lambda: demo.job is None, 20, "stop")
        assert demo.results["baseline"].stop_reason == "cancelled"
        assert "speculative" not in demo.results and demo.stage == "baseline"

    run_app(app, scenario)


def test_first_difference() -> None:
    assert first_difference([1, 2, 3], [1, 2, 3]) is None
    assert first_difference([1, 2, 3], [1, 5, 3]) == 1
    assert first_difference([1, 2], [1, 2, 3]) == 2


def test_settings_are_validated_saved_as_toml_and_reload_the_pair(dirs: AppDirs, tiny_ref: PairRef) -> None:
    app = TandemApp(dirs=dirs, pair=tiny_ref)

    async def scenario(pilot: Pilot[None]) -> None:
        await wait_ready(pilot)
        first = app.loaded
        await pilot.press("f4")
        await wait_for(pilot, lambda: isinstance(app.screen, SettingsScreen), 10)
        screen = app.screen
        screen.query_one("#draft_max", Input).value = "99"
        await pilot.press("ctrl+s")
        await pilot.pause()
        assert "between 0 and 32" in str(screen.query_one("#error", Static).render())
        assert isinstance(app.screen, SettingsScreen)
        screen.query_one("#draft_max", Input).value = "7"
        screen.query_one("#temperature", Input).value = "0.7"
        screen.query_one("#seed", Input).value = "42"
        screen.query_one("#n_ctx", Input).value = "768"
        screen.query_one("#adaptive", Switch).value = True
        screen.query_one("#drafter", Select).value = "model"
        await pilot.press("ctrl+s")
        await pilot.pause()
        assert app.screen is app.chat, str(screen.query_one("#error", Static).render())
        s = app.settings
        assert (s.draft_max, s.temperature, s.seed, s.n_ctx, s.adaptive) == (7, 0.7, 42, 768, True)
        assert s.drafter == "model" and app.settings.generation_config().drafter == "model"
        saved, notes = load_settings(dirs.settings_file)
        assert saved == s and not notes
        # The context size changed: the pair is reloaded with it.
        await wait_ready(pilot)
        assert app.loaded is not first and app.loaded.pair.target.n_ctx == 768
        # Cancel leaves everything as it was.
        await pilot.press("f4")
        await wait_for(pilot, lambda: isinstance(app.screen, SettingsScreen), 10)
        app.screen.query_one("#draft_max", Input).value = "3"
        await pilot.press("escape")
        await pilot.pause()
        assert app.settings.draft_max == 7

    run_app(app, scenario)


def test_help_and_command_palette(dirs: AppDirs, tiny_ref: PairRef) -> None:
    app = TandemApp(dirs=dirs, pair=tiny_ref)

    async def scenario(pilot: Pilot[None]) -> None:
        await wait_ready(pilot)
        await pilot.press("f1")
        await pilot.pause()
        assert isinstance(app.screen, HelpScreen)
        text = " ".join(str(s.render()) for s in app.screen.query(Static))
        assert "green" in text and "bonus" in text and "same answer" in text and "Prefill" in text
        await pilot.press("escape")
        await pilot.pause()
        assert app.screen is app.chat
        titles = [c.title for c in app.get_system_commands(app.screen)]
        for t in ("Pairs", "Speed demo", "Settings", "Help", "New chat", "Saved chats", "Stop", "Regenerate"):
            assert t in titles
        await pilot.press("ctrl+p")
        await pilot.pause()
        await pilot.press(*"speed demo")
        await pilot.pause(0.3)
        await pilot.press("enter")
        await wait_for(pilot, lambda: isinstance(app.screen, DemoScreen), 10, "palette -> demo")

    run_app(app, scenario)


def test_saved_chats_list_opens_and_deletes(dirs: AppDirs, tiny_ref: PairRef) -> None:
    from tandem.ui.screens.conversations import ConversationsScreen

    app = TandemApp(dirs=dirs, pair=tiny_ref)

    async def scenario(pilot: Pilot[None]) -> None:
        await wait_ready(pilot)
        await send(pilot, "one")
        await pilot.press("ctrl+n")
        await send(pilot, "two")
        await pilot.press("ctrl+n")
        assert len(app.conversations.list()) == 2
        await pilot.press("ctrl+o")
        await pilot.pause()
        assert isinstance(app.screen, ConversationsScreen)
        assert [s.title for s in app.screen.items] == ["two", "one"]
        await pilot.press("d")
        await pilot.pause()
        assert [s.title for s in app.conversations.list()] == ["one"]
        await pilot.press("enter")
        await pilot.pause()
        assert app.chat.conv.title == "one" and len(app.chat.conv.turns) == 2

    run_app(app, scenario)
