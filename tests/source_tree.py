"""Reading the app's own source as syntax trees, for the tests of its structure (layers, import
circles, where argparse's namespace may go)."""

from __future__ import annotations

import ast
import gc


def parse(source: str) -> ast.Module:
    """ast.parse with the garbage collector held off. CPython 3.11 keeps one recursion count for
    every conversion to Python syntax objects; a collection during the conversion can run a
    finalizer that formats a traceback, and 3.11's traceback formatting calls ast.parse itself,
    which resets the count under the outer parse: a spurious SystemError ("AST constructor
    recursion depth mismatch"), seen only in the full suite. With no collection, no Python code
    runs inside the conversion."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        return ast.parse(source)
    finally:
        if was_enabled:
            gc.enable()
