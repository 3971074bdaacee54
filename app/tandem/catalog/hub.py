"""Downloading catalog models from the Hugging Face hub into its standard cache: the resumable
transfer. What a file is on the hub (commit, size, ETag) and the hub's errors are hub_client.py's.

What huggingface_hub does for us: the file metadata request (`get_hf_file_metadata`: the
commit, the size and the ETag, which for LFS files is the sha256 of the content; errors
classified as gated / not found / unauthorised), the auth headers (HF_TOKEN or `hf auth
login`), its shared HTTP session (proxies, user agent) and the cache layout.

What we do ourselves, and why: `hf_hub_download` (huggingface_hub 2.x) writes to a temporary
file unique to each call and deletes it on any failure, so an interrupted 40 GB download
starts again from zero, and it has no way to be cancelled from another thread. Tandem streams
into `blobs/<etag>.incomplete` (the name older huggingface_hub versions used for the same
purpose), resumes it with an HTTP Range request, checks a `threading.Event` between chunks,
hashes while writing and compares with the hub's sha256 before the file enters the cache.
A file only becomes `blobs/<etag>` (and a snapshot link) once complete and verified; then
read_gguf's truncation check runs on it, so llama.cpp is never handed a partial file.

The network read runs on a helper thread feeding a small queue, so a cancel is noticed within
0.1 s even while the connection is stalled.

The server is not trusted: its commit must be a commit hash, an ETag that is not a hash only
names the blob through its sha256, every cache path is checked to stay in the repository folder,
a body longer than the announced size is cut off, and bad addresses and redirect loops are
one-line errors.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import queue
import shutil
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tandem import __version__
from tandem.engine.errors import ModelFileError
from tandem.engine.files.gguf_file import read_gguf

try:  # huggingface_hub 2.x talks through httpx2, 1.x through httpx
    import httpx2 as _http
except ImportError:  # pragma: no cover - huggingface_hub 1.x
    import httpx as _http  # type: ignore[no-redef]

from .hub_cache import (
    cached_part,
    hub_cache_dir,
    inside,
    link_snapshot,
    offline_mode,
    repo_folder,
    usable_gguf,
)
from .hub_client import (
    CONNECT_TIMEOUT_S,
    HEX40,
    HEX64,
    DownloadError,
    Remote,
    reason,
    remote_file,
)
from .spec import ModelFile, PairSpec
from .units import format_bytes

CHUNK_BYTES = 1 << 20
PROGRESS_INTERVAL_S = 0.1  # at most ten progress callbacks a second per file
SPEED_WINDOW_S = 5.0  # speed = bytes over the last few seconds, so it follows the network
READ_TIMEOUT_S = 30.0
MAX_RETRIES = 5  # consecutive failures without progress before giving up (partial kept)
RETRY_DELAYS_S = (1.0, 2.0, 4.0, 8.0, 8.0)
DISK_MARGIN_BYTES = 64 * 2**20  # keep this much free beyond the download itself


class DownloadCancelled(DownloadError):
    """The cancel event was set. The partial file is kept and the next call resumes it."""


class _Oversized(DownloadError):
    """The server sent more bytes than it announced; the partial file is not worth keeping."""


@dataclass(frozen=True)
class DownloadProgress:
    filename: str  # the file in the repository (a part's name for split models)
    downloaded: int  # bytes on disk so far, resumed bytes included
    total: int  # the file's size; 0 if the hub did not say
    bytes_per_s: float  # recent speed; 0 for a file that was already complete
    eta_s: float | None  # seconds left at that speed; None when unknown
    done: bool  # the file is complete, verified and in the cache


ProgressCallback = Callable[[DownloadProgress], None]


# ------------------------------------------------------------------------------- public API
def download_file(
    f: ModelFile,
    on_progress: ProgressCallback | None = None,
    cancel: threading.Event | None = None,
) -> Path:
    """Make sure `f` (every part, for a split model) is complete in the HF cache and return
    the path to hand to llama.cpp (the first part). Raises DownloadError / DownloadCancelled."""
    return _ensure([f], on_progress, cancel)[0]


def pull_pair(
    p: PairSpec,
    on_progress: ProgressCallback | None = None,
    cancel: threading.Event | None = None,
) -> tuple[Path, Path | None]:
    """Download a pair's target and draft (one free-space check for both, before either). The
    draft is None for a pair drafted by the target's own heads (it has one file)."""
    paths = _ensure(list(p.files), on_progress, cancel)
    return paths[0], paths[1] if len(paths) > 1 else None


