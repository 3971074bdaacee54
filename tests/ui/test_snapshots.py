"""How each screen looks (pytest-textual-snapshot). Update with `pytest --snapshot-update`.

Deterministic by construction: a fixed terminal size; the chat shows a saved conversation that
a real SmolLM2 run produced (tests/ui/fixtures/chat.json: its text and token origins), the
numbers come from a fixed StatsView instead of this machine's timings, the demo panes show the
same fixed text with fixed speeds, text cursors do not blink, there is no network
(HF_HUB_OFFLINE), and memory is pinned (TANDEM_MEMORY).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from textual.pilot import Pilot
from textual.widgets import Input
from ui_helpers import wait_for, wait_ready

from tandem.engine import Origin
from tandem.engine.stats import DrafterStats
from tandem.session.files import write_json
from tandem.session.refs import PairRef
from tandem.ui.app import TandemApp
from tandem.ui.conversations import Conversation
from tandem.ui.screens.demo import DemoPane, DemoScreen
from tandem.ui.storage import AppDirs
from tandem.ui.widgets.stats import StatsPanel, StatsView

FIXTURE = Path(__file__).parent / "fixtures" / "chat.json"
Snap = Callable[..., bool]

PER_ROUND = [13, 13, 9, 13, 5, 13, 13, 13, 8, 13, 13, 6, 13, 13, 3, 13, 7, 13, 13, 9, 4, 13, 6, 3]


def fixed_view(app: TandemApp, *, load_changed: bool = False) -> StatsView:
    assert app.loaded is not None
    return StatsView(
        pair=app.loaded.ref.label,
        state="ready",
        tokens_per_s=57.9,
        speedup=1.23,
        speedup_low=1.15,
        speedup_high=1.31,
        target_alone_tps=46.9,
        speedup_steps=5,
        load_changed=load_changed,
        acceptance=0.91,
        accepted=120,
        drafted=132,
        tokens_per_round=10.85,
        k=12,
        k_max=12,
        adaptive=True,
        drafter="auto",
        last_drafter="model",
        drafters={"lookup": DrafterStats(rounds=2)},
        rounds=24,
        prefill_tokens=17,
        prompt_tokens=212,
        generated=134,
        stop_reason="eog",
        per_round=[float(x) for x in PER_ROUND],
    )


def conversation() -> Conversation:
    conv = Conversation.from_json(json.loads(FIXTURE.read_text(encoding="utf-8")))
    assert conv is not None
    return conv


async def still(pilot: Pilot[None]) -> None:
    """No blinking cursors, nothing pending."""
    for inp in pilot.app.screen.query(Input):
        inp.cursor_blink = False
    await pilot.pause()


def chat_app(dirs: AppDirs, smollm2_ref: PairRef) -> TandemApp:
    return TandemApp(dirs=dirs, pair=smollm2_ref)


async def show_chat(pilot: Pilot[None]) -> None:
    app = pilot.app
    assert isinstance(app, TandemApp)
    await wait_ready(pilot)
    app.chat.load_conversation(conversation())
    await pilot.pause()
    app.chat.query_one(StatsPanel).show(fixed_view(app))
    await still(pilot)


@pytest.mark.parametrize("size", [(120, 40), (80, 24)], ids=["120x40", "80x24"])
def test_chat(snap_compare: Snap, dirs: AppDirs, smollm2_ref: PairRef, size: tuple[int, int]) -> None:
    assert snap_compare(chat_app(dirs, smollm2_ref), terminal_size=size, run_before=show_chat)


def test_chat_on_a_busy_machine(snap_compare: Snap, dirs: AppDirs, smollm2_ref: PairRef) -> None:
    """The machine's speed changed mid-answer (a neighbour arrived): the panel says so."""

    async def run_before(pilot: Pilot[None]) -> None:
        await show_chat(pilot)
        app = pilot.app
        assert isinstance(app, TandemApp)
        app.chat.query_one(StatsPanel).show(fixed_view(app, load_changed=True))
        await still(pilot)

    assert snap_compare(chat_app(dirs, smollm2_ref), terminal_size=(120, 40), run_before=run_before)


def test_chat_plain_reading(snap_compare: Snap, dirs: AppDirs, smollm2_ref: PairRef) -> None:
    async def run_before(pilot: Pilot[None]) -> None:
        await show_chat(pilot)
        await pilot.press("ctrl+t")
        await pilot.pause()

    assert snap_compare(chat_app(dirs, smollm2_ref), terminal_size=(120, 40), run_before=run_before)


