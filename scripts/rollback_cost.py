#!/usr/bin/env python3
"""What undoing a rejected draft costs per round on a recurrent or hybrid target.

Runs greedy speculative generations at a fixed K on the tiny random-weight test models
(tests/model_files.py: an lfm2 hybrid that llama.cpp rolls back with its own snapshots, a mamba2
whose state Tandem checkpoints), one llama.cpp thread, and reports per drafted round the medians
of what the engine measured itself (RoundEvent):

    checkpoint   copying the target's recurrent state out before the verify batch
    restore      after a rejection: restoring the states (target, and a recurrent draft) and
                 re-decoding the kept tokens on the target
    verify       the verify batch alone

    .venv/bin/python scripts/rollback_cost.py             # K = 4, 3 prompts x 64 tokens, 3 runs
    .venv/bin/python scripts/rollback_cost.py --k 8 --runs 5
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT))

PROMPTS = [
    "Explain in detail why the sky is blue.",
    "Write a story about the ocean and a lighthouse keeper.",
    "Describe five red fruits and what they taste like.",
]
PAIRS = {  # target, draft: (name, architecture, seed) as tests/engine/test_recurrent.py has them
    "lfm2 target (snapshots), llama draft": (("lfm2-t", "lfm2", 11), ("llama-d", "llama", 31)),
    "mamba2 target (checkpoint), llama draft": (("mamba2-t", "mamba2", 21), ("llama-d", "llama", 31)),
    "mamba2 target, mamba2 draft (both checkpoint)": (
        ("mamba2-t", "mamba2", 21),
        ("mamba2-d", "mamba2", 22),
    ),
}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--k", type=int, default=4, help="draft tokens per round (fixed)")
    ap.add_argument("--runs", type=int, default=3, help="generations per prompt")
    ap.add_argument("--tokens", type=int, default=64)
    args = ap.parse_args()

    import model_files
    from tandem.engine import ChatMessage, GenerationConfig, LoadOptions, ModelPair, RoundEvent
    from tandem.session.collect import collect

    print(f"K = {args.k}, greedy, {args.tokens} tokens, {len(PROMPTS)} prompts x {args.runs} runs, 1 thread")
    columns = ("rounds", "rejected", "checkpoint", "restore", "verify", "share")
    widths = (6, 8, 11, 9, 9, 6)
    print(f"{'pair':50} " + " ".join(f"{c:>{w}}" for c, w in zip(columns, widths, strict=True)))
    for label, (t, d) in PAIRS.items():
        paths = [model_files.tiny_stateful_model(name, arch, seed=seed) for name, arch, seed in (t, d)]
        pair = ModelPair.load(paths[0], paths[1], LoadOptions(n_ctx=1024, n_threads=1))
        cfg = GenerationConfig(max_tokens=args.tokens, draft_max=args.k, adaptive=False, drafter="model")
        rounds: list[RoundEvent] = []
        try:
            for _ in range(args.runs):
                for text in PROMPTS:
                    pair.target.reset()  # every run prefills: only the rounds are compared
                    if pair.draft is not None:
                        pair.draft.reset()
                    prompt = pair.chat_prompt([ChatMessage("user", text)])
                    rounds += [r for r in collect(pair.generate(prompt, cfg)).rounds if r.drafted][1:]
        finally:
            pair.close()
        rejected = [r for r in rounds if r.accepted < r.drafted]
        ckpt = statistics.median(r.checkpoint_s for r in rounds)
        restore = statistics.median(r.restore_s for r in rejected) if rejected else 0.0
        verify = statistics.median(r.verify_s - r.checkpoint_s - r.restore_s for r in rounds)
        per_round = ckpt + restore * len(rejected) / len(rounds)  # expected rollback per round
        share = per_round / (verify + per_round)
        print(
            f"{label:50} {len(rounds):6d} {len(rejected) / len(rounds):8.0%} {ckpt * 1e6:9.1f}us "
            f"{restore * 1e6:7.1f}us {verify * 1e6:7.1f}us {share:6.1%}"
        )
    print("checkpoint: median per drafted round; restore: median per rejected round (restore + replay);")
    print("share: expected rollback cost per round / (verify + it)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
