"""Settings: drafting, sampling, lengths and loading options, saved as TOML on Save."""

from __future__ import annotations

from dataclasses import replace
from typing import Any, ClassVar

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label, Select, Static, Switch

from tandem.engine import (
    ADAPTIVE_K_MAX,
    AUTO_DRAFTER,
    DRAFT_MAX_LIMIT,
    FIXED_K,
    LoadOptions,
    TandemError,
    drafter_choices,
    drafter_label,
)
from tandem.ui.settings import Settings

DRAFTER_LABELS: dict[str, str] = {
    AUTO_DRAFTER: "auto (the fastest)",
    **{name: drafter_label(name) for name in drafter_choices() if name != AUTO_DRAFTER},
}

# (field, label, input type, hint)
FIELDS: list[tuple[str, str, str, str]] = [
    (
        "draft_max",
        "K (draft max)",
        "integer",
        f"most guesses per round, 0..{DRAFT_MAX_LIMIT}; empty = the pair's, else {ADAPTIVE_K_MAX} "
        f"adaptive / {FIXED_K} fixed",
    ),
    ("adaptive", "Adaptive drafting", "switch", "on: K chosen each round (≤ K max); off: always K"),
    ("exact", "Exact output", "switch", "on: bit-identical to the target alone where possible (CPU)"),
    ("drafter", "Drafter", "select", f"one kind, or {AUTO_DRAFTER}: the fastest the pair offers, each round"),
    ("temperature", "Temperature", "number", "0 = greedy: the output is then exactly reproducible"),
    ("top_p", "Top-p", "number", "nucleus sampling, (0, 1]; 1 = off"),
    ("top_k", "Top-k", "integer", "0 = off"),
    ("min_p", "Min-p", "number", "[0, 1); 0 = off"),
    ("seed", "Seed", "integer", "empty = random; a seeded sampling run repeats exactly"),
    ("max_tokens", "Max tokens", "integer", "longest answer"),
    (
        "n_ctx",
        "Context size",
        "integer",
        f"tokens; empty = the pair's, else {LoadOptions.n_ctx}; applies on the next load",
    ),
    ("n_gpu_layers", "GPU layers", "integer", "-1 = all, 0 = CPU only; applies on the next load"),
    ("n_threads", "CPU threads", "integer", "empty = chosen from the CPU count; applies on the next load"),
    (
        "rpc_servers",
        "RPC servers",
        "servers",
        "HOST:PORT,...: the target's layers run there (rpc-server, trusted networks only); "
        "empty = here; applies on the next load",
    ),
    ("think", "Thinking", "select", "reasoning models: think before answering? F5 switches one chat"),
    ("system_prompt", "System prompt", "text", "for new chats (Ctrl+G edits the current one)"),
]

# A select's options: (label, value) as the form shows them. Select has no None value, so the
# thinking setting's None ("the model's default") is the string "default" in the form.
THINK_VALUES: dict[str, bool | None] = {"default": None, "on": True, "off": False}
SELECT_OPTIONS: dict[str, list[tuple[str, str]]] = {
    "drafter": [(label, v) for v, label in DRAFTER_LABELS.items()],
    "think": [("the model's default", "default"), ("on", "on"), ("off", "off")],
}


def _form_value(name: str, value: Any) -> Any:
    if name == "think":
        return next(k for k, v in THINK_VALUES.items() if v is value)
    return value


# Fields that may be left empty: not chosen (the pair's value or the default; see Settings).
OPTIONAL = ("draft_max", "seed", "n_ctx", "n_threads")


class SettingsScreen(ModalScreen[Settings | None]):
    """Returns the new settings on Save, None on Cancel."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "cancel", "Cancel"),
        Binding("ctrl+s", "save", "Save"),
    ]

    def __init__(self, settings: Settings) -> None:
        super().__init__()
        self.settings = settings

    def compose(self) -> ComposeResult:
        with VerticalScroll() as scroll:
            scroll.border_title = "Settings · Ctrl+S saves · Esc cancels"
            for name, label, kind, hint in FIELDS:
                value: Any = getattr(self.settings, name)
                with Horizontal(classes="row"):
                    yield Label(label)
                    if kind == "switch":
                        yield Switch(value=bool(value), id=name)
                    elif kind == "select":
                        yield Select(
                            SELECT_OPTIONS[name],
                            value=_form_value(name, value),
                            allow_blank=False,
                            id=name,
                        )
                    else:
                        text = "" if value is None else str(value)
                        yield Input(
                            text,
                            id=name,
                            type=kind if kind in ("integer", "number") else "text",  # type: ignore[arg-type]
                            classes="-wide" if kind in ("text", "servers") else "",
                        )
                    if kind != "text":
                        yield Static(hint, classes="hint", markup=False)
            yield Static("", id="error", markup=False)
            with Horizontal(id="buttons"):
                yield Button("Save", id="save", variant="primary")
                yield Button("Cancel", id="cancel")

    def read_form(self) -> Settings:
        """The settings as typed, validated; TandemError names the first bad field."""
        values: dict[str, Any] = {}
        for name, label, kind, _ in FIELDS:
            if kind == "switch":
                values[name] = self.query_one(f"#{name}", Switch).value
                continue
            if kind == "select":
                chosen = self.query_one(f"#{name}", Select).value
                values[name] = THINK_VALUES[str(chosen)] if name == "think" else chosen
                continue
            raw = self.query_one(f"#{name}", Input).value.strip()
            if kind == "text":
                values[name] = self.query_one(f"#{name}", Input).value
            elif kind == "servers":
                values[name] = raw
            elif name in OPTIONAL and not raw:
                values[name] = None
            else:
                try:
                    values[name] = int(raw) if kind == "integer" else float(raw)
                except ValueError:
                    raise TandemError(f"{label}: '{raw}' is not a number") from None
        settings = replace(self.settings, **values)
        settings.validate()
        return settings

    @on(Button.Pressed, "#save")
    @on(Input.Submitted)
    def action_save(self) -> None:
        try:
            settings = self.read_form()
        except TandemError as exc:
            self.query_one("#error", Static).update(str(exc))
            return
        self.dismiss(settings)

    @on(Button.Pressed, "#cancel")
    def action_cancel(self) -> None:
        self.dismiss(None)
