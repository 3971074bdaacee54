"""Streamed answer text, coloured by token origin, that grows without being re-rendered.

A chat answer arrives a few tokens at a time. Re-rendering the whole answer for each batch
would cost O(answer) per frame; instead this widget keeps the answer as logical lines and
their wrapped, rendered strips. Appending only re-wraps the last (open) line; finished lines
are never touched again, except when the width changes or the colours are toggled.

Fenced code blocks (``` lines) get a darker background so code stays readable while it
streams; the finished answer can also be shown as Markdown (see AnswerView).
"""

from __future__ import annotations

from collections.abc import Iterable

from rich.cells import cell_len
from rich.style import Style
from rich.text import Text
from textual.geometry import Region, Size
from textual.strip import Strip
from textual.widget import Widget

from tandem.engine import Origin
from tandem.ui.colours import CODE_BACKGROUND, ORIGIN_STYLES

Piece = tuple[str, Origin]
_CONTROL = {c: None for c in range(32) if c not in (9, 10)}  # keep tabs and newlines
_CODE_STYLE = Style(bgcolor=CODE_BACKGROUND)


def _clean(text: str) -> str:
    return text.translate(_CONTROL).expandtabs(4) if text else text


class TokenText(Widget):
    """Text that only ever grows at its end."""

    def __init__(
        self, pieces: Iterable[Piece] = (), *, colour: bool = True, id: str | None = None, headroom: int = 1
    ) -> None:
        super().__init__(id=id)
        self.colour = colour
        # While streaming, the height grows `headroom` lines at a time: each growth costs the
        # whole screen a layout pass, far more than repainting a line, and on a small machine
        # that CPU is taken from the engine. stream_done() gives the blank lines back.
        self.headroom = headroom
        self._lines: list[list[Piece]] = [[]]  # logical lines; the last one is still open
        self._in_code: list[bool] = [False]  # whether each logical line is inside a code fence
        self._width = 0  # the width the strips were wrapped at
        self._strips: list[Strip] = []  # wrapped strips of the closed lines
        self._tail: list[Strip] = []  # wrapped strips of the open line
        self._chars = 0
        # The widget's Rich style walks every ancestor's CSS; on a small machine that walk was
        # most of the cost of drawing a streamed line, so it is kept until the styles change.
        self._style: Style | None = None
        self.append(pieces)

    # ------------------------------------------------------------------ content
    @property
    def text(self) -> str:
        return "\n".join("".join(t for t, _ in line) for line in self._lines)

    @property
    def pieces(self) -> list[Piece]:
        out: list[Piece] = []
        for i, line in enumerate(self._lines):
            if i:
                out.append(("\n", out[-1][1] if out else Origin.TARGET))
            out.extend(line)
        return out

    def append(self, pieces: Iterable[Piece]) -> None:
        """Add text at the end; only the open line and any lines it closes are wrapped."""
        before = self._height()
        first_changed = len(self._strips)
        closed_from = len(self._lines) - 1
        added = False
        for text, origin in pieces:
            if not text:
                continue
            added = True
            self._chars += len(text)
            first, *rest = text.split("\n")
            if first:
                self._lines[-1].append((first, origin))
            for part in rest:
                self._close_line()
                if part:
                    self._lines[-1].append((part, origin))
        if not added:
            return
        if self._width:
            for i in range(closed_from, len(self._lines) - 1):
                self._strips.extend(self._wrap(i))
            self._tail = self._wrap(len(self._lines) - 1)
        after = self._height()
        if after != before:
            self.refresh(layout=True)
        elif self._width:
            # Same height: only the lines from the previously open one on changed.
            self.refresh(Region(0, first_changed, self._width, after - first_changed))

    def stream_done(self) -> None:
        """The text is complete: drop the headroom (blank lines kept for growth)."""
        if self.headroom != 1:
            self.headroom = 1
            self.refresh(layout=True)

    def _height(self) -> int:
        n = len(self._strips) + len(self._tail)
        if not self._chars:
            return 0
        return -(-n // self.headroom) * self.headroom  # n rounded up to whole headroom steps

    def _close_line(self) -> None:
        line = "".join(t for t, _ in self._lines[-1]).strip()
        fence = line.startswith("```") or line.startswith("~~~")
        # A fence line belongs to its block; the state after it flips.
        in_code_next = self._in_code[-1] != fence
        self._lines.append([])
        self._in_code.append(in_code_next)

    def set_colour(self, colour: bool) -> None:
        if colour != self.colour:
            self.colour = colour
            self._rewrap(self._width)
            self.refresh()

    # ------------------------------------------------------------------ wrapping
    def _wrap(self, i: int) -> list[Strip]:
        width = self._width
        text = Text(no_wrap=False, end="")
        for chunk, origin in self._lines[i]:
            text.append(_clean(chunk), ORIGIN_STYLES[origin] if self.colour else None)
        is_fence = text.plain.strip().startswith(("```", "~~~"))
        code = self._in_code[i] or is_fence
        if code:
            text.stylize(_CODE_STYLE)
        if not text.plain:
            return [Strip.blank(width, _CODE_STYLE if code else None)]
        console = self.app.console
        lines = text.wrap(console, width, overflow="fold")
        strips = []
        for line in lines:
            line.rstrip_end(width)
            strip = Strip(line.render(console), cell_len(line.plain))
            if code:
                strip = strip.extend_cell_length(width, _CODE_STYLE)
            strips.append(strip)
        return strips

    def _rewrap(self, width: int) -> None:
        self._width = width
        if width <= 0:
            self._strips, self._tail = [], []
            return
        self._strips = [s for i in range(len(self._lines) - 1) for s in self._wrap(i)]
        self._tail = self._wrap(len(self._lines) - 1)

    # ------------------------------------------------------------------ Textual hooks
    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        if width != self._width:
            self._rewrap(width)
        return self._height()

    def render_line(self, y: int) -> Strip:
        width = self.size.width
        if width != self._width:
            self._rewrap(width)
        style = self._style
        if style is None:
            style = self._style = self.rich_style
        if y < len(self._strips):
            strip = self._strips[y]
        elif y - len(self._strips) < len(self._tail):
            strip = self._tail[y - len(self._strips)]
        else:
            return Strip.blank(width, style)
        return strip.apply_style(style).crop_extend(0, width, style)

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._style = None

    def on_resize(self) -> None:
        if self.size.width != self._width:
            self._rewrap(self.size.width)
            self.refresh(layout=True)
