#!/usr/bin/env python3
"""Lines of code per package of app/tandem at a commit: lines that are not blank, not comments
and not docstrings, per top-level package and per room of the engine.

    .venv/bin/python scripts/code_lines.py            # HEAD
    .venv/bin/python scripts/code_lines.py 13ffe05    # any commit
"""

from __future__ import annotations

import ast
import io
import subprocess
import sys
import tokenize
from collections import Counter

SKIPPED = {
    tokenize.COMMENT,
    tokenize.NL,
    tokenize.NEWLINE,
    tokenize.INDENT,
    tokenize.DEDENT,
    tokenize.ENDMARKER,
}


def code_lines(source: str) -> int:
    """Lines holding code: a token that is not a comment, outside every docstring."""
    docstrings: set[int] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            value = first.value if isinstance(first, ast.Expr) else None
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                docstrings.update(range(first.lineno, (first.end_lineno or first.lineno) + 1))
    lines: set[int] = set()
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type not in SKIPPED:
            lines.update(n for n in range(tok.start[0], tok.end[0] + 1) if n not in docstrings)
    return len(lines)


def git(*args: str) -> str:
    return subprocess.run(["git", *args], capture_output=True, text=True, check=True).stdout


def main() -> None:
    rev = sys.argv[1] if len(sys.argv) > 1 else "HEAD"
    packages: Counter[str] = Counter()
    modules: Counter[str] = Counter()
    rooms: Counter[str] = Counter()
    engine_top = 0
    for path in git("ls-tree", "-r", "--name-only", rev, "app/tandem").split():
        if not path.endswith(".py"):
            continue
        n = code_lines(git("show", f"{rev}:{path}"))
        parts = path.split("/")[2:]
        package = parts[0] if len(parts) > 1 else "(top)"
        packages[package] += n
        modules[package] += 1
        if package == "engine":
            rooms[parts[1] if len(parts) > 2 else "(top level)"] += n
            engine_top += len(parts) == 2
    print(f"{rev}: {sum(packages.values()):,} lines of code")
    for name in sorted(packages):
        print(f"  {name:10} {packages[name]:6,} ({modules[name]} modules)")
    print(f"  engine's top level: {engine_top} modules")
    for name in sorted(rooms):
        print(f"    engine/{name:12} {rooms[name]:6,}")


if __name__ == "__main__":
    main()
