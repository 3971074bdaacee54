"""A hostile or broken hub (whatever HF_ENDPOINT points at) cannot write, replace or delete a
file outside the Hugging Face cache, fill the disk, or crash Tandem with a traceback.

Real huggingface_hub, real HTTP against the local fake hub answering what a malicious server
could (see hub_server.py's hostile knobs), real files. Every download test checks that nothing
outside the cache folder was created, changed or deleted.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from catalogs import TINY_REPO, link_or_copy
from hub_server import FakeHub
from tandem.catalog import DownloadError, DownloadProgress, ModelFile, download_file, local_file
from tandem.catalog import hub as hub_module
from tandem.catalog.discovery import scan
from tandem.catalog.hub_cache import link_snapshot, repo_folder
from tandem.engine.errors import TandemError

A = "tiny-a.gguf"
FOLDER = "models--test-org--tiny-GGUF"


def model(filename: str = A) -> ModelFile:
    return ModelFile(TINY_REPO, filename, 0, "F32", "", False)


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def outside_cache(tmp_path: Path, cache: Path) -> dict[str, tuple[str, bytes]]:
    """Everything under tmp_path except the cache: kind and content (links not followed)."""
    seen: dict[str, tuple[str, bytes]] = {}
    for dirpath, dirs, files in os.walk(tmp_path):
        here = Path(dirpath)
        dirs[:] = [d for d in dirs if here / d != cache]
        for name in dirs + files:
            p = here / name
            rel = str(p.relative_to(tmp_path))
            if p.is_symlink():
                seen[rel] = ("link", os.readlink(p).encode())
            elif p.is_dir():
                seen[rel] = ("dir", b"")
            else:
                seen[rel] = ("file", p.read_bytes() if p.stat().st_size < 1 << 20 else b"big")
    return seen


@pytest.fixture
def victim(tmp_path: Path, hf_env: Path) -> Path:
    """A file next to the cache that a path-traversing header would aim at."""
    path = tmp_path / "victim.txt"
    path.write_text("precious")
    return path


@pytest.fixture
def untouched(tmp_path: Path, hf_env: Path, victim: Path) -> Iterator[None]:
    """Asserts, after the test, that nothing outside the cache was created, changed or deleted."""
    before = outside_cache(tmp_path, hf_env)
    yield
    assert outside_cache(tmp_path, hf_env) == before
    assert victim.read_text() == "precious" and not victim.is_symlink()


@pytest.fixture
def quick_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    """Real retries, without the seconds of back-off a user's download waits between them."""
    monkeypatch.setattr(hub_module, "RETRY_DELAYS_S", (0.01, 0.01, 0.01, 0.01, 0.01))


# ----------------------------------------------------------------- 1. headers used as paths
@pytest.mark.parametrize("commit", ["../../../x.d", "z" * 40, "a" * 41, "a" * 39 + "/"])
def test_a_commit_header_that_is_not_40_hex_is_refused_before_anything_is_written(
    tiny_hub: FakeHub, hf_env: Path, untouched: None, commit: str
) -> None:
    tiny_hub.files[(TINY_REPO, A)].commit_header = commit
    with pytest.raises(DownloadError) as err:
        download_file(model())
    msg = str(err.value)
    assert tiny_hub.url in msg and "X-Repo-Commit" in msg and "\n" not in msg
    assert not tiny_hub.gets(A)  # refused from the HEAD's answer, before any byte was fetched
    assert not (hf_env / FOLDER / "snapshots").exists() and not (hf_env / FOLDER / "refs").exists()


def test_an_etag_header_that_is_a_path_cannot_delete_or_create_files_outside_the_cache(
    tiny_hub: FakeHub, hf_env: Path, untouched: None, tiny_files: tuple[Path, Path]
) -> None:
    served = tiny_hub.files[(TINY_REPO, A)]
    served.etag_header = "../../../victim.txt"  # hf_env/<repo>/blobs/../../../ is tmp_path
    path = download_file(model())
    # An ETag that is no hash is not used as a name: its sha256 is (the size is still checked).
    blob = hf_env / FOLDER / "blobs" / hashlib.sha256(b"../../../victim.txt").hexdigest()
    assert path.resolve() == blob and sha256(path) == sha256(tiny_files[0])
    assert not list((hf_env / FOLDER / "blobs").glob("*.incomplete"))


def test_an_uppercase_hex_etag_is_lowercased_and_still_verified(
    tiny_hub: FakeHub, hf_env: Path, untouched: None, tiny_files: tuple[Path, Path]
) -> None:
    served = tiny_hub.files[(TINY_REPO, A)]
    served.etag_header = served.sha256.upper()
    served.corrupt = True  # the checksum must still be compared
    with pytest.raises(DownloadError, match=f"checksum mismatch .*the hub says {served.sha256}"):
        download_file(model())
    served.corrupt = False
    path = download_file(model())
    assert path.resolve() == hf_env / FOLDER / "blobs" / served.sha256
    assert sha256(path) == sha256(tiny_files[0])


