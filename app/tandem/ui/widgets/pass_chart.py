"""A small bar chart of tokens per target pass, one column per round, the latest at the right.

Textual's Sparkline re-renders a Rich renderable (buckets, colour blends per bar) on every
repaint, which cost ~2.5 ms per update on the 2-core test machine while the engine decodes on
the same cores. This chart builds its few rows of strips once when the data changes and hands
out the cached strips when the screen repaints.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from rich.color import Color as RichColor
from rich.segment import Segment
from rich.style import Style
from textual.color import Color
from textual.strip import Strip
from textual.widget import Widget

_BARS = " ▁▂▃▄▅▆▇█"  # index = eighths of a row filled
_LEVELS = 8  # colour steps from the low colour to the high colour


class PassChart(Widget):
    """Bars scaled from zero to the largest value shown; colour deepens with height."""

    COMPONENT_CLASSES: ClassVar[set[str]] = {"pass-chart--low", "pass-chart--high"}

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._data: list[float] = []
        self._rows: list[Strip] = []
        self._built_for: tuple[int, int] = (-1, -1)  # (width, height) the rows were built at

    def set_data(self, data: Sequence[float]) -> None:
        data = [max(0.0, float(v)) for v in data]
        if data != self._data:
            self._data = data
            self._built_for = (-1, -1)
            self.refresh()

    def _styles(self, base: Style) -> list[Style]:
        """Foreground styles from the low to the high colour, on the widget's background."""
        low = self.get_component_styles("pass-chart--low").color
        high = self.get_component_styles("pass-chart--high").color
        background = Color.from_rich_color(base.bgcolor) if base.bgcolor else Color(0, 0, 0)
        out = []
        for i in range(_LEVELS):
            c = background + low.blend(high, i / (_LEVELS - 1))  # alpha over the background
            out.append(base + Style(color=RichColor.from_rgb(c.r, c.g, c.b)))
        return out

    def _build(self, width: int, height: int) -> None:
        self._built_for = (width, height)
        blank = self.rich_style
        values = self._data[-width:] if width > 0 else []
        pad = width - len(values)
        top = max(values, default=0.0)
        styles = self._styles(blank)
        # Each column's height in eighths of a row, over `height` rows.
        eighths = [round(v / top * 8 * height) if top > 0 else 0 for v in values]
        levels = [min(_LEVELS - 1, int(v / top * (_LEVELS - 1) + 0.5)) if top > 0 else 0 for v in values]
        rows: list[Strip] = []
        for row in range(height - 1, -1, -1):  # top row first
            segments = [Segment(" " * pad, blank)] if pad else []
            floor = row * 8
            for e, level in zip(eighths, levels, strict=True):
                fill = min(8, max(0, e - floor))
                segments.append(Segment(_BARS[fill], styles[level] if fill else blank))
            rows.append(Strip(segments, width).simplify())
        self._rows = rows

    def render_line(self, y: int) -> Strip:
        width, height = self.size
        if self._built_for != (width, height):
            self._build(width, height)
        return self._rows[y] if 0 <= y < len(self._rows) else Strip.blank(width, self.rich_style)

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._built_for = (-1, -1)
