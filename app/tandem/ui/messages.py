"""Messages that worker threads post back to the UI (Textual delivers them on its own thread)."""

from __future__ import annotations

from pathlib import Path

from textual.message import Message

from tandem.session.refs import PairRef
from tandem.ui.jobs import LoadedPair
from tandem.ui.pairs import CatalogListing, DiskModel, PairDownload


class WorkerFailed(Message):
    """A thread worker raised (app/ui/workers.py); bubbles up to the app, which shows it."""

    def __init__(self, name: str, error: BaseException) -> None:
        super().__init__()
        self.name = name
        self.error = error


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


class CatalogReady(Message):
    def __init__(self, listing: CatalogListing) -> None:
        super().__init__()
        self.listing = listing


class DiskReady(Message):
    def __init__(self, models: list[DiskModel], error: str = "") -> None:
        super().__init__()
        self.models = models
        self.error = error


class NetworkChecked(Message):
    def __init__(self, online: bool, reason: str) -> None:
        super().__init__()
        self.online = online
        self.reason = reason


class DownloadUpdate(Message):
    def __init__(self, download: PairDownload) -> None:
        super().__init__()
        self.download = download


class DownloadFinished(Message):
    def __init__(
        self, download: PairDownload, paths: tuple[Path, Path | None] | None, error: str = ""
    ) -> None:
        """`paths`: the target's and the draft's (None: the target drafts with its own heads)."""
        super().__init__()
        self.download = download
        self.paths = paths
        self.error = error
