"""Pair picker: the catalog (download with progress, cancel, resume), GGUFs already on disk,
or two files by path; then load the chosen pair.

Everything slow runs in thread workers: reading the catalog and judging the fit (it may ask
nvidia-smi), scanning the disk for GGUFs, probing the network, downloading. Before any
weights are loaded the files' headers and tokenizers are checked, so an incompatible, corrupt
or truncated pair is refused with one sentence and the current pair stays loaded.
"""

from __future__ import annotations

import time
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import Screen
from textual.widgets import (
    Button,
    DataTable,
    Footer,
    Header,
    Input,
    Label,
    LoadingIndicator,
    ProgressBar,
    Static,
    TabbedContent,
    TabPane,
)

from app.catalog import DownloadCancelled, FitVerdict, files_fit, pull_pair
from app.catalog.units import format_bytes
from app.engine import TandemError, compatibility_problems, read_gguf
from app.session.pairs import PairRef
from app.ui.messages import CatalogReady, DiskReady, DownloadFinished, DownloadUpdate, NetworkChecked
from app.ui.pairs import (
    CatalogListing,
    CatalogRow,
    DiskModel,
    PairDownload,
    catalog_rows,
    describe_file,
    disk_models,
    hub_reachable,
    progress_text,
)

if TYPE_CHECKING:
    from app.ui.app import TandemApp

FIT_STYLE = {"fits": "green", "tight": "yellow", "won't fit": "red"}


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


def fit_text(fit: FitVerdict | None) -> Text:
    if fit is None or fit.need_bytes == 0:
        return Text("unknown", style="dim")
    t = Text(fit.verdict, style=FIT_STYLE.get(fit.verdict, ""))
    t.append(f" · {format_bytes(fit.need_bytes)}", style="dim")
    return t


