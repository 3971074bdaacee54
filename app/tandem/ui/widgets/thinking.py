"""An answer's reasoning: a dimmed section above the answer that folds away.

Reasoning models write pages of thinking before they answer. It streams here, dimmed and
coloured by origin like every token, and folds to one line when the answer starts (the answer
is what the user asked for); a click on that line, or Ctrl+L, opens it again.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from rich.text import Text
from textual import events
from textual.containers import Vertical
from textual.widgets import Static

from tandem.ui.widgets.token_text import Piece, TokenText

# Lines the section grows by while it streams (see TokenText.headroom).
STREAM_HEADROOM = 6


class ThinkingHeader(Static):
    """The section's one line: what it is, how long, and how to open or close it."""

    def on_click(self, event: events.Click) -> None:
        event.stop()
        parent = self.parent
        if isinstance(parent, ThinkingView):
            parent.toggle()


class ThinkingView(Vertical):
    def __init__(
        self,
        pieces: Iterable[Piece] = (),
        *,
        colour: bool = True,
        finished: bool = False,
        folded: bool = False,
    ) -> None:
        super().__init__()
        self.tokens = TokenText(pieces, colour=colour, headroom=1 if finished else STREAM_HEADROOM)
        self.header = ThinkingHeader("", markup=False)
        self.finished = finished  # the reasoning is complete (the answer began, or it ended)
        self.folded = folded
        # Once the user opened or closed it, the answer starting does not fold it again.
        self.user_chose = False
        self.set_class(folded, "-folded")
        self._update_header()

    def compose(self) -> Any:
        yield self.header
        yield self.tokens

    @property
    def text(self) -> str:
        return self.tokens.text

    @property
    def pieces(self) -> list[Piece]:
        return self.tokens.pieces

    def append(self, pieces: Iterable[Piece]) -> None:
        self.tokens.append(pieces)
        self._update_header()

    def finish(self, fold: bool = True) -> None:
        """The reasoning is over: fold it (unless the user chose otherwise, or `fold` is False:
        an answer that ended while still thinking has nothing else to show)."""
        if self.finished:
            return
        self.finished = True
        self.tokens.stream_done()
        if fold and not self.user_chose:
            self.set_folded(True)
        self._update_header()

    def toggle(self) -> None:
        self.user_chose = True
        self.set_folded(not self.folded)

    def set_folded(self, folded: bool) -> None:
        self.folded = folded
        self.set_class(folded, "-folded")
        self._update_header()

    def set_colour(self, colour: bool) -> None:
        self.tokens.set_colour(colour)

    def _update_header(self) -> None:
        words = len(self.tokens.text.split())
        if not self.finished:
            label = f"{'▸' if self.folded else '▾'} Thinking… ({words} words)"
        elif self.folded:
            label = f"▸ Thought for {words} words · click or Ctrl+L to read"
        else:
            label = f"▾ Thought for {words} words · click or Ctrl+L to fold"
        self.header.update(Text(label))
