#!/usr/bin/env python3
r"""How long one decoded token takes in this process, with nothing else running: llama.cpp's
one-row decode as `tandem serve` drives it (engine/llama/sequences.py), next to llama-bench's own.

Each variant runs in a fresh process (libgomp reads its environment once, at load), alternated
over --runs: a context of --seq sequences, a 30-token prompt, then one-token decodes with their
logits read, --tokens of them; the median per run. The variants: Tandem as it starts (libgomp's
own wait at barriers, as llama-server and llama-bench run: engine/llama/threads.py), Tandem's spin until
2026-11-28 (GOMP_SPINCOUNT=300), and with --llama-bench the tool's tg figure for the same file and
threads.

    .venv/bin/python scripts/decode_step.py                     # SmolLM2-135M F16
    .venv/bin/python scripts/decode_step.py --llama-bench --tokens 30 \
        --model ~/.cache/tandem/test-models/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_MODEL = Path("~/.cache/tandem/test-models/SmolLM2-135M-Instruct.F16.gguf").expanduser()
# Tandem as it starts (libgomp's own default, as llama.cpp's tools) against its former short spin.
VARIANTS = {"tandem (libgomp's default)": None, "GOMP_SPINCOUNT=300 (until 2026-11-28)": "300"}


def _child(model: str, n_seq: int, tokens: int, threads: int) -> None:
    sys.path.insert(0, str(ROOT / "app"))
    from tandem.engine.config import LoadOptions
    from tandem.engine.llama.model import LoadedModel
    from tandem.engine.llama.sequences import Piece, SeqContext

    m = LoadedModel(model, LoadOptions(n_ctx=2048, n_threads=threads, n_seq=n_seq), role="target")
    ctx = SeqContext(m)
    prompt = [100 + t * 37 % 20000 for t in range(30)]
    ctx.prefill([Piece(0, prompt, "none")])
    times = []
    for i in range(tokens + 3):
        t0 = time.perf_counter()
        ctx.decode([Piece(0, [prompt[i % 30]], "all")])
        times.append(time.perf_counter() - t0)
    print(statistics.median(times[3:]) * 1000)  # (the first decodes page the weights in)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", type=Path, default=DEFAULT_MODEL)
    ap.add_argument("--seq", type=int, default=8, help="sequences in the context (serve's default)")
    ap.add_argument("--tokens", type=int, default=100)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--llama-bench", action="store_true", help="also llama-bench -p 0 -n 64")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    model = str(args.model.expanduser())
    if args.child:
        _child(model, args.seq, args.tokens, args.threads)
        return
    results: dict[str, list[float]] = {name: [] for name in VARIANTS}
    for run in range(args.runs):
        names = list(VARIANTS) if run % 2 == 0 else list(reversed(VARIANTS))
        for name in names:
            env = {k: v for k, v in os.environ.items() if k != "GOMP_SPINCOUNT"}
            if VARIANTS[name] is not None:
                env["GOMP_SPINCOUNT"] = str(VARIANTS[name])
            cmd = [sys.executable, __file__, "--child", "--model", model, "--seq", str(args.seq)]
            cmd += ["--tokens", str(args.tokens), "--threads", str(args.threads)]
            out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True).stdout
            results[name].append(float(out.split()[-1]))
            print(f"run {run + 1} {name}: {results[name][-1]:.2f} ms a token", flush=True)
    print(f"\n{model} ({args.seq} sequences, {args.threads} threads), median ms per one-token decode:")
    for name, ms in results.items():
        print(f"  {name:32s} {statistics.median(ms):7.2f}   runs {' '.join(f'{x:.2f}' for x in ms)}")
    if args.llama_bench:
        spec = importlib.util.spec_from_file_location(
            "tandem_llama_tools", ROOT / "scripts" / "llama_tools.py"
        )
        assert spec is not None and spec.loader is not None
        tools = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(tools)
        bench = tools.build("llama-bench")["llama-bench"]
        out = subprocess.run(
            [str(bench), "-m", model, "-t", str(args.threads), "-p", "0", "-n", "64", "-r", "3", "-o", "csv"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        last = out.strip().splitlines()[-1].split(",")
        tps = float(last[-2].strip('"'))
        print(f"  {'llama-bench tg64 (spin 300000)':32s} {1000 / tps:7.2f}   ({tps:.2f} tok/s)")


if __name__ == "__main__":
    main()
