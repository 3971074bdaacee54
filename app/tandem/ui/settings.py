"""User settings: generation and loading options, persisted as TOML in the config directory.

Read and written with tomlkit (one parse serves both): a change saved from the app is written
over the file as it is, keeping the user's comments, order and keys this version does
not know. Unknown keys and values of the wrong type are ignored with a note, so an old or
hand-edited file never stops the app.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import tomlkit
from filelock import FileLock
from pydantic import ValidationError, model_validator
from tomlkit.exceptions import TOMLKitError

from tandem.engine import TandemError, UnusableFile, read_small_bytes, read_small_text
from tandem.session.files import LOCK_TIMEOUT_S, atomic_write_text
from tandem.session.options import Options, base_type, sentence

DEFAULT_SYSTEM_PROMPT = "You are a helpful assistant."

# settings.toml's format. Files without a version were written when the app stored every
# setting, defaults included: their draft_max = 12 and n_ctx = 4096 were the app's defaults, not
# the user's choice, and are read as "not chosen" so that a catalog pair's own values apply.
# Version 2 stored exact output as a switch: `exact = true` was "wherever the target allows it",
# now not choosing (a required exact output is version 3's `exact = true`).
SETTINGS_VERSION = 3
_UNVERSIONED_DEFAULTS = {"draft_max": 12, "n_ctx": 4096}
# settings.toml holds a screenful of values; a larger file is not one the app wrote.
MAX_SETTINGS_BYTES = 1 << 20
APP_MAX_TOKENS = 512


class Settings(Options):
    """The app's settings: the options (session/options.py) with the app's defaults. None means
    "not chosen": the loaded catalog pair's setting where it has one, else the engine's default."""

    system_prompt: str = DEFAULT_SYSTEM_PROMPT  # (for new chats)

    @model_validator(mode="before")
    @classmethod
    def _app_defaults(cls, data: Any) -> Any:
        # Chat answers run longer than `tandem run`'s one-off 256 tokens.
        return {"max_tokens": APP_MAX_TOKENS, **data} if isinstance(data, dict) else data


def load_settings(path: Path) -> tuple[Settings, list[str]]:
    """The settings in `path` (defaults for what is missing) and notes about what was ignored.

    Each note names the file, the line and the setting. A file with problems is copied to
    `settings.toml.broken` first, because the app rewrites settings.toml when settings are
    saved: the user's hand edits are never silently lost."""
    settings, notes, _ = _read(path)
    return settings, notes


def _read(path: Path) -> tuple[Settings, list[str], tomlkit.TOMLDocument | None]:
    """load_settings, and the file as tomlkit read it (None: none, or not TOML) to write over."""
    try:
        text = read_small_text(path, MAX_SETTINGS_BYTES)  # (no pipe, link or device: small_files.py)
        doc = tomlkit.parse(text)
    except FileNotFoundError:
        return Settings(), [], None
    except UnusableFile as exc:  # (nothing to keep: reading it is the problem)
        return Settings(), [f"{path} could not be read ({exc}); using the default settings"], None
    except (OSError, UnicodeDecodeError, TOMLKitError) as exc:
        note = f"{path} could not be read ({exc}); using the default settings"
        return Settings(), [_keep_broken(path, note)], None
    settings, notes = _checked(doc.unwrap(), text, path)
    return settings, notes, doc


