"""Token colours by origin, shared by every screen (and explained on the help screen).

The same meaning as the CLI's colours: green = a draft token the target accepted, yellow = the
target's own token after a rejected guess (or with no draft), cyan = the bonus token the target
adds after a fully accepted run. Hex values so they look the same in every terminal theme.
"""

from __future__ import annotations

from rich.style import Style

from tandem.engine import Origin

ORIGIN_COLOURS: dict[Origin, str] = {
    Origin.DRAFT: "#7bd88f",
    Origin.TARGET: "#f5c451",
    Origin.BONUS: "#5fd3e8",
}
ORIGIN_LABELS: dict[Origin, str] = {
    Origin.DRAFT: "draft accepted",
    Origin.TARGET: "target correction",
    Origin.BONUS: "bonus",
}
ORIGIN_STYLES: dict[Origin, Style] = {o: Style(color=c) for o, c in ORIGIN_COLOURS.items()}
CODE_BACKGROUND = "#262b36"  # fenced code blocks in a streamed answer
