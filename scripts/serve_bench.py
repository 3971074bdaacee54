#!/usr/bin/env python3
"""Decode speed through `tandem serve` (streaming, as a client receives it) against `tandem run`
on the same pair, prompts and settings, alternated in one invocation.

For each prompt and run, in alternating order:

* `tandem run --json` in a fresh process: its decode tokens/s (first round to last);
* one streaming request to a `tandem serve` started once: tokens/s as the client receives them,
  from the arrival of the first chunk with tokens to the last (the first chunk's tokens not
  counted), so the server's own costs (the event loop, JSON, SSE, the socket) are included.
  The server's own engine-side figure (usage.tandem.decode_tokens_per_s) is printed beside it.

Both run greedy with a fixed K (adaptive drafting follows measured timings, and the server's pair
keeps what it learnt across requests while each `tandem run` starts afresh), --threads 1.

    .venv/bin/python scripts/serve_bench.py                     # SmolLM2 F16 drafted by Q4_1
    .venv/bin/python scripts/serve_bench.py --runs 5 -n 256 -k 4
    .venv/bin/python scripts/serve_bench.py --target T.gguf --draft D.gguf
"""

from __future__ import annotations

import argparse
import http.client
import json
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

PROMPTS = [
    "Write a long story about a dragon who learns to write computer programs.",
    "Explain in detail how a refrigerator works.",
    "Write a Python function that parses a CSV file and sums each column, with comments.",
    "Describe the history of the printing press.",
]


def run_cli(models: list[str], settings: list[str], prompt: str) -> float:
    cmd = [sys.executable, "-m", "tandem.cli.main", "run", *models, *settings, "--json", prompt]
    stats = json.loads(subprocess.run(cmd, check=True, capture_output=True, cwd=ROOT).stdout)["stats"]
    return float(stats["decode_tokens_per_s"])


def start_server(models: list[str], settings: list[str]) -> tuple[subprocess.Popen[str], int]:
    cmd = [sys.executable, "-m", "tandem.cli.main", "serve", *models, *settings, "--port", "0"]
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    assert proc.stderr is not None
    for line in proc.stderr:
        m = re.search(r"http://127\.0\.0\.1:(\d+)/v1", line)
        if m:
            return proc, int(m.group(1))
    raise SystemExit("tandem serve did not start")


def stream_once(port: int, prompt: str, n: int) -> tuple[float, float]:
    """One streaming chat request: (client-side decode tokens/s, the server's own figure)."""
    body = {"messages": [{"role": "user", "content": prompt}], "max_tokens": n, "stream": True}
    body["stream_options"] = {"include_usage": True}
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    conn.request("POST", "/v1/chat/completions", json.dumps(body), {"Content-Type": "application/json"})
    resp = conn.getresponse()
    first_t = last_t = 0.0
    first_n = total = 0
    usage: dict[str, Any] = {}
    for raw in resp:
        line = raw.strip()
        if not line.startswith(b"data: ") or line == b"data: [DONE]":
            continue
        chunk = json.loads(line[6:])
        tokens = len(chunk.get("tandem", {}).get("tokens", []))
        if tokens:
            now = time.perf_counter()
            if not first_t:
                first_t, first_n = now, tokens
            last_t = now
            total += tokens
        if chunk.get("usage"):
            usage = chunk["usage"]
    conn.close()
    client = (total - first_n) / (last_t - first_t) if last_t > first_t else 0.0
    return client, float(usage["tandem"]["decode_tokens_per_s"])


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--target", type=Path)
    parser.add_argument("--draft", type=Path)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("-n", type=int, default=256)
    parser.add_argument("-k", type=int, default=4)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    if args.target is None:
        import model_files

        args.target, args.draft = model_files.smollm2("F16"), model_files.smollm2_q4_1()
    models = ["--target", str(args.target), *(["--draft", str(args.draft)] if args.draft else [])]
    settings = [
        "--threads",
        str(args.threads),
        "--no-adaptive",
        "--draft-max",
        str(args.k),
        "-n",
        str(args.n),
    ]

    proc, port = start_server(models, settings)
    cli: list[float] = []
    served: list[float] = []
    engine: list[float] = []
    try:
        stream_once(port, "Hello", 8)  # warm-up: first-use costs are not the server's steady state
        for r in range(args.runs):
            for i, prompt in enumerate(PROMPTS):
                order = ("cli", "serve") if (r + i) % 2 == 0 else ("serve", "cli")
                for who in order:
                    if who == "cli":
                        cli.append(run_cli(models, settings, prompt))
                    else:
                        c, e = stream_once(port, prompt, args.n)
                        served.append(c)
                        engine.append(e)
                print(
                    f"run {r + 1} prompt {i + 1}: tandem run {cli[-1]:6.1f} tok/s   "
                    f"serve (client) {served[-1]:6.1f}   (engine) {engine[-1]:6.1f}",
                    flush=True,
                )
    finally:
        proc.terminate()
        proc.wait(10)
    ratios = [s / c for s, c in zip(served, cli, strict=True)]
    print()
    print(
        f"median decode tok/s: tandem run {statistics.median(cli):.1f}, tandem serve as received "
        f"{statistics.median(served):.1f} (engine inside the server {statistics.median(engine):.1f})"
    )
    print(
        f"serve / run: median of pairwise ratios {statistics.median(ratios):.3f}, "
        f"ratio of medians {statistics.median(served) / statistics.median(cli):.3f} "
        f"({len(ratios)} pairs, goal >= 0.97)"
    )


if __name__ == "__main__":
    main()