def test_link_snapshot_refuses_a_commit_or_filename_that_leaves_the_snapshot(
    hf_env: Path, tmp_path: Path, untouched: None, victim: Path
) -> None:
    folder = repo_folder(TINY_REPO, hf_env)
    blob = folder / "blobs" / ("b" * 64)
    blob.parent.mkdir(parents=True)
    blob.write_bytes(b"bytes")
    # snapshots/../../../victim.txt is tmp_path/victim.txt: it would become a symlink to the blob.
    with pytest.raises(TandemError, match="40 hex"):
        link_snapshot(folder, "../../..", "victim.txt", blob)
    with pytest.raises(TandemError, match="outside"):
        link_snapshot(folder, "c" * 40, "../../../../victim.txt", blob)
    with pytest.raises(TandemError, match="outside"):
        link_snapshot(folder, "c" * 40, "x.gguf", tmp_path / "victim.txt")  # a blob elsewhere
    assert not (folder / "refs").exists() and blob.read_bytes() == b"bytes"


def test_a_poisoned_refs_main_is_not_followed_out_of_the_cache(
    hf_env: Path, tmp_path: Path, tiny_files: tuple[Path, Path]
) -> None:
    """A ref written by an older Tandem from a hostile commit header must not hand llama.cpp a
    file outside the cache."""
    link_or_copy(tiny_files[0], tmp_path / "x.d" / A)
    folder = repo_folder(TINY_REPO, hf_env)
    (folder / "snapshots").mkdir(parents=True)
    (folder / "refs").mkdir()
    (folder / "refs" / "main").write_text("../../../x.d")
    assert local_file(model()) is None


# ----------------------------------------------------------------- 2. more bytes than announced
@pytest.mark.parametrize("announced", [False, True], ids=["close-delimited", "longer-content-length"])
def test_a_server_sending_past_the_announced_size_is_stopped_and_the_partial_deleted(
    tiny_hub: FakeHub, hf_env: Path, untouched: None, tiny_files: tuple[Path, Path], announced: bool
) -> None:
    served = tiny_hub.files[(TINY_REPO, A)]
    served.overrun_bytes, served.overrun_announced = 64 * 2**20, announced  # HEAD says the real size
    events: list[DownloadProgress] = []
    with pytest.raises(DownloadError) as err:
        download_file(model(), events.append)
    msg = str(err.value)
    assert f"more than the {served.size:,} bytes" in msg and "deleted" in msg and "\n" not in msg
    assert max(e.downloaded for e in events) <= served.size  # never wrote a byte past the size
    blobs = hf_env / FOLDER / "blobs"
    assert not list(blobs.iterdir())  # no oversized partial kept as if it were good, no blob
    assert local_file(model()) is None
    assert len(tiny_hub.gets(A)) == 1  # not retried: the server is misbehaving, not flaky

    served.overrun_bytes = 0  # an honest answer downloads normally
    assert sha256(download_file(model())) == sha256(tiny_files[0])


# ----------------------------------------------------------------- 3. redirect loops, bad URLs
@pytest.mark.parametrize("method", ["HEAD", "GET"])
def test_a_redirect_loop_is_a_one_line_error(
    tiny_hub: FakeHub, hf_env: Path, untouched: None, quick_retries: None, method: str
) -> None:
    tiny_hub.files[(TINY_REPO, A)].redirect_loop = (method,)
    with pytest.raises(DownloadError) as err:
        download_file(model())
    msg = str(err.value)
    assert "redirect" in msg and "\n" not in msg
    assert len(tiny_hub.gets(A)) <= 21  # one GET and its redirects (if any): no retries
    assert local_file(model()) is None


@pytest.mark.parametrize("location", ["htp://127.0.0.1:1/x.gguf", "http://[::1"])
def test_a_redirect_to_an_unusable_address_is_a_one_line_error_without_retries(
    tiny_hub: FakeHub, hf_env: Path, untouched: None, quick_retries: None, location: str
) -> None:
    tiny_hub.files[(TINY_REPO, A)].redirect_get_to = location
    with pytest.raises(DownloadError) as err:
        download_file(model())
    msg = str(err.value)
    assert "address" in msg and TINY_REPO in msg and "\n" not in msg
    assert len(tiny_hub.gets(A)) == 1  # retrying cannot help


@pytest.mark.parametrize(
    "endpoint", ["htp://x", "http://[::1", "http://", "ftp://example.com", "http://h:99999"]
)
def test_an_unusable_hf_endpoint_is_a_one_line_error(
    hf_env: Path, untouched: None, monkeypatch: pytest.MonkeyPatch, endpoint: str
) -> None:
    monkeypatch.setenv("HF_ENDPOINT", endpoint)
    with pytest.raises(DownloadError) as err:
        download_file(model())
    msg = str(err.value)
    assert "HF_ENDPOINT" in msg and repr(endpoint) in msg and "\n" not in msg
    assert isinstance(err.value, TandemError)