def _checked(data: dict[str, Any], text: str, path: Path) -> tuple[Settings, list[str]]:
    notes: list[str] = []
    values: dict[str, Any] = {}
    version = data.pop("version", None)
    for key, value in data.items():
        where = f"{path}:{_line_of(text, key)}"
        if version is None and _UNVERSIONED_DEFAULTS.get(key) == value and not isinstance(value, bool):
            continue  # written by an older app as its default, not chosen (see SETTINGS_VERSION)
        if key == "exact" and value is True and not (isinstance(version, int) and version >= 3):
            continue  # version 2's "on": wherever the target allows it, not chosen
        if key not in Settings.model_fields:
            notes.append(f"{where}: unknown setting '{key}' ignored")
            continue
        # Each value checked on its own, so the note names its line and one bad value costs
        # only itself; then the combination (values can be fine alone and not together).
        try:
            Settings.model_validate({key: value})
        except ValidationError as exc:
            error = exc.errors()[0]["type"]
            if error.endswith("_type") and error != "finite_number":
                kind = base_type(key).__name__
                notes.append(
                    f"{where}: '{key}' must be {_a(kind)}, not {_a(type(value).__name__)}; default used"
                )
            else:
                notes.append(f"{where}: '{key}': {sentence(exc)}; default used")
            continue
        values[key] = value
    try:
        settings = Settings.parse(values)
        settings.validate_all()
    except TandemError as exc:
        return Settings(), [*notes, _keep_broken(path, f"{path}: {exc}; using the default settings")]
    if notes:
        notes[-1] = _keep_broken(path, notes[-1])
    return settings, notes


def _a(word: str) -> str:
    return ("an " if word[:1] in "aeiou" else "a ") + word


def _line_of(text: str, key: str) -> int | str:
    """The line on which `key` is set (TOML errors name lines; so do we), or '?'."""
    for number, line in enumerate(text.splitlines(), start=1):
        name = line.split("=", 1)[0].strip().strip("\"'")
        if "=" in line and name == key:
            return number
    return "?"


def _keep_broken(path: Path, note: str) -> str:
    backup = path.with_name(path.name + ".broken")
    try:
        backup.write_bytes(read_small_bytes(path, MAX_SETTINGS_BYTES))
    except (OSError, ValueError):
        return note
    return f"{note} (your file is kept as {backup.name})"


def settings_toml(settings: Settings) -> str:
    """A new settings file holding `settings`."""
    doc = tomlkit.document()
    doc.add(tomlkit.comment("Tandem settings (written by the app; safe to edit while it is closed)."))
    doc.add(
        tomlkit.comment(
            "A setting left out is not chosen: the catalog pair's value where it has one, else the default."
        )
    )
    doc["version"] = SETTINGS_VERSION
    _set_values(doc, settings)
    return tomlkit.dumps(doc)


def _set_values(doc: tomlkit.TOMLDocument, settings: Settings) -> None:
    """Every setting into `doc`; one unchanged keeps its line (and the comment on it)."""
    now = doc.unwrap()  # (plain values: bool and int compare equal, so the types are compared too)
    for name, value in settings.model_dump().items():
        if isinstance(value, tuple):
            value = list(value)  # (a TOML array)
        if value is None:  # TOML has no null: an absent key means "not set"
            doc.pop(name, None)
        elif name not in now or now[name] != value or type(now[name]) is not type(value):
            doc[name] = value


def save_settings(path: Path, settings: Settings) -> None:
    atomic_write_text(path, settings_toml(settings))


def save_changes(path: Path, before: Settings, after: Settings) -> Settings:
    """Write the settings that changed from `before` to `after` over the file as it is now, and
    return what the file then holds. Another instance of the app may have saved its own changes
    since this one read the file: written whole, this instance's stale values would undo them.
    The read and the write happen under an inter-process lock, as for the app's JSON files."""
    changed = {name: value for name, value in after.model_dump().items() if value != getattr(before, name)}
    path.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(f"{path}.lock", timeout=LOCK_TIMEOUT_S):
        current, _, doc = _read(path)
        try:
            merged = current.updated(**changed)
            merged.validate_all()
        except TandemError:  # valid alone, not together with the other instance's: ours whole
            merged = after
        if doc is None:  # none, or not TOML: a new file
            save_settings(path, merged)
            return merged
        doc["version"] = SETTINGS_VERSION  # (over the file as it is: comments and unknown keys kept)
        _set_values(doc, merged)
        atomic_write_text(path, tomlkit.dumps(doc))
    return merged
