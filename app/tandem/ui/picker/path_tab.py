"""The picker's "By path" tab: two GGUF files typed in (or a target alone, when it has its own
draft heads), checked before anything is loaded."""

from __future__ import annotations

from pathlib import Path

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.containers import Horizontal, VerticalScroll
from textual.widgets import Button, Input, Label, Static, TabPane

from tandem.catalog import BUILTIN_DRAFTER_LABEL
from tandem.engine import TandemError
from tandem.session.preflight import APP_REMEDY, Checked, preflight
from tandem.session.refs import DraftNeeds, PairRef
from tandem.ui.picker.messages import PairChosen, PickerNote


def check_paths(target: str, draft: str) -> PairRef:
    """The pair, if both files are GGUFs whose tokenizers match (or can be drafted across), or
    a target alone that has its own draft heads (multi-token prediction): the session's
    preflight, as for every load; TandemError otherwise."""
    return checked_paths(target, draft).ref


def checked_paths(target: str, draft: str) -> Checked:
    """check_paths, with what the preflight found (the tokenizers' verdict)."""
    if not target.strip():
        raise TandemError(
            "give a target GGUF path (and a draft's, unless the target has its own draft heads)"
        )
    t_path = Path(target.strip()).expanduser()
    d_path = Path(draft.strip()).expanduser() if draft.strip() else None
    ref = PairRef(t_path, d_path)
    return preflight(ref, DraftNeeds.of_pair(ref), remedy=APP_REMEDY)


class PathTab(TabPane):
    def __init__(self) -> None:
        super().__init__("By path", id="tab-path")

    def compose(self) -> ComposeResult:
        with VerticalScroll():
            with Horizontal(classes="row"):
                yield Label("Target")
                yield Input(placeholder="/path/to/target.gguf", id="target-path")
            with Horizontal(classes="row"):
                yield Label("Draft")
                yield Input(
                    placeholder="/path/to/draft.gguf (empty: the target's own heads)", id="draft-path"
                )
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
            checked = checked_paths(target, draft)
        except TandemError as exc:
            check.update("")
            self.post_message(PickerNote(str(exc)))
            return
        ref = checked.ref
        if ref.draft is None:
            check.update(Text(f"✓ {BUILTIN_DRAFTER_LABEL}: the target drafts with its own heads", "green"))
        elif checked.tokenizers is not None and not checked.tokenizers.same:
            check.update(
                Text("✓ another tokenizer: the draft drafts across tokenizers (dearer drafting)", "green")
            )
        else:
            check.update(Text("✓ same tokenizer: the draft can draft for the target", "green"))
        self.post_message(PairChosen(ref))
