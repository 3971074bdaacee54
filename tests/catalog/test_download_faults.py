"""Downloads when things go wrong: server errors, a full disk, a killed process.

Real huggingface_hub, real HTTP against the local fake hub, real files; the faults are real
too (the server answers 5xx, the kernel refuses to grow the file, the process is SIGKILLed).
In every case the partial file is kept for resuming and never handed to llama.cpp.
"""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from catalogs import TINY_REPO
from hub_server import FakeHub
from tandem.catalog import DownloadError, ModelFile, download_file, local_file
from tandem.catalog import hub as hub_module

ROOT = Path(__file__).resolve().parents[2]
A = "tiny-a.gguf"


def model(filename: str = A) -> ModelFile:
    return ModelFile(TINY_REPO, filename, 0, "F32", "", False)


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def partial_file(hf_env: Path, served_sha: str) -> Path:
    return hf_env / "models--test-org--tiny-GGUF" / "blobs" / f"{served_sha}.incomplete"


@pytest.fixture
def quick_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    """Real retries, without the seconds of back-off a user's download waits between them."""
    monkeypatch.setattr(hub_module, "RETRY_DELAYS_S", (0.01, 0.01, 0.01, 0.01, 0.01))


def pull_in_child(*args: str, limit_file_bytes: int | None = None) -> subprocess.Popen[str]:
    """`tandem pull` in a child process (this test's environment), optionally unable to write
    more than `limit_file_bytes` to any file: the kernel's answer when a disk is full."""

    def limit() -> None:
        if limit_file_bytes is not None:
            import resource

            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a failed write, not a dead process
            resource.setrlimit(resource.RLIMIT_FSIZE, (limit_file_bytes, limit_file_bytes))

    return subprocess.Popen(
        [sys.executable, "-m", "tandem.cli.main", "pull", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
        cwd=ROOT,
        env=dict(os.environ),
        preexec_fn=limit,
    )


def test_server_errors_are_retried_and_the_download_completes(
    tiny_hub: FakeHub, tiny_files: tuple[Path, Path], quick_retries: None
):
    served = tiny_hub.files[(TINY_REPO, A)]
    served.errors_left, served.error_status = 2, 503
    path = download_file(model())
    assert len(tiny_hub.gets(A)) == 3  # two 503s, then the file
    assert sha256(path) == sha256(tiny_files[0])


def test_a_server_that_keeps_failing_gives_a_clear_error_and_keeps_the_partial_file(
    tiny_hub: FakeHub, hf_env: Path, tiny_files: tuple[Path, Path], quick_retries: None
):
    served = tiny_hub.files[(TINY_REPO, A)]
    served.drop_after, served.drops_left = 3_000_000, 1  # the connection drops...
    served.errors_left, served.errors_on_resume_only = 100, True  # ...and the server then fails
    with pytest.raises(DownloadError) as err:
        download_file(model())
    msg = str(err.value)
    assert "keeps failing (the hub answered 500)" in msg and "3.0 MB are kept" in msg
    assert "resumes from there" in msg
    assert partial_file(hf_env, served.sha256).stat().st_size == 3_000_000
    assert local_file(model()) is None  # a partial file is never offered to llama.cpp

    served.errors_left = 0  # the server recovers: the next attempt resumes
    path = download_file(model())
    assert tiny_hub.gets(A)[-1].range == "bytes=3000000-"
    assert sha256(path) == sha256(tiny_files[0])


def test_disk_full_mid_file_is_one_line_and_the_download_resumes_later(
    tiny_hub: FakeHub, tiny_catalog: Path, hf_env: Path, tiny_files: tuple[Path, Path]
):
    served = tiny_hub.files[(TINY_REPO, A)]
    child = pull_in_child("tiny", limit_file_bytes=4_000_000)
    _, err = child.communicate(timeout=120)
    assert child.returncode == 1, err
    last = err.strip().splitlines()[-1]
    assert last.startswith("tandem: ") and "cannot write tiny-a.gguf" in last and "kept for resuming" in last
    assert "Traceback" not in err
    kept = partial_file(hf_env, served.sha256).stat().st_size
    assert 0 < kept <= 4_000_000
    assert local_file(model()) is None

    path = download_file(model())  # room again: resumed from the kept bytes, then verified
    assert tiny_hub.gets(A)[-1].range == f"bytes={kept}-"
    assert sha256(path) == sha256(tiny_files[0])


def test_a_download_killed_mid_file_resumes_and_the_partial_is_never_loaded(
    tiny_hub: FakeHub, tiny_catalog: Path, hf_env: Path, tiny_files: tuple[Path, Path]
):
    served = tiny_hub.files[(TINY_REPO, A)]
    served.chunk_delay_s = 0.01  # ~6 MB/s, so the kill lands mid-file
    partial = partial_file(hf_env, served.sha256)
    child = pull_in_child("tiny")
    deadline = time.monotonic() + 60
    while not (partial.exists() and partial.stat().st_size > 2_000_000):
        assert time.monotonic() < deadline and child.poll() is None, "the download did not start"
        time.sleep(0.02)
    child.send_signal(signal.SIGKILL)  # no chance to clean up
    child.wait(timeout=30)
    kept = partial.stat().st_size
    assert 2_000_000 < kept < served.size
    assert local_file(model()) is None

    served.chunk_delay_s = 0.0
    path = download_file(model())
    assert tiny_hub.gets(A)[-1].range == f"bytes={kept}-"  # the lock died with the process
    assert sha256(path) == sha256(tiny_files[0]) and not partial.exists()
