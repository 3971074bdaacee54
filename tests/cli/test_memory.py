"""No context x vocabulary logits buffer: memory grows with the context only by the KV cache.

Asking llama.cpp for logits at every prompt position (logits_all) would cost
n_ctx x n_vocab x 4 bytes: 604 MB more at 4096 than at 1024 tokens for SmolLM2. Tandem asks
for logits only where it needs them, so between the two context sizes the peak resident
memory of `tandem run` must grow by the KV caches' growth and nothing more (within a small
allowance for allocator noise).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MiB = 1 << 20


def peak(target: Path, draft: Path, ctx: int) -> dict[str, int]:
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "tandem.cli.main",
            "run",
            "--target",
            str(target),
            "--draft",
            str(draft),
            "--ctx",
            str(ctx),
            "-n",
            "64",
            "--json",
            "Write a story about a lighthouse.",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        check=True,
    )
    memory: dict[str, int] = json.loads(res.stdout)["memory"]
    return memory


def test_memory_grows_with_context_only_by_the_kv_cache(smollm2_f16: Path, smollm2_q4_1: Path) -> None:
    small = peak(smollm2_f16, smollm2_q4_1, 1024)
    large = peak(smollm2_f16, smollm2_q4_1, 4096)
    kv_growth = large["kv_cache_bytes"] - small["kv_cache_bytes"]
    rss_growth = large["peak_rss_bytes"] - small["peak_rss_bytes"]
    logits_buffer_growth = (4096 - 1024) * 49152 * 4
    print(
        f"\nKV growth {kv_growth / MiB:.1f} MiB, RSS growth {rss_growth / MiB:.1f} MiB, "
        f"peak at 4096: {large['peak_rss_bytes'] / MiB:.1f} MiB = "
        f"{large['peak_rss_bytes'] / (large['model_file_bytes'] + large['kv_cache_bytes']):.3f}"
        " x (files + KV)"
    )
    assert kv_growth > 100 * MiB
    assert rss_growth < kv_growth + 16 * MiB
    assert rss_growth < logits_buffer_growth / 4


def _vm_peak_after_load(target: Path | None, draft: Path | None, ctx: int) -> int:
    """Address space a process needs to load the pair (or, without a target, just to start)."""
    load = f"ModelPair.load({str(target)!r}, {str(draft)!r}, LoadOptions(n_ctx={ctx}))\n" if target else ""
    code = (
        "from tandem.engine import LoadOptions, ModelPair\n"
        "from tandem.engine.llama.model import ensure_backend\n"
        "ensure_backend()\n"
        f"{load}"
        "print(next(l for l in open('/proc/self/status') if l.startswith('VmPeak')).split()[1])\n"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    return int(res.stdout.strip()) * 1024


@pytest.mark.skipif(sys.platform != "linux", reason="limits the address space with RLIMIT_AS")
@pytest.mark.parametrize("where", ["context", "weights"])
def test_not_enough_memory_is_one_clear_line(smollm2_f16: Path, smollm2_q4_1: Path, where: str) -> None:
    """A pair that does not fit gets advice, not a crash or a hang. Scarce memory is simulated
    by capping the address space: just above what a 1024-token context needs, an 8192-token
    context cannot be allocated; well below it, the weights cannot even be mapped."""
    import resource

    if where == "context":
        # Going from 1024 to 8192 tokens adds ~158 MiB of KV per model, allocated target first:
        # with 200 MiB to spare the target gets its KV and the draft its weights, not its KV.
        limit = _vm_peak_after_load(smollm2_f16, smollm2_q4_1, 1024) + 200 * MiB
    else:
        # 100 MiB above what starting takes: less than the target's 257 MiB of weights.
        limit = _vm_peak_after_load(None, None, 1024) + 100 * MiB

    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "tandem.cli.main",
            "run",
            "--target",
            str(smollm2_f16),
            "--draft",
            str(smollm2_q4_1),
            "--ctx",
            "8192",
            "-n",
            "8",
            "hello",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        preexec_fn=cap,
    )
    assert res.returncode == 1, res.stderr
    assert "Traceback" not in res.stderr
    lines = [line for line in res.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("tandem: error: "), res.stderr
    expected = "create a 8192-token context" if where == "context" else "load the model"
    assert f"not enough memory to {expected}" in lines[0]
    assert "smaller context (--ctx)" in lines[0]