def check_free_space(need_bytes: int, folder: Path, what: str, free_bytes: int | None = None) -> None:
    """Raise DownloadError unless `folder`'s disk has room for `need_bytes` (+ a margin).
    `free_bytes` replaces the real shutil.disk_usage reading (tests)."""
    if need_bytes <= 0:
        return
    if free_bytes is None:
        probe = folder
        while not probe.exists() and probe != probe.parent:
            probe = probe.parent  # the cache folder may not exist yet: measure its disk
        free_bytes = shutil.disk_usage(probe).free
    if free_bytes < need_bytes + DISK_MARGIN_BYTES:
        raise DownloadError(
            f"not enough disk space for {what}: it needs {format_bytes(need_bytes)} "
            f"({need_bytes:,} bytes) but {folder} has {format_bytes(free_bytes)} ({free_bytes:,} bytes) "
            "free. Free some space, or point HF_HUB_CACHE at a larger disk."
        )


# ------------------------------------------------------------------------------- planning
def _ensure(
    files: Sequence[ModelFile], on_progress: ProgressCallback | None, cancel: threading.Event | None
) -> list[Path]:
    cache = hub_cache_dir()
    report = on_progress or (lambda _p: None)
    firsts: list[Path | None] = []
    todo: list[tuple[ModelFile, str]] = []
    for f in files:
        first: Path | None = None
        for part in f.parts:
            path = cached_part(f.repo_id, part, cache)
            if path is not None and usable_gguf(path):
                size = path.stat().st_size
                report(DownloadProgress(part, size, size, 0.0, 0.0, True))
            else:
                if all((f.repo_id, part) != (g.repo_id, q) for g, q in todo):
                    todo.append((f, part))
                path = None
            if part == f.parts[0]:
                first = path
        firsts.append(first)
    if not todo:
        return [p for p in firsts if p is not None]

    if offline_mode():
        missing = ", ".join(f"{f.repo_id}/{part}" for f, part in todo)
        raise DownloadError(
            f"offline mode (HF_HUB_OFFLINE) is on and these files are not in the Hugging Face cache "
            f"at {cache}: {missing}. Connect and run `tandem pull`, or unset HF_HUB_OFFLINE."
        )

    remotes = [remote_file(f, part) for f, part in todo]
    need = 0
    for r in remotes:
        if r.size is not None:
            have = _incomplete_path(cache, r).stat().st_size if _incomplete_path(cache, r).exists() else 0
            need += max(0, r.size - have)
    names = ", ".join(sorted({f.display_name for f, _ in todo}))
    check_free_space(need, cache, names)

    for r in remotes:
        _fetch(cache, r, report, cancel)

    paths: list[Path] = []
    for f in files:
        for part in f.parts:
            path = cached_part(f.repo_id, part, cache)
            if path is None:  # pragma: no cover - _fetch links every part it fetches
                raise DownloadError(f"{f.repo_id}/{part} is missing from the cache after downloading it")
            try:
                read_gguf(path)
            except ModelFileError as exc:
                raise DownloadError(
                    f"downloaded {f.repo_id}/{part}, but it is not a usable GGUF: {exc}"
                ) from exc
        first = cached_part(f.repo_id, f.parts[0], cache)
        assert first is not None
        paths.append(first)
    return paths


def _blob_path(cache: Path, r: Remote, suffix: str = "") -> Path:
    folder = repo_folder(r.repo_id, cache)
    return inside(folder, folder / "blobs" / f"{r.blob}{suffix}")


def _incomplete_path(cache: Path, r: Remote) -> Path:
    return _blob_path(cache, r, ".incomplete")


