"""Downloads against a local fake hub: real huggingface_hub, real HTTP, real files."""

from __future__ import annotations

import hashlib
import os
import threading
import time
from pathlib import Path

import pytest

from catalogs import TINY_REPO
from hub_server import FakeHub
from split_gguf import write_split
from tandem.catalog import (
    DownloadCancelled,
    DownloadError,
    DownloadProgress,
    ModelFile,
    PairSpec,
    download_file,
    local_file,
    pull_pair,
)
from tandem.catalog.hub import check_free_space
from tandem.engine import LoadedModel, LoadOptions, read_gguf


def model(filename: str, repo_id: str = TINY_REPO, gated: bool = False) -> ModelFile:
    return ModelFile(repo_id, filename, 0, "F32", "", gated)


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_complete_download_lands_in_the_hf_cache(
    tiny_hub: FakeHub, hf_env: Path, tiny_files: tuple[Path, Path]
):
    events: list[DownloadProgress] = []
    path = download_file(model("tiny-a.gguf"), events.append)

    commit = tiny_hub.commit(TINY_REPO)
    folder = hf_env / "models--test-org--tiny-GGUF"
    assert path == folder / "snapshots" / commit / "tiny-a.gguf"
    assert (
        path.is_symlink()
        and path.resolve() == folder / "blobs" / tiny_hub.files[(TINY_REPO, "tiny-a.gguf")].sha256
    )
    assert (folder / "refs" / "main").read_text() == commit
    assert sha256(path) == sha256(tiny_files[0])
    read_gguf(path)  # complete, readable
    assert not list((folder / "blobs").glob("*.incomplete"))

    # Progress: starts at 0, only grows, ends with one `done` event at the full size.
    size = tiny_files[0].stat().st_size
    assert events[0].downloaded == 0 and not events[0].done
    assert [e.downloaded for e in events] == sorted(e.downloaded for e in events)
    assert events[-1] == DownloadProgress("tiny-a.gguf", size, size, events[-1].bytes_per_s, 0.0, True)
    assert sum(e.done for e in events) == 1 and all(e.total == size for e in events)

    # The standard cache layout: huggingface_hub itself finds the file, and so does local_file.
    from huggingface_hub import try_to_load_from_cache

    assert try_to_load_from_cache(TINY_REPO, "tiny-a.gguf", cache_dir=hf_env) == str(path)
    assert local_file(model("tiny-a.gguf")) == path

    # A second call is served from the cache without touching the network.
    before = len(tiny_hub.requests)
    again: list[DownloadProgress] = []
    assert download_file(model("tiny-a.gguf"), again.append) == path
    assert len(tiny_hub.requests) == before
    assert again == [DownloadProgress("tiny-a.gguf", size, size, 0.0, 0.0, True)]


def test_connection_cut_mid_file_is_resumed_with_a_range_request(
    tiny_hub: FakeHub, tiny_files: tuple[Path, Path]
):
    tiny_hub.files[(TINY_REPO, "tiny-a.gguf")].drop_after = 3_000_000
    tiny_hub.files[(TINY_REPO, "tiny-a.gguf")].drops_left = 1
    path = download_file(model("tiny-a.gguf"))
    gets = tiny_hub.gets("tiny-a.gguf")
    assert [g.range for g in gets] == [None, "bytes=3000000-"]  # resumed, not restarted
    assert sha256(path) == sha256(tiny_files[0])


