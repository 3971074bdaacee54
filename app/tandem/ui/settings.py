"""User settings: generation and loading options, persisted as TOML in the config directory.

Read with the standard library's tomllib, written with tomlkit: a change saved from the app is
written over the file as it is, keeping the user's comments, order and keys this version does
not know. Unknown keys and values of the wrong type are ignored with a note, so an old or
hand-edited file never stops the app.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import tomlkit
from filelock import FileLock
from tomlkit.exceptions import TOMLKitError

from tandem.engine import (
    DrafterChoice,
    GenerationConfig,
    LoadOptions,
    SamplerSettings,
    TandemError,
    UnusableFile,
    read_small_bytes,
    read_small_text,
)
from tandem.session.choices import Choices, generation_config, load_options
from tandem.session.files import LOCK_TIMEOUT_S, atomic_write_text

if TYPE_CHECKING:
    from tandem.catalog.spec import PairSpec

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

DEFAULT_SYSTEM_PROMPT = "You are a helpful assistant."
_SAMPLER = SamplerSettings()

# settings.toml's format. Files without a version were written when the app stored every
# setting, defaults included: their draft_max = 12 and n_ctx = 4096 were the app's defaults, not
# the user's choice, and are read as "not chosen" so that a catalog pair's own values apply.
SETTINGS_VERSION = 2
_UNVERSIONED_DEFAULTS = {"draft_max": 12, "n_ctx": 4096}
# settings.toml holds a screenful of values; a larger file is not one the app wrote.
MAX_SETTINGS_BYTES = 1 << 20


@dataclass(frozen=True)
class Settings:
    """The app's settings. None means "not chosen": the loaded catalog pair's setting where it
    has one, else the engine's default (app/session/choices.py layers them)."""

    # Drafting: K (None: the pair's draft_max, else 12 adaptive / 5 fixed), adaptive K.
    draft_max: int | None = None
    adaptive: bool = True
    # Exact output (GenerationConfig.exact): on, wherever the target allows it (the CPU, a
    # quantized target; nothing is refused where it does not); off: llama.cpp's fastest kernels.
    exact: bool = True
    # Who drafts: the draft model, prompt lookup (continue text found earlier in the context),
    # the target's own draft heads (mtp), or auto: each round whichever of those the pair has
    # promises more tokens per second.
    drafter: DrafterChoice = GenerationConfig.drafter
    # Sampling: temperature 0 is greedy decoding (the output is then exactly reproducible).
    temperature: float = _SAMPLER.temperature
    top_k: int = _SAMPLER.top_k
    top_p: float = _SAMPLER.top_p
    min_p: float = _SAMPLER.min_p
    seed: int | None = None
    # Chat answers run longer than `tandem run`'s one-off 256 tokens.
    max_tokens: int = 512
    # Loading: a change takes effect when the pair is next loaded.
    n_ctx: int | None = None  # None: the pair's context, else 4096
    n_gpu_layers: int = LoadOptions.n_gpu_layers
    n_threads: int | None = None  # None: chosen from the CPU count (model.default_threads)
    # rpc-server endpoints for the target, "HOST:PORT,HOST:PORT" as typed (one flat TOML
    # string); empty: the target runs on this machine.
    rpc_servers: str = ""
    system_prompt: str = DEFAULT_SYSTEM_PROMPT
    # A thinking model: think before answering (True) or not (False) where its chat template
    # has a switch; None: the model's own default. Each chat can override it (F5).
    think: bool | None = None

    def choices(self) -> Choices:
        return Choices(
            max_tokens=self.max_tokens,
            draft_max=self.draft_max,
            adaptive=self.adaptive,
            drafter=self.drafter,
            sampler=SamplerSettings(
                temperature=self.temperature,
                top_k=self.top_k,
                top_p=self.top_p,
                min_p=self.min_p,
                seed=self.seed,
            ),
            n_ctx=self.n_ctx,
            n_gpu_layers=self.n_gpu_layers,
            n_threads=self.n_threads,
            rpc_servers=tuple(s.strip() for s in self.rpc_servers.split(",") if s.strip()),
            think=self.think,
            exact=None if self.exact else False,
        )

    def validate(self) -> None:
        """Raise TandemError with one sentence naming the first bad value."""
        self.choices().validate()

    def generation_config(self, pair: PairSpec | None = None) -> GenerationConfig:
        return generation_config(self.choices(), pair)

    def load_options(self, pair: PairSpec | None = None) -> LoadOptions:
        return load_options(self.choices(), pair)

    def needs_reload(self, other: Settings, pair: PairSpec | None = None) -> bool:
        """Whether going from `other` to these settings changes how models are loaded."""
        return self.load_options(pair) != other.load_options(pair)

    @property
    def greedy(self) -> bool:
        return self.generation_config().sampler.greedy


