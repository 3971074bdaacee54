"""`tandem`: the command-line entry point. With no command it starts the terminal app.

User mistakes (a bad path, an incompatible pair, a full context...) are TandemErrors and are
printed as one line with exit code 1: never a traceback.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from tandem import __version__


def build_parser() -> argparse.ArgumentParser:
    from tandem.cli import bench_cmd, chat_cmd, models_cmd, pairs_cmd, run_cmd, serve_cmd
    from tandem.cli.options import chat_options

    parser = argparse.ArgumentParser(
        prog="tandem",
        description="Faster local LLMs with speculative decoding: a small draft model guesses, "
        "the target model checks. The output is exactly the target's.",
    )
    parser.add_argument("--version", action="version", version=f"tandem {__version__}")
    # Plain `tandem` starts the app (the picker on a first run, else the last pair).
    parser.set_defaults(func=chat_cmd.chat, options=chat_options)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    chat_cmd.add_parser(sub)
    run_cmd.add_parser(sub)
    bench_cmd.add_parser(sub)
    pairs_cmd.add_parsers(sub)
    models_cmd.add_parser(sub)
    serve_cmd.add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    from tandem.cli.options import options_for
    from tandem.engine import TandemError

    try:
        handler, options = options_for(args)  # (a bad value is a TandemError: one line)
        return int(handler(options) or 0)
    except TandemError as exc:
        print(f"tandem: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("\ntandem: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # `tandem run ... | head`: the reader went away; that is not an error.
        sys.stderr.close()
        return 0


if __name__ == "__main__":
    sys.exit(main())
