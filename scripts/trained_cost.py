#!/usr/bin/env python3
"""What trained drafters cost, on real-shaped random-weight models: an EAGLE-3 head for a
Llama-3.1-8B-shaped target, a DFlash drafter for a Qwen3-8B-shaped one.

Writes (once, into the test-model cache's `shaped/` folder; `--clean` removes them afterwards)
Q8_0 random-weight models with those shapes (tests/model_files.py: shaped_target,
shaped_eagle3, shaped_dflash), then runs, alternating, the target alone and speculative
generations drafted at fixed K, one llama.cpp thread, and reports in units of one plain target
step (measured by the engine itself, RoundEvent):

    EAGLE-3   c_first   a round's first step: the catch-up entries for the tokens the target
                        accepted since the last draft, then the last token's entry (its logits)
              c         each further step (one decoder layer and its own LM head, 32k tokens)
              enc       encoding the rows of one target batch (fc), per round (in v below)
    DFlash    block(K)  one pass over [last, <mask> x K], the waiting rows injected first
    both      v(n)      the target's verify batch of n tokens (with its layer rows handed over,
                        and for EAGLE-3 their encoding)

Random weights say nothing about acceptance, so speedups are PREDICTED from these costs for a
range of acceptance rates, E(a, K) / (draft cost + v(K + 1)), best K. On a GPU decoding is
memory-bound: the GPU figures are PREDICTED from the bytes of weights each pass reads (the
GGUFs' own tensor sizes), with v(K + 1) = 1.

    .venv/bin/python scripts/trained_cost.py --runs 2 --tokens 12       # both (about 18 GB of files)
    .venv/bin/python scripts/trained_cost.py --kind eagle3 --clean
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT))

if TYPE_CHECKING:
    from tandem.engine.config import DrafterChoice

ALPHAS = (0.5, 0.6, 0.7, 0.8, 0.9)
PROMPT = "Write a long story about the sea, the wind and an old lighthouse keeper. " * 3


@dataclass
class Setup:
    kind: DrafterChoice
    title: str
    target: Callable[[], Path]
    drafter: Callable[[], Path]
    ks: tuple[int, ...]


def setups() -> dict[str, Setup]:
    import model_files as mf

    return {
        "eagle3": Setup(
            "eagle3",
            "EAGLE-3 head (1 layer, own LM head over 32,000 tokens + d2t) for a Llama-3.1-8B-shaped target",
            lambda: mf.shaped_target("llama31-8b-shaped-q8", "llama", mf.LLAMA31_8B),
            lambda: mf.shaped_eagle3(
                "eagle3-llama31-8b-shaped-q8", mf.LLAMA31_8B, layers=(2, 16, 29), draft_vocab=32000
            ),
            (1, 2, 4),
        ),
        "dflash": Setup(
            "dflash",
            "DFlash drafter (5 layers, block 16, borrowed embeddings and head), Qwen3-8B-shaped target",
            lambda: mf.shaped_target("qwen3-8b-shaped-q8", "qwen3", mf.QWEN3_8B),
            lambda: mf.shaped_dflash(
                "dflash-qwen3-8b-shaped-q8", mf.QWEN3_8B, n_layer=5, layers=(2, 10, 18, 26, 34), block_size=16
            ),
            (1, 3, 7, 15),
        ),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kind", choices=("eagle3", "dflash", "both"), default="both")
    ap.add_argument("--runs", type=int, default=2, help="alternations of every setting")
    ap.add_argument("--tokens", type=int, default=12)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--clean", action="store_true", help="delete the written models afterwards")
    ap.add_argument(
        "--gpu-layers", type=int, default=0, help="layers on the GPU (-1 all: measured there, not predicted)"
    )
    args = ap.parse_args()
    chosen = ("eagle3", "dflash") if args.kind == "both" else (args.kind,)
    for kind in chosen:
        measure(setups()[kind], args)
    return 0


def pair_where(args: argparse.Namespace) -> str:
    if args.gpu_layers:
        return "this GPU (every layer)" if args.gpu_layers < 0 else f"this GPU ({args.gpu_layers} layers)"
    return f"this CPU ({args.threads} thread{'s' if args.threads > 1 else ''})"


def measure(setup: Setup, args: argparse.Namespace) -> None:
    from round_times import alternate

    from tandem.engine import LoadOptions, ModelPair
    from tandem.engine.files.gguf_file import read_gguf

    print(f"\n== {setup.title}", flush=True)
    print("writing/reading the models (once: several GB)...", flush=True)
    target_path, drafter_path = setup.target(), setup.drafter()
    opts = LoadOptions(n_ctx=1024, n_threads=args.threads, n_gpu_layers=args.gpu_layers)
    with ModelPair.load(target_path, drafter_path, opts) as pair:
        prompt = pair.raw_prompt(PROMPT)
        print(
            f"{target_path.name}: {pair.target.size_bytes / 2**30:.2f} GiB; {drafter_path.name}: "
            f"{drafter_path.stat().st_size / 2**30:.2f} GiB; {args.threads} thread(s), prompt "
            f"{len(prompt)} tokens, {args.tokens} tokens per run",
            flush=True,
        )
        t = alternate(pair, prompt, setup.kind, setup.ks, args.tokens, args.runs)
    step = t.step
    v = {k + 1: statistics.median(t.verify[k]) / step for k in setup.ks if t.verify[k]}
    print(
        f"\nMEASURED on {pair_where(args)}: plain target step {step * 1000:.1f} ms (median of {len(t.steps)})"
    )
    print("v(n) = " + "  ".join(f"v({n}) {x:.2f}" for n, x in v.items()))
    t_info, d_info = read_gguf(target_path), read_gguf(drafter_path)
    tb = _bytes(t_info)
    target_step = sum(b for name, b in tb.items() if name != "token_embd.weight")
    db = _bytes(d_info)
    if setup.kind == "eagle3":
        c_first = statistics.median(x for k in setup.ks for x in t.first[k]) / step
        c = statistics.median(x for k in setup.ks for x in t.rest[k]) / step
        print(
            f"c_first = {c_first:.3f}  (catch-up of a median {statistics.median(t.caught):.0f} entries, then "
            f"the last token's)   c = {c:.3f}  (each further step)"
        )
        cpu = {k: c_first + (k - 1) * c for k in setup.ks}
        step_bytes = sum(b for name, b in db.items() if name not in ("fc.weight", "token_embd.weight"))
        enc_bytes = db["fc.weight"]
        g_c = step_bytes / target_step
        g_enc = enc_bytes / target_step
        print(
            "\nPREDICTED on a GPU (memory-bound, from weight bytes): a draft step reads "
            f"{step_bytes / 2**20:.0f} MiB of the {target_step / 2**20:.0f} MiB a target step reads: "
            f"c = {g_c:.3f}; encoding a round's rows (fc) {enc_bytes / 2**20:.0f} MiB: {g_enc:.3f}"
        )
        gpu = {k: g_enc + k * g_c for k in range(1, 9)}
    else:
        blocks = {k: statistics.median(t.first[k]) / step for k in setup.ks if t.first[k]}
        print(
            "block(K) = "
            + "  ".join(f"block({k}) {x:.3f}" for k, x in blocks.items())
            + "  (K guesses, K + 1 positions)"
        )
        cpu = blocks
        own = sum(b for name, b in db.items() if name.startswith("blk.") or name == "output_norm.weight")
        head = tb["output.weight"]  # borrowed: read once per block, whatever its length
        inject = db["fc.weight"] + sum(
            b for name, b in db.items() if name.endswith(("attn_k.weight", "attn_v.weight"))
        )
        g_block = (own + head) / target_step
        g_inject = inject / target_step
        print(
            "\nPREDICTED on a GPU (memory-bound, from weight bytes): a block reads its "
            f"{own / 2**20:.0f} MiB and the target's LM head ({head / 2**20:.0f} MiB) of the "
            f"{target_step / 2**20:.0f} MiB a target step reads: block = {g_block:.3f} whatever K; "
            f"injecting a round's rows (fc, keys, values) {g_inject:.3f}"
        )
        gpu = {k: g_block + g_inject for k in range(1, 16)}
    print("\nPREDICTED speedup over the target alone, acceptance a per draft token, best K:")
    here = "this GPU" if args.gpu_layers else "CPU"  # (the first column: the costs measured here)
    print(f"  a     {here + ' (measured costs)':<27}GPU (v = 1, costs from weight bytes)")
    from tandem.engine.drafters.policy import expected_tokens

    for a in ALPHAS:
        best_cpu = max((expected_tokens(a, k) / (cpu[k] + v[k + 1]), k) for k in cpu if k + 1 in v)
        best_gpu = max((expected_tokens(a, k) / (gpu[k] + 1.0), k) for k in gpu)
        print(
            f"  {a:.1f}   {best_cpu[0]:.2f}x at K = {best_cpu[1]:<10} {best_gpu[0]:.2f}x at K = {best_gpu[1]}"
        )
    if args.clean:
        for path in (target_path, drafter_path):
            path.unlink(missing_ok=True)
        print("(models removed)")


def _bytes(info: object) -> dict[str, int]:
    return {t.name: t.n_bytes or 0 for t in info.tensors}  # type: ignore[attr-defined]


if __name__ == "__main__":
    raise SystemExit(main())
