#!/usr/bin/env python3
"""Where a speculative round's time goes outside llama.cpp, and what verifying on-device could save.

Runs a few real generations of the reference pair under cProfile (greedy, then sampling at
T = 0.7) and prints:

* the share of decode time spent inside `llama_decode` (both models) and outside it;
* the Python functions that take the most of the time outside it (self time);
* the cost of the one step llama.cpp's backend sampling could take over for greedy
  verification: the argmax over the K+1 logits rows of a verify batch, timed alone on real
  logits, against the verify batch itself.

    .venv/bin/python scripts/profile_round.py                # SmolLM2 F16 target + Q4_1 draft
    .venv/bin/python scripts/profile_round.py --target T.gguf --draft D.gguf -n 256

Profiling slows Python down, so the shares it prints are upper bounds for the outside-llama
part; the engine's own figure without a profiler is the bench's "Python outside llama_decode".
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tandem.engine import DoneEvent, GenerationConfig, ModelPair, SamplerSettings  # noqa: E402

PROMPTS = [
    "Explain how a refrigerator keeps food cold, step by step.",
    "Write a Python function that merges two sorted lists, with a docstring and tests.",
]


def profile(pair: ModelPair, prompts: list[list[int]], cfg: GenerationConfig) -> None:
    prof = cProfile.Profile()
    decode_s = llama_s = 0.0
    tokens = rounds = 0
    for tok in prompts:
        prof.enable()
        for ev in pair.generate(tok, cfg):
            if isinstance(ev, DoneEvent):
                decode_s += ev.stats.decode_s
                llama_s += ev.stats.llama_s
                tokens += ev.stats.generated
                rounds += ev.stats.rounds
        prof.disable()
    outside = decode_s - llama_s
    label = "greedy" if cfg.sampler.greedy else f"sampling T={cfg.sampler.temperature:g}"
    print(f"\n== {label}: {tokens} tokens in {rounds} rounds, decode {decode_s:.2f} s (under the profiler)")
    print(f"inside llama_decode {llama_s:.2f} s, outside {outside:.3f} s = {100 * outside / decode_s:.1f}%")
    print(f"outside per round: {1000 * outside / max(1, rounds):.3f} ms")
    stats = pstats.Stats(prof)
    rows = []
    for (file, line, name), (_, ncalls, tottime, _, _) in stats.stats.items():  # type: ignore[attr-defined]
        if Path(file).name == "model.py" and name == "_decode":
            continue  # its self time is the llama_decode call (ctypes calls have no entry of their own)
        rows.append((tottime, ncalls, f"{Path(file).name}:{line}({name})"))
    rows.sort(reverse=True)
    print("largest self times outside llama_decode (ms per round):")
    for tottime, ncalls, where in rows[:8]:
        print(f"  {1000 * tottime / max(1, rounds):7.3f}  {ncalls:>7} calls  {where}")


def argmax_share(pair: ModelPair, prompt: list[int], k: int, repeats: int) -> None:
    """The verify batch of K+1 tokens vs the argmax that reads its logits."""
    target = pair.target
    target.reset()
    target.decode(prompt[:-1], "none")
    batch = [prompt[-1]] * (k + 1)
    verify: list[float] = []
    argmax: list[float] = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        logits = target.decode(batch, "all")
        t1 = time.perf_counter()
        assert logits is not None
        logits.argmax(axis=1)
        t2 = time.perf_counter()
        target.truncate(len(prompt) - 1)
        verify.append(t1 - t0)
        argmax.append(t2 - t1)
    v, a = statistics.median(verify), statistics.median(argmax)
    print(
        f"\nverify batch of {k + 1} tokens: {1000 * v:.2f} ms (median of {repeats}); argmax over its "
        f"{k + 1} x {target.n_vocab} logits: {1000 * a:.3f} ms = {100 * a / v:.2f}% of the batch"
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", type=Path)
    ap.add_argument("--draft", type=Path)
    ap.add_argument("-n", "--max-tokens", type=int, default=128)
    args = ap.parse_args()
    target, draft = args.target, args.draft
    if target is None or draft is None:
        sys.path.insert(0, str(ROOT / "tests"))
        import model_files

        target, draft = model_files.smollm2("F16"), model_files.smollm2_q4_1()
    from tandem.session.prompts import text_prompt

    pair = ModelPair.load(target, draft)
    try:
        prompts = [text_prompt(pair, p) for p in PROMPTS]
        base = GenerationConfig(max_tokens=args.max_tokens, sampler=SamplerSettings(temperature=0.0))
        for _ in pair.generate(prompts[0], replace(base, max_tokens=16)):  # warm-up
            pass
        profile(pair, prompts, base)
        profile(pair, prompts, replace(base, sampler=SamplerSettings(temperature=0.7, seed=1)))
        for k in (4, 12):
            argmax_share(pair, prompts[0], k, repeats=15)
    finally:
        pair.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
