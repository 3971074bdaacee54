#!/usr/bin/env python3
"""`tandem run`, traced round by round: who drafted, K, what was accepted, and what each round
cost (draft, verify, wall), then the totals. It runs the real command in this process and only
listens to the events it streams, so the answer and its stats are the command's own.

    .venv/bin/python scripts/trace_run.py --target T.gguf --draft D.gguf -n 64 "Write a story."

Every argument is `tandem run`'s. The answer goes to standard output as usual; the trace to
standard error. Time it alone (docs/benchmarks.md, "Why the Qwen pair's first answer loses").
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "app"))

import tandem.cli.run_cmd as run_cmd
from tandem.cli.main import main
from tandem.engine.events import DoneEvent, Event, PrefillEvent, RoundEvent


def _line(at_s: float, e: RoundEvent) -> str:
    who = e.drafter or "plain"
    return (
        f"{at_s * 1000:8.1f} ms  {who:7} K={e.k} drafted={e.drafted} accepted={e.accepted} "
        f"draft={e.draft_s * 1000:5.1f} verify={e.verify_s * 1000:5.1f} wall={e.wall_s * 1000:5.1f} ms"
    )


def traced(original: Any) -> Any:
    def collect(events: Iterable[Event], writer: Any) -> Any:
        def listen() -> Iterator[Event]:
            t0 = time.perf_counter()
            rounds: list[RoundEvent] = []
            for e in events:
                at = time.perf_counter() - t0
                if isinstance(e, RoundEvent):
                    rounds.append(e)
                    print(_line(at, e), file=sys.stderr)
                elif isinstance(e, PrefillEvent):
                    print(f"{at * 1000:8.1f} ms  prefill of {e.prompt_tokens} tokens", file=sys.stderr)
                elif isinstance(e, DoneEvent):
                    _totals(rounds)
                yield e

        return original(listen(), writer)

    return collect


def _totals(rounds: list[RoundEvent]) -> None:
    by: dict[str, list[RoundEvent]] = {}
    for r in rounds:
        by.setdefault(r.drafter or "plain", []).append(r)
    for who, rs in sorted(by.items()):
        wall = sum(r.wall_s for r in rs)
        tokens = sum(r.emitted for r in rs)
        drafted, accepted = sum(r.drafted for r in rs), sum(r.accepted for r in rs)
        print(
            f"{who:7} {len(rs):3} rounds, {tokens:3} tokens, {wall * 1000:7.1f} ms "
            f"({wall / max(1, tokens) * 1000:5.1f} ms a token), accepted {accepted}/{drafted}",
            file=sys.stderr,
        )


if __name__ == "__main__":
    run_cmd.collect = traced(run_cmd.collect)
    sys.exit(main(["run", *sys.argv[1:]]))