# The TOML types each key accepts (an integer is accepted where a float is expected).
_TYPES: dict[str, tuple[type, ...]] = {
    "draft_max": (int,),
    "adaptive": (bool,),
    "exact": (bool,),
    "drafter": (str,),
    "temperature": (float, int),
    "top_k": (int,),
    "top_p": (float, int),
    "min_p": (float, int),
    "seed": (int,),
    "max_tokens": (int,),
    "n_ctx": (int,),
    "n_gpu_layers": (int,),
    "n_threads": (int,),
    "rpc_servers": (str,),
    "system_prompt": (str,),
    "think": (bool,),
}
assert set(_TYPES) == {f.name for f in fields(Settings)}


def load_settings(path: Path) -> tuple[Settings, list[str]]:
    """The settings in `path` (defaults for what is missing) and notes about what was ignored.

    Each note names the file, the line and the setting. A file with problems is copied to
    `settings.toml.broken` first, because the app rewrites settings.toml when settings are
    saved: the user's hand edits are never silently lost."""
    notes: list[str] = []
    try:
        text = read_small_text(path, MAX_SETTINGS_BYTES)  # (no pipe, link or device: small_files.py)
        data = tomllib.loads(text)
    except FileNotFoundError:
        return Settings(), notes
    except UnusableFile as exc:  # (nothing to keep: reading it is the problem)
        return Settings(), [f"{path} could not be read ({exc}); using the default settings"]
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        note = f"{path} could not be read ({exc}); using the default settings"
        return Settings(), [_keep_broken(path, note)]
    values: dict[str, Any] = {}
    versioned = data.pop("version", None) is not None
    for key, value in data.items():
        if not versioned and _UNVERSIONED_DEFAULTS.get(key) == value and not isinstance(value, bool):
            continue  # written by an older app as its default, not chosen (see SETTINGS_VERSION)
        allowed = _TYPES.get(key)
        where = f"{path}:{_line_of(text, key)}"
        if allowed is None:
            notes.append(f"{where}: unknown setting '{key}' ignored")
        elif not isinstance(value, allowed) or (isinstance(value, bool) and bool not in allowed):
            kind = " or ".join(t.__name__ for t in allowed)
            notes.append(f"{where}: '{key}' must be {_a(kind)}, not {_a(type(value).__name__)}; default used")
        else:
            values[key] = float(value) if float in allowed else value  # type: ignore[arg-type]
    # Check each value on its own so the note can name its line, and one bad value costs only
    # itself; then the combination (values can be fine alone and not together).
    for key in list(values):
        try:
            replace(Settings(), **{key: values[key]}).validate()
        except TandemError as exc:
            notes.append(f"{path}:{_line_of(text, key)}: '{key}': {exc}; default used")
            del values[key]
    settings = replace(Settings(), **values)
    try:
        settings.validate()
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
    for f in fields(Settings):
        value = getattr(settings, f.name)
        if value is None:  # TOML has no null: an absent key means "not set"
            doc.pop(f.name, None)
        elif f.name not in now or now[f.name] != value or type(now[f.name]) is not type(value):
            doc[f.name] = value


def save_settings(path: Path, settings: Settings) -> None:
    atomic_write_text(path, settings_toml(settings))


def _save_over(path: Path, settings: Settings) -> None:
    """`settings` written over the file as it is (its comments and unknown keys kept); a new
    file where it cannot be read as TOML."""
    try:
        doc = tomlkit.parse(read_small_text(path, MAX_SETTINGS_BYTES))
    except (OSError, UnusableFile, UnicodeDecodeError, TOMLKitError):
        save_settings(path, settings)
        return
    doc["version"] = SETTINGS_VERSION
    _set_values(doc, settings)
    atomic_write_text(path, tomlkit.dumps(doc))


def save_changes(path: Path, before: Settings, after: Settings) -> Settings:
    """Write the settings that changed from `before` to `after` over the file as it is now, and
    return what the file then holds. Another instance of the app may have saved its own changes
    since this one read the file: written whole, this instance's stale values would undo them.
    The read and the write happen under an inter-process lock, as for the app's JSON files."""
    changed = {
        f.name: getattr(after, f.name)
        for f in fields(Settings)
        if getattr(after, f.name) != getattr(before, f.name)
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(f"{path}.lock", timeout=LOCK_TIMEOUT_S):
        current, _ = load_settings(path)
        merged = replace(current, **changed)
        try:
            merged.validate()
        except TandemError:  # valid alone, not together with the other instance's: ours whole
            merged = after
        _save_over(path, merged)
    return merged
