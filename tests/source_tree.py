"""Reading the app's own source as syntax trees, for the tests of its structure (layers, import
circles, where argparse's namespace may go)."""

from __future__ import annotations

import ast
from concurrent.futures import ThreadPoolExecutor


def parse(source: str) -> ast.Module:
    """ast.parse in a thread of its own: CPython 3.11 can raise a spurious SystemError ("AST
    constructor recursion depth mismatch") in a thread whose recursion count an earlier test's
    deep recursion left off (seen in the full suite, never alone); a new thread starts from zero."""
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(ast.parse, source).result()
