"""Saved conversations: pick one to reopen it (Enter), or delete it (d)."""

from __future__ import annotations

import time
from typing import ClassVar

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Label, OptionList
from textual.widgets.option_list import Option

from tandem.ui.conversations import ConversationStore, ConversationSummary


def _when(ts: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(ts))


class ConversationsScreen(ModalScreen[str | None]):
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "dismiss(None)", "Close"),
        Binding("d,delete", "delete", "Delete"),
    ]

    def __init__(self, store: ConversationStore) -> None:
        super().__init__()
        self.store = store
        self.items: list[ConversationSummary] = []

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Label("Saved chats · Enter opens · d deletes · Esc closes")
            yield OptionList()

    def on_mount(self) -> None:
        self._fill()

    def _fill(self) -> None:
        self.items = self.store.list()
        if self.store.damaged:
            where = self.store.damaged[0].parent
            self.store.damaged = []
            self.notify(f"Unreadable chat files were moved to {where} (kept as they were).", markup=False)
        options = self.query_one(OptionList)
        options.clear_options()
        if not self.items:
            options.add_option(Option("No saved chats yet.", disabled=True))
            return
        for s in self.items:
            t = Text()
            t.append(s.title, style="bold")
            t.append(f"\n  {_when(s.updated)} · {s.turns} turns · {s.pair}", style="dim")
            options.add_option(Option(t, id=s.id))
        options.highlighted = 0
        options.focus()

    @on(OptionList.OptionSelected)
    def _opened(self, event: OptionList.OptionSelected) -> None:
        if event.option.id:
            self.dismiss(event.option.id)

    def action_delete(self) -> None:
        options = self.query_one(OptionList)
        if options.highlighted is None or not self.items:
            return
        option = options.get_option_at_index(options.highlighted)
        if option.id:
            self.store.delete(option.id)
            self.notify("Chat deleted.", markup=False)
            self._fill()