# ------------------------------------------------------------------------------- fetching
class _Meter:
    """Throttled progress reports with a recent-window speed and an ETA."""

    def __init__(self, filename: str, total: int, start: int, report: ProgressCallback) -> None:
        self.filename, self.total, self.done_bytes, self.report = filename, total, start, report
        self.samples: deque[tuple[float, int]] = deque([(time.monotonic(), start)])
        self.last_emit = 0.0

    def restart(self, start: int) -> None:
        self.done_bytes = start
        self.samples = deque([(time.monotonic(), start)])

    def add(self, n: int) -> None:
        self.done_bytes += n
        self.emit()

    def speed(self, now: float) -> float:
        self.samples.append((now, self.done_bytes))
        while len(self.samples) > 2 and now - self.samples[0][0] > SPEED_WINDOW_S:
            self.samples.popleft()
        t0, b0 = self.samples[0]
        return (self.done_bytes - b0) / (now - t0) if now > t0 else 0.0

    def emit(self, *, force: bool = False, done: bool = False) -> None:
        now = time.monotonic()
        if not (force or done) and now - self.last_emit < PROGRESS_INTERVAL_S:
            return
        self.last_emit = now
        speed = self.speed(now)
        left = max(0, self.total - self.done_bytes)
        eta = 0.0 if done else (left / speed if speed > 0 and self.total else None)
        total = self.total or (self.done_bytes if done else 0)
        self.report(DownloadProgress(self.filename, self.done_bytes, total, speed, eta, done))


def _hasher_for(etag: str, size: int | None) -> Any:
    """The hub's ETag is the sha256 of an LFS file, or the git blob sha1 of a small file."""
    if HEX64.fullmatch(etag):
        return hashlib.sha256()
    if HEX40.fullmatch(etag) and size is not None:
        h = hashlib.sha1(usedforsecurity=False)
        h.update(b"blob %d\0" % size)
        return h
    return None  # an ETag we cannot check (e.g. a mirror's own); the size is still checked


def _fetch(cache: Path, r: Remote, report: ProgressCallback, cancel: threading.Event | None) -> None:
    folder = repo_folder(r.repo_id, cache)
    blob = _blob_path(cache, r)

    def reuse_blob() -> bool:
        """The same bytes are already cached (another file name or commit, or another process
        finished them while we waited for the lock): link them instead of downloading."""
        if not blob.is_file() or (r.size is not None and blob.stat().st_size != r.size):
            return False
        link_snapshot(folder, r.commit, r.filename, blob)
        size = blob.stat().st_size if blob.exists() else (r.size or 0)
        report(DownloadProgress(r.filename, size, size, 0.0, 0.0, True))
        return True

    if reuse_blob():
        return
    blob.parent.mkdir(parents=True, exist_ok=True)
    lock_path = inside(cache, cache / ".locks" / folder.name / f"{r.blob}.lock")
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with _locked(lock_path, cancel):
        if reuse_blob():
            return
        blob.unlink(missing_ok=True)  # a blob of the wrong size is not this file
        incomplete = _incomplete_path(cache, r)
        meter = _download_to(incomplete, r, report, cancel)
        os.replace(incomplete, blob)  # only now, verified, does the file enter the cache
        link_snapshot(folder, r.commit, r.filename, blob)
        meter.emit(done=True)


@contextlib.contextmanager
def _locked(path: Path, cancel: threading.Event | None) -> Iterator[None]:
    """The lock huggingface_hub takes for the same blob, so Tandem and `hf download` running
    at once never write the same .incomplete file."""
    from filelock import FileLock, Timeout

    lock = FileLock(str(path))
    while True:
        try:
            lock.acquire(timeout=0.2)
            break
        except Timeout:
            if cancel is not None and cancel.is_set():
                raise DownloadCancelled(
                    "download cancelled while waiting for another download of the same file"
                ) from None
    try:
        yield
    finally:
        lock.release()


@dataclass
class _State:
    """Where a download stands; `_stream` updates it as bytes land, so a failure mid-stream
    still leaves the right offset for the next Range request."""

    offset: int
    hasher: Any


