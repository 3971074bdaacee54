#!/usr/bin/env python3
"""A short answer beside long prompts being read (issue 49's finding 6): its first-token time
and its time per token alone, beside one and beside three 3,763-token prompts, and those
prompts' first-token time; the Qwen2.5-Coder pair (tests/model_files.py), 4 sequences, in
Tandem's batched engine.

    .venv/bin/python scripts/prompt_share_bench.py TREE THREADS

TREE: a checkout whose app/ and tests/ to use (to compare a commit: a worktree of it; one
without the engine's `ready` waits 30 s for its calibration instead)."""

from __future__ import annotations

import sys
import threading
import time
from typing import Any


def main(tree: str, threads: int) -> None:
    sys.path.insert(0, tree + "/app")
    sys.path.insert(0, tree + "/tests")
    import model_files
    from tandem.engine import (
        BatchEngine,
        DoneEvent,
        Event,
        GenerationConfig,
        LoadOptions,
        ModelPair,
        SeqRequest,
        TokenEvent,
    )
    from tandem.session.prompts import chat_prompt, messages_for

    t, d = model_files.qwen_coder_pair()
    pair = ModelPair.load(t, d, LoadOptions(n_ctx=4096, n_seq=4, n_threads=threads))
    eng = BatchEngine(pair.target, pair.draft)
    thread = threading.Thread(target=eng.run, daemon=True)
    thread.start()
    if hasattr(eng, "ready"):
        eng.ready.wait()
    else:
        time.sleep(30)

    def ask(prompt: list[int], max_tokens: int) -> tuple[dict[str, Any], threading.Event]:
        done = threading.Event()
        box: dict[str, Any] = {"n": 0}

        def emit(events: list[Event]) -> None:
            for e in events:
                if isinstance(e, TokenEvent):
                    box.setdefault("first", time.perf_counter())
                    box["n"] += 1
                if isinstance(e, DoneEvent):
                    box["done"] = time.perf_counter()
                    done.set()

        def fail(exc: BaseException) -> None:
            box["err"] = exc
            done.set()

        config = eng.check(GenerationConfig(max_tokens=max_tokens), True)
        box["t0"] = time.perf_counter()
        eng.submit(SeqRequest(prompt, config, True, emit, fail))
        return box, done

    long_text = " ".join(f"Item {i} is a box of {i * 7 % 13} apples." for i in range(290))
    for n_long in (0, 1, 3):
        longs = [
            ask(chat_prompt(pair, messages_for(f"List {j}. {long_text} How many boxes?")), 4)
            for j in range(n_long)
        ]
        time.sleep(2 if n_long else 0)
        question = f"Write a Python function that reverses a string, case {n_long}."
        box, done = ask(chat_prompt(pair, messages_for(question)), 24)
        done.wait()
        ttft = box["first"] - box["t0"]
        per = (box["done"] - box["first"]) / max(1, box["n"] - 1)
        for _, long_done in longs:
            long_done.wait()
        long_s = max((b.get("first", 0.0) - b["t0"] for b, _ in longs), default=0.0)
        print(
            f"beside {n_long} long prompt(s): short answer first token {ttft:.2f} s, then "
            f"{1000 * per:.0f} ms/token ({box['n']} tokens); long prompts' first token {long_s:.1f} s",
            flush=True,
        )
    eng.stop()
    thread.join()
    eng.close()
    pair.close()


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
