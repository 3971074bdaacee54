"""Reading a small file Tandem keeps, or finds, without trusting what sits at its path.

The app's saved chats, settings and state, and the files of other apps Tandem looks at (LM
Studio's settings, Ollama's manifests), are read at start and whenever a list is drawn. What is
at such a path may not be a file: a named pipe blocks the reader until something writes to it
(forever), a link to /dev/zero or to a huge file feeds it gigabytes. So the path is opened
without following a link and without blocking, must be a regular file, and is read only up to a
size far above what Tandem writes there. Anything else is UnusableFile, a ValueError like a
file that is not valid JSON: the caller sets it aside or ignores it, as it does damaged files.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

_FLAGS = (
    os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
)


class UnusableFile(ValueError):
    """What is at the path is not a regular file of a reasonable size (one sentence)."""


def read_small_text(path: Path, max_bytes: int) -> str:
    """The UTF-8 text of the regular file at `path`, at most `max_bytes` long. Raises
    UnusableFile for a link, a pipe, a device or a larger file (UnicodeDecodeError for text that
    is not UTF-8, both ValueErrors), OSError when it cannot be read now (missing, no permission,
    an I/O error, a folder in its place)."""
    return read_small_bytes(path, max_bytes).decode("utf-8")


def read_small_bytes(path: Path, max_bytes: int) -> bytes:
    """As read_small_text, the bytes."""
    if path.is_symlink():  # (where the system cannot refuse links when opening: Windows)
        raise UnusableFile(f"{path.name} is a link, not a file")
    try:
        fd = os.open(path, _FLAGS)
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # O_NOFOLLOW: it became a link since
            raise UnusableFile(f"{path.name} is a link, not a file") from exc
        raise
    with os.fdopen(fd, "rb") as fh:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):  # (a folder is a mistake to report, not a file to move)
            raise IsADirectoryError(errno.EISDIR, "is a folder", str(path))
        if not stat.S_ISREG(info.st_mode):
            raise UnusableFile(f"{path.name} is not a regular file")
        if info.st_size > max_bytes:
            raise UnusableFile(
                f"{path.name} is {info.st_size:,} bytes, more than the {max_bytes:,} Tandem reads"
            )
        # What fstat says, then on in pieces (read(n) sets n bytes aside at once; the file may
        # have grown, or be one whose size reads as 0).
        chunks = [fh.read(info.st_size + 1)]
        size = len(chunks[0])
        while size > info.st_size and size <= max_bytes and (chunk := fh.read(1 << 20)):
            chunks.append(chunk)
            size += len(chunk)
    if size > max_bytes:
        raise UnusableFile(f"{path.name} is more than the {max_bytes:,} bytes Tandem reads")
    return b"".join(chunks)