def _download_to(path: Path, r: Remote, report: ProgressCallback, cancel: threading.Event | None) -> _Meter:
    """Stream the file into `path`, resuming what is there; verify size and checksum."""
    state = _State(path.stat().st_size if path.exists() else 0, _hasher_for(r.etag, r.size))
    if r.size is not None and state.offset > r.size:
        path.unlink()  # longer than the file: not a prefix of it
        state.offset = 0
    try:
        meter = _receive(path, r, state, report, cancel)
    except _Oversized:
        path.unlink(missing_ok=True)  # the server is not sending this file: keep nothing of it
        raise
    if r.size is not None and state.offset != r.size:
        raise DownloadError(f"{r.filename}: got {state.offset:,} bytes, the hub said {r.size:,}")
    if state.hasher is not None:
        got = state.hasher.hexdigest()
        if got != r.etag:
            path.unlink(missing_ok=True)
            raise DownloadError(
                f"checksum mismatch for {r.repo_id}/{r.filename}: "
                f"the hub says {r.etag}, the download is {got}. "
                "The damaged file was deleted; run the download again."
            )
    return meter


def _receive(
    path: Path, r: Remote, state: _State, report: ProgressCallback, cancel: threading.Event | None
) -> _Meter:
    """Append the rest of the file to `path`, retrying dropped connections from where they stopped."""
    with path.open("ab") as fh:
        if state.offset and state.hasher is not None:
            _hash_existing(path, state.offset, state.hasher, cancel)
        meter = _Meter(r.filename, r.size or 0, state.offset, report)
        meter.emit(force=True)
        failures = 0
        while r.size is None or state.offset < r.size:
            before = state.offset
            try:
                finished = _stream(fh, r, state, meter, cancel)
                if finished and (r.size is None or state.offset >= r.size):
                    break
                error = "the connection closed early"
            except _Retryable as exc:
                error = str(exc)
            # A connection that delivered bytes before dropping is retried at once; repeated
            # failures without progress back off, then give up (the partial file stays).
            failures = 0 if state.offset > before else failures + 1
            if failures > MAX_RETRIES:
                raise DownloadError(
                    f"download of {r.repo_id}/{r.filename} keeps failing ({error}); "
                    f"{format_bytes(state.offset)} are kept and the next attempt resumes from there."
                )
            delay = RETRY_DELAYS_S[min(failures, len(RETRY_DELAYS_S)) - 1] if failures else 0.0
            if cancel is not None and cancel.wait(delay):
                raise DownloadCancelled(
                    f"download of {r.filename} cancelled; {format_bytes(state.offset)} kept for resuming"
                )
            if cancel is None and delay:
                time.sleep(delay)
    return meter


def _hash_existing(path: Path, length: int, hasher: Any, cancel: threading.Event | None) -> None:
    """Feed the bytes of a resumed download to the hasher (disk speed, far above network)."""
    with path.open("rb") as src:
        left = length
        while left:
            block = src.read(min(left, 8 * CHUNK_BYTES))
            if not block:
                break
            hasher.update(block)
            left -= len(block)
            if cancel is not None and cancel.is_set():
                raise DownloadCancelled(f"download of {path.name} cancelled; partial file kept")


class _Retryable(Exception):
    """A network failure worth another try (with a Range request from where we are)."""


_BAD_LOCATION = "Invalid URL in location header"  # httpx's message for an unparsable redirect


class _Unfollowable(Exception):
    """An answer no retry can fix: a redirect loop, or a redirect to an address that is not one."""


