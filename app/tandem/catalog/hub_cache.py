"""The Hugging Face hub cache on disk: where it is, what is complete in it, and adding to it.

Tandem stores downloads in huggingface_hub's own cache layout, so a file fetched by Tandem is
found by `hf`, transformers, llama.cpp's `-hf` and LM Studio imports, and the other way round:

    <cache>/models--<owner>--<name>/
        blobs/<etag>                  the file's bytes (etag = sha256 for LFS files; an ETag
                                      that is no hash is named by its own sha256)
        blobs/<etag>.incomplete       a download in progress (Tandem resumes it)
        snapshots/<commit>/<filename> -> ../../blobs/<etag>
        refs/main                     the commit `main` pointed to when last fetched

Settings are read from the environment on every call (not once at import, as
huggingface_hub's constants are), so a TUI or a test can change HF_HUB_CACHE at run time.

Commits and ETags come from the server (whatever HF_ENDPOINT points at): every path built from
them is checked to stay inside its repository folder (`inside`), as huggingface_hub checks its
own pointer paths, so a hostile answer cannot write, replace or delete a file elsewhere.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import uuid
from functools import lru_cache
from pathlib import Path

from tandem.engine.errors import ModelFileError, TandemError
from tandem.engine.files.gguf_file import read_gguf

from .spec import ModelFile

DEFAULT_ENDPOINT = "https://huggingface.co"
_TRUE = {"1", "on", "yes", "true"}
COMMIT_RE = re.compile(r"[0-9a-f]{40}")  # a git commit hash, the only snapshot folder name


class CachePathError(TandemError):
    """A name from the hub (or a damaged cache) would put a path outside its repository folder."""


def hub_cache_dir() -> Path:
    """$HF_HUB_CACHE, else $HUGGINGFACE_HUB_CACHE, else $HF_HOME/hub, else ~/.cache/huggingface/hub
    (XDG_CACHE_HOME respected): the same order huggingface_hub uses."""
    for var in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        if os.environ.get(var):
            return Path(os.path.expandvars(os.environ[var])).expanduser()
    if os.environ.get("HF_HOME"):
        return Path(os.path.expandvars(os.environ["HF_HOME"])).expanduser() / "hub"
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg).expanduser() / "huggingface" / "hub"


def hub_endpoint() -> str:
    return (os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/")


def offline_mode() -> bool:
    """HF_HUB_OFFLINE (or the legacy TRANSFORMERS_OFFLINE) as huggingface_hub reads it."""
    value = os.environ.get("HF_HUB_OFFLINE") or os.environ.get("TRANSFORMERS_OFFLINE") or ""
    if value.strip().lower() in _TRUE:
        return True
    with contextlib.suppress(Exception):  # set programmatically by another library
        from huggingface_hub import constants

        return bool(constants.HF_HUB_OFFLINE)
    return False


def repo_folder(repo_id: str, cache: Path | None = None) -> Path:
    return (cache or hub_cache_dir()) / ("models--" + repo_id.replace("/", "--"))


def inside(root: Path, path: Path) -> Path:
    """`path`, if it lies strictly inside `root` once `.` and `..` are resolved; else CachePathError.
    A check on the names, like huggingface_hub's pointer-path check: the names come from the
    network, and a folder the user symlinked elsewhere (blobs on another disk) stays usable."""
    top, real = os.path.abspath(root), os.path.abspath(path)
    if real == top or os.path.commonpath([top, real]) != top:
        raise CachePathError(
            f"refusing to use {path}: it lies outside {root} "
            "(a bad answer from HF_ENDPOINT or a damaged cache)."
        )
    return path


def _read_ref(folder: Path, revision: str = "main") -> str | None:
    """The commit refs/<revision> names; None unless it is a commit hash (a ref written from a
    hostile answer by an older version must not lead out of the snapshots folder)."""
    try:
        commit = inside(folder / "refs", folder / "refs" / revision).read_text().strip()
    except (OSError, CachePathError):
        return None
    return commit if COMMIT_RE.fullmatch(commit) else None


def cached_part(repo_id: str, filename: str, cache: Path | None = None) -> Path | None:
    """The snapshot path of `filename` if it is in the cache, preferring the commit `main`
    pointed to; other snapshots count too (the file is the same bytes the catalog named)."""
    folder = repo_folder(repo_id, cache)
    snapshots = folder / "snapshots"
    if not snapshots.is_dir():
        return None
    commits: list[Path] = []
    main = _read_ref(folder)
    if main:
        commits.append(snapshots / main)
    try:
        others = sorted(snapshots.iterdir(), key=lambda p: p.stat().st_mtime, reverse=True)
    except OSError:
        others = []
    commits += [c for c in others if c.name != main]
    for commit in commits:
        candidate = commit / filename
        if candidate.is_file():  # follows the symlink: a dangling link does not count
            return candidate
    return None


def usable_gguf(path: Path) -> bool:
    """A complete, readable GGUF (read_gguf's truncation check, no weights loaded).
    Remembered while the file is unchanged: `tandem pairs` asks about every file several
    times, and parsing a 256k-token vocabulary takes a moment."""
    try:
        st = path.stat()
    except OSError:
        return False
    return _usable(str(path), st.st_size, st.st_mtime_ns, st.st_ino)


@lru_cache(maxsize=256)
def _usable(path: str, size: int, mtime_ns: int, inode: int) -> bool:
    try:
        read_gguf(path)
    except ModelFileError:
        return False
    return True


def local_file(f: ModelFile) -> Path | None:
    """The model's complete file in the HF cache (first part for split models), or None.
    No network. Every part must be present and pass the truncation check."""
    cache = hub_cache_dir()
    first: Path | None = None
    for part in f.parts:
        path = cached_part(f.repo_id, part, cache)
        if path is None or not usable_gguf(path):
            return None
        first = first or path
    return first


def link_snapshot(folder: Path, commit: str, filename: str, blob: Path, revision: str = "main") -> Path:
    """Point snapshots/<commit>/<filename> at the blob and record refs/<revision> = commit.
    Safe to run from several processes at once for the same file (see `_link`)."""
    if not COMMIT_RE.fullmatch(commit):
        raise CachePathError(f"refusing to link {filename}: {commit[:80]!r} is not a commit (40 hex digits).")
    snapshot = folder / "snapshots" / commit
    pointer = inside(snapshot, snapshot / filename)
    inside(folder / "blobs", blob)
    pointer.parent.mkdir(parents=True, exist_ok=True)
    if not _links_to(pointer, blob):
        _link(pointer, blob)
    write_ref(folder, revision, commit)
    return pointer


def _links_to(pointer: Path, blob: Path) -> bool:
    """The pointer is already a symlink to this blob (another process linked it first)."""
    try:
        return pointer.is_symlink() and os.path.samefile(pointer, blob)
    except OSError:
        return False


def _link(pointer: Path, blob: Path) -> None:
    """Make `pointer` a symlink to `blob` in one step. The link is made under a unique name and
    renamed over the pointer: unlinking and re-creating it in place races with another process
    doing the same (its link lands in between, ours then fails), and the pointer is never missing."""
    tmp = pointer.with_name(f".{pointer.name}.{uuid.uuid4().hex[:8]}.tmp")
    try:
        tmp.symlink_to(os.path.relpath(blob, pointer.parent))
    except OSError:
        # No symlinks (Windows without developer mode, exFAT): huggingface_hub then keeps the
        # bytes in the snapshot itself; do the same. (A unique name cannot exist already, so this
        # is never a lost race.)
        shutil.move(str(blob), pointer)
        return
    try:
        os.replace(tmp, pointer)
    except OSError:
        tmp.unlink(missing_ok=True)
        raise


def write_ref(folder: Path, revision: str, commit: str) -> None:
    ref = inside(folder / "refs", folder / "refs" / revision)
    ref.parent.mkdir(parents=True, exist_ok=True)
    if _read_ref(folder, revision) == commit:
        return
    tmp = ref.with_name(f"{ref.name}.{uuid.uuid4().hex[:8]}.tmp")
    tmp.write_text(commit)
    os.replace(tmp, ref)