def test_picker_first_run_offline(snap_compare: Snap, dirs: AppDirs, smollm2_ref: PairRef) -> None:
    # Two GGUFs on disk (an LM Studio folder) and no network: the picker offers them.
    folder = Path(os.environ["HOME"]) / ".lmstudio" / "models" / "HuggingFaceTB" / "SmolLM2-135M-Instruct"
    folder.mkdir(parents=True)
    for f in (smollm2_ref.target, smollm2_ref.draft):
        os.symlink(f, folder / f.name)
    app = TandemApp(dirs=dirs)

    async def run_before(pilot: Pilot[None]) -> None:
        from tandem.ui.screens.picker import PickerScreen

        await wait_for(pilot, lambda: isinstance(app.screen, PickerScreen), 10)
        p = app.screen
        assert isinstance(p, PickerScreen)
        await wait_for(pilot, lambda: p.online is False and p.disk and p.listing is not None, 20)
        await still(pilot)

    assert snap_compare(app, terminal_size=(120, 40), run_before=run_before)


def test_picker_catalog(snap_compare: Snap, dirs: AppDirs, monkeypatch: pytest.MonkeyPatch) -> None:
    """The built-in catalog with the default pair preselected, as on a first run with network
    (the network check is answered by a stand-in)."""
    monkeypatch.setattr("tandem.ui.screens.picker.hub_reachable", lambda: (True, ""))
    app = TandemApp(dirs=dirs)

    async def run_before(pilot: Pilot[None]) -> None:
        from tandem.ui.screens.picker import PickerScreen

        await wait_for(pilot, lambda: isinstance(app.screen, PickerScreen), 10)
        p = app.screen
        assert isinstance(p, PickerScreen)
        await wait_for(pilot, lambda: p.online is True and p.listing is not None, 20)
        await still(pilot)

    assert snap_compare(app, terminal_size=(120, 40), run_before=run_before)


def test_demo(snap_compare: Snap, dirs: AppDirs, smollm2_ref: PairRef) -> None:
    app = chat_app(dirs, smollm2_ref)
    answer = conversation().turns[1]

    async def run_before(pilot: Pilot[None]) -> None:
        await wait_ready(pilot)
        await pilot.press("f3")
        await wait_for(pilot, lambda: isinstance(app.screen, DemoScreen), 10)
        demo = app.screen
        assert isinstance(demo, DemoScreen)
        base, spec = demo.query_one("#baseline", DemoPane), demo.query_one("#speculative", DemoPane)
        base.text.append([(answer.content, Origin.TARGET)])
        spec.text.append(answer.pieces())
        base.text.stream_done()  # both runs have finished
        spec.text.stream_done()
        base.show_speed(46.9, "134 tokens")
        spec.show_speed(57.9, "134 tokens · 91% accepted · 10.85 tok/pass")
        ids = list(range(134))
        demo.show_result(46.9, 57.9, ids, ids)
        await still(pilot)

    assert snap_compare(app, terminal_size=(120, 40), run_before=run_before)


@pytest.mark.parametrize("key", ["f4", "f1"], ids=["settings", "help"])
def test_modal_screens(snap_compare: Snap, dirs: AppDirs, tiny_ref: PairRef, key: str) -> None:
    app = TandemApp(dirs=dirs, pair=tiny_ref)

    async def run_before(pilot: Pilot[None]) -> None:
        await wait_ready(pilot)
        app.chat.query_one(StatsPanel).show(StatsView(pair=tiny_ref.label, state="ready", k_max=4))
        await pilot.press(key)
        await pilot.pause()
        await still(pilot)

    assert snap_compare(app, terminal_size=(120, 40), run_before=run_before)


def test_saved_chats(
    snap_compare: Snap, dirs: AppDirs, tiny_ref: PairRef, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    base = json.loads(FIXTURE.read_text(encoding="utf-8"))
    for i, title in enumerate(["Write a Python function that reverses a string.", "What is 2+2?"]):
        data: dict[str, Any] = dict(base, id=f"20261121-12000{i}-abc", updated=base["updated"] + 3600 * i)
        data["turns"] = [dict(base["turns"][0], content=title), base["turns"][1]]
        write_json(dirs.conversations / f"{data['id']}.json", data)
    app = TandemApp(dirs=dirs, pair=tiny_ref)

    async def run_before(pilot: Pilot[None]) -> None:
        await wait_ready(pilot)
        app.chat.query_one(StatsPanel).show(StatsView(pair=tiny_ref.label, state="ready", k_max=4))
        await pilot.press("ctrl+o")
        await pilot.pause()
        await still(pilot)

    try:
        assert snap_compare(app, terminal_size=(120, 40), run_before=run_before)
    finally:
        monkeypatch.undo()
        time.tzset()
