"""The GPU lane: the engine tests that matter on a GPU, run on a GPU backend with every layer
offloaded (`pytest --gpu-lane`; scripts/gpu_lane.sh builds llama.cpp's Vulkan backend and runs
it on Mesa's CPU Vulkan driver, lavapipe, where no GPU is; scripts/device/ on a CUDA machine).

Tests take part by the `gpu` marker. Without --gpu-lane they run in the ordinary suite as
well, on whatever the build has (the CPU here). With it, only they run, the session refuses to
start without a GPU device, and every model a test loads must have its layers on the GPU: a
model that fell back to the CPU (LoadedModel's "could not load on the GPU") fails the test
rather than passing on the CPU unnoticed. A test about that fallback says so with
`@pytest.mark.gpu(cpu_fallback=True)`.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

OPTION = "--gpu-lane"
# What a test needs that only a GPU backend has: the skip reason outside the lane.
NEEDS_GPU = "needs a GPU backend: run the GPU lane (scripts/gpu_lane.sh, or pytest --gpu-lane on a GPU build)"


def add_option(parser: pytest.Parser) -> None:
    parser.addoption(
        OPTION,
        action="store_true",
        help="run only the tests marked gpu, with every layer on the GPU backend this llama.cpp "
        "build has (Vulkan on lavapipe: scripts/gpu_lane.sh)",
    )


def configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "gpu(cpu_fallback=False, heavy=False): in the GPU lane (pytest --gpu-lane): the engine on a GPU "
        "backend; cpu_fallback: the test makes a model fall back to the CPU on purpose; heavy: "
        "thousands of generations, skipped on lavapipe",
    )
    if config.getoption(OPTION):
        os.environ["TANDEM_GPU_LANE"] = "1"  # for the processes tests start (tandem run, serve)


HEAVY_ON_LAVAPIPE = (
    "thousands of generations: hours on lavapipe, where a step of the tiny models takes ~0.2 s "
    "(test_gpu_path.py's compact tests take the same GPU paths there); this test runs in the lane "
    "on a real GPU (scripts/device/run.sh: an H200) and in the ordinary suite on the CPU"
)


def select(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not config.getoption(OPTION):
        return
    keep = [item for item in items if item.get_closest_marker("gpu") is not None]
    dropped = [item for item in items if item.get_closest_marker("gpu") is None]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
    items[:] = keep
    if slow_device():
        for item in keep:
            marker = item.get_closest_marker("gpu")
            if marker is not None and marker.kwargs.get("heavy"):
                item.add_marker(pytest.mark.skip(reason=HEAVY_ON_LAVAPIPE))


def gpu_names() -> list[str]:
    from tandem.engine.llama.devices import local_gpus
    from tandem.engine.llama.model import ensure_backend

    ensure_backend()
    return [d.label for d in local_gpus()]


def start(session: pytest.Session) -> None:
    if not session.config.getoption(OPTION):
        return
    names = gpu_names()
    if not names:
        pytest.exit(
            "the GPU lane needs a llama.cpp build with a GPU backend and a device it can use: "
            "build one with TANDEM_LLAMA_BUILD=vulkan (scripts/gpu_lane.sh does it all), and for "
            "lavapipe set GGML_VK_VISIBLE_DEVICES=0",
            returncode=2,
        )
    session.config.stash[_DEVICES] = names
    if slow_device() and "TANDEM_FLASH_ATTN" not in os.environ:
        # Flash attention off by default on lavapipe, for time: with it on (and so exact output,
        # the default where possible) the lane took 816 s instead of 572. The tests of exact
        # output load their models with it on (test_exact_gpu.py, the sampling law in
        # test_gpu_path.py). It used to crash lavapipe: llama.cpp freed an outgrown scratch
        # buffer the driver still read, which Tandem's Vulkan patch fixes (scripts/patches/).
        os.environ["TANDEM_FLASH_ATTN"] = "off"
    _check_every_load()


_DEVICES = pytest.StashKey[list[str]]()
_fallback_expected = False  # set while a test marked gpu(cpu_fallback=True) runs


def header(config: pytest.Config) -> str | None:
    names = config.stash.get(_DEVICES, None)
    if not names:
        return None
    fa = "; flash attention off (TANDEM_FLASH_ATTN)" if os.environ.get("TANDEM_FLASH_ATTN") == "off" else ""
    return f"GPU lane: every layer on {', '.join(names)}{fa}"


def slow_device() -> bool:
    """Whether the lane's GPU is Mesa's lavapipe: a Vulkan device that runs on the CPU, where a
    step of the tiny models takes ~0.2 s (its LM head, 49k rows, is one workgroup per row)."""
    return any("llvmpipe" in name for name in gpu_names())


def active() -> bool:
    return os.environ.get("TANDEM_GPU_LANE") == "1"


def _check_every_load() -> None:
    """In the lane, a model loaded with GPU layers asked for must have them: one that fell back
    to the CPU fails the test that loaded it (session fixtures too) instead of passing there."""
    from tandem.engine.llama.model import LoadedModel

    original = LoadedModel.__init__

    def checked(self: LoadedModel, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        if self.options.n_gpu_layers != 0 and not self.devices and not _fallback_expected:
            notes = "; ".join(self.notes) or "no note"
            self.close()
            raise AssertionError(f"GPU lane: {self.path.name} runs on the CPU, not the GPU ({notes})")

    LoadedModel.__init__ = checked  # type: ignore[method-assign]


@pytest.fixture(autouse=True)
def fallback_expected(request: pytest.FixtureRequest) -> Iterator[None]:
    """Lets a test marked gpu(cpu_fallback=True) load a model that falls back to the CPU."""
    global _fallback_expected
    marker = request.node.get_closest_marker("gpu")
    _fallback_expected = bool(marker is not None and marker.kwargs.get("cpu_fallback"))
    yield
    _fallback_expected = False


@pytest.fixture
def gpu_device() -> list[str]:
    """The GPUs llama.cpp sees (skips the test without one: see NEEDS_GPU)."""
    names = gpu_names()
    if not names:
        pytest.skip(NEEDS_GPU)
    return names
