"""The picker's "By path" tab: two GGUF files typed in, checked before anything is loaded."""

from __future__ import annotations

from pathlib import Path

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.containers import Horizontal, VerticalScroll
from textual.widgets import Button, Input, Label, Static, TabPane

from app.engine import TandemError, compatibility_problems, read_gguf
from app.session.pairs import PairRef
from app.ui.picker.messages import PairChosen, PickerNote


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


class PathTab(TabPane):
    DEFAULT_CSS = """
    PathTab .row { height: 3; }
    PathTab .row > Label { width: 9; padding: 1 0 0 0; }
    PathTab .row > Input { width: 1fr; }
    PathTab #check { color: $text-muted; height: auto; padding: 0 1; }
    """

    def __init__(self) -> None:
        super().__init__("By path", id="tab-path")

    def compose(self) -> ComposeResult:
        with VerticalScroll():
            with Horizontal(classes="row"):
                yield Label("Target")
                yield Input(placeholder="/path/to/target.gguf", id="target-path")
            with Horizontal(classes="row"):
                yield Label("Draft")
                yield Input(placeholder="/path/to/draft.gguf", id="draft-path")
            yield Static("", id="check", markup=False)
            yield Button("Check and load", id="load-path", variant="primary")

    @on(Input.Submitted, "#target-path")
    def _target_done(self) -> None:
        self.query_one("#draft-path", Input).focus()

    @on(Input.Submitted, "#draft-path")
    @on(Button.Pressed, "#load-path")
    def load_from_paths(self) -> None:
        target = self.query_one("#target-path", Input).value
        draft = self.query_one("#draft-path", Input).value
        check = self.query_one("#check", Static)
        try:
            ref = check_paths(target, draft)
        except TandemError as exc:
            check.update("")
            self.post_message(PickerNote(str(exc)))
            return
        check.update(Text("✓ same tokenizer: the draft can draft for the target", "green"))
        self.post_message(PairChosen(ref))