def test_cancel_stops_promptly_keeps_the_partial_file_and_a_later_call_resumes(
    tiny_hub: FakeHub, hf_env: Path, tiny_files: tuple[Path, Path]
):
    served = tiny_hub.files[(TINY_REPO, "tiny-a.gguf")]
    served.chunk_delay_s = 0.01  # ~6 MB/s: slow enough to cancel half-way
    cancel = threading.Event()
    cancelled_at: list[float] = []

    def on_progress(p: DownloadProgress) -> None:
        if p.downloaded >= 2_000_000 and not cancel.is_set():
            cancelled_at.append(time.monotonic())
            cancel.set()

    with pytest.raises(DownloadCancelled, match="kept"):
        download_file(model("tiny-a.gguf"), on_progress, cancel)
    assert time.monotonic() - cancelled_at[0] < 1.0  # promptly
    blobs = hf_env / "models--test-org--tiny-GGUF" / "blobs"
    partial = blobs / f"{served.sha256}.incomplete"
    kept = partial.stat().st_size
    assert 2_000_000 <= kept < served.size
    assert not (blobs / served.sha256).exists() and local_file(model("tiny-a.gguf")) is None

    served.chunk_delay_s = 0.0
    events: list[DownloadProgress] = []
    path = download_file(model("tiny-a.gguf"), events.append)
    assert tiny_hub.gets("tiny-a.gguf")[-1].range == f"bytes={kept}-"
    assert events[0].downloaded == kept  # progress starts where the partial file ended
    assert sha256(path) == sha256(tiny_files[0]) and not partial.exists()


def test_missing_file_and_missing_repo_give_clear_404_messages(tiny_hub: FakeHub):
    with pytest.raises(DownloadError, match=r"no-such-file\.gguf is not in test-org/tiny-GGUF .*\(404\)"):
        download_file(model("no-such-file.gguf"))
    with pytest.raises(DownloadError, match=r"repository test-org/nope was not found on http://127\.0\.0\.1"):
        download_file(model("tiny-a.gguf", repo_id="test-org/nope"))


def test_gated_repo_without_token_then_refused_then_accepted(
    tiny_hub: FakeHub, monkeypatch: pytest.MonkeyPatch, tiny_files: tuple[Path, Path]
):
    tiny_hub.gated.add(TINY_REPO)
    with pytest.raises(DownloadError) as no_token:
        download_file(model("tiny-a.gguf", gated=True))
    msg = str(no_token.value)
    assert "gated" in msg and "HF_TOKEN" in msg and f"{tiny_hub.url}/{TINY_REPO}" in msg
    assert tiny_hub.requests[-1].authorization is None

    monkeypatch.setenv("HF_TOKEN", "hf_wrong_token")
    with pytest.raises(DownloadError, match=r"refused your token for test-org/tiny-GGUF \(403\)"):
        download_file(model("tiny-a.gguf", gated=True))

    monkeypatch.setenv("HF_TOKEN", "hf_good_token")
    path = download_file(model("tiny-a.gguf", gated=True))
    assert sha256(path) == sha256(tiny_files[0])
    assert tiny_hub.gets("tiny-a.gguf")[-1].authorization == "Bearer hf_good_token"


def test_checksum_mismatch_is_rejected_and_nothing_enters_the_cache(tiny_hub: FakeHub, hf_env: Path):
    served = tiny_hub.files[(TINY_REPO, "tiny-a.gguf")]
    served.corrupt = True
    with pytest.raises(DownloadError, match=f"checksum mismatch .*the hub says {served.sha256}"):
        download_file(model("tiny-a.gguf"))
    folder = hf_env / "models--test-org--tiny-GGUF"
    assert not list((folder / "blobs").iterdir())  # neither the blob nor a partial file
    assert not (folder / "snapshots").exists() or not list((folder / "snapshots").rglob("*.gguf"))
    assert local_file(model("tiny-a.gguf")) is None

    served.corrupt = False  # the next attempt downloads cleanly
    assert read_gguf(download_file(model("tiny-a.gguf")))


def test_small_non_lfs_file_is_checked_against_its_git_sha1(hub: FakeHub, tmp_path: Path, tiny_files):
    hub.add("test-org/small", "tiny.gguf", tiny_files[0], lfs=False)
    path = download_file(model("tiny.gguf", repo_id="test-org/small"))
    assert sha256(path) == sha256(tiny_files[0])
    hub.files[("test-org/small", "tiny.gguf")].corrupt = True
    os.remove(path.resolve())
    os.remove(path)
    with pytest.raises(DownloadError, match="checksum mismatch"):
        download_file(model("tiny.gguf", repo_id="test-org/small"))


