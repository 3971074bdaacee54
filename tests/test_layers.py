"""The layers hold (docs/architecture.md): read from every module's imports, so CI fails the
day one crosses a line.

    engine     imports nothing above it, and never Textual
    session    nothing of the front-ends (ui, cli, server) nor the bench
    catalog    nothing of session, the front-ends or the bench
    ui, cli, server   never each other, except where the command line starts the others
    ui, cli, server, bench   of the engine, only its face (`tandem.engine`, its __init__.py)

Every import counts: at the top, inside functions (lazy imports) and under TYPE_CHECKING (a
type is a dependency too); relative imports are resolved. Modules are read as text (ast), not
imported, so the check needs no llama.cpp and takes a fraction of a second.
"""

from __future__ import annotations

import ast
import importlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from source_tree import parse

pytestmark = pytest.mark.fast  # pure logic over source text: the fast lane

PACKAGE = "tandem"  # the importable package's name: the one word the package rename changes here

# layer -> the layers it must not import.
FORBIDDEN: dict[str, frozenset[str]] = {
    "engine": frozenset({"session", "catalog", "cli", "server", "ui", "bench"}),
    "session": frozenset({"ui", "cli", "server", "bench"}),
    "catalog": frozenset({"session", "ui", "cli", "server", "bench"}),
    "ui": frozenset({"cli", "server"}),
    "server": frozenset({"cli", "ui"}),
    "cli": frozenset({"ui", "server"}),
}
NO_TEXTUAL = frozenset({"engine", "session", "catalog"})  # (nor do they draw anything)
# The front-ends use the engine through its face alone: what they need is exported there.
FACE_ONLY = frozenset({"ui", "cli", "server", "bench"})

# The command line starts the other front-ends: `tandem chat` opens the app, `tandem serve`
# runs the server. These launch points (module -> what it may import) are the only crossings.
LAUNCHERS: frozenset[tuple[str, str]] = frozenset(
    {
        ("cli.chat_cmd", "ui.app"),
        ("cli.serve_cmd", "server"),
        ("cli.serve_cmd", "server.run"),
    }
)


def package_dir() -> Path:
    module = importlib.import_module(PACKAGE)
    assert module.__file__ is not None
    return Path(module.__file__).parent


