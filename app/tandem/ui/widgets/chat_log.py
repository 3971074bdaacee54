"""The conversation on screen: user turns, streamed answers, and notes."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from rich.text import Text
from textual.containers import Vertical, VerticalScroll
from textual.widgets import Markdown, Static

from tandem.ui.widgets.thinking import ThinkingView
from tandem.ui.widgets.token_text import Piece, TokenText


class UserTurn(Static):
    def __init__(self, text: str) -> None:
        super().__init__(Text(text), markup=False)
        self.text = text


class Note(Static):
    """A line from the app, not the model (a stopped answer, an error, a loaded pair)."""

    def __init__(self, text: str) -> None:
        super().__init__(text, markup=False)


def answer_footer(stats: dict[str, Any]) -> str:
    """One dim line under an answer: how it was produced."""
    if not stats:
        return ""
    parts = [f"{stats.get('generated', 0)} tokens", f"{stats.get('tokens_per_s', 0.0):.1f} tok/s"]
    if stats.get("mode") == "speculative":
        parts.append(f"{100 * float(stats.get('acceptance', 0.0)):.0f}% accepted")
        parts.append(f"{float(stats.get('tokens_per_round', 0.0)):.2f} tok/pass")
    reason = str(stats.get("stop_reason", ""))
    if reason and reason != "eog":
        parts.append({"cancelled": "stopped", "max_tokens": "max tokens reached"}.get(reason, reason))
    return " · ".join(parts)


# Lines an answer's height grows by while it streams (see TokenText.headroom).
STREAM_HEADROOM = 6


class AnswerView(Vertical):
    """One answer: coloured tokens while streaming (and when colours are on); rendered as
    Markdown once finished when colours are off, for plain reading. A reasoning model's
    thinking goes in a folding section above it (ThinkingView), made when the first arrives."""

    def __init__(
        self,
        pieces: Iterable[Piece] = (),
        *,
        colour: bool = True,
        finished: bool = False,
        reasoning: Iterable[Piece] = (),
    ) -> None:
        super().__init__()
        self.tokens = TokenText(pieces, colour=colour, headroom=1 if finished else STREAM_HEADROOM)
        reasoning = list(reasoning)
        # A saved answer's thinking shows folded, unless there is no answer below it to read.
        self.thinking: ThinkingView | None = (
            ThinkingView(reasoning, colour=colour, finished=True, folded=bool(self.tokens.text))
            if reasoning
            else None
        )
        self.footer = Static("", classes="answer-footer", markup=False)
        self.footer.display = False
        self.colour = colour
        self.finished = finished
        self._markdown: Markdown | None = None
        self.set_class(not finished, "-streaming")

    def compose(self) -> Any:
        if self.thinking is not None:
            yield self.thinking
        yield self.tokens
        yield self.footer

    def on_mount(self) -> None:
        self._show_mode()

    @property
    def text(self) -> str:
        return self.tokens.text

    @property
    def reasoning(self) -> str:
        return self.thinking.text if self.thinking is not None else ""

    def append(self, pieces: Iterable[Piece]) -> None:
        pieces = [p for p in pieces if p[0]]
        if pieces and self.thinking is not None:
            self.thinking.finish()  # the answer began: the thinking folds away
        self.tokens.append(pieces)

    def append_reasoning(self, pieces: Iterable[Piece]) -> None:
        pieces = [p for p in pieces if p[0]]
        if not pieces:
            return
        if self.thinking is None:
            self.thinking = ThinkingView(colour=self.colour)
            if self.is_mounted:
                self.mount(self.thinking, before=self.tokens)
        self.thinking.append(pieces)

    def toggle_thinking(self) -> bool:
        """Open or fold the thinking section; False if this answer has none."""
        if self.thinking is None:
            return False
        self.thinking.toggle()
        return True

    def finish(self, stats: dict[str, Any]) -> None:
        self.finished = True
        self.tokens.stream_done()
        if self.thinking is not None:
            self.thinking.finish(fold=bool(self.tokens.text))
        self.remove_class("-streaming")
        line = answer_footer(stats)
        self.footer.update(line)
        self.footer.display = bool(line)
        if self.is_mounted:
            self._show_mode()

    def set_colour(self, colour: bool) -> None:
        self.colour = colour
        self.tokens.set_colour(colour)
        if self.thinking is not None:
            self.thinking.set_colour(colour)
        if self.is_mounted:
            self._show_mode()

    def _show_mode(self) -> None:
        as_markdown = self.finished and not self.colour
        if as_markdown and self._markdown is None:
            self._markdown = Markdown(self.tokens.text)
            self.mount(self._markdown, before=self.footer)
        if self._markdown is not None:
            self._markdown.display = as_markdown
        self.tokens.display = not as_markdown


class ChatLog(VerticalScroll):
    """Scrolls to the end as text arrives, unless the user scrolled up to read."""

    @property
    def near_end(self) -> bool:
        return self.max_scroll_y - self.scroll_y <= 2

    def follow(self) -> None:
        """Keep the end in view (after the next layout, when the new lines exist)."""
        self.scroll_end(animate=False, immediate=False)
