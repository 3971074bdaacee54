"""Will a pair fit? Both models' weights + both KV caches + runtime buffers vs device memory.

Memory available for models:
* a GPU llama.cpp can use (CUDA, Metal, Vulkan, ROCm...): the free memory its backend reports
  (engine/llama/devices.py: CUDA asks the driver, Metal gives the working set macOS allows the GPU,
  Vulkan reads its memory heaps), summed over GPUs because llama.cpp spreads layers across all
  of them;
* Apple Silicon where the backend reports nothing: unified memory from `sysctl hw.memsize`, of
  which macOS lets the GPU use about three quarters by default (recommendedMaxWorkingSetSize);
* otherwise system RAM that is available now (Linux MemAvailable), since models run on the CPU.
TANDEM_MEMORY (e.g. `24G`) overrides the measurement, to plan for another machine.

The KV cache is computed from GGUF metadata exactly as llama.cpp sizes it with F16 K and V:
n_ctx × n_layer × n_head_kv × (key_length + value_length) × 2 bytes, with the context capped
at the model's training context (the engine does the same). Runtime buffers (compute graphs,
the GPU context) are an allowance, not a measurement: 512 MiB + 2% of the weights.

Verdicts: "fits" when the need is within 85% of what is available (room for the desktop, other
programs and estimate error), "tight" up to 100%, "won't fit" beyond.
"""

from __future__ import annotations

import os
import platform
import re
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from tandem.engine.files.gguf_file import GGUFInfo, read_gguf
from tandem.engine.files.memory import kv_cache_bytes

from .hub_cache import local_file
from .spec import ModelFile, PairSpec, split_parts
from .units import format_bytes, parse_bytes

Verdict = Literal["fits", "tight", "won't fit"]
FITS_FRACTION = 0.85
OVERHEAD_BASE_BYTES = 512 * 2**20
OVERHEAD_WEIGHT_FRACTION = 0.02
APPLE_GPU_FRACTION = 0.75
ROUGH_KV_FRACTION = 0.15  # when nothing better is known: KV + buffers ~ 15% of the weights
MEMORY_ENV = "TANDEM_MEMORY"
_CACHE_TTL_S = 5.0


@dataclass(frozen=True)
class FitVerdict:
    verdict: Verdict
    need_bytes: int
    available_bytes: int
    device: str

    def summary(self) -> str:
        return (
            f"{self.verdict}: needs {format_bytes(self.need_bytes)} of {format_bytes(self.available_bytes)}"
        )


def runtime_overhead(weight_bytes: int) -> int:
    return OVERHEAD_BASE_BYTES + int(weight_bytes * OVERHEAD_WEIGHT_FRACTION)


def judge(need: int, available: int, device: str) -> FitVerdict:
    if need <= available * FITS_FRACTION:
        verdict: Verdict = "fits"
    elif need <= available:
        verdict = "tight"
    else:
        verdict = "won't fit"
    return FitVerdict(verdict, need, available, device)


def _model_bytes(path: Path, info: GGUFInfo) -> int:
    """File size of a model, all parts of a split model included."""
    if info.split_count <= 1:
        return info.file_size
    total = 0
    for part in split_parts(path.name):
        p = path.with_name(part)
        total += p.stat().st_size if p.exists() else 0
    return total


def _host_only_bytes(info: GGUFInfo) -> int:
    """Weights llama.cpp keeps in host memory when every layer is on a GPU: the input
    embedding table ("very little benefit to offloading the input layer", llama-model.cpp),
    unless the output head is the same table (tied: then a copy goes to the GPU as the head)."""
    names = {t.name: t for t in info.tensors}
    embedding = names.get("token_embd.weight")
    if embedding is None or "output.weight" not in names:
        return 0
    return embedding.n_bytes or 0


