"""Where the app keeps its files, and writing them safely.

Settings live in the user config directory (TOML); conversations and the last pair used live
in the user data directory (JSON). Both come from platformdirs, so on
Linux XDG_CONFIG_HOME / XDG_DATA_HOME move them (the tests and the tmux trials do that).
Reading and writing them safely is session/files.py's (the CLI's files use it too).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import platformdirs

from tandem.session.files import APP_NAME, data_dir

# A saved chat is its text and its colours (a long one: a few MiB). Anything larger is not a
# file the app wrote.
MAX_CHAT_BYTES = 64 << 20


@dataclass(frozen=True)
class AppDirs:
    config: Path
    data: Path

    @classmethod
    def default(cls) -> AppDirs:
        return cls(
            config=platformdirs.user_config_path(APP_NAME),
            data=data_dir(),
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
