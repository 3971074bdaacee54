"""The picker's "On disk" tab: GGUFs already on this machine (Hugging Face cache, LM Studio,
Ollama), and for the highlighted one the models that can draft for it; a model with its own
draft heads (multi-token prediction) lists its "built-in drafter" first: it loads alone; the
trained drafters shipped beside it (EAGLE-3, DFlash) come next, with their kind."""

from __future__ import annotations

from pathlib import Path

from textual import on
from textual.app import ComposeResult
from textual.widgets import DataTable, Static, TabPane

from tandem.catalog import BUILTIN_DRAFTER_LABEL, Companion
from tandem.catalog.units import format_bytes, format_params
from tandem.engine import drafter_across_tokenizers, drafter_label, drafter_of_own_heads
from tandem.session.refs import PairRef
from tandem.ui.jobs import failure_text
from tandem.ui.messages import DiskReady
from tandem.ui.pairs import DiskModel, disk_models
from tandem.ui.picker.messages import PairChosen, PickerNote
from tandem.ui.workers import run_in_thread


def _drafts_cell(m: DiskModel) -> str:
    """How many models can draft for it, "built-in" first for its own heads, then the kinds
    of the trained drafters beside it, then how many draft models, and how many of those are of
    another tokenizer ("1 + 2 cross")."""
    same = len(m.drafts) - len(m.cross)
    across = f"{len(m.cross)} {drafter_across_tokenizers()}"
    count = " + ".join([*([str(same)] if same else []), *([across] if m.cross else [])])
    parts = (["built-in"] if m.drafts_alone else []) + [_short(c.label) for c in m.companions]
    if parts:
        return " + ".join(parts) + (f" + {count}" if count else "")
    return count or "–"


def _short(label: str) -> str:
    return label.removesuffix(" drafter")


class DiskTab(TabPane):
    def __init__(self) -> None:
        super().__init__("On disk", id="tab-disk")
        self.disk: list[DiskModel] = []

    def compose(self) -> ComposeResult:
        yield DataTable(id="disk", cursor_type="row", zebra_stripes=True)
        yield Static("Models that can draft for it:", id="drafts-label", markup=False)
        yield DataTable(id="drafts", cursor_type="row")

    def on_mount(self) -> None:
        self.query_one("#disk", DataTable).add_columns(
            "model", "arch", "params", "quant", "size", "where", "drafts"
        )
        self.query_one("#drafts", DataTable).add_columns(
            "draft", "params", "quant", "size", "where", "tokenizer", "here"
        )

    def refresh_list(self) -> None:
        """Scan the disk for GGUFs (reading each header): in a worker."""
        run_in_thread(self, self._scan, group="picker-disk", name="The disk scan")

    def _scan(self) -> None:
        try:
            self.post_message(DiskReady(disk_models()))
        except Exception as exc:  # one unreadable folder or file must not empty the picker's tab
            self.post_message(DiskReady([], failure_text(exc)))

    def on_disk_ready(self, message: DiskReady) -> None:
        self.disk = message.models
        table = self.query_one("#disk", DataTable)
        table.clear()
        for i, m in enumerate(self.disk):
            g = m.gguf
            table.add_row(
                g.name.rsplit("/", 1)[-1],  # `owner/repo/file.gguf` -> the file (in full below)
                g.architecture,
                format_params(g.n_params),
                g.quantization,
                format_bytes(g.size_bytes),
                g.source,
                _drafts_cell(m),
                key=str(i),
            )
        if message.error:
            self.post_message(PickerNote(message.error))
        if not self.disk:
            self.query_one("#drafts-label", Static).update(
                "No GGUF files found in the Hugging Face cache, LM Studio or Ollama folders. "
                "Give paths in the By path tab."
            )
        self._show_drafts()

    def _model(self) -> DiskModel | None:
        table = self.query_one("#disk", DataTable)
        if not self.disk or table.row_count == 0:
            return None
        i = table.cursor_row
        return self.disk[i] if 0 <= i < len(self.disk) else None

    @on(DataTable.RowHighlighted, "#disk")
    def _show_drafts(self) -> None:
        model = self._model()
        table = self.query_one("#drafts", DataTable)
        table.clear()
        if model is None:
            return
        label = self.query_one("#drafts-label", Static)
        if model.drafts_alone:
            heads = drafter_label(drafter_of_own_heads())
            table.add_row(
                BUILTIN_DRAFTER_LABEL,
                "–",
                heads,
                "–",
                "its file",
                "its own",
                _here(model, None),
                key="builtin",
            )
        for i, c in enumerate(model.companions):
            # (Its kind in the quant column, as the heads': a trained drafter's own.)
            table.add_row(
                c.path.name,
                "–",
                _short(c.label),
                _size(c),
                "beside it",
                "its target's",
                _here(model, c.path),
                key=f"c{i}",
            )
        if not (model.drafts_alone or model.companions or model.drafts):
            label.update(
                f"No model on disk can draft for {model.gguf.name} (smaller, and a usable tokenizer)."
            )
            return
        cross = (
            " Another tokenizer: drafts across tokenizers (slower drafting, same output)."
            if model.cross
            else ""
        )
        label.update(f"Can draft for {model.gguf.name}: Enter on one loads the pair.{cross}")
        for i, d in enumerate(model.drafts):
            table.add_row(
                d.name,
                format_params(d.n_params),
                d.quantization,
                format_bytes(d.size_bytes),
                d.source,
                f"another ({drafter_across_tokenizers()})" if model.is_cross(d) else "same",
                _here(model, d.path),
                key=str(i),
            )

    @on(DataTable.RowSelected, "#disk")
    def _model_selected(self) -> None:
        model = self._model()
        if model is None:
            return
        if model.drafts_alone and not model.drafts and not model.companions:
            self.post_message(PairChosen(PairRef(model.gguf.path, None)))  # its own heads draft
            return
        if not model.drafts and not model.companions:
            self.post_message(PickerNote(f"No model on disk can draft for {model.gguf.name}."))
            return
        self.query_one("#drafts", DataTable).focus()

    @on(DataTable.RowSelected, "#drafts")
    def _draft_selected(self) -> None:
        model = self._model()
        if model is None:
            return
        row = self.query_one("#drafts", DataTable).cursor_row
        if model.drafts_alone:
            if row == 0:
                self.post_message(PairChosen(PairRef(model.gguf.path, None)))
                return
            row -= 1  # (the built-in drafter's row comes first)
        if 0 <= row < len(model.companions):
            self.post_message(PairChosen(PairRef(model.gguf.path, model.companions[row].path)))
            return
        row -= len(model.companions)  # (then the trained drafters beside it)
        if 0 <= row < len(model.drafts):
            self.post_message(PairChosen(PairRef(model.gguf.path, model.drafts[row].path)))


def _here(model: DiskModel, draft: Path | None) -> str:
    """The speedup `tandem bench` measured for this pair on this machine, or a dash."""
    m = model.measured.get(draft)
    if m is None:
        return "–"
    name, result = m.headline
    return f"{result.speedup:.2f}x {name}"


def _size(c: Companion) -> str:
    try:
        return format_bytes(c.path.stat().st_size)
    except OSError:
        return "–"
