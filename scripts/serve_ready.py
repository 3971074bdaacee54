#!/usr/bin/env python3
"""How long `tandem serve` takes from launch to saying where it listens, started several times
over the same pair on a fresh data directory: the first start times this machine's batches
(BatchEngine.calibrate), the later ones start from what the first kept (session/learnt.py).

    .venv/bin/python scripts/serve_ready.py                 # the Qwen2.5-Coder pair, 3 starts
    .venv/bin/python scripts/serve_ready.py --pair smollm2 --starts 2
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

MODELS = Path("~/.cache/tandem/test-models").expanduser()
PAIRS = {
    "qwen": ("qwen2.5-coder-1.5b-instruct-q4_k_m.gguf", "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"),
    "smollm2": ("SmolLM2-135M-Instruct.F16.gguf", "SmolLM2-135M-Instruct.Q4_1.gguf"),
}


def start(target: Path, draft: Path, env: dict[str, str]) -> tuple[float, bool]:
    """One start: seconds until it says where it listens, and whether it said it timed first."""
    t0 = time.perf_counter()
    cmd = [sys.executable, "-m", "tandem.cli.main", "serve", "--target", str(target)]
    proc = subprocess.Popen(
        [*cmd, "--draft", str(draft), "--port", "0"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert proc.stderr is not None
    timed = False
    for line in proc.stderr:
        timed |= "timing this machine's batches" in line
        if "/v1" in line:
            break
    ready = time.perf_counter() - t0
    proc.send_signal(signal.SIGTERM)
    proc.stderr.read()
    proc.wait(30)
    return ready, timed


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--pair", choices=sorted(PAIRS), default="qwen")
    parser.add_argument("--starts", type=int, default=3)
    args = parser.parse_args()
    target, draft = (MODELS / name for name in PAIRS[args.pair])
    env = {**os.environ, "XDG_DATA_HOME": tempfile.mkdtemp(prefix="tandem-ready-"), "PYTHONUNBUFFERED": "1"}
    for i in range(args.starts):
        ready, timed = start(target, draft, env)
        what = "timed its batches" if timed else "timed nothing"
        print(f"start {i + 1}: ready after {ready:.1f} s ({what})")


if __name__ == "__main__":
    main()
