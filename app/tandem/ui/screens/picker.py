"""Pair picker: the catalog (download with progress, cancel, resume), GGUFs already on disk,
or two files by path; then load the chosen pair.

Each tab is its own widget (app/ui/picker/) with its own thread workers: reading the catalog
and judging the fit (it may ask the GPU driver), scanning the disk, downloading. They tell this
screen what the user picked (`PairChosen`) or what went wrong (`PickerNote`); the screen probes
the network, writes the introduction and loads the pair. Before any weights are loaded the
files' headers and tokenizers are checked, so an incompatible, corrupt or truncated pair is
refused with one sentence and the current pair stays loaded.
"""

from __future__ import annotations

import time
from typing import ClassVar, cast

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Header, LoadingIndicator, Static, TabbedContent

from tandem.catalog import BUILTIN_DRAFTER_LABEL, FitVerdict
from tandem.catalog.hub_client import hub_reachable  # (through the hub client: proxies, HF_ENDPOINT)
from tandem.catalog.units import format_bytes
from tandem.engine import TandemError
from tandem.session.preflight import APP_REMEDY, preflight
from tandem.session.refs import DraftNeeds, PairRef
from tandem.ui.host import AppHost
from tandem.ui.messages import CatalogReady, NetworkChecked
from tandem.ui.pairs import CatalogListing, CatalogRow, DiskModel, PairDownload
from tandem.ui.picker.catalog_tab import CatalogTab
from tandem.ui.picker.disk_tab import DiskTab
from tandem.ui.picker.messages import PairChosen, PickerNote
from tandem.ui.picker.path_tab import PathTab
from tandem.ui.workers import run_in_thread


class PickerScreen(Screen[None]):
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "back", "Back"),
        Binding("c", "cancel_download", "Cancel download"),
        Binding("r", "refresh_lists", "Refresh"),
    ]

    def __init__(self, *, first_run: bool = False) -> None:
        super().__init__(id="picker")
        self.first_run = first_run
        self.online: bool | None = None
        self.catalog = CatalogTab()
        self.on_disk = DiskTab()
        self._loading_since = 0.0
        self._confirm: PairRef | None = None  # a pair judged too big: Enter again loads it anyway

    @property
    def tandem(self) -> AppHost:
        return cast("AppHost", self.app)  # (TandemApp: the app these screens run in)

    # The tabs' state, as the screen's (what the user sees on it).
    @property
    def listing(self) -> CatalogListing | None:
        return self.catalog.listing

    @property
    def download(self) -> PairDownload | None:
        return self.catalog.download

    @property
    def disk(self) -> list[DiskModel]:
        return self.on_disk.disk

    # ------------------------------------------------------------------ layout
    def compose(self) -> ComposeResult:
        yield Header(icon="⇉")
        yield Static("", id="intro")
        yield Static("", id="network", markup=False)
        with TabbedContent(id="tabs"):
            yield self.catalog
            yield self.on_disk
            yield PathTab()
        with Horizontal(id="loading"):
            yield LoadingIndicator()
            yield Static("", id="loading-text", markup=False)
        yield Static("", id="error", markup=False)
        yield Footer(compact=True)

    def on_mount(self) -> None:
        self.sub_title = "pairs"
        self.query_one("#intro", Static).update(self._intro(None))
        self.query_one("#catalog", DataTable).focus()
        self.set_interval(0.5, self._tick)
        self.action_refresh_lists()
        run_in_thread(self, self._probe_network, group="picker-net", name="The network check")

    def _intro(self, default: CatalogRow | None) -> Text:
        t = Text()
        if self.first_run:
            t.append("Welcome to Tandem. ", style="bold")
            t.append("Pick a target model and a smaller draft model, best with the same tokenizer. ")
        if default is not None and not default.downloaded:
            t.append("Suggested: ")
            t.append(default.spec.name, style="bold")
            t.append(f", {format_bytes(default.missing_bytes)} to download")
            draft = default.spec.draft
            t.append(
                f" (target {format_bytes(default.spec.target.size_bytes)} + draft "
                f"{format_bytes(draft.size_bytes)})."
                if draft is not None
                else f" (the target, {BUILTIN_DRAFTER_LABEL}: its own draft heads)."
            )
            t.append(" Enter downloads and loads it." if self.online is not False else "")
        elif default is not None:
            t.append(f"{default.spec.name} is on disk: Enter loads it.")
        else:
            t.append("Enter on a catalog pair downloads (if needed) and loads it.")
        return t

    def on_catalog_ready(self, message: CatalogReady) -> None:
        # The catalog tab has shown the list (the message reaches it first).
        self.query_one("#intro", Static).update(self._intro(self.catalog.default_row))

    # ------------------------------------------------------------------ workers
    def action_refresh_lists(self) -> None:
        # Fit at the pair's own context unless the user chose one (as when it is loaded).
        self.catalog.refresh_list(self.tandem.settings.n_ctx)
        self.on_disk.refresh_list()

    def _probe_network(self) -> None:
        online, reason = hub_reachable()
        self.post_message(NetworkChecked(online, reason))

    def on_network_checked(self, message: NetworkChecked) -> None:
        self.online = self.catalog.online = message.online
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
        self.query_one("#intro", Static).update(self._intro(self.catalog.default_row))
        self.catalog.show_details()

    def action_cancel_download(self) -> None:
        if not self.catalog.cancel_download():
            self.notify("No download to cancel.", markup=False)

    # ------------------------------------------------------------------ loading
    def on_pair_chosen(self, message: PairChosen) -> None:
        self.start_load(message.ref, message.fit if message.fit is not None else self._files_fit(message.ref))

    def _files_fit(self, ref: PairRef) -> FitVerdict | None:
        """Whether the files (a target alone drafts with its own heads) fit at the app's context
        size; None when it cannot be told, or when the preflight refuses them (the load says
        why, and keeps the current pair)."""
        n_ctx = self.tandem.settings.load_options(ref.spec).n_ctx
        try:
            return preflight(ref, DraftNeeds.of_pair(ref), n_ctx=n_ctx, remedy=APP_REMEDY).fit
        except (TandemError, OSError):
            return None

    def on_picker_note(self, message: PickerNote) -> None:
        self.show_error(message.text)

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
