"""scripts/install.py's choice of llama.cpp build: the Vulkan flavour (when it is chosen, what it
needs, the one line it says when something is missing) and the build cache keyed by flavour.

The script is loaded as a module and asked, with `vulkaninfo`, `glslc` and the headers faked
(subprocess and files): no build runs here. The real Vulkan build is CI's GPU lane."""

from __future__ import annotations

import importlib.util
import subprocess
from pathlib import Path
from types import ModuleType

import pytest

pytestmark = pytest.mark.fast

ROOT = Path(__file__).resolve().parent.parent

# What `vulkaninfo --summary` prints (trimmed): Mesa's lavapipe, then a discrete AMD GPU.
SUMMARY_CPU = """Devices:
========
GPU0:
\tapiVersion         = 1.3.230
\tdeviceType         = PHYSICAL_DEVICE_TYPE_CPU
\tdeviceName         = llvmpipe (LLVM 15.0.6, 256 bits)
"""
SUMMARY_AMD = (
    SUMMARY_CPU
    + """GPU1:
\tdeviceType         = PHYSICAL_DEVICE_TYPE_DISCRETE_GPU
\tdeviceName         = AMD Radeon RX 7900 XTX (RADV NAVI31)
"""
)
OLD_HEADER = "#define VK_HEADER_VERSION 239\n"
NEW_HEADER = "#define VK_HEADER_VERSION 309\n#define VK_EXT_layer_settings 1\n"


