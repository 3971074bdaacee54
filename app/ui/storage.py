"""Where the app keeps its files, and writing them safely.

Settings live in the user config directory (TOML); conversations, the last pair used and the
measured speeds live in the user data directory (JSON). Both come from platformdirs, so on
Linux XDG_CONFIG_HOME / XDG_DATA_HOME move them (the tests and the tmux trials do that).
Every write goes to a temporary file in the same directory and is renamed over the old one:
a crash or a full disk never leaves a half-written file behind.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import platformdirs

APP_NAME = "tandem"


@dataclass(frozen=True)
class AppDirs:
    config: Path
    data: Path

    @classmethod
    def default(cls) -> AppDirs:
        return cls(
            config=platformdirs.user_config_path(APP_NAME),
            data=platformdirs.user_data_path(APP_NAME),
        )

    @classmethod
    def under(cls, root: Path) -> AppDirs:
        """Both directories inside `root` (tests, benchmarks)."""
        return cls(config=root / "config", data=root / "data")

    @property
    def settings_file(self) -> Path:
        return self.config / "settings.toml"

    @property
    def conversations(self) -> Path:
        return self.data / "conversations"

    @property
    def state_file(self) -> Path:
        return self.data / "state.json"

    @property
    def speeds_file(self) -> Path:
        return self.data / "speeds.json"


def atomic_write_text(path: Path, text: str) -> None:
    """Write `text` to `path` so that readers see the old file or the new one, never a mix."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_json(path: Path, data: Any) -> None:
    atomic_write_text(path, json.dumps(data, indent=1, ensure_ascii=False) + "\n")


def read_json(path: Path) -> Any | None:
    """The parsed file, or None when it is missing or unreadable. A damaged file never stops
    the app; the caller decides how to keep it (conversations are moved aside as a backup)."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