def module_name(path: Path, root: Path) -> str:
    """`engine.files.gguf_file` for <root>/engine/files/gguf_file.py, `engine` for its __init__.py."""
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(source: str, module: str, *, is_package: bool = False) -> Iterator[tuple[str, int]]:
    """(what `module` imports, the line) for every import in `source`: names inside PACKAGE as
    paths within it (`session.pairs`; "" for the package itself), others as written
    (`textual.app`)."""
    for node in ast.walk(parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield _inside(alias.name), node.lineno
        elif isinstance(node, ast.ImportFrom):
            target = from_target(node, module, is_package=is_package)
            if target == "":  # `from tandem import session` / `from .. import session`: submodules
                for alias in node.names:
                    yield alias.name, node.lineno
            else:
                yield target, node.lineno


def from_target(node: ast.ImportFrom, module: str, *, is_package: bool = False) -> str:
    """What `from X import ...` in `module` imports from, as `imports` names it (relative:
    from the module's package, one level up per extra dot)."""
    if not node.level:
        return _inside(node.module or "")
    here = module.split(".") if module else []
    package = here if is_package else here[:-1]
    up = len(package) - (node.level - 1)
    if up < 0:
        raise ValueError(f"{module}: a relative import above {PACKAGE}")
    return ".".join([*package[:up], *([node.module] if node.module else [])])


def _inside(name: str) -> str:
    if name == PACKAGE:
        return ""
    return name.removeprefix(PACKAGE + ".") if name.startswith(PACKAGE + ".") else f"!{name}"


def violations(source: str, module: str, *, is_package: bool = False) -> list[str]:
    """Each import of `module` that crosses a layer line, as `module:line imports target`."""
    layer = module.split(".")[0]
    found: list[str] = []
    for target, line in imports(source, module, is_package=is_package):
        if target.startswith("!"):  # outside the package
            top = target[1:].split(".")[0]
            if top == "textual" and layer in NO_TEXTUAL:
                found.append(f"{module}:{line} imports {target[1:]}")
            continue
        other = target.split(".")[0]
        if other in FORBIDDEN.get(layer, ()) and (module, target) not in LAUNCHERS:
            found.append(f"{module}:{line} imports {PACKAGE}.{target}")
        elif layer in FACE_ONLY and other == "engine" and target != "engine":
            found.append(f"{module}:{line} imports {PACKAGE}.{target}, not the engine's face")
    return found


def test_every_layer_imports_only_what_is_below_it() -> None:
    root = package_dir()
    files = sorted(root.rglob("*.py"))
    layers = {module_name(f, root).split(".")[0] for f in files}
    assert set(FORBIDDEN) <= layers  # the layers named here exist (a rename would show here)
    found: list[str] = []
    for f in files:
        source, module = f.read_text(encoding="utf-8"), module_name(f, root)
        found += violations(source, module, is_package=f.name == "__init__.py")
    assert not found, "imports across the layers:\n" + "\n".join(found)


@pytest.mark.parametrize(
    ("source", "module", "crossing"),
    [
        (f"from {PACKAGE}.session.pairs import PairRef", "engine.pair", "engine.pair:1 imports"),
        ("from ..session import pairs", "engine.pair", "imports app.session"),
        ("from .. import ui", "server.api", "imports app.ui"),
        (f"def f():\n    import {PACKAGE}.cli.main", "catalog.fit", "catalog.fit:2 imports"),
        ("if TYPE_CHECKING:\n    from ..session.pairs import PairRef", "catalog.hub", "imports app.session"),
        ("from textual.app import App", "engine.llama.model", "imports textual.app"),
        ("from textual.app import App", "session.collect", "imports textual.app"),
        (f"from {PACKAGE}.server import create_app", "cli.run_cmd", "imports app.server"),
        (f"from {PACKAGE}.engine.stats import Tally", "ui.live_stats", "not the engine's face"),
        ("from ..engine.drafters import registry", "bench.report", "not the engine's face"),
    ],
)
def test_the_check_sees_each_kind_of_crossing(source: str, module: str, crossing: str) -> None:
    """The check can fail: each way of writing a forbidden import is caught."""
    found = violations(source, module)
    assert len(found) == 1 and crossing.replace("app.", f"{PACKAGE}.") in found[0]


def test_the_check_lets_allowed_imports_through() -> None:
    assert violations("from ..engine import ModelPair\nfrom .pairs import PairRef", "session.choices") == []
    assert violations(f"from {PACKAGE}.ui.app import TandemApp", "cli.chat_cmd") == []  # a launcher
    assert violations(f"from {PACKAGE}.ui.app import TandemApp", "cli.run_cmd") != []  # not one
    assert violations("from .drafters import lookup", "engine", is_package=True) == []
    assert violations(f"from {PACKAGE}.engine import Tally", "ui.live_stats") == []  # the face
    assert violations(f"from {PACKAGE}.engine.drafters import registry", "session.pairs") == []


# The engine's rooms, lowest first: a module imports only from its own room or lower ones
# (docs/architecture.md). The shared words are the engine's top-level modules but pair.py.
ENGINE_ROOMS: tuple[frozenset[str], ...] = (
    frozenset({"errors", "stats", "events", "sampling", "reasoning", "config"}),
    frozenset({"files"}),
    frozenset({"llama"}),
    frozenset({"text"}),
    frozenset({"drafters"}),
    frozenset({"decoding"}),
    frozenset({"pair", ""}),  # ("": the face, __init__.py)
)
ENGINE_TOP_MODULES_MAX = 12  # modules and rooms at engine/'s top level: a newcomer sees the map


def engine_room(module: str) -> int:
    """The rank of `engine.x.y` (module names as module_name gives them) in ENGINE_ROOMS."""
    parts = module.split(".")
    assert parts[0] == "engine", module
    name = parts[1] if len(parts) > 1 else ""
    for rank, room in enumerate(ENGINE_ROOMS):
        if name in room:
            return rank
    raise AssertionError(f"{module}: in no room of ENGINE_ROOMS (add it to one)")


def room_violations(source: str, module: str, *, is_package: bool = False) -> list[str]:
    """Each import of an engine module from a room above its own."""
    mine = engine_room(module)
    found = []
    for target, line in imports(source, module, is_package=is_package):
        if target.split(".")[0] == "engine" and engine_room(target) > mine:
            found.append(f"{module}:{line} imports {PACKAGE}.{target}")
    return found


def test_the_engine_s_rooms_import_only_lower_rooms() -> None:
    root = package_dir()
    found: list[str] = []
    for f in sorted((root / "engine").rglob("*.py")):
        module = module_name(f, root)
        found += room_violations(f.read_text(encoding="utf-8"), module, is_package=f.name == "__init__.py")
    assert not found, "imports from a higher room of the engine:\n" + "\n".join(found)
    engine = root / "engine"
    top = sorted(p.name for p in engine.iterdir() if p.suffix == ".py" or (p / "__init__.py").exists())
    assert len(top) - 1 <= ENGINE_TOP_MODULES_MAX, top  # (- 1: the face, __init__.py)


def test_the_room_check_sees_an_import_from_above() -> None:
    assert room_violations("from ..decoding.round import verify", "engine.llama.model") != []
    assert room_violations("from .text.prompting import Prompting", "engine.config") != []
    assert room_violations("from ..llama.model import LoadedModel", "engine.decoding.round") == []
    assert room_violations("from .. import Proposal", "engine.drafters.heads.base") == []
    assert room_violations("from .. import ModelPair", "engine.llama.model") != []  # the face


# Where a word that is a drafter kind's name may stand outside engine/drafters/ as code (a
# string), and why: every other place asks the registry (drafters/registry.py).
KIND_WORDS_ALLOWED: dict[tuple[str, str], str] = {
    ("catalog/schema.py", "mtp"): 'the catalog\'s `draft = "mtp"`: a target drafting with its own heads',
    ("engine/llama/model.py", "model"): "a model's role in messages",
    ("server/served.py", "model"): "OpenAI's `model` field and a model entry's `object`",
    ("server/routes/models.py", "model"): "the health check's `model`: the id served",
    ("server/chunks.py", "model"): "OpenAI's `model` field",
    ("ui/picker/disk_tab.py", "model"): "a column: the model file",
    ("engine/files/native_checks.py", "eagle3"): "llama.cpp's graph builders, by architecture",
    ("engine/files/native_checks.py", "dflash"): "llama.cpp's graph builders, by architecture",
}


def kind_words(source: str, kinds: set[str], prefixes: tuple[str, ...]) -> Iterator[tuple[str, int]]:
    """(the string, its line) for each string in `source`, docstrings aside, that is a kind's
    name, names one after --drafter, or starts with a kind's file-name prefix."""
    tree = parse(source)
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    for node in ast.walk(tree):
        if not isinstance(node, ast.Constant) or not isinstance(node.value, str) or id(node) in docstrings:
            continue
        text = node.value
        words = set(text.replace("--drafter ", "--drafter=").split())
        if text in kinds or text.startswith(prefixes) or any(f"--drafter={k}" in words for k in kinds):
            yield text, node.lineno


def test_no_code_outside_the_drafters_spells_a_kind() -> None:
    from tandem.engine.drafters import registry

    kinds = {s.name for s in registry.KINDS}
    prefixes = tuple(p for s in registry.KINDS if s.files is not None for p in s.files.prefixes)
    root = package_dir()
    found = []
    for f in sorted(root.rglob("*.py")):
        where = f.relative_to(root).as_posix()
        if where.startswith("engine/drafters/"):
            continue
        for text, line in kind_words(f.read_text(encoding="utf-8"), kinds, prefixes):
            if (where, text) not in KIND_WORDS_ALLOWED:
                found.append(f"{where}:{line} {text!r}")
    assert not found, "kinds spelled outside engine/drafters/ (ask the registry):\n" + "\n".join(found)


def test_the_kind_check_sees_a_kind_spelled() -> None:
    kinds, prefixes = {"mtp", "lookup"}, ("eagle3-",)
    source = 'K = "mtp"\nM = f"use --drafter lookup {x}"\nN = "eagle3-x.gguf"\ndef f():\n    """mtp"""\n'
    assert sorted(line for _, line in kind_words(source, kinds, prefixes)) == [1, 2, 3]


# What a module outside engine/drafters/ may import of it: what every kind shares (the registry,
# the spec, the batch proposers' words, the policies, the header checks of drafter files), never
# a kind's own module: a new kind must not need a line anywhere else.
DRAFTERS_SHARED = frozenset({"", "registry", "spec", "batched", "policy", "heads", "heads.files"})


def kind_modules_imported(source: str, module: str, drafters: Path, *, is_package: bool = False) -> list[str]:
    """The modules of engine/drafters/ (relative to it: `lookup`, `heads.mtp`) that `module`
    imports beyond DRAFTERS_SHARED, as `module:line drafters.X`."""
    found = []
    for node in ast.walk(parse(source)):
        if not isinstance(node, ast.ImportFrom):
            continue
        target = from_target(node, module, is_package=is_package)
        if target != "engine.drafters" and not target.startswith("engine.drafters."):
            continue
        sub = target.removeprefix("engine.drafters").lstrip(".")
        for alias in node.names:  # `from ..drafters import lookup`: a module, not a name
            named = f"{sub}.{alias.name}".strip(".")
            path = drafters / named.replace(".", "/")
            imported = named if path.with_suffix(".py").exists() or path.is_dir() else sub
            if imported not in DRAFTERS_SHARED:
                found.append(f"{module}:{node.lineno} drafters.{imported}")
    return found


def test_no_module_outside_the_drafters_imports_a_kind() -> None:
    root = package_dir()
    drafters = root / "engine" / "drafters"
    found: list[str] = []
    for f in sorted(root.rglob("*.py")):
        if f.is_relative_to(drafters):
            continue
        source, module = f.read_text(encoding="utf-8"), module_name(f, root)
        found += kind_modules_imported(source, module, drafters, is_package=f.name == "__init__.py")
    assert not found, "a kind's module imported outside engine/drafters/ (ask the registry):\n" + "\n".join(
        found
    )


def test_the_kind_import_check_sees_each_form() -> None:
    drafters = package_dir() / "engine" / "drafters"
    source = (
        "from ..drafters.lookup import KIND\n"
        "from ..drafters import lookup, registry\n"
        "from tandem.engine.drafters.heads.mtp import head_of\n"
        "from ..drafters.spec import Needs\n"
        "from ..drafters import Proposal\n"
    )
    assert kind_modules_imported(source, "engine.decoding.batch", drafters) == [
        "engine.decoding.batch:1 drafters.lookup",
        "engine.decoding.batch:2 drafters.lookup",
        "engine.decoding.batch:3 drafters.heads.mtp",
    ]
