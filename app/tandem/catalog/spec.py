"""The pair catalog: models.toml (built in), $TANDEM_CATALOG and --catalog files.

A catalog is a TOML file of `[[pair]]` tables, each naming a target and a draft GGUF on the
Hugging Face hub plus the settings that suit the pair; a pair whose target carries its own draft
heads (multi-token prediction layers, Qwen3.5/3.6 and others) says `draft = "mtp"` instead of
naming a draft file: it has one file to download, and the heads draft. User catalogs add pairs to the built-in
ones, replace built-in pairs that have the same name, or (with `include_builtin = false`)
replace the built-in catalog altogether.

Every mistake in a file is reported as `file:line: what is wrong`, naming the field: tomllib
gives the line of syntax errors; the schema (schema.py: pydantic models) says what is wrong with
a pair or a field, and its line is found by scanning the text, because tomllib returns plain
dicts without positions.
"""

from __future__ import annotations

import difflib
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from tandem.engine.errors import TandemError
from tandem.shipped import shipped

from .names import display_name, quantization_from_name, split_info, split_parts
from .schema import BUILTIN_DRAFT, BuiltinCatalog, UserCatalog, UserPair, first_problem

__all__ = [
    "BUILTIN_DRAFT",
    "Catalog",
    "CatalogError",
    "ModelFile",
    "PairSpec",
    "load_catalog",
    "quantization_from_name",
    "split_info",
    "split_parts",
]

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

BUILTIN_CATALOG = shipped("models.toml")
CATALOG_ENV = "TANDEM_CATALOG"


class CatalogError(TandemError):
    """A catalog file is missing or malformed, or a pair name is unknown."""


@dataclass(frozen=True)
class ModelFile:
    """One GGUF on the hub. For a split model `filename` is the first part
    (`...-00001-of-0000N.gguf`) and `size_bytes` the size of all parts together."""

    repo_id: str
    filename: str
    size_bytes: int  # 0 when the catalog does not say (the hub tells at download time)
    quantization: str
    license: str
    gated: bool
    # False: the file name was not seen in the hub's file listing or a README naming it, so it
    # may 404; the front-ends say so before a download instead of failing in the middle of one.
    confirmed: bool = True

    @property
    def parts(self) -> tuple[str, ...]:
        """Every file to fetch: the filename itself, or all parts of a split model."""
        return split_parts(self.filename)

    @property
    def display_name(self) -> str:
        """The file's name without folders or the split suffix."""
        return display_name(self.filename)


@dataclass(frozen=True)
class PairSpec:
    name: str
    description: str
    shines_on: str
    target: ModelFile
    # None: the target drafts for itself with its built-in heads (`draft = "mtp"`).
    draft: ModelFile | None
    draft_max: int
    p_min: float
    context: int
    gpu_memory_bytes: int  # both models + both KV caches at `context`; 0 = not given
    # The target (and maybe the draft) mixes attention with recurrent layers (Qwen3.5's Gated
    # DeltaNet, Nemotron-H's Mamba-2): shown to the user, whose llama.cpp must support it.
    hybrid: bool = False
    # The draft has another tokenizer than the target: it drafts across tokenizers, its text
    # re-encoded each round (engine/drafters/cross.py); said before anything is downloaded.
    cross_tokenizer: bool = False

    @property
    def builtin_draft(self) -> bool:
        """The target drafts with its own multi-token-prediction heads: no draft file."""
        return self.draft is None

    @property
    def files(self) -> tuple[ModelFile, ...]:
        """The files to download: the target, and the draft when the pair has one."""
        return (self.target,) if self.draft is None else (self.target, self.draft)

    @property
    def total_bytes(self) -> int:
        """Download size of the pair's files (the target and the draft, if any) together."""
        return sum(f.size_bytes for f in self.files)

    @property
    def unconfirmed(self) -> tuple[ModelFile, ...]:
        """The pair's files whose names were not confirmed on the hub."""
        return tuple(f for f in self.files if not f.confirmed)