def _files_bytes(target: Path, draft: Path | None, n_ctx: int) -> tuple[int, int]:
    """(bytes of the weights, bytes of one n_ctx context's KV cache) of a pair's GGUF files.
    Against a GPU's memory, what stays in host memory is not counted."""
    weights = kv = 0
    gpu = _gpu_build()
    for path in (target, draft):
        if path is None:
            continue
        info = read_gguf(path, check_data=False)
        weights += _model_bytes(Path(path), info) - (_host_only_bytes(info) if gpu else 0)
        kv += kv_cache_bytes(info, n_ctx)
    return weights, kv


def files_fit(target: Path, draft: Path | None, n_ctx: int) -> FitVerdict:
    """Fit of GGUF files on disk (exact KV sizes from their metadata). Against a GPU's memory,
    what stays in host memory is not counted (measured on an H200: 8B + 1B shapes at 8k, the
    estimate 8.7% over what nvidia-smi showed in use, 13% while the embedding was counted)."""
    weights, kv = _files_bytes(target, draft, n_ctx)
    available, device = device_memory()
    return judge(weights + kv + runtime_overhead(weights), available, device)


def sequences_fit(target: Path, draft: Path | None, n_ctx: int) -> tuple[int, str]:
    """How many sequences of `n_ctx` tokens each (tandem serve --parallel) fit beside the
    models in the memory available now, and where: the KV cache grows by one context of each
    model per sequence."""
    weights, per_seq = _files_bytes(target, draft, n_ctx)
    available, device = device_memory()
    room = int(available * FITS_FRACTION) - weights - runtime_overhead(weights)
    return (max(0, room // per_seq) if per_seq else 1 << 16), device


# Bits per weight of common llama.cpp quantizations (whole-file averages), for guessing the size
# of a user-catalog file that gives no size_bytes from the parameter count in its name.
_BITS_PER_WEIGHT = {
    "F32": 32.0, "F16": 16.0, "BF16": 16.0, "Q8_0": 8.5, "Q6_K": 6.6, "Q5_K_M": 5.7, "Q5_K_S": 5.5,
    "Q5_0": 5.5, "Q4_K_M": 4.9, "Q4_K_S": 4.6, "Q4_0": 4.6, "Q4_1": 5.0, "IQ4_XS": 4.3,
    "IQ4_NL": 4.6, "Q3_K_L": 4.3, "Q3_K_M": 3.9, "Q3_K_S": 3.5, "Q2_K": 3.4,
}  # fmt: skip
_PARAMS_IN_NAME = re.compile(r"(?:^|[-_.])(\d+(?:\.\d+)?)([BM])(?=$|[-_.])", re.IGNORECASE)


def estimate_file_bytes(f: ModelFile) -> int | None:
    """The catalog's size, else a guess from the name (`...-14B-...-Q4_K_M.gguf`), else None."""
    if f.size_bytes:
        return f.size_bytes
    bits = _BITS_PER_WEIGHT.get(f.quantization.upper())
    m = _PARAMS_IN_NAME.search(f.display_name) or _PARAMS_IN_NAME.search(f.repo_id.split("/")[-1])
    if bits is None or m is None:
        return None
    params = float(m.group(1)) * (1e9 if m.group(2).upper() == "B" else 1e6)
    return int(params * bits / 8)


def estimate_pair_bytes(p: PairSpec, n_ctx: int | None = None) -> int | None:
    """Memory a catalog pair needs at `n_ctx` (default: its own context), from the catalog;
    None when the catalog says too little to tell (a user pair without sizes).

    The catalog's gpu_memory_bytes holds weights + buffers + KV at the pair's context; the KV
    part scales linearly with the context. Without gpu_memory_bytes, a rough allowance."""
    ctx = n_ctx or p.context
    sizes = [estimate_file_bytes(f) for f in p.files]  # (a pair drafted by its own heads: one)
    if p.gpu_memory_bytes <= 0 and None in sizes:
        return None
    weights = sum(s or 0 for s in sizes) if p.gpu_memory_bytes <= 0 else p.total_bytes
    fixed = weights + runtime_overhead(weights)
    if p.gpu_memory_bytes <= 0:
        return fixed + int(weights * ROUGH_KV_FRACTION * ctx / max(p.context, 1))
    kv = max(0, p.gpu_memory_bytes - fixed)
    return fixed + kv * ctx // max(p.context, 1)


def pair_fit(p: PairSpec, n_ctx: int | None = None) -> FitVerdict:
    """Fit of a catalog pair: measured from the files when all are downloaded, else from the
    catalog's figures. need_bytes is 0 when neither can tell (a user pair without sizes whose
    file names do not say the parameter count); the verdict is then "fits" by default."""
    ctx = n_ctx or p.context
    target = local_file(p.target)
    if p.draft is None:  # the target's own draft heads: its file is all there is
        if target is not None:
            return files_fit(target, None, ctx)
    elif target is not None and (draft := local_file(p.draft)) is not None:
        return files_fit(target, draft, ctx)
    available, device = device_memory()
    return judge(estimate_pair_bytes(p, ctx) or 0, available, device)


# ----------------------------------------------------------------------------- the device
_lock = threading.Lock()
_cached: tuple[float, tuple[int, str]] | None = None


def device_memory() -> tuple[int, str]:
    """(bytes available for models, a description). Measured at most every few seconds:
    `tandem pairs` asks once per pair."""
    global _cached
    override = os.environ.get(MEMORY_ENV, "").strip()
    if override:
        try:
            return parse_bytes(override), f"{MEMORY_ENV}={override}"
        except ValueError:
            pass  # a bad override is ignored rather than breaking every listing
    with _lock:
        now = time.monotonic()
        if _cached is not None and now - _cached[0] < _CACHE_TTL_S:
            return _cached[1]
        result = _measure()
        _cached = (now, result)
        return result


def _measure() -> tuple[int, str]:
    gpu_build = _gpu_build()
    if gpu_build:
        gpu = _gpu_memory()
        if gpu is not None:
            free, total, name = gpu
            return free, f"{name}: {format_bytes(free)} free of {format_bytes(total)}"
        if sys.platform == "darwin" and platform.machine() == "arm64":
            total = _sysctl_memsize()
            if total:
                usable = int(total * APPLE_GPU_FRACTION)
                return usable, (
                    f"Apple unified memory: {format_bytes(total)}, "
                    f"about {format_bytes(usable)} usable by the GPU"
                )
    available, total = _ram()
    note = "" if gpu_build or not shutil.which("nvidia-smi") else " (this llama.cpp build is CPU-only)"
    return available, f"system RAM: {format_bytes(available)} available of {format_bytes(total)}{note}"


def _gpu_build() -> bool:
    try:
        from tandem.engine.llama.model import gpu_offload_supported

        return gpu_offload_supported()
    except Exception:  # no llama.cpp library at all: answer for the CPU
        return False


def _gpu_memory() -> tuple[int, int, str] | None:
    """(free, total, name) of the GPUs, as llama.cpp's backends report them."""
    from tandem.engine.llama.devices import gpu_memory

    return gpu_memory()


def _run(cmd: list[str]) -> str | None:
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=10, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout


def _sysctl_memsize() -> int:
    out = _run(["sysctl", "-n", "hw.memsize"])
    try:
        return int(out.strip()) if out else 0
    except ValueError:
        return 0


def _ram() -> tuple[int, int]:
    """(available, total) bytes of system memory."""
    try:
        fields: dict[str, Any] = {}
        with open("/proc/meminfo", encoding="ascii") as fh:
            for line in fh:
                key, _, rest = line.partition(":")
                fields[key] = int(rest.split()[0]) * 1024
        return fields.get("MemAvailable", fields["MemTotal"]), fields["MemTotal"]
    except (OSError, KeyError, ValueError, IndexError):
        pass
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        total = 0
    if sys.platform == "darwin":
        total = _sysctl_memsize() or total
    return total, total
