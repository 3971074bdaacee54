"""Waiting on the app from a Pilot test: real models take real (if short) time."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from textual import events
from textual.pilot import Pilot
from textual.widgets import Static

from catalogs import link_or_copy
from tandem.ui.app import TandemApp
from tandem.ui.screens.picker import PickerScreen
from tandem.ui.settings import Settings

# Greedy decoding with a fixed K: which tokens are drafted, corrected or bonus depends on the
# models only, so the colours are the same on every run.
# One llama.cpp thread: the tiny models need no more, and a test machine shared with other
# jobs then cannot stall a generation on a thread that is waiting for a core.
FIXED = Settings(draft_max=4, adaptive=False, max_tokens=32, n_ctx=1024, n_threads=1)


async def wait_for(
    pilot: Pilot[None],
    cond: Callable[[], object],
    timeout: float = 60.0,
    what: str | Callable[[], str] = "",
) -> None:
    """Until `cond()`; `what` names it in the failure (a callable: read at the failure, to say
    the state the app was in then)."""
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            said = what() if callable(what) else what
            raise AssertionError(f"timed out waiting for {said or cond}")
        await pilot.pause(0.05)


async def wait_ready(pilot: Pilot[None], timeout: float = 60.0) -> TandemApp:
    """Until the pair is loaded."""
    app = pilot.app
    assert isinstance(app, TandemApp)
    await wait_for(pilot, lambda: app.loaded is not None and app.loading is None, timeout, "load")
    return app


# Typed key by key up to this many characters; the rest arrives as a paste. A Pilot key press
# waits for the app to settle (~0.1 s): a 200-character message typed took 20 s.
TYPED = 16


async def start_sending(pilot: Pilot[None], text: str) -> None:
    """Type a message in the chat's prompt and press Enter; returns as the answer starts."""
    app = pilot.app
    assert isinstance(app, TandemApp)
    prompt = app.chat.query_one("#prompt")
    prompt.focus()
    await pilot.press(*text[:TYPED])
    if text[TYPED:]:
        prompt.post_message(events.Paste(text[TYPED:]))
        await pilot.pause()
    await pilot.press("enter")


async def send(pilot: Pilot[None], text: str, timeout: float = 60.0) -> None:
    """Type a message, press Enter, wait for the whole answer."""
    app = pilot.app
    assert isinstance(app, TandemApp)
    chat = app.chat
    n = len(chat.conv.turns)
    await start_sending(pilot, text)
    await wait_for(
        pilot, lambda: chat._failed or (chat.job is None and len(chat.conv.turns) >= n + 2), timeout, "answer"
    )
    await pilot.pause()


def run_app(
    app: TandemApp, scenario: Callable[[Pilot[None]], Awaitable[None]], size: tuple[int, int] = (120, 40)
) -> None:
    """Run `scenario` against the app, headless, at a fixed terminal size."""

    async def main() -> None:
        async with app.run_test(size=size, notifications=True) as pilot:
            await scenario(pilot)

    asyncio.run(main())


def picker(app: TandemApp) -> PickerScreen:
    screen = app.screen
    assert isinstance(screen, PickerScreen), screen
    return screen


def text_of(screen: PickerScreen, selector: str) -> str:
    return str(screen.query_one(selector, Static).render())


def in_lm_studio(folder: str, files: dict[str, Path]) -> Path:
    """GGUFs where LM Studio keeps models (~/.lmstudio/models/<folder>/<name>: source), for the
    picker's On disk tab to find. The folder."""
    models = Path(os.environ["HOME"]) / ".lmstudio" / "models" / folder
    for name, src in files.items():
        link_or_copy(src, models / name)
    return models
