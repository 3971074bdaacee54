"""Messages that worker threads post back to the UI (Textual delivers them on its own thread)."""

from __future__ import annotations

from textual.message import Message

from app.ui.session import LoadedPair, PairRef
from app.ui.speed import SpeedReference


class StreamWake(Message):
    """A generation job has new events in its buffer (sent once per drain at most)."""

    def __init__(self, job_id: int) -> None:
        super().__init__()
        self.job_id = job_id


class PairLoaded(Message):
    def __init__(self, loaded: LoadedPair, seconds: float) -> None:
        super().__init__()
        self.loaded = loaded
        self.seconds = seconds


class PairLoadFailed(Message):
    """Loading `ref` failed with `error`; `current` is what is loaded now (the previous pair,
    kept or reloaded, or None)."""

    def __init__(self, ref: PairRef, error: str, current: LoadedPair | None) -> None:
        super().__init__()
        self.ref = ref
        self.error = error
        self.current = current


class SpeedMeasured(Message):
    def __init__(self, loaded: LoadedPair, reference: SpeedReference | None, error: str = "") -> None:
        super().__init__()
        self.loaded = loaded
        self.reference = reference
        self.error = error
