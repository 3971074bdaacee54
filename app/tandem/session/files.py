"""Small JSON and text files Tandem keeps for the user, read and written safely.

Every write goes to a temporary file in the same directory and is renamed over the old one: a
crash or a full disk never leaves a half-written file behind. A file that two processes update
(two instances of the app, a benchmark beside the app) is changed under a file lock, so neither
loses the other's update. Reading never follows a link, never blocks on a pipe and caps the
size (engine/files/small_files.py): a damaged file is never a hang.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import platformdirs
from filelock import FileLock

from tandem.engine.files.small_files import read_small_text

APP_NAME = "tandem"
# The lock is held for one read and one small write (milliseconds); waiting longer than this
# means the file system hangs, and the caller gets an OSError (filelock.Timeout is one).
LOCK_TIMEOUT_S = 10.0
# Tandem's JSON files are a few KiB. Anything larger is not a file Tandem wrote.
MAX_JSON_BYTES = 16 << 20
# The latest time (seconds since the epoch) a file Tandem wrote can hold: the year 5138. Saved
# times are shown as dates (time.localtime, which raises OverflowError or OSError far beyond).
MAX_TIMESTAMP = 1e11


def is_plausible_time(v: object) -> bool:
    """Whether `v` is a time Tandem could have written (seconds since the epoch, as a number):
    finite, not negative, not past MAX_TIMESTAMP. Anything else in a file is not Tandem's."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return False
    return 0 <= v <= MAX_TIMESTAMP  # (NaN fails both comparisons; an int may be any size)


def data_dir() -> Path:
    """The user data directory (XDG_DATA_HOME on Linux): saved chats, state, measurements."""
    return platformdirs.user_data_path(APP_NAME)


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
    the app; the caller decides how to keep it (conversations are moved aside as a backup).
    A pipe, a link or a device in its place, or a file larger than MAX_JSON_BYTES, counts as
    damaged (small_files.py): never a hang."""
    try:
        return json.loads(read_small_text(path, MAX_JSON_BYTES))
    except (OSError, ValueError, RecursionError):  # RecursionError: JSON nested beyond reason
        return None


def update_json(path: Path, change: Callable[[Any], Any]) -> Any:
    """Read `path`, apply `change`, write the result; returns what was written.

    Two instances of the app can do this at the same moment: an inter-process lock
    (`path` + ".lock") covers the read and the write, so each sees the other's update and none
    is lost. `change` gets the parsed file, or None when it is missing or not valid JSON (a
    damaged file is replaced, as a plain write always did). A file that exists but cannot be
    read (permissions, an I/O error) raises OSError and is left as it was: writing without
    having read it would drop what it holds.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(f"{path}.lock", timeout=LOCK_TIMEOUT_S):
        try:
            current = json.loads(read_small_text(path, MAX_JSON_BYTES))
        except FileNotFoundError:
            current = None
        except (ValueError, RecursionError):  # not JSON, not UTF-8, nested beyond reason, no file
            current = None
        new = change(current)
        write_json(path, new)
    return new
