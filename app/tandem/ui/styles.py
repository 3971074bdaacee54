"""Where the app's look is written: one stylesheet (tandem.tcss) for every screen and widget,
each rule starting with its class. Textual reads it as the app's CSS (TandemApp.CSS_PATH); a
test that mounts a widget in an app of its own gives that app the same sheet."""

from __future__ import annotations

from pathlib import Path

STYLESHEET = Path(__file__).with_name("tandem.tcss")