def unconfirmed_note(spec: PairSpec, files: tuple[ModelFile, ...] | None = None) -> str:
    """One sentence saying a download may stop with 404 because a file name was never confirmed
    on the hub; "" when every file (of `files`, by default the pair's own) was confirmed."""
    doubtful = [f for f in (spec.unconfirmed if files is None else files) if not f.confirmed]
    if not doubtful:
        return ""
    many = len(doubtful) > 1
    names = " and ".join(f"{f.repo_id}/{f.filename}" for f in doubtful)
    return (
        f"pair {spec.name}: {names} {'were' if many else 'was'} not confirmed on the Hugging Face hub; "
        f"if {'those names are' if many else 'that name is'} wrong, the download stops with 'not found'"
    )


@dataclass(frozen=True)
class Catalog:
    pairs: tuple[PairSpec, ...]
    default: str
    sources: tuple[Path, ...]

    def get(self, name: str) -> PairSpec:
        for p in self.pairs:
            if p.name == name:
                return p
        for p in self.pairs:  # forgiving about case: `Llama3.1-8B` finds `llama3.1-8b`
            if p.name.lower() == name.lower():
                return p
        known = [p.name for p in self.pairs]
        close = difflib.get_close_matches(name, known, n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        raise CatalogError(
            f"unknown pair {name!r}.{hint} Known pairs: {', '.join(known)} (see `tandem pairs`)"
        )

    @property
    def default_pair(self) -> PairSpec:
        return self.get(self.default)


# ---------------------------------------------------------------------------------- loading
def load_catalog(extra: Path | None = None) -> Catalog:
    """The built-in models.toml, then $TANDEM_CATALOG, then `extra` (e.g. --catalog).

    Later files override earlier pairs with the same name; `include_builtin = false` in a user
    file drops the built-in pairs; the last file that sets `default` chooses the default pair.
    """
    files: list[tuple[Path, bool]] = [(BUILTIN_CATALOG, True)]
    env = os.environ.get(CATALOG_ENV, "").strip()
    for item in filter(None, env.split(os.pathsep)) if env else ():
        files.append((_existing(Path(item).expanduser(), f"${CATALOG_ENV}"), False))
    if extra is not None:
        files.append((_existing(Path(extra).expanduser(), "--catalog"), False))

    pairs: dict[str, PairSpec] = {}
    default: str | None = None
    default_from: tuple[Path, int] | None = None
    sources: list[Path] = []
    for path, builtin in files:
        parsed = parse_catalog_file(path, builtin=builtin)
        if not parsed.include_builtin:
            pairs = {}
            default, default_from = None, None
        for p in parsed.pairs:
            pairs[p.name] = p  # an override keeps the overridden pair's place in the list
        if parsed.default is not None:
            default, default_from = parsed.default, (path, parsed.default_line)
        sources.append(path)
    if not pairs:
        raise CatalogError(f"the catalog has no pairs (files: {', '.join(map(str, sources))})")
    if default is None:
        default = next(iter(pairs))
    elif default not in pairs:
        where = f"{default_from[0]}:{default_from[1]}: " if default_from else ""
        raise CatalogError(
            f"{where}field 'default' names pair {default!r}, which no catalog defines "
            f"(known pairs: {', '.join(pairs)})"
        )
    return Catalog(tuple(pairs.values()), default, tuple(sources))


def _existing(path: Path, origin: str) -> Path:
    if not path.is_file():
        raise CatalogError(f"catalog file not found: {path} (given by {origin})")
    return path


@dataclass(frozen=True)
class ParsedCatalog:
    pairs: tuple[PairSpec, ...]
    default: str | None
    default_line: int
    include_builtin: bool


def parse_catalog_file(path: Path, *, builtin: bool = False) -> ParsedCatalog:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise CatalogError(f"cannot read catalog {path}: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise CatalogError(f"{path}: not a UTF-8 text file ({exc.reason})") from exc
    return parse_catalog(text, path, builtin=builtin)


def parse_catalog(text: str, source: Path, *, builtin: bool = False) -> ParsedCatalog:
    """Parse and check one catalog (schema.py). `builtin` demands every field (the shipped
    catalog must be complete); user catalogs may leave out everything but names, repos and
    filenames."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise _syntax_error(exc, text, source) from None
    lines = _Lines(text)
    try:
        checked = (BuiltinCatalog if builtin else UserCatalog).model_validate(data)
    except ValidationError as exc:
        p = first_problem(exc, data)
        raise CatalogError(f"{source}:{lines.of(p.pair, p.table, p.key)}: {p.label}{p.sentence}") from None
    pairs: list[PairSpec] = []
    seen: dict[str, int] = {}
    for i, entry in enumerate(checked.pair):
        line = lines.of(i, None, "name")
        if entry.name in seen:
            raise CatalogError(
                f"{source}:{line}: pair {entry.name!r} is defined twice in this file "
                f"(first at line {seen[entry.name]})"
            )
        seen[entry.name] = line
        pairs.append(_pair(entry))
    return ParsedCatalog(
        tuple(pairs), checked.default, lines.of(-1, None, "default"), checked.include_builtin
    )


def _pair(entry: UserPair) -> PairSpec:
    return PairSpec(
        name=entry.name,
        description=entry.description,
        shines_on=entry.shines_on,
        target=ModelFile(**entry.target.model_dump()),
        draft=ModelFile(**entry.draft.model_dump()) if entry.draft is not None else None,
        draft_max=entry.draft_max,
        p_min=entry.p_min,
        context=entry.context,
        gpu_memory_bytes=entry.gpu_memory_bytes,
        hybrid=entry.hybrid,
        cross_tokenizer=entry.cross_tokenizer,
    )


def _syntax_error(exc: Exception, text: str, source: Path) -> CatalogError:
    msg = str(exc)
    line = getattr(exc, "lineno", None)
    m = re.search(r"\(at line (\d+), column (\d+)\)", msg)
    if line is None and m:
        line = int(m.group(1))
    detail = re.sub(r"\s*\(at line \d+, column \d+\)|\s*\(at end of document\)", "", msg)
    if line is None:
        line = text.count("\n") + 1
    lines = text.splitlines()
    field = ""
    if 0 < line <= len(lines):
        km = re.match(r"\s*([A-Za-z0-9_.\"'-]+)\s*=", lines[line - 1])
        hm = re.match(r"\s*\[+\s*([^\]]+?)\s*\]+", lines[line - 1])
        if km:
            field = f" in field {km.group(1).strip(chr(34) + chr(39))!r}"
        elif hm:
            field = f" in table [{hm.group(1)}]"
    return CatalogError(f"{source}:{line}: invalid TOML{field}: {detail}")


class _Lines:
    """Where each pair, table and key sits in the text, for error messages.

    A light scan, not a TOML parser: it follows `[[pair]]` and `[pair.target]` headers and
    `key =` lines, which is how catalogs are written (inline tables are found by their key).
    """

    _ARRAY = re.compile(r"^\s*\[\[\s*([A-Za-z0-9_.\"-]+)\s*\]\]")
    _TABLE = re.compile(r"^\s*\[\s*([A-Za-z0-9_.\"-]+)\s*\]")
    _KEY = re.compile(r"^\s*([A-Za-z0-9_-]+|\"[^\"]*\")\s*=")

    def __init__(self, text: str) -> None:
        self.headers: dict[tuple[int, str | None], int] = {}
        self.keys: dict[tuple[int, str | None, str], int] = {}
        pair, table = -1, None  # -1: top level, before the first [[pair]]
        for no, line in enumerate(text.splitlines(), 1):
            if m := self._ARRAY.match(line):
                table = None
                if m.group(1) == "pair":
                    pair += 1
                    self.headers.setdefault((pair, None), no)
                else:
                    table = "?"
                continue
            if m := self._TABLE.match(line):
                name = m.group(1)
                table = name.split(".", 1)[1] if name.startswith("pair.") and pair >= 0 else "?"
                self.headers.setdefault((pair, table), no)
                continue
            if m := self._KEY.match(line):
                key = m.group(1).strip('"')
                self.keys.setdefault((pair, table, key), no)
                if table is None and "{" in line:  # inline table: `target = { ... }`
                    self.headers.setdefault((pair, key), no)

    def of(self, pair: int, table: str | None = None, key: str | None = None) -> int:
        if key is not None and (pair, table, key) in self.keys:
            return self.keys[(pair, table, key)]
        if table is not None and (pair, table) in self.headers:
            return self.headers[(pair, table)]
        if (pair, None) in self.headers:
            return self.headers[(pair, None)]
        return 1
