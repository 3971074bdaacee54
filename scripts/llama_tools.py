#!/usr/bin/env python3
"""llama.cpp's own programs (llama-bench, llama-server, rpc-server), built from the same llama.cpp
as the installed bindings, for the benchmarks that compare Tandem with them and the RPC tests:
`tandem.bench.llama_tools` builds them (minutes once, then cached); this prints their paths.

    .venv/bin/python scripts/llama_tools.py llama-bench llama-server   # CPU build, as the bindings'
    .venv/bin/python scripts/llama_tools.py --flavour bindings llama-bench   # the bindings' GPU too
"""

from __future__ import annotations

import argparse
from pathlib import Path

from tandem.bench.llama_tools import TARGETS
from tandem.bench.llama_tools import build as _build


def build(*programs: str, flavour: str = "cpu") -> dict[str, Path]:
    return _build(*programs, flavour=flavour)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("programs", nargs="+", choices=sorted(TARGETS))
    parser.add_argument("--flavour", choices=("cpu", "bindings"), default="cpu")
    args = parser.parse_args()
    for program, path in build(*args.programs, flavour=args.flavour).items():
        print(f"{program}: {path}")


if __name__ == "__main__":
    main()
