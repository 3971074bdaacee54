#!/usr/bin/env python3
"""The batched engine's aggregate speed, engine-side (no HTTP): N requests at once through one
`BatchEngine` (what `tandem serve --parallel N` runs), greedy, `auto` with adaptive K.

    .venv/bin/python scripts/batch_bench.py [--pair smollm2|qwen] [--clients 1,2,4]
        [--waves 3] [-n 96] [--category summarization,code] [--fixed-k K] [--single] [--json OUT]

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
import statistics
import sys
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "scripts"))

from serve_bench import machine, pair_models  # noqa: E402

from batch_helpers import Asked, run, running  # noqa: E402
from tandem.bench.prompts import DEFAULT_PROMPTS, load_prompts  # noqa: E402
from tandem.engine import BatchEngine, GenerationConfig, LoadOptions, ModelPair, RoundEvent  # noqa: E402
from tandem.session.collect import collect  # noqa: E402
from tandem.session.prompts import chat_prompt, messages_for  # noqa: E402


def wave(eng: BatchEngine, prompts: list[list[int]], config: GenerationConfig, n: int, i: int) -> list[Asked]:
    """Wave i: n requests at once, the prompts rotated."""
    picks = [prompts[(i * n + c) % len(prompts)] for c in range(n)]
    return run(eng, [Asked(p, config) for p in picks], timeout=600)


def single_against_batch(
    args: argparse.Namespace, target: Path, draft: Path, texts: list[str]
) -> dict[str, Any]:
    """Each request through the single-sequence loop and through a batched engine of one
    sequence (two loads of the pair: their caches are their own), alternated request by request
    (the order swapped every other one): tokens/s of each over the same requests, end to end
    from the call to the answer's end (the prompt's read included); and each request once more
    with the target alone, whose time outside llama.cpp a token is each loop's own overhead."""
    options = LoadOptions(n_ctx=2048, n_threads=args.threads)
    config = GenerationConfig(max_tokens=args.n)
    if args.fixed_k:
        config = GenerationConfig(max_tokens=args.n, draft_max=args.fixed_k, adaptive=False)
    spent = {"single": 0.0, "batch": 0.0}
    tokens = {"single": 0, "batch": 0}
    outside: dict[str, list[float]] = {"single": [], "batch": []}  # us a token, the target alone
    with (
        ModelPair.load(target, draft, options) as alone,
        ModelPair.load(target, draft, replace(options, n_seq=1)) as batched,
        running(batched) as eng,
    ):
        prompts = [chat_prompt(alone, messages_for(t)) for t in texts]
        for i in range(-1, args.waves * len(prompts)):  # (-1: a warm-up of each)
            prompt = prompts[i % len(prompts)]
            for side in ("single", "batch") if i % 2 else ("batch", "single"):
                for speculative in (True, False):
                    t0 = time.perf_counter()
                    if side == "single":
                        stats = collect(alone.generate(prompt, config, speculative=speculative)).stats
                    else:
                        done = run(eng, [Asked(prompt, config, speculative)], timeout=600)[0].done
                        assert done is not None
                        stats = done.stats
                    if i < 0 or not stats.generated:
                        continue
                    if speculative:
                        spent[side] += time.perf_counter() - t0
                        tokens[side] += stats.generated
                    else:  # (no drafts: the time outside llama.cpp is each loop's own)
                        outside[side].append(1e6 * (stats.decode_s - stats.llama_s) / stats.generated)
    rates = {side: tokens[side] / spent[side] for side in spent}
    us = {side: statistics.median(v) for side, v in outside.items()}
    print(
        f"one request at a time: single loop {rates['single']:.1f} tok/s, batched engine "
        f"{rates['batch']:.1f} tok/s ({rates['batch'] / rates['single']:.2f}x); the target alone's "
        f"time outside llama.cpp a token (median): {us['single']:.0f} us and {us['batch']:.0f} us",
        flush=True,
    )
    return {"tok_s": rates, "tokens": tokens, "outside_us": us}


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
    parser.add_argument(
        "--single",
        action="store_true",
        help="also the single-sequence loop (ModelPair.generate) on the same requests, one at a "
        "time, alternated with the batched engine at one client (the one-loop question)",
    )
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    wanted = set(args.category.split(","))
    texts = [p.text for p in load_prompts(sorted(DEFAULT_PROMPTS.glob("*.jsonl"))) if p.category in wanted]
    target, draft = pair_models(args.pair)
    out: dict[str, Any] = {"machine": machine(), "argv": sys.argv, "results": {}}
    for n_seq in (int(c) for c in args.clients.split(",") if c):
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
    if args.single:
        out["single"] = single_against_batch(args, target, draft, texts)
    print(out["machine"])
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