def _stream(fh: Any, r: Remote, state: _State, meter: _Meter, cancel: threading.Event | None) -> bool:
    """One GET from `state.offset`, appending to `fh`. True when the body ended normally."""
    from huggingface_hub.utils import build_hf_headers  # type: ignore[attr-defined]

    headers = build_hf_headers(library_name="tandem", library_version=__version__)
    headers["Accept-Encoding"] = "identity"  # sizes and ranges are about the raw bytes
    if state.offset:
        headers["Range"] = f"bytes={state.offset}-"
    q: queue.Queue[tuple[str, Any]] = queue.Queue(maxsize=16)
    stop = threading.Event()
    worker = threading.Thread(
        target=_reader, args=(r.url, headers, q, stop), name="tandem-download", daemon=True
    )
    worker.start()
    try:
        while True:
            if cancel is not None and cancel.is_set():
                raise DownloadCancelled(
                    f"download of {r.filename} cancelled; {format_bytes(state.offset)} kept for resuming"
                )
            try:
                kind, item = q.get(timeout=0.1)
            except queue.Empty:
                meter.emit()
                continue
            if kind == "status":
                status, content_range = item
                if state.offset and status == 200:
                    # The server ignored the Range header: start over rather than append.
                    fh.seek(0)
                    fh.truncate()
                    state.offset = 0
                    state.hasher = _hasher_for(r.etag, r.size)
                    meter.restart(0)
                elif (
                    state.offset
                    and status == 206
                    and not str(content_range).startswith(f"bytes {state.offset}-")
                ):
                    raise _Retryable(f"the server sent the wrong range ({content_range})")
            elif kind == "data":
                if r.size is not None and state.offset + len(item) > r.size:
                    # Stop before writing: a server that keeps sending must not fill the disk.
                    raise _Oversized(
                        f"the server sent more than the {r.size:,} bytes the hub announced for "
                        f"{r.repo_id}/{r.filename}, so the download was stopped and its partial file "
                        "deleted; try again later or check HF_ENDPOINT."
                    )
                try:
                    fh.write(item)
                except OSError as exc:
                    raise DownloadError(
                        f"cannot write {r.filename} ({exc.strerror or exc}); "
                        f"{format_bytes(state.offset)} kept for resuming"
                    ) from None
                if state.hasher is not None:
                    state.hasher.update(item)
                state.offset += len(item)
                meter.add(len(item))
            elif kind == "end":
                return True
            elif kind == "error" and isinstance(item, _Unfollowable):
                raise DownloadError(
                    f"cannot download {r.repo_id}/{r.filename}: {item}; "
                    "check HF_ENDPOINT and any proxy settings."
                )
            elif kind == "error":
                raise item
    finally:
        stop.set()
        fh.flush()


def _reader(
    url: str, headers: dict[str, str], q: queue.Queue[tuple[str, Any]], stop: threading.Event
) -> None:
    """Runs on its own thread: pushes ("status"|"data"|"end"|"error", value) into `q`."""
    from huggingface_hub import get_session, hf_raise_for_status
    from huggingface_hub.errors import HfHubHTTPError

    def put(kind: str, item: Any) -> bool:
        while not stop.is_set():
            try:
                q.put((kind, item), timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    try:
        timeout = _http.Timeout(READ_TIMEOUT_S, connect=CONNECT_TIMEOUT_S)
        with get_session().stream(
            "GET", url, headers=headers, timeout=timeout, follow_redirects=True
        ) as resp:
            if resp.status_code == 416:
                put("error", _Retryable("the server refused the resume range (416)"))
                return
            if resp.status_code >= 400:
                resp.read()
                try:
                    hf_raise_for_status(resp)
                except HfHubHTTPError as exc:
                    status = exc.response.status_code
                    if status in (408, 429) or status >= 500:
                        put("error", _Retryable(f"the hub answered {status}"))
                    else:
                        put("error", DownloadError(f"the hub refused the download ({status}): {reason(exc)}"))
                    return
            if not put("status", (resp.status_code, resp.headers.get("Content-Range", ""))):
                return
            for chunk in resp.iter_bytes():  # as the network delivers (~64 KB), not buffered up
                if stop.is_set() or not put("data", chunk):
                    return
        put("end", None)
    except (_http.RequestError, _http.InvalidURL) as exc:  # dropped, refused, timed out, redirected...
        put("error", _network_failure(exc))
    except Exception as exc:  # anything else reaches the caller, not a silent thread death
        put("error", exc)


def _network_failure(exc: Exception) -> Exception:
    """What a failed GET calls for: another try (_Retryable), or none can help (_Unfollowable)."""
    if isinstance(exc, _http.TooManyRedirects):
        return _Unfollowable("the server redirects it in a loop")
    # httpx reports a malformed Location header as a protocol error, as it does a dropped
    # connection: only the message tells them apart (if it changes, the bad redirect is retried,
    # then reported as failing, still in one line).
    bad_location = isinstance(exc, _http.RemoteProtocolError) and str(exc).startswith(_BAD_LOCATION)
    if bad_location or isinstance(exc, (_http.UnsupportedProtocol, _http.InvalidURL)):
        return _Unfollowable(f"the server redirected it to an unusable address ({reason(exc)})")
    if isinstance(exc, _http.TransportError):
        return _Retryable(reason(exc))
    return _Unfollowable(f"its answer cannot be read ({reason(exc)})")