class PickerScreen(Screen[None]):
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "back", "Back"),
        Binding("c", "cancel_download", "Cancel download"),
        Binding("r", "refresh_lists", "Refresh"),
    ]

    DEFAULT_CSS = """
    PickerScreen #intro { padding: 0 1; height: auto; }
    PickerScreen #network { padding: 0 1; height: auto; color: $warning; display: none; }
    PickerScreen #network.-offline { display: block; }
    PickerScreen TabbedContent { height: 1fr; }
    PickerScreen DataTable { height: 1fr; min-height: 4; }
    PickerScreen #catalog-details { height: auto; max-height: 8; padding: 0 1; color: $text-muted; }
    PickerScreen #download { height: auto; padding: 0 1; display: none; border: round $success; }
    PickerScreen #download.-on { display: block; }
    PickerScreen #download .dl-row { height: 1; }
    PickerScreen #download .dl-row > Label { width: 8; }
    PickerScreen #download .dl-row > ProgressBar { width: 40; }
    PickerScreen #download .dl-row > Static { width: 1fr; padding: 0 0 0 1; }
    PickerScreen #drafts-label { padding: 0 1; height: 1; color: $text-muted; }
    PickerScreen #drafts { height: 8; }
    PickerScreen .row { height: 3; }
    PickerScreen .row > Label { width: 9; padding: 1 0 0 0; }
    PickerScreen .row > Input { width: 1fr; }
    PickerScreen #check { color: $text-muted; height: auto; padding: 0 1; }
    PickerScreen #loading { height: 1; display: none; padding: 0 1; }
    PickerScreen #loading.-on { display: block; }
    PickerScreen #loading LoadingIndicator { width: 6; height: 1; }
    PickerScreen #loading-text { width: 1fr; }
    PickerScreen #error { color: $error; height: auto; padding: 0 1; }
    """

    def __init__(self, *, first_run: bool = False) -> None:
        super().__init__(id="picker")
        self.first_run = first_run
        self.listing: CatalogListing | None = None
        self.disk: list[DiskModel] = []
        self.download: PairDownload | None = None
        self.online: bool | None = None
        self._loading_since = 0.0
        self._confirm: PairRef | None = None  # a pair judged too big: Enter again loads it anyway
        self._default_row: CatalogRow | None = None

    @property
    def tandem(self) -> TandemApp:
        return self.app  # type: ignore[return-value]

    # ------------------------------------------------------------------ layout
    def compose(self) -> ComposeResult:
        yield Header(icon="⇉")
        yield Static("", id="intro")
        yield Static("", id="network", markup=False)
        with TabbedContent(id="tabs"):
            with TabPane("Catalog", id="tab-catalog"):
                yield DataTable(id="catalog", cursor_type="row", zebra_stripes=True)
                yield Static("Reading the catalog…", id="catalog-details", markup=False)
                with Vertical(id="download"):
                    yield Static("", id="dl-title", markup=False)
                    for role in ("target", "draft"):
                        with Horizontal(classes="dl-row"):
                            yield Label(role.capitalize())
                            yield ProgressBar(id=f"bar-{role}", show_eta=False, show_percentage=True)
                            yield Static("waiting", id=f"dl-{role}", markup=False)
            with TabPane("On disk", id="tab-disk"):
                yield DataTable(id="disk", cursor_type="row", zebra_stripes=True)
                yield Static("Models that can draft for it:", id="drafts-label", markup=False)
                yield DataTable(id="drafts", cursor_type="row")
            with TabPane("By path", id="tab-path"), VerticalScroll():
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
        yield Footer(compact=True)

    def on_mount(self) -> None:
        self.sub_title = "pairs"
        catalog = self.query_one("#catalog", DataTable)
        catalog.add_columns("pair", "download", "on disk", "memory", "shines on")
        disk = self.query_one("#disk", DataTable)
        disk.add_columns("model", "arch", "params", "quant", "size", "where", "drafts")
        drafts = self.query_one("#drafts", DataTable)
        drafts.add_columns("draft", "params", "quant", "size", "where")
        self.query_one("#intro", Static).update(self._intro(None))
        catalog.focus()
        self.set_interval(0.5, self._tick)
        self.action_refresh_lists()
        self.run_worker(self._probe_network, thread=True, group="picker-net")

    def _intro(self, default: CatalogRow | None) -> Text:
        t = Text()
        if self.first_run:
            t.append("Welcome to Tandem. ", style="bold")
            t.append("Pick a target model and a smaller draft model with the same tokenizer. ")
        if default is not None and not default.downloaded:
            t.append("Suggested: ")
            t.append(default.spec.name, style="bold")
            t.append(f", {format_bytes(default.missing_bytes)} to download")
            t.append(
                f" (target {format_bytes(default.spec.target.size_bytes)} + draft "
                f"{format_bytes(default.spec.draft.size_bytes)})."
            )
            t.append(" Enter downloads and loads it." if self.online is not False else "")
        elif default is not None:
            t.append(f"{default.spec.name} is on disk: Enter loads it.")
        else:
            t.append("Enter on a catalog pair downloads (if needed) and loads it.")
        return t

    # ------------------------------------------------------------------ workers
    def action_refresh_lists(self) -> None:
        n_ctx = self.tandem.settings.n_ctx
        self.run_worker(partial(self._read_catalog, n_ctx), thread=True, group="picker-catalog")
        self.run_worker(self._scan_disk, thread=True, group="picker-disk")

    def _read_catalog(self, n_ctx: int | None) -> None:
        self.post_message(CatalogReady(catalog_rows(n_ctx)))

    def _scan_disk(self) -> None:
        try:
            self.post_message(DiskReady(disk_models()))
        except (TandemError, OSError) as exc:
            self.post_message(DiskReady([], str(exc)))

    def _probe_network(self) -> None:
        online, reason = hub_reachable()
        self.post_message(NetworkChecked(online, reason))

    # ------------------------------------------------------------------ catalog
    def on_catalog_ready(self, message: CatalogReady) -> None:
        self.listing = message.listing
        table = self.query_one("#catalog", DataTable)
        table.clear()
        if message.listing.error:
            self.query_one("#catalog-details", Static).update(message.listing.error)
            return
        default = message.listing.catalog.default if message.listing.catalog else ""
        default_row: CatalogRow | None = None
        for i, row in enumerate(message.listing.rows):
            name = Text(row.spec.name)
            if row.spec.name == default:
                name.append(" ★", style="yellow")
                default_row = row
            table.add_row(
                name,
                format_bytes(row.spec.total_bytes) if row.spec.total_bytes else "?",
                self._state_text(row),
                fit_text(row.fit),
                row.spec.shines_on,
                key=row.spec.name,
            )
            if row.spec.name == default:
                table.move_cursor(row=i)
        self._default_row = default_row
        self.query_one("#intro", Static).update(self._intro(default_row))
        self._show_details()

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
    def _show_details(self) -> None:
        row = self._row()
        details = self.query_one("#catalog-details", Static)
        if row is None:
            return
        s = row.spec
        lines = [
            s.description,
            f"Target: {describe_file(s.target)}",
            f"Draft:  {describe_file(s.draft)}",
        ]
        if row.fit is not None and row.fit.need_bytes:
            lines.append(f"Memory: {row.fit.summary()} ({row.fit.device})")
        action = "Enter loads it." if row.downloaded else "Enter downloads and loads it."
        if not row.downloaded and self.online is False:
            action = "No network: it cannot be downloaded now."
        lines.append(action)
        details.update("\n".join(lines))

    @on(DataTable.RowSelected, "#catalog")
    def _catalog_selected(self) -> None:
        row = self._row()
        if row is None:
            return
        if row.downloaded and row.target_path and row.draft_path:
            self.start_load(PairRef.from_catalog(row.spec, row.target_path, row.draft_path), row.fit)
        else:
            self.start_download(row)

    def start_download(self, row: CatalogRow) -> None:
        if self.download is not None:
            self.show_error(f"Already downloading {self.download.spec.name}: c cancels it.")
            return
        if self.online is False:
            self.show_error("No network: downloads are unavailable. Use GGUFs already on disk (On disk tab).")
            return
        self.show_error("")
        dl = PairDownload(row.spec)
        self.download = dl
        box = self.query_one("#download")
        box.add_class("-on")
        self.query_one("#dl-title", Static).update(
            f"Downloading {row.spec.name} into the Hugging Face cache · c cancels (kept; Enter resumes)"
        )
        for role in ("target", "draft"):
            self.query_one(f"#bar-{role}", ProgressBar).update(total=None, progress=0)
            self.query_one(f"#dl-{role}", Static).update("waiting")
        self._refresh_state(row.spec.name)
        self.run_worker(partial(self._download_thread, dl), thread=True, group="picker-download")

    def _download_thread(self, dl: PairDownload) -> None:
        def progress(p: object) -> None:
            from app.catalog import DownloadProgress

            assert isinstance(p, DownloadProgress)
            dl.update(p)
            self.post_message(DownloadUpdate(dl))

        try:
            paths = pull_pair(dl.spec, on_progress=progress, cancel=dl.cancel)
        except DownloadCancelled:
            self.post_message(DownloadFinished(dl, None, "cancelled"))
            return
        except TandemError as exc:
            self.post_message(DownloadFinished(dl, None, str(exc)))
            return
        self.post_message(DownloadFinished(dl, paths))

    def on_download_update(self, message: DownloadUpdate) -> None:
        dl = message.download
        if dl is not self.download:
            return
        for role in ("target", "draft"):
            p = dl.progress(role)
            bar = self.query_one(f"#bar-{role}", ProgressBar)
            if p.total:
                bar.update(total=p.total, progress=p.done_bytes)
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
                self.show_error(f"Download of {name} failed: {message.error}")
            self._refresh_state(name)
            return
        self.query_one("#download").remove_class("-on")
        self.notify(f"{name} downloaded.", markup=False)
        target, draft = message.paths
        if self.listing is not None:
            rows = [
                CatalogRow(r.spec, target, draft, r.fit) if r.spec.name == name else r
                for r in self.listing.rows
            ]
            self.listing = CatalogListing(self.listing.catalog, rows)
        self._refresh_state(name)
        fit = next((r.fit for r in self.listing.rows if r.spec.name == name), None) if self.listing else None
        self.start_load(PairRef.from_catalog(dl.spec, target, draft), fit)

    def _refresh_state(self, name: str) -> None:
        if self.listing is None:
            return
        table = self.query_one("#catalog", DataTable)
        for row in self.listing.rows:
            if row.spec.name == name:
                columns = list(table.columns)
                table.update_cell(name, columns[2], self._state_text(row))
        self._show_details()

    def action_cancel_download(self) -> None:
        if self.download is None:
            self.notify("No download to cancel.", markup=False)
            return
        self.download.cancel.set()
        self.query_one("#dl-title", Static).update(f"Cancelling {self.download.spec.name}…")

    # ------------------------------------------------------------------ network
    def on_network_checked(self, message: NetworkChecked) -> None:
        self.online = message.online
        banner = self.query_one("#network", Static)
        if message.online:
            banner.remove_class("-offline")
        else:
            banner.update(
                f"No network: {message.reason}. Downloads are unavailable; use GGUFs already on this "
                "machine (On disk) or give two paths (By path)."
            )
            banner.add_class("-offline")
            if self.first_run:
                self.query_one("#tabs", TabbedContent).active = "tab-disk"
                self.query_one("#disk", DataTable).focus()
        self.query_one("#intro", Static).update(self._intro(self._default_row))
        self._show_details()

    # ------------------------------------------------------------------ on disk
    def on_disk_ready(self, message: DiskReady) -> None:
        self.disk = message.models
        table = self.query_one("#disk", DataTable)
        table.clear()
        for i, m in enumerate(self.disk):
            g = m.gguf
            table.add_row(
                _short(g.name),
                g.architecture,
                _params(g.n_params),
                g.quantization,
                format_bytes(g.size_bytes),
                g.source,
                str(len(m.drafts)) if m.drafts else "–",
                key=str(i),
            )
        if message.error:
            self.show_error(message.error)
        label = self.query_one("#drafts-label", Static)
        if not self.disk:
            label.update(
                "No GGUF files found in the Hugging Face cache, LM Studio or Ollama folders. "
                "Give paths in the By path tab."
            )
        self._show_drafts()

    def _disk_model(self) -> DiskModel | None:
        table = self.query_one("#disk", DataTable)
        if not self.disk or table.row_count == 0:
            return None
        i = table.cursor_row
        return self.disk[i] if 0 <= i < len(self.disk) else None

    @on(DataTable.RowHighlighted, "#disk")
    def _show_drafts(self) -> None:
        model = self._disk_model()
        table = self.query_one("#drafts", DataTable)
        table.clear()
        if model is None:
            return
        label = self.query_one("#drafts-label", Static)
        if not model.drafts:
            label.update(f"No model on disk can draft for {model.gguf.name} (same tokenizer, smaller).")
            return
        label.update(f"Can draft for {model.gguf.name}: Enter on one loads the pair.")
        for i, d in enumerate(model.drafts):
            table.add_row(
                d.name, _params(d.n_params), d.quantization, format_bytes(d.size_bytes), d.source, key=str(i)
            )

    @on(DataTable.RowSelected, "#disk")
    def _disk_selected(self) -> None:
        model = self._disk_model()
        if model is None:
            return
        if not model.drafts:
            self.show_error(f"No model on disk can draft for {model.gguf.name}.")
            return
        drafts = self.query_one("#drafts", DataTable)
        drafts.focus()

    @on(DataTable.RowSelected, "#drafts")
    def _draft_selected(self) -> None:
        model = self._disk_model()
        if model is None or not model.drafts:
            return
        i = self.query_one("#drafts", DataTable).cursor_row
        draft = model.drafts[i]
        ref = PairRef(model.gguf.path, draft.path)
        self.start_load(ref, self._files_fit(ref))

    # ------------------------------------------------------------------ by path
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
            self.show_error(str(exc))
            return
        check.update(Text("✓ same tokenizer: the draft can draft for the target", "green"))
        self.start_load(ref, self._files_fit(ref))

    def _files_fit(self, ref: PairRef) -> FitVerdict | None:
        try:
            return files_fit(ref.target, ref.draft, self.tandem.settings.load_options().n_ctx)
        except (TandemError, OSError):
            return None

    # ------------------------------------------------------------------ loading
    def start_load(self, ref: PairRef, fit: FitVerdict | None = None) -> None:
        self.show_error("")
        if fit is not None and fit.verdict == "won't fit" and fit.need_bytes and self._confirm != ref:
            self._confirm = ref
            self.show_error(
                f"{ref.label} won't fit: it needs {format_bytes(fit.need_bytes)} and {fit.device}. "
                "Lower the context size (F4) or pick a smaller pair; Enter again tries anyway."
            )
            return
        self._confirm = None
        if self.tandem.load_pair(ref):
            self._loading_since = time.monotonic()
            self.query_one("#loading").add_class("-on")
            self._tick()

    def _tick(self) -> None:
        app = self.tandem
        if app.loading is None:
            return
        elapsed = time.monotonic() - self._loading_since
        self.query_one("#loading-text", Static).update(
            f"Loading {app.loading.label}… {elapsed:.0f} s (checking the files, then the weights)"
        )

    def load_failed(self, ref: PairRef, error: str) -> None:
        self.query_one("#loading").remove_class("-on")
        self.show_error(f"Could not load {ref.label}: {error}")

    def show_error(self, text: str) -> None:
        self.query_one("#error", Static).update(text)

    def action_back(self) -> None:
        if self.tandem.loaded is None and self.tandem.loading is None:
            self.notify("Choose a pair first (or Ctrl+Q to quit).", severity="warning", markup=False)
            return
        self.dismiss()

    def on_unmount(self) -> None:
        # Leaving the picker does not stop a download silently: it is cancelled (and resumable).
        if self.download is not None:
            self.download.cancel.set()


def _short(name: str) -> str:
    """`owner/repo/file.gguf` -> `file.gguf` (the full name is in the drafts line)."""
    return name.rsplit("/", 1)[-1]


def _params(n: int) -> str:
    if n >= 1e9:
        return f"{n / 1e9:.1f}B"
    if n >= 1e6:
        return f"{n / 1e6:.0f}M"
    return str(n) if n else "?"
