"""`tandem run`: one prompt, streamed to the terminal (or one JSON object with --json)."""

from __future__ import annotations

import argparse
import json
import sys
import threading

from tandem.cli.fetch import terminal_fetch
from tandem.cli.options import (
    RunOptions,
    add_generation_options,
    add_model_options,
    add_think_option,
    run_options,
)
from tandem.cli.process import interrupt_sets, peak_rss_bytes
from tandem.cli.render import OriginCodes, TokenWriter, legend, stats_line, terminal
from tandem.engine import TandemError
from tandem.session.collect import collect, outcome_json
from tandem.session.drafting import exact_note, no_draft_note
from tandem.session.pairs import open_pair
from tandem.session.prompts import (
    build_text,
    system_folded_note,
    thinking_note,
    with_reasoning,
)
from tandem.session.runner import Runner


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "run",
        help="generate an answer to one prompt",
        description="Generate an answer to PROMPT with speculative decoding (or --baseline).",
    )
    add_model_options(p)
    add_generation_options(p, max_tokens=256)
    p.add_argument("--baseline", action="store_true", help="run the target alone (no draft)")
    p.add_argument("--raw", action="store_true", help="send PROMPT as plain text, without the chat template")
    p.add_argument("--system", metavar="TEXT", help="system prompt (chat mode)")
    add_think_option(p)
    p.add_argument(
        "--json",
        action="store_true",
        help='print one JSON object instead of streaming (a thinking model\'s reasoning in "reasoning")',
    )
    p.add_argument(
        "--color",
        choices=("auto", "always", "never"),
        default="auto",
        help="colour tokens by origin (default: when writing to a terminal)",
    )
    p.add_argument("prompt", metavar="PROMPT", help="the prompt, or - to read it from standard input")
    p.set_defaults(func=run, options=run_options)


def read_prompt(arg: str) -> str:
    """The prompt argument, or standard input for "-"; refused with one line when it is empty
    or not UTF-8 text (a byte that is not UTF-8 reaches argv as a lone surrogate)."""
    if arg == "-":
        data = sys.stdin.buffer.read()
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise TandemError(
                f"standard input is not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start}): "
                "convert it first, e.g. with iconv -t UTF-8"
            ) from None
    else:
        text = arg
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise TandemError(
                f"the prompt is not UTF-8 text (an undecodable byte at character {exc.start}): "
                "check the terminal's encoding, or pass the prompt on standard input with -"
            ) from None
    if not text.strip():
        raise TandemError("the prompt is empty")
    return text


def run(opts: RunOptions) -> int:
    speculative = not opts.baseline
    options = opts.options
    options.validate_all()
    text = read_prompt(opts.prompt)
    fetch = terminal_fetch(yes=opts.yes)
    colours = OriginCodes(terminal(sys.stdout, opts.color))  # (the answer's: the legend says them)

    with open_pair(opts.models, options, fetch=fetch, speculative=speculative, raw=opts.raw) as opened:
        pair, cfg = opened.pair, opened.config
        exact = exact_note(pair, cfg)
        for note in opened.notes:
            print(f"note: {note}", file=sys.stderr)
        if speculative and not opts.json and (drafting := no_draft_note(pair, options.drafter)):
            print(f"note: {drafting}", file=sys.stderr)
        if exact and speculative and not opts.json:
            print(f"note: {exact}", file=sys.stderr)
        chat = build_text(
            pair, text, raw=opts.raw, system=opts.system, think=options.think, within_context=True
        )
        prompt, cfg = chat.tokens, with_reasoning(cfg, chat)
        if not opts.raw:
            notes = [thinking_note(pair, options.think)]
            notes.append(system_folded_note(pair) if chat.system_folded else None)
            for note in filter(None, notes):
                print(f"note: {note}", file=sys.stderr)
        cancel = threading.Event()
        if not opts.json:
            print(legend(colours, speculative), file=sys.stderr)
        # The reasoning is shown (on standard error, dimmed) unless thinking was turned off and
        # the model reasons anyway (its template has no switch).
        shown = None if options.think is False else sys.stderr
        writer = None if opts.json else TokenWriter(sys.stdout, colours, shown)
        try:
            with interrupt_sets(cancel), Runner.open(pair) as runner:
                out = collect(runner.stream(prompt, cfg, speculative=speculative, cancel=cancel), writer)
        finally:
            if writer is not None:
                writer.flush()  # whatever was generated is shown, even if it ended in an error
        if opts.json:
            result = outcome_json(out)
            result["config"] = {  # the settings the generation ran with, after the pair's and defaults
                "max_tokens": cfg.max_tokens,
                "draft_max": out.stats.draft_max,
                "adaptive": out.stats.adaptive,
                "drafter": out.stats.drafter,
                "p_min": cfg.p_min,
                "context": pair.context_size,
                "think": options.think,  # null: the model's default
                "exact": out.stats.exact,  # (as run: `--exact` where the target allows it)
            }
            files = [pair.target] + ([pair.draft] if pair.draft else [])
            result["memory"] = {
                "peak_rss_bytes": peak_rss_bytes(),
                # (a trained drafter given as the draft file counts with the models)
                "model_file_bytes": sum(m.path.stat().st_size for m in files)
                + (pair.sidecar.stat().st_size if pair.sidecar is not None else 0),
                "kv_cache_bytes": sum(m.kv_cache_bytes() for m in files),
            }
            print(json.dumps(result, ensure_ascii=False))
        else:
            if writer is not None and writer.reasoning_open:
                sys.stderr.write("\n")  # (the reasoning did not end with an answer below it)
            sys.stdout.write("\n")
            sys.stdout.flush()
            print(stats_line(out.stats), file=sys.stderr)
        return 130 if out.stats.stop_reason == "cancelled" and cancel.is_set() else 0
