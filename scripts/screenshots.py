#!/usr/bin/env python3
"""Screenshots of the app for the README (assets/screenshots/*.svg), from real runs.

The app runs headless at 120x40 on the SmolLM2 test pair (or --target/--draft): a first-run
picker, a two-turn chat, and the speed demo. Numbers are this machine's, live. The picker is
shot as a user with network sees it (the development machines have none, so the network
check is answered "online" for that one picture; nothing is downloaded).

    .venv/bin/python scripts/screenshots.py
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "assets" / "screenshots"
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "tests" / "ui"))


async def shoot(target: Path, draft: Path, size: tuple[int, int]) -> None:
    from textual.widgets import Input
    from ui_helpers import send, wait_for, wait_ready

    from tandem.session.refs import PairRef
    from tandem.ui.app import TandemApp
    from tandem.ui.screens.demo import DemoScreen
    from tandem.ui.screens.picker import PickerScreen
    from tandem.ui.settings import Settings, save_settings
    from tandem.ui.storage import AppDirs

    suffix = "" if size == (120, 40) else f"-{size[0]}x{size[1]}"

    def save(app: TandemApp, name: str) -> None:
        for inp in app.screen.query(Input):
            inp.cursor_blink = False
        path = app.save_screenshot(filename=f"{name}{suffix}.svg", path=str(OUT))
        print(path)

    with tempfile.TemporaryDirectory() as tmp:
        dirs = AppDirs.under(Path(tmp))
        save_settings(dirs.settings_file, Settings(max_tokens=200))
        import tandem.ui.screens.picker as picker_module

        picker_module.hub_reachable = lambda: (True, "")  # see the docstring
        first = TandemApp(dirs=dirs)
        async with first.run_test(size=size) as pilot:
            await wait_for(pilot, lambda: isinstance(first.screen, PickerScreen), 10)
            p = first.screen
            assert isinstance(p, PickerScreen)
            await wait_for(pilot, lambda: p.listing is not None and p.online is not None, 30)
            await pilot.pause(0.5)
            save(first, "picker")

        app = TandemApp(dirs=dirs, pair=PairRef(target, draft))
        async with app.run_test(size=size) as pilot:
            await wait_ready(pilot, 120)
            await send(pilot, "Write a Python function that reverses a string.", 300)
            await send(pilot, "Now explain it in one sentence.", 300)
            await pilot.pause(0.5)
            save(app, "chat")
            await pilot.press("f3")
            await wait_for(pilot, lambda: isinstance(app.screen, DemoScreen), 10)
            demo = app.screen
            assert isinstance(demo, DemoScreen)
            await pilot.press("enter")
            await wait_for(pilot, lambda: demo.stage == "speculative" and demo.job is None, 300)
            await pilot.pause(0.5)
            save(app, "demo")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--target", type=Path)
    p.add_argument("--draft", type=Path)
    p.add_argument("--size", default="120x40", help="terminal size, e.g. 80x24")
    args = p.parse_args()
    if not args.target or not args.draft:
        import model_files

        args.target, args.draft = model_files.smollm2("F16"), model_files.smollm2_q4_1()
    w, h = (int(x) for x in args.size.split("x"))
    OUT.mkdir(parents=True, exist_ok=True)
    asyncio.run(shoot(args.target, args.draft, (w, h)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
