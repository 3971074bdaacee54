"""The picker's catalog tab: every catalog pair with its size, download state and fit; Enter
downloads (with progress, cancel and resume) and loads it."""

from __future__ import annotations

from functools import partial

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.widgets import DataTable, Label, ProgressBar, Static, TabPane

from tandem.catalog import (
    BUILTIN_DRAFTER_LABEL,
    DownloadCancelled,
    DownloadProgress,
    FitVerdict,
    pull_pair,
    unconfirmed_note,
)
from tandem.catalog.units import format_bytes
from tandem.session.refs import PairRef
from tandem.ui.jobs import failure_text
from tandem.ui.messages import CatalogReady, DownloadFinished, DownloadUpdate
from tandem.ui.pairs import (
    CatalogListing,
    CatalogRow,
    PairDownload,
    catalog_rows,
    describe_file,
    progress_text,
)
from tandem.ui.picker.messages import PairChosen, PickerNote
from tandem.ui.workers import run_in_thread

FIT_STYLE = {"fits": "green", "tight": "yellow", "won't fit": "red"}
HYBRID_LINE = (
    "Hybrid: attention mixed with recurrent layers, whose state Tandem rolls back after a "
    "rejected draft (llama.cpp's snapshots, else a copy of the state): the output stays exact."
)
CROSS_LINE = (
    "Cross-tokenizer: the draft has another tokenizer; its text is re-encoded into the target's "
    "tokens each round (dearer drafting): the output stays exact."
)


BUILTIN_LINE = "Draft:  built-in drafter: the target's own multi-token-prediction heads (no draft file)"


def pair_name_text(row: CatalogRow, default: bool) -> Text:
    """The name cell: ★ for the default, then what sets the pair apart: a target that drafts
    with its own heads, hybrid models, and a file still to download whose name was never
    confirmed on the hub (once on disk it was right)."""
    name = Text(row.spec.name)
    if default:
        name.append(" ★", style="yellow")
    if row.spec.draft is None:
        name.append(f" {BUILTIN_DRAFTER_LABEL}", style="cyan")
    elif row.draft_kind:
        name.append(f" {row.draft_kind}", style="cyan")
    if row.spec.hybrid:
        name.append(" hybrid", style="magenta")
    if row.spec.cross_tokenizer:
        name.append(" cross-tokenizer", style="cyan")
    if any(not f.confirmed for f in row.missing):
        name.append(" unconfirmed", style="yellow")
    return name


def fit_text(fit: FitVerdict | None) -> Text:
    if fit is None or fit.need_bytes == 0:
        return Text("unknown", style="dim")
    t = Text(fit.verdict, style=FIT_STYLE.get(fit.verdict, ""))
    t.append(f" · {format_bytes(fit.need_bytes)}", style="dim")
    return t


