"""Two Tandems at once, with default threads: the second process is not starved.

Before the threads followed the machine (engine/llama/threads.py), two processes on a 2-core VM fell to
0.003-0.27x of their idle speed each (spinning OpenMP barriers, more threads than free cores).
The limit here is generous (a test is not a benchmark: scripts/busy_bench.py measures it).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

PROMPT = "Write a short story about a robot."


def _start(target: Path, tokens: int) -> subprocess.Popen[str]:
    cmd = [sys.executable, "-m", "tandem.cli.main", "run", "--json", "--baseline"]
    cmd += ["--target", str(target), "-n", str(tokens), PROMPT]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _stats(proc: subprocess.Popen[str]) -> dict[str, float]:
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    stats: dict[str, float] = json.loads(out)["stats"]
    return stats


def test_two_processes_at_once_are_not_starved(smollm2_f16: Path) -> None:
    idle = max(_stats(_start(smollm2_f16, 64))["decode_tokens_per_s"] for _ in range(2))
    a, b = _start(smollm2_f16, 128), _start(smollm2_f16, 128)
    both = [_stats(a), _stats(b)]
    for s in both:
        assert s["decode_tokens_per_s"] > 0.2 * idle, (idle, [x["decode_tokens_per_s"] for x in both])
