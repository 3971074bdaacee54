"""What the picker's tabs tell the picker screen."""

from __future__ import annotations

from textual.message import Message

from tandem.catalog import FitVerdict
from tandem.session.refs import PairRef


class PairChosen(Message):
    """Load this pair. `fit`: whether it fits in memory, when the tab judged it (the catalog
    does, at each pair's context); else the picker judges the files at the app's context."""

    def __init__(self, ref: PairRef, fit: FitVerdict | None = None) -> None:
        super().__init__()
        self.ref = ref
        self.fit = fit


class PickerNote(Message):
    """A line for the picker's error row ("" clears it)."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.text = text
