"""Getting a catalog pair's missing files from the terminal: ask first, then download with
progress bars (the session layer's `Fetch`, app/session/pairs.py)."""

from __future__ import annotations

import sys
import threading
from collections.abc import Sequence
from pathlib import Path

from tandem.catalog import (
    DownloadCancelled,
    ModelFile,
    PairSpec,
    download_file,
    local_file,
    pull_pair,
    unconfirmed_note,
)
from tandem.catalog.hub_cache import hub_cache_dir, hub_endpoint
from tandem.catalog.units import format_bytes
from tandem.cli.process import interrupt_sets
from tandem.cli.progress import ProgressPrinter
from tandem.engine import TandemError
from tandem.session.refs import Fetch


def terminal_fetch(*, yes: bool) -> Fetch:
    """Ask on the terminal before downloading (`yes`: don't ask); without a terminal to ask
    on, say how to download instead of waiting for an answer that cannot come."""

    def fetch(spec: PairSpec, missing: Sequence[ModelFile]) -> None:
        size = sum(f.size_bytes for f in missing)
        amount = format_bytes(size) if size else "size unknown"
        if not yes and not (sys.stdin.isatty() and sys.stderr.isatty()):
            raise TandemError(
                f"pair {spec.name} is not downloaded yet ({amount}): run `tandem pull {spec.name}` "
                "first, or add --yes to download it now"
            )
        # Said before the question (or before a download --yes allowed), not after a 404.
        if note := unconfirmed_note(spec, tuple(missing)):
            print(f"tandem: note: {note}", file=sys.stderr)
        if not yes:
            what = " and ".join(f"{f.repo_id}/{f.filename}" for f in missing)
            print(f"Pair {spec.name} needs {what} ({amount}).", file=sys.stderr)
            try:
                answer = input("Download now? [y/N] ")
            except EOFError:
                answer = ""
            if answer.strip().lower() not in ("y", "yes"):
                raise TandemError(
                    f"not downloading; `tandem pull {spec.name}` fetches the pair when you are ready"
                )
        try:
            download_with_progress(spec, need_draft=spec.draft is not None and spec.draft in missing)
        except DownloadCancelled:
            raise TandemError(
                f"download stopped; what was downloaded is kept: run `tandem pull {spec.name}` to resume"
            ) from None

    return fetch


def download_with_progress(spec: PairSpec, *, need_draft: bool) -> tuple[Path, Path | None]:
    """Fetch a pair (or only its target; a pair drafted by its target's own heads has nothing
    else) with progress bars on stderr. Ctrl+C raises DownloadCancelled promptly, keeping what
    was downloaded for the next attempt."""
    cancel = threading.Event()
    printer = ProgressPrinter()
    missing = [f for f in (spec.files if need_draft else (spec.target,)) if local_file(f) is None]
    if missing:
        size = sum(f.size_bytes for f in missing)
        amount = format_bytes(size) if size else "the files"
        print(f"downloading {amount} from {hub_endpoint()} into {hub_cache_dir()}", file=sys.stderr)
    try:
        with interrupt_sets(cancel):
            if need_draft:
                return pull_pair(spec, printer, cancel)
            return download_file(spec.target, printer, cancel), None
    finally:
        printer.close()  # never leave a half-drawn bar before an error message
