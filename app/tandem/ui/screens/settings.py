"""Settings: every option the schema puts on the screen (session/options.py), saved as TOML on
Save. Each row is made from its option: a switch for on/off, a select where it has choices,
an input otherwise (empty where it may be left out: not chosen)."""

from __future__ import annotations

from typing import Any, ClassVar

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label, Select, Static, Switch

from tandem.engine import TandemError
from tandem.session.options import Opt, base_type, fields_with, optional
from tandem.ui.settings import Settings

# The options on the screen, in the schema's order.
FIELDS: list[tuple[str, Opt]] = [(name, o) for name, o in fields_with("screen")]


def _hint(name: str, o: Opt) -> str:
    parts = [o.hint]
    if optional(name) and o.unset and not o.choices:
        parts.append(f"empty = {o.unset}")
    if o.reload:
        parts.append("applies on the next load")
    return "; ".join(parts)


def _key(value: object) -> str:
    """A select's value as the form holds it: a name as it is; Select has no None, so the
    three-way switches (think, exact) hold "default", "on" and "off"."""
    if isinstance(value, str):
        return value
    return "default" if value is None else "on" if value else "off"


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
            for name, o in FIELDS:
                value: Any = getattr(self.settings, name)
                kind = base_type(name)
                with Horizontal(classes="row"):
                    yield Label(o.label)
                    if o.choices:
                        options = [(label, _key(v)) for label, v in o.choices]
                        yield Select(options, value=_key(value), allow_blank=False, id=name)
                    elif kind is bool:
                        yield Switch(value=bool(value), id=name)
                    else:
                        text = "" if value is None else ",".join(value) if kind is tuple else str(value)
                        yield Input(
                            text,
                            id=name,
                            type="integer" if kind is int else "number" if kind is float else "text",
                            classes="-wide" if kind in (str, tuple) else "",
                        )
                    if kind is not str or o.choices:  # (free text gets the whole row)
                        yield Static(_hint(name, o), classes="hint", markup=False)
            yield Static("", id="error", markup=False)
            with Horizontal(id="buttons"):
                yield Button("Save", id="save", variant="primary")
                yield Button("Cancel", id="cancel")

    def read_form(self) -> Settings:
        """The settings as typed, validated; TandemError names the first bad field."""
        values: dict[str, Any] = {}
        for name, o in FIELDS:
            kind = base_type(name)
            if o.choices:
                chosen = str(self.query_one(f"#{name}", Select).value)
                values[name] = next(v for _, v in o.choices if _key(v) == chosen)
                continue
            if kind is bool:
                values[name] = self.query_one(f"#{name}", Switch).value
                continue
            typed = self.query_one(f"#{name}", Input).value
            raw = typed.strip()
            if kind is str:
                values[name] = typed
            elif kind is tuple:
                values[name] = raw  # (split at commas and checked by the option)
            elif optional(name) and o.unset and not raw:  # (left out: what `unset` says)
                values[name] = None
            else:
                try:
                    values[name] = int(raw) if kind is int else float(raw)
                except ValueError:
                    raise TandemError(f"{o.label}: '{raw}' is not a number") from None
        settings = self.settings.updated(**values)
        settings.validate_all()
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