# ----------------------------------------------------------------- 4. Ollama manifest digests
def write_manifest(root: Path, model: str, digest: object) -> None:
    manifest = root / "manifests" / "registry.ollama.ai" / "library" / model / "latest"
    manifest.parent.mkdir(parents=True, exist_ok=True)
    layer = {"mediaType": "application/vnd.ollama.image.model", "digest": digest, "size": 1}
    manifest.write_text(json.dumps({"schemaVersion": 2, "layers": [layer]}))


def test_ollama_digests_that_are_not_sha256_hashes_are_skipped_and_the_scan_goes_on(
    hf_env: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tiny_files: tuple[Path, Path]
) -> None:
    root = tmp_path / "ollama"
    monkeypatch.setenv("OLLAMA_MODELS", str(root))
    outside = link_or_copy(tiny_files[0], tmp_path / "elsewhere" / "secret.gguf")
    good = sha256(tiny_files[1])
    link_or_copy(tiny_files[1], root / "blobs" / f"sha256-{good}")
    write_manifest(root, "absolute", str(outside))  # root / "blobs" / "/abs" is "/abs"
    write_manifest(root, "relative", "../../elsewhere/secret.gguf")
    write_manifest(root, "prefixed", "sha256:../../elsewhere/secret.gguf")
    write_manifest(root, "short", "sha256:" + good[:63])
    write_manifest(root, "number", 12)
    write_manifest(root, "good", f"sha256:{good}")
    write_manifest(root, "dashed", f"sha256-{good}")  # the blob file's own spelling: accepted
    found, _ = scan()
    ollama = [(g.name, g.path) for g in found if g.source == "ollama"]
    assert ollama == [("dashed:latest", root / "blobs" / f"sha256-{good}")]  # same blob: named once
    assert all(g.path.resolve() != outside.resolve() for g in found)


# ----------------------------------------------------------------- 5. the snapshot symlink race
def blob_and_folder(hf_env: Path) -> tuple[Path, Path]:
    folder = repo_folder(TINY_REPO, hf_env)
    blob = folder / "blobs" / ("b" * 64)
    blob.parent.mkdir(parents=True)
    blob.write_bytes(b"the model")
    return folder, blob


def assert_linked(pointer: Path, blob: Path) -> None:
    assert pointer.is_symlink() and pointer.resolve() == blob.resolve()
    assert blob.is_file() and not blob.is_symlink() and blob.read_bytes() == b"the model"
    assert [p.name for p in pointer.parent.iterdir()] == [pointer.name]  # no temporary links left


def test_link_snapshot_when_another_process_creates_the_pointer_first(
    hf_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Deterministic replay of the race: the other process's symlink lands just before ours.
    The blob must stay in blobs/ (other snapshots link to it), not be moved over the pointer."""
    folder, blob = blob_and_folder(hf_env)
    commit = "c" * 40
    pointer = folder / "snapshots" / commit / A
    other = folder / "snapshots" / ("d" * 40) / A  # an older snapshot of the same bytes
    other.parent.mkdir(parents=True)
    other.symlink_to(os.path.relpath(blob, other.parent))
    real_symlink = os.symlink
    raced: list[bool] = []

    def symlink_after_the_other_process(src: str, dst: str, *args: object, **kwargs: object) -> None:
        if not raced:
            raced.append(True)
            real_symlink(os.path.relpath(blob, pointer.parent), pointer)  # the other process wins
        real_symlink(src, dst, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "symlink", symlink_after_the_other_process)
    assert link_snapshot(folder, commit, A, blob) == pointer
    assert raced
    assert_linked(pointer, blob)
    assert_linked(other, blob)
    assert (folder / "refs" / "main").read_text() == commit


def test_link_snapshot_from_many_threads_at_once(hf_env: Path) -> None:
    folder, blob = blob_and_folder(hf_env)
    commit = "c" * 40
    start = threading.Barrier(8)
    errors: list[BaseException] = []

    def link() -> None:
        start.wait()
        for _ in range(50):
            try:
                link_snapshot(folder, commit, A, blob)
            except BaseException as exc:  # collected: an exception must fail the test, not the thread
                errors.append(exc)

    threads = [threading.Thread(target=link) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors
    assert_linked(folder / "snapshots" / commit / A, blob)


def test_an_existing_correct_pointer_is_kept(hf_env: Path) -> None:
    folder, blob = blob_and_folder(hf_env)
    pointer = link_snapshot(folder, "c" * 40, A, blob)
    first = pointer.lstat()
    time.sleep(0.01)
    assert link_snapshot(folder, "c" * 40, A, blob) == pointer
    assert pointer.lstat().st_ino == first.st_ino and pointer.lstat().st_mtime_ns == first.st_mtime_ns
    assert_linked(pointer, blob)