def test_offline_mode_uses_the_cache_and_names_what_is_missing(
    tiny_hub: FakeHub, monkeypatch: pytest.MonkeyPatch, hf_env: Path
):
    path = download_file(model("tiny-a.gguf"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    before = len(tiny_hub.requests)
    assert download_file(model("tiny-a.gguf")) == path
    with pytest.raises(DownloadError) as missing:
        download_file(model("tiny-a-draft.gguf"))
    assert "HF_HUB_OFFLINE" in str(missing.value) and "test-org/tiny-GGUF/tiny-a-draft.gguf" in str(
        missing.value
    )
    assert str(hf_env) in str(missing.value)
    assert len(tiny_hub.requests) == before  # offline means offline


def test_split_model_fetches_every_part_and_llama_cpp_loads_the_first(
    hub: FakeHub, tmp_path: Path, tiny_files: tuple[Path, Path]
):
    parts = write_split(tiny_files[0], tmp_path / "split-src", "tiny-a-split", 3)
    for p in parts:
        hub.add("test-org/split-GGUF", f"Q/{p.name}", p)
    f = model("Q/tiny-a-split-00001-of-00003.gguf", repo_id="test-org/split-GGUF")
    events: list[DownloadProgress] = []
    first = download_file(f, events.append)
    assert first.name == "tiny-a-split-00001-of-00003.gguf" and first.parent.name == "Q"
    for p in parts:
        assert sha256(first.with_name(p.name)) == sha256(p)
    assert {e.filename for e in events if e.done} == {f"Q/{p.name}" for p in parts}
    assert local_file(f) == first
    m = LoadedModel(first, LoadOptions(n_ctx=128))
    try:
        assert m.n_vocab == 49152 and m.tokenize("Hello world")
    finally:
        m.close()

    # One missing part makes the whole model "not downloaded".
    first.with_name(parts[2].name).unlink()
    assert local_file(f) is None


def test_free_disk_space_is_checked_before_downloading(tiny_hub: FakeHub, hf_env: Path):
    tiny_hub.files[(TINY_REPO, "tiny-a.gguf")].claimed_size = 2**60  # ~1.15 exabytes
    with pytest.raises(DownloadError) as err:
        download_file(model("tiny-a.gguf"))
    msg = str(err.value)
    assert "not enough disk space" in msg and f"{2**60:,} bytes" in msg and "free" in msg
    assert not tiny_hub.gets("tiny-a.gguf")  # refused before any byte was fetched


def test_free_space_check_with_an_injected_reading(tmp_path: Path):
    check_free_space(10**9, tmp_path, "x", free_bytes=2 * 10**9)
    with pytest.raises(DownloadError, match=r"needs 1\.0 GB \(1,000,000,000 bytes\) but .* has 500 MB"):
        check_free_space(10**9, tmp_path / "not" / "yet", "x", free_bytes=500 * 10**6)


def test_pull_pair_downloads_target_and_draft(tiny_hub: FakeHub, tiny_files: tuple[Path, Path]):
    spec = PairSpec("tiny", "", "", model("tiny-a.gguf"), model("tiny-a-draft.gguf"), 4, 0.0, 512, 0)
    events: list[DownloadProgress] = []
    target, draft = pull_pair(spec, events.append)
    assert sha256(target) == sha256(tiny_files[0]) and sha256(draft) == sha256(tiny_files[1])
    assert [e.filename for e in events if e.done] == ["tiny-a.gguf", "tiny-a-draft.gguf"]


def test_pull_pair_drafted_by_its_own_heads_downloads_the_target_alone(
    tiny_hub: FakeHub, tiny_files: tuple[Path, Path]
):
    spec = PairSpec("tiny-mtp", "", "", model("tiny-a.gguf"), None, 4, 0.0, 512, 0)
    events: list[DownloadProgress] = []
    target, draft = pull_pair(spec, events.append)
    assert sha256(target) == sha256(tiny_files[0]) and draft is None
    assert [e.filename for e in events if e.done] == ["tiny-a.gguf"] and not tiny_hub.gets(
        "tiny-a-draft.gguf"
    )
