"""Pair picker: choose the target + draft to load.

By path: type (or paste) two GGUF paths; Tandem reads both headers and compares the
tokenizers before loading any weights, and says what differs when the pair cannot work.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.screen import Screen
from textual.widgets import Button, Footer, Header, Input, Label, LoadingIndicator, Static

from app.engine import TandemError, compatibility_problems, read_gguf
from app.ui.session import PairRef

if TYPE_CHECKING:
    from app.ui.app import TandemApp


def check_paths(target: str, draft: str) -> PairRef:
    """The pair, if both files are GGUFs whose tokenizers match; TandemError otherwise."""
    if not target.strip() or not draft.strip():
        raise TandemError("give both a target and a draft GGUF path")
    t_path, d_path = Path(target.strip()).expanduser(), Path(draft.strip()).expanduser()
    t_info, d_info = read_gguf(t_path), read_gguf(d_path)
    problems = compatibility_problems(t_info, d_info)
    if problems:
        raise TandemError(f"{d_path.name} cannot draft for {t_path.name}: {problems[0]}")
    return PairRef(t_path, d_path)


class PickerScreen(Screen[None]):
    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "back", "Back")]

    DEFAULT_CSS = """
    PickerScreen #intro { padding: 0 1; height: auto; }
    PickerScreen .section { border: round $primary 50%; padding: 0 1; height: auto; margin: 0 0 1 0; }
    PickerScreen .row { height: 3; }
    PickerScreen .row > Label { width: 9; padding: 1 0 0 0; }
    PickerScreen .row > Input { width: 1fr; }
    PickerScreen #check { color: $text-muted; height: auto; padding: 0 1; }
    PickerScreen #loading { height: 3; display: none; }
    PickerScreen #loading.-on { display: block; }
    PickerScreen #loading LoadingIndicator { width: 6; height: 1; }
    PickerScreen #loading-text { width: 1fr; }
    PickerScreen #error { color: $error; height: auto; padding: 0 1; }
    """

    def __init__(self, *, first_run: bool = False) -> None:
        super().__init__(id="picker")
        self.first_run = first_run
        self._loading_since = 0.0

    @property
    def tandem(self) -> TandemApp:
        return self.app  # type: ignore[return-value]

    def compose(self) -> ComposeResult:
        yield Header(icon="⇉")
        intro = (
            "Welcome to Tandem. Choose a target model and a smaller draft model with the same tokenizer."
            if self.first_run
            else "Choose the target + draft pair to chat with."
        )
        yield Static(intro, id="intro", markup=False)
        with Vertical(classes="section") as by_path:
            by_path.border_title = "GGUF files by path"
            with Horizontal(classes="row"):
                yield Label("Target")
                yield Input(placeholder="/path/to/target.gguf", id="target-path")
            with Horizontal(classes="row"):
                yield Label("Draft")
                yield Input(placeholder="/path/to/draft.gguf", id="draft-path")
            yield Static("", id="check", markup=False)
            yield Button("Check and load", id="load-path", variant="primary")
        with Horizontal(id="loading"):
            yield LoadingIndicator()
            yield Static("", id="loading-text", markup=False)
        yield Static("", id="error", markup=False)
        yield Footer()

    def on_mount(self) -> None:
        self.sub_title = "pairs"
        self.query_one("#target-path", Input).focus()
        self.set_interval(0.5, self._tick)

    # ------------------------------------------------------------------ by path
    @on(Input.Submitted, "#target-path")
    def _target_done(self) -> None:
        self.query_one("#draft-path", Input).focus()

    @on(Input.Submitted, "#draft-path")
    @on(Button.Pressed, "#load-path")
    def load_from_paths(self) -> None:
        target = self.query_one("#target-path", Input).value
        draft = self.query_one("#draft-path", Input).value
        try:
            ref = check_paths(target, draft)
        except TandemError as exc:
            self.show_error(str(exc))
            return
        self.query_one("#check", Static).update(
            Text("✓ same tokenizer: the draft can draft for the target", "green")
        )
        self.start_load(ref)

    # ------------------------------------------------------------------ loading
    def start_load(self, ref: PairRef) -> None:
        self.show_error("")
        if self.tandem.load_pair(ref):
            self._loading_since = time.monotonic()
            self.query_one("#loading").add_class("-on")
            self._tick()

    def _tick(self) -> None:
        app = self.tandem
        if app.loading is None:
            return
        elapsed = time.monotonic() - self._loading_since
        self.query_one("#loading-text", Static).update(f"Loading {app.loading.label}… {elapsed:.0f} s")

    def load_failed(self, ref: PairRef, error: str) -> None:
        self.query_one("#loading").remove_class("-on")
        self.show_error(f"Could not load {ref.label}: {error}")

    def show_error(self, text: str) -> None:
        self.query_one("#error", Static).update(text)

    def action_back(self) -> None:
        if self.tandem.loaded is None and self.tandem.loading is None:
            self.notify("Choose a pair first (or Ctrl+Q to quit).", severity="warning")
            return
        self.dismiss()