def load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("tandem_install", ROOT / "scripts" / "install.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def install(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> ModuleType:
    """install.py on a Linux x86 machine with no NVIDIA toolkit, Vulkan headers in tmp_path."""
    module = load()
    monkeypatch.delenv("TANDEM_LLAMA_BUILD", raising=False)
    monkeypatch.setattr(module.platform, "system", lambda: "Linux")
    monkeypatch.setattr(module.platform, "machine", lambda: "x86_64")
    monkeypatch.setattr(module, "find_nvcc", lambda: None)
    monkeypatch.setattr(module, "cpu_flags", lambda: {"avx2", "fma"})
    monkeypatch.setenv("VULKAN_SDK", str(tmp_path))
    return module


def fake_tools(
    module: ModuleType, monkeypatch: pytest.MonkeyPatch, *, summary: str | None, glslc: bool = True
) -> None:
    tools = {"vulkaninfo": summary is not None, "glslc": glslc}
    monkeypatch.setattr(module.shutil, "which", lambda name: f"/usr/bin/{name}" if tools.get(name) else None)

    def run(cmd: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
        assert cmd[-1] == "--summary"
        return subprocess.CompletedProcess(cmd, 0, summary or "", "")

    monkeypatch.setattr(module.subprocess, "run", run)


def headers(root: Path, text: str) -> None:
    (root / "include" / "vulkan").mkdir(parents=True, exist_ok=True)
    (root / "include" / "vulkan" / "vulkan_core.h").write_text(text)


def test_a_vulkan_gpu_gets_the_vulkan_build(
    install: ModuleType, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    fake_tools(install, monkeypatch, summary=SUMMARY_AMD)
    headers(tmp_path, NEW_HEADER)
    assert install.vulkan_gpus() == ["AMD Radeon RX 7900 XTX (RADV NAVI31)"]  # lavapipe left out
    flavour, args = install.choose_build()
    assert flavour == "vulkan" and "-DGGML_VULKAN=on" in args
    assert f"-DVulkan_INCLUDE_DIR={tmp_path / 'include'}" in args  # the headers that were checked
    assert "-DGGML_AVX2=ON" in args and "-DGGML_NATIVE=OFF" in args  # the host code still


def test_lavapipe_alone_is_no_reason_for_vulkan(install: ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_tools(install, monkeypatch, summary=SUMMARY_CPU)
    assert install.vulkan_gpus() == []
    assert install.choose_build()[0] == "cpu"
    fake_tools(install, monkeypatch, summary=None)  # no vulkaninfo at all
    assert install.choose_build()[0] == "cpu"


def test_old_headers_fall_back_to_the_cpu_with_one_line(
    install: ModuleType, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fake_tools(install, monkeypatch, summary=SUMMARY_AMD)
    headers(tmp_path, OLD_HEADER)
    assert install.choose_build()[0] == "cpu"
    out = capsys.readouterr().err.strip().splitlines()
    assert len(out) == 1 and "found a Vulkan GPU (AMD Radeon RX 7900 XTX" in out[0]
    assert "(1.3.239) are too old" in out[0] and "VK_EXT_layer_settings" in out[0]
    assert "building for the CPU instead" in out[0]


@pytest.mark.parametrize(
    ("setup", "expect"),
    [
        ("old headers", "are too old for this llama.cpp"),
        ("no headers", "no Vulkan headers"),
        ("no glslc", "the shader compiler glslc is missing"),
    ],
)
def test_forcing_vulkan_without_what_it_needs_is_one_line(
    install: ModuleType,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    setup: str,
    expect: str,
) -> None:
    monkeypatch.setenv("TANDEM_LLAMA_BUILD", "vulkan")
    fake_tools(install, monkeypatch, summary=SUMMARY_CPU, glslc=setup != "no glslc")
    if setup != "no headers":
        headers(tmp_path, OLD_HEADER if setup == "old headers" else NEW_HEADER)
    with pytest.raises(SystemExit) as stop:
        install.choose_build()
    assert stop.value.code == 1
    out = capsys.readouterr().err.strip().splitlines()
    assert (
        len(out) == 1 and out[0].startswith("[tandem install] cannot build for Vulkan: ") and expect in out[0]
    )


def test_forcing_vulkan_on_lavapipe_builds_it(
    install: ModuleType, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The GPU lane's case: no Vulkan GPU, Mesa's CPU driver, the flavour asked for."""
    monkeypatch.setenv("TANDEM_LLAMA_BUILD", "vulkan")
    fake_tools(install, monkeypatch, summary=SUMMARY_CPU)
    headers(tmp_path, NEW_HEADER)
    assert install.choose_build()[0] == "vulkan"


def test_each_flavour_and_flag_set_has_its_own_cached_build(
    install: ModuleType, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """pip's cache keys a built wheel by its source alone (a CPU build came back for a GPU
    install); install.py's cache folder is named by flavour and a hash of the flags."""
    monkeypatch.setenv("TANDEM_WHEEL_CACHE", str(tmp_path / "cache"))
    built: list[list[str]] = []

    def fake_run(cmd: list[str], env: dict[str, str] | None = None) -> None:
        built.append(cmd)
        out = Path(cmd[cmd.index("-w") + 1])
        out.mkdir(parents=True)
        (out / "llama_cpp_python-0.3.36-py3-none-linux_x86_64.whl").write_bytes(b"")

    monkeypatch.setattr(install, "run", fake_run)
    patched: list[list[Path]] = []

    def fake_source(py: Path, patches: list[Path], offline: Path | None, work: Path) -> Path:
        patched.append(patches)
        return work / "llama_cpp_python-0.3.36"

    monkeypatch.setattr(install, "patched_source", fake_source)
    cpu = install.llama_wheel(Path("python"), "cpu", ["-DGGML_AVX2=ON"], None, False)
    vulkan = install.llama_wheel(Path("python"), "vulkan", ["-DGGML_VULKAN=on"], None, False)
    assert cpu.parent != vulkan.parent and cpu.parent.name.startswith("cpu-")
    assert install.llama_wheel(Path("python"), "cpu", ["-DGGML_AVX2=ON"], None, False) == cpu
    assert len(built) == 2  # the second CPU install took the cached wheel
    assert all("--no-cache-dir" in cmd for cmd in built)
    # The Vulkan build is of the patched source (its folder named in pip's command), the CPU's not.
    assert patched == [[ROOT / "scripts" / "patches" / "vulkan-batch-invariant.patch"]]
    assert built[0][-1] == install.LLAMA_CPP_PYTHON and built[1][-1].endswith("llama_cpp_python-0.3.36")


def test_a_vulkan_build_takes_the_patch_and_its_cache_key_follows_it(
    install: ModuleType, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    patch = install.build_patches(["-DGGML_VULKAN=on", "-DGGML_RPC=ON"])
    assert [p.name for p in patch] == ["vulkan-batch-invariant.patch"] and patch[0].is_file()
    assert install.build_patches(["-DGGML_VULKAN=ON"]) == patch  # (CMake's ON, a user's own flags)
    assert install.build_patches(["-DGGML_AVX2=ON"]) == [] and install.build_patches(["-DGGML_CUDA=on"]) == []
    # A changed patch is another build: the wheel cache's folder is keyed by its contents.
    monkeypatch.setenv("TANDEM_WHEEL_CACHE", str(tmp_path / "cache"))
    folders: list[str] = []

    def fake_run(cmd: list[str], env: dict[str, str] | None = None) -> None:
        out = Path(cmd[cmd.index("-w") + 1])
        folders.append(out.name)
        out.mkdir(parents=True)
        (out / "llama_cpp_python-0.3.36-py3-none-linux_x86_64.whl").write_bytes(b"")

    monkeypatch.setattr(install, "run", fake_run)
    monkeypatch.setattr(install, "patched_source", lambda py, patches, offline, work: work)
    install.llama_wheel(Path("python"), "vulkan", ["-DGGML_VULKAN=on"], None, False)
    changed = tmp_path / "patches"
    changed.mkdir()
    (changed / "vulkan-batch-invariant.patch").write_text(patch[0].read_text() + "\n")
    monkeypatch.setattr(install, "PATCHES", changed)
    install.llama_wheel(Path("python"), "vulkan", ["-DGGML_VULKAN=on"], None, False)
    assert len(folders) == 2 and folders[0] != folders[1]


def test_a_patch_that_no_longer_applies_stops_the_install_naming_it(
    install: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A new llama-cpp-python whose ggml-vulkan.cpp moved on: one line, and no build."""
    source = tmp_path / "llama.cpp"
    vulkan = source / "ggml" / "src" / "ggml-vulkan"
    vulkan.mkdir(parents=True)
    (vulkan / "ggml-vulkan.cpp").write_text("// another version\n")
    (vulkan / "ggml-vulkan-types.h").write_text("// another version\n")
    with pytest.raises(SystemExit) as stop:
        install.apply_patch(install.build_patches(["-DGGML_VULKAN=on"])[0], source)
    assert stop.value.code == 1
    said = capsys.readouterr().err.strip().splitlines()
    assert len(said) == 1
    assert "scripts/patches/vulkan-batch-invariant.patch no longer applies" in said[0]
    assert "must be redone" in said[0]
    assert (vulkan / "ggml-vulkan.cpp").read_text() == "// another version\n"  # untouched
