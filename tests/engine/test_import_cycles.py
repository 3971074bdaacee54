"""No import circle in app/: read every module's imports and look for a cycle among them. An
import only for type checking counts too (a circle that only type checking closes is still a
circle of ideas: model.py <-> mtp.py was one, the app and its screens another, session/pairs.py
and preflight.py a third). Fast lane: pure logic over source text."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from source_tree import parse

pytestmark = pytest.mark.fast

ROOT = Path(__file__).resolve().parents[2]
SOURCE = ROOT / "app"  # the source folder: module names are relative to it (tandem.engine...)


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SOURCE).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in SOURCE.rglob("*.py")}


def _imports(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The app modules `name` imports: a submodule where one is named, else the package."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    tree = parse(path.read_text(encoding="utf-8"))
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name in known)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join([*base, *([node.module] if node.module else [])])
            else:
                target = node.module or ""
            for a in node.names:
                sub = f"{target}.{a.name}"
                if sub in known:
                    out.add(sub)
                elif target in known:
                    out.add(target)
    out.discard(name)
    return out


def import_cycles() -> list[list[str]]:
    """Each group of modules that import each other, directly or around a circle."""
    known = _modules()
    graph = {name: _imports(name, path, known) for name, path in known.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return groups


def test_no_import_cycle_in_app() -> None:
    assert import_cycles() == []


def test_the_check_finds_a_cycle(tmp_path: Path) -> None:
    # The reader itself: heads/context.py -> model.py is an edge, so model.py -> heads/context.py
    # would be a circle.
    known = _modules()
    context = "tandem.engine.drafters.heads.context"
    assert "tandem.engine.llama.model" in _imports(context, known[context], known)
    assert context not in _imports("tandem.engine.llama.model", known["tandem.engine.llama.model"], known)
