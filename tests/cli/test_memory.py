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

ROOT = Path(__file__).resolve().parents[2]
MiB = 1 << 20


def peak(target: Path, draft: Path, ctx: int) -> dict[str, int]:
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "app.cli.main",
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
