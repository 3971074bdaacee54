"""`tandem run`: one prompt, streamed to the terminal (or one JSON object with --json)."""

from __future__ import annotations

import argparse
import json
import sys
import threading
from typing import Any

from app.cli.options import (
    add_generation_options,
    add_model_options,
    generation_config,
    load_options,
    model_choice,
)
from app.cli.process import interrupt_sets, peak_rss_bytes
from app.cli.render import coloured, legend, stats_line
from app.engine import (
    ChatMessage,
    DoneEvent,
    GenerationStats,
    ModelPair,
    PrefillEvent,
    TandemError,
    TokenEvent,
)


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "run",
        help="generate an answer to one prompt",
        description="Generate an answer to PROMPT with speculative decoding (or --baseline).",
    )
    add_model_options(p)
    add_generation_options(p)
    p.add_argument("--baseline", action="store_true", help="run the target alone (no draft)")
    p.add_argument("--raw", action="store_true", help="send PROMPT as plain text, without the chat template")
    p.add_argument("--system", metavar="TEXT", help="system prompt (chat mode)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of streaming")
    p.add_argument(
        "--color",
        choices=("auto", "always", "never"),
        default="auto",
        help="colour tokens by origin (default: when writing to a terminal)",
    )
    p.add_argument("prompt", metavar="PROMPT", help="the prompt, or - to read it from standard input")
    p.set_defaults(func=run)


def read_prompt(arg: str) -> str:
    text = sys.stdin.read() if arg == "-" else arg
    if not text.strip():
        raise TandemError("the prompt is empty")
    return text


def build_prompt(pair: ModelPair, text: str, *, raw: bool, system: str | None) -> list[int]:
    if raw:
        return pair.raw_prompt(text)
    if not pair.has_chat_template():
        print(
            f"note: {pair.target.path.name} has no chat template; sending the prompt as plain text",
            file=sys.stderr,
        )
        return pair.raw_prompt(text)
    messages = [ChatMessage("system", system)] if system else []
    messages.append(ChatMessage("user", text))
    return pair.chat_prompt(messages)


def run(args: argparse.Namespace) -> int:
    speculative = not args.baseline
    choice = model_choice(args, need_draft=speculative and args.drafter == "model")
    cfg = generation_config(args)
    text = read_prompt(args.prompt)
    colour = args.color == "always" or (args.color == "auto" and sys.stdout.isatty())

    with ModelPair.load(choice.target, choice.draft if speculative else None, load_options(args)) as pair:
        for note in pair.notes:
            print(f"note: {note}", file=sys.stderr)
        if speculative and pair.draft is None and not args.json:
            print("note: no draft model given: drafting with prompt lookup only", file=sys.stderr)
        prompt = build_prompt(pair, text, raw=args.raw, system=args.system)
        cancel = threading.Event()
        tokens: list[dict[str, Any]] = []
        stats: GenerationStats | None = None
        answer = ""
        if not args.json:
            print(legend(colour, speculative), file=sys.stderr)
        with interrupt_sets(cancel):
            for ev in pair.generate(prompt, cfg, speculative=speculative, cancel=cancel):
                if isinstance(ev, TokenEvent):
                    tokens.append({"id": ev.id, "text": ev.text, "origin": ev.origin.value})
                    if not args.json and ev.text:
                        sys.stdout.write(coloured(ev.text, ev.origin, colour))
                        sys.stdout.flush()
                elif isinstance(ev, PrefillEvent):
                    pass
                elif isinstance(ev, DoneEvent):
                    stats, answer = ev.stats, ev.text
        assert stats is not None
        if args.json:
            print(json.dumps(_json_result(answer, tokens, stats, pair), ensure_ascii=False))
        else:
            sys.stdout.write("\n")
            sys.stdout.flush()
            print(stats_line(stats), file=sys.stderr)
        return 130 if stats.stop_reason == "cancelled" and cancel.is_set() else 0


def _json_result(
    text: str, tokens: list[dict[str, Any]], s: GenerationStats, pair: ModelPair
) -> dict[str, Any]:
    files = [pair.target] + ([pair.draft] if pair.draft else [])
    return {
        "text": text,
        "tokens": tokens,
        "stats": {
            "decode_tokens_per_s": s.decode_tokens_per_s,
            "prefill_s": s.prefill_s,
            "acceptance_rate": s.acceptance_rate,
            "tokens_per_round": s.tokens_per_round,
            "rounds": s.rounds,
            "drafted": s.drafted,
            "accepted": s.accepted,
            "generated": s.generated,
            "prompt_tokens": s.prompt_tokens,
            "prefill_tokens": s.prefill_tokens,
            "decode_s": s.decode_s,
            "draft_s": s.draft_s,
            "verify_s": s.verify_s,
            "python_overhead": s.python_overhead,
            "draft_max": s.draft_max,
            "mode": s.mode,
            "stop_reason": s.stop_reason,
        },
        "memory": {
            "peak_rss_bytes": peak_rss_bytes(),
            "model_file_bytes": sum(m.path.stat().st_size for m in files),
            "kv_cache_bytes": sum(m.kv_cache_bytes() for m in files),
        },
    }