class CatalogTab(TabPane):
    def __init__(self) -> None:
        super().__init__("Catalog", id="tab-catalog")
        self.listing: CatalogListing | None = None
        self.download: PairDownload | None = None
        self.online: bool | None = None  # set by the screen once the network was probed
        self.default_row: CatalogRow | None = None

    def compose(self) -> ComposeResult:
        yield DataTable(id="catalog", cursor_type="row", zebra_stripes=True)
        yield Static("Reading the catalog…", id="catalog-details", markup=False)
        with Vertical(id="download"):
            yield Static("", id="dl-title", markup=False)
            for role in ("target", "draft"):
                with Horizontal(classes="dl-row", id=f"dl-row-{role}"):
                    yield Label(role.capitalize())
                    yield ProgressBar(id=f"bar-{role}", show_eta=False, show_percentage=True)
                    yield Static("waiting", id=f"dl-{role}", markup=False)

    def on_mount(self) -> None:
        self.query_one("#catalog", DataTable).add_columns(
            "pair", "download", "on disk", "memory", "shines on"
        )

    # ------------------------------------------------------------------ the list
    def refresh_list(self, n_ctx: int | None) -> None:
        """Read the catalog and judge each pair's fit (it may ask the GPU driver): in a worker."""
        run_in_thread(
            self, partial(self._read_catalog, n_ctx), group="picker-catalog", name="Reading the catalog"
        )

    def _read_catalog(self, n_ctx: int | None) -> None:
        self.post_message(CatalogReady(catalog_rows(n_ctx)))

    def on_catalog_ready(self, message: CatalogReady) -> None:
        # (The message goes on to the screen, which writes the introduction from it.)
        self.listing = message.listing
        table = self.query_one("#catalog", DataTable)
        table.clear()
        if message.listing.error:
            self.query_one("#catalog-details", Static).update(message.listing.error)
            return
        default = message.listing.catalog.default if message.listing.catalog else ""
        self.default_row = None
        for i, row in enumerate(message.listing.rows):
            if row.spec.name == default:
                self.default_row = row
            table.add_row(
                pair_name_text(row, row.spec.name == default),
                format_bytes(row.spec.total_bytes) if row.spec.total_bytes else "?",
                self._state_text(row),
                fit_text(row.fit),
                row.spec.shines_on,
                key=row.spec.name,
            )
            if row.spec.name == default:
                table.move_cursor(row=i)
        self.show_details()

    def _state_text(self, row: CatalogRow) -> Text:
        if self.download is not None and self.download.spec.name == row.spec.name:
            return Text("↓ downloading", style="cyan")
        return Text(row.state, style="green" if row.downloaded else "")

    def _row(self) -> CatalogRow | None:
        table = self.query_one("#catalog", DataTable)
        if self.listing is None or not self.listing.rows or table.row_count == 0:
            return None
        index = table.cursor_row
        return self.listing.rows[index] if 0 <= index < len(self.listing.rows) else None

    @on(DataTable.RowHighlighted, "#catalog")
    def show_details(self) -> None:
        row = self._row()
        if row is None:
            return
        s = row.spec
        draft = f"Draft:  {describe_file(s.draft)}" if s.draft is not None else BUILTIN_LINE
        if row.draft_kind:
            draft = f"Draft:  {row.draft_kind}: {describe_file(s.draft) if s.draft else ''}"
        lines = [s.description, f"Target: {describe_file(s.target)}", draft]
        if row.fit is not None and row.fit.need_bytes:
            lines.append(f"Memory: {row.fit.summary()} ({row.fit.device})")
        if row.measured is not None:
            lines.append(f"Measured here: {row.measured.summary()}")
        if s.hybrid:
            lines.append(HYBRID_LINE)
        if s.cross_tokenizer:
            lines.append(CROSS_LINE)
        if note := unconfirmed_note(s, row.missing):
            lines.append(f"Unconfirmed: {note}.")
        action = "Enter loads it." if row.downloaded else "Enter downloads and loads it."
        if not row.downloaded and self.online is False:
            action = "No network: it cannot be downloaded now."
        lines.append(action)
        self.query_one("#catalog-details", Static).update("\n".join(lines))

    @on(DataTable.RowSelected, "#catalog")
    def _selected(self) -> None:
        row = self._row()
        if row is None:
            return
        if row.downloaded and row.target_path:
            self.post_message(
                PairChosen(PairRef.from_catalog(row.spec, row.target_path, row.draft_path), row.fit)
            )
        else:
            self.start_download(row)

    # ------------------------------------------------------------------ downloads
    def start_download(self, row: CatalogRow) -> None:
        if self.download is not None:
            self.post_message(PickerNote(f"Already downloading {self.download.spec.name}: c cancels it."))
            return
        if self.online is False:
            self.post_message(
                PickerNote("No network: downloads are unavailable. Use GGUFs already on disk (On disk tab).")
            )
            return
        # The one line that says a guessed file name may 404, before the download rather than after.
        note = unconfirmed_note(row.spec, row.missing)
        self.post_message(PickerNote(f"Note: {note}." if note else ""))
        dl = PairDownload(row.spec)
        self.download = dl
        self.query_one("#download").add_class("-on")
        self.query_one("#dl-title", Static).update(
            f"Downloading {row.spec.name} into the Hugging Face cache · c cancels (kept; Enter resumes)"
        )
        for role in ("target", "draft"):
            self.query_one(f"#bar-{role}", ProgressBar).update(total=None, progress=0)
            self.query_one(f"#dl-{role}", Static).update("waiting")
        # A pair drafted by its target's own heads downloads one file: no draft row.
        self.query_one("#dl-row-draft").display = row.spec.draft is not None
        self._refresh_state(row.spec.name)
        run_in_thread(self, partial(self._download_thread, dl), group="picker-download", name="The download")

    def _download_thread(self, dl: PairDownload) -> None:
        def progress(p: DownloadProgress) -> None:
            dl.update(p)
            self.post_message(DownloadUpdate(dl))

        try:
            paths = pull_pair(dl.spec, on_progress=progress, cancel=dl.cancel)
        except DownloadCancelled:
            self.post_message(DownloadFinished(dl, None, "cancelled"))
            return
        except Exception as exc:  # the panel must leave its downloading state whatever happened
            self.post_message(DownloadFinished(dl, None, failure_text(exc)))
            return
        self.post_message(DownloadFinished(dl, paths))

    def on_download_update(self, message: DownloadUpdate) -> None:
        dl = message.download
        if dl is not self.download:
            return
        for role in ("target", "draft"):
            p = dl.progress(role)
            if p.total:
                self.query_one(f"#bar-{role}", ProgressBar).update(total=p.total, progress=p.done_bytes)
            self.query_one(f"#dl-{role}", Static).update(progress_text(p))

    def on_download_finished(self, message: DownloadFinished) -> None:
        dl = message.download
        if dl is not self.download:
            return
        self.download = None
        name = dl.spec.name
        if message.paths is None:
            done = sum(p.downloaded for _, p in dl.parts.values())
            if message.error == "cancelled":
                self.query_one("#dl-title", Static).update(
                    f"Cancelled {name}: {format_bytes(done)} kept; Enter on it resumes the download."
                )
            else:
                self.query_one("#download").remove_class("-on")
                self.post_message(PickerNote(f"Download of {name} failed: {message.error}"))
            self._refresh_state(name)
            return
        self.query_one("#download").remove_class("-on")
        self.notify(f"{name} downloaded.", markup=False)
        target, draft = message.paths
        if self.listing is not None:
            rows = [
                CatalogRow(r.spec, target, draft, r.fit, r.draft_kind) if r.spec.name == name else r
                for r in self.listing.rows
            ]
            self.listing = CatalogListing(self.listing.catalog, rows)
        self._refresh_state(name)
        fit = next((r.fit for r in self.listing.rows if r.spec.name == name), None) if self.listing else None
        self.post_message(PairChosen(PairRef.from_catalog(dl.spec, target, draft), fit))

    def _refresh_state(self, name: str) -> None:
        if self.listing is None:
            return
        table = self.query_one("#catalog", DataTable)
        for row in self.listing.rows:
            if row.spec.name == name:
                table.update_cell(name, list(table.columns)[2], self._state_text(row))
        self.show_details()

    def cancel_download(self) -> bool:
        """Stop the running download (what was fetched is kept); False if there is none."""
        if self.download is None:
            return False
        self.download.cancel.set()
        self.query_one("#dl-title", Static).update(f"Cancelling {self.download.spec.name}…")
        return True

    def on_unmount(self) -> None:
        # Leaving the picker does not stop a download silently: it is cancelled (and resumable).
        if self.download is not None:
            self.download.cancel.set()
