"""The real command line in a child process, as a user runs it: one helper for every test that
runs `tandem ...` (this interpreter, the repository as its directory, nothing on its stdin)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
TANDEM = [sys.executable, "-m", "tandem.cli.main"]


def tandem(*args: str, timeout: float = 120, **kw: Any) -> subprocess.CompletedProcess[str]:
    """`tandem ARGS`, its output captured as text; `kw` goes to subprocess.run (env=...)."""
    return subprocess.run(
        [*TANDEM, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
        **kw,
    )
