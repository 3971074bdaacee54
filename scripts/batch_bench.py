#!/usr/bin/env python3
"""The batched engine's aggregate speed, engine-side (no HTTP): N requests at once through one
`BatchEngine` (what `tandem serve --parallel N` runs), greedy, `auto` with adaptive K.

    .venv/bin/python scripts/batch_bench.py [--pair smollm2|qwen] [--clients 1,2,4]
        [--waves 3] [-n 96] [--category summarization,code] [--fixed-k K] [--json OUT]

Each wave sends N requests together (the benchmark's prompts of the chosen categories, rotated)
and waits for all; a warm-up wave is not counted. Printed per N: aggregate tokens/s over the
waves (tokens / seconds from the first submit to the last answer's end), the rounds by drafter,
and the model rounds whose draft prompt lookup finished (tails). For an A/B against another
checkout, run it with `PYTHONPATH=/that/checkout/app` alternately (it imports `tandem` from
wherever PYTHONPATH points) and compare the JSON files. Time it alone on the machine.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

import model_files  # (the test models, assembled from registry packages)
from batch_helpers import Asked, run, running
from tandem.bench.prompts import DEFAULT_PROMPTS, load_prompts
from tandem.engine import BatchEngine, GenerationConfig, LoadOptions, ModelPair, RoundEvent
from tandem.session.prompts import chat_prompt, messages_for


def pair_files(name: str) -> tuple[Path, Path]:
    if name == "qwen":
        return model_files.qwen_coder_pair()
    return model_files.smollm2("F16"), model_files.smollm2_q4_1()


def cpu_line() -> str:
    info = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    names = [line.split(":", 1)[1].strip() for line in info.splitlines() if line.startswith("model name")]
    model = names[0] if names else platform.processor()
    return f"{model}, {os.cpu_count()} CPUs, avx512f={'avx512f' in info}"


def wave(eng: BatchEngine, prompts: list[list[int]], config: GenerationConfig, n: int, i: int) -> list[Asked]:
    """Wave i: n requests at once, the prompts rotated."""
    picks = [prompts[(i * n + c) % len(prompts)] for c in range(n)]
    return run(eng, [Asked(p, config) for p in picks], timeout=600)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--pair", choices=("smollm2", "qwen"), default="smollm2")
    parser.add_argument("--clients", default="1,2,4")
    parser.add_argument("--waves", type=int, default=3)
    parser.add_argument("-n", type=int, default=96)
    parser.add_argument("--category", default="summarization,code,chat")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--fixed-k", type=int, help="draft exactly K a round (no adaptive K)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    wanted = set(args.category.split(","))
    texts = [p.text for p in load_prompts(sorted(DEFAULT_PROMPTS.glob("*.jsonl"))) if p.category in wanted]
    target, draft = pair_files(args.pair)
    out: dict[str, Any] = {"machine": cpu_line(), "argv": sys.argv, "results": {}}
    for n_seq in (int(c) for c in args.clients.split(",")):
        options = LoadOptions(n_ctx=2048, n_seq=n_seq, n_threads=args.threads)
        with ModelPair.load(target, draft, options) as pair, running(pair) as eng:
            prompts = [chat_prompt(pair, messages_for(t)) for t in texts]
            config = GenerationConfig(max_tokens=args.n)
            if args.fixed_k:
                config = GenerationConfig(max_tokens=args.n, draft_max=args.fixed_k, adaptive=False)
            wave(eng, prompts, config, n_seq, len(prompts))  # (warm-up)
            tokens = 0
            seconds = 0.0
            drafters: Counter[str] = Counter()
            tails = 0
            for i in range(args.waves):
                t0 = time.perf_counter()
                got = wave(eng, prompts, config, n_seq, i)
                seconds += time.perf_counter() - t0
                for a in got:
                    assert a.done is not None
                    tokens += a.done.stats.generated
                    rounds = [r for r in a.events if isinstance(r, RoundEvent)]
                    drafters.update(r.drafter or "none" for r in rounds)
                    tails += sum(1 for r in rounds if r.drafter and r.looked_up and r.looked_up < r.drafted)
            rate = tokens / seconds
            out["results"][n_seq] = {
                "tok_s": rate,
                "tokens": tokens,
                "rounds": dict(drafters),
                "tails": tails,
            }
            print(f"{n_seq} clients: {rate:6.1f} tok/s  rounds {dict(drafters)}  tails {tails}", flush=True)
    print(out["machine"])
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
