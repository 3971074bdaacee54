"""The pair catalog: models.toml (built in), $TANDEM_CATALOG and --catalog files.

A catalog is a TOML file of `[[pair]]` tables, each naming a target and a draft GGUF on the
Hugging Face hub plus the settings that suit the pair; a pair whose target carries its own draft
heads (multi-token prediction layers, Qwen3.5/3.6 and others) says `draft = "mtp"` instead of
naming a draft file: it has one file to download, and the heads draft. User catalogs add pairs to the built-in
ones, replace built-in pairs that have the same name, or (with `include_builtin = false`)
replace the built-in catalog altogether.

Every mistake in a file is reported as `file:line: what is wrong`, naming the field: tomllib
gives the line of syntax errors; for schema errors the line of the offending pair or field is
found by scanning the text, because tomllib returns plain dicts without positions.
"""

from __future__ import annotations

import difflib
import os
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tandem.engine.config import ADAPTIVE_K_MAX, DRAFT_MAX_LIMIT, GenerationConfig, LoadOptions
from tandem.engine.errors import TandemError
from tandem.shipped import shipped

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

BUILTIN_CATALOG = shipped("models.toml")
CATALOG_ENV = "TANDEM_CATALOG"

# `draft = "mtp"`: the target's own draft heads draft (no draft file).
BUILTIN_DRAFT = "mtp"

# `name-00001-of-00003.gguf`: llama.cpp's split naming (llama_split_path); the first part is the
# one handed to llama.cpp, which finds the others next to it.
_SPLIT = re.compile(r"^(?P<prefix>.*)-(?P<no>\d{5})-of-(?P<count>\d{5})\.gguf$")
_QUANT_TOKEN = re.compile(r"^(?:I?Q\d+(?:_[0-9A-Z]+)*|BF16|F16|F32|MXFP4)$", re.IGNORECASE)
_PAIR_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_REPO_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")


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
        name = self.filename.rsplit("/", 1)[-1]
        m = _SPLIT.match(name)
        return (m.group("prefix") if m else name.removesuffix(".gguf")) if name else self.filename


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


def split_parts(filename: str) -> tuple[str, ...]:
    """`x-00001-of-00003.gguf` -> the three part names; any other name -> itself."""
    folder, _, name = filename.rpartition("/")
    m = _SPLIT.match(name)
    if not m:
        return (filename,)
    count = int(m.group("count"))
    prefix = f"{folder}/" if folder else ""
    return tuple(f"{prefix}{m.group('prefix')}-{i:05d}-of-{count:05d}.gguf" for i in range(1, count + 1))


def split_info(filename: str) -> tuple[int, int] | None:
    """(part number, part count) for a split part's name, else None."""
    m = _SPLIT.match(filename.rsplit("/", 1)[-1])
    return (int(m.group("no")), int(m.group("count"))) if m else None


def quantization_from_name(filename: str) -> str:
    """`Meta-Llama-3.1-8B-Instruct-Q4_K_M.gguf` -> `Q4_K_M`; `unknown` when the name says nothing."""
    stem = ModelFile("", filename, 0, "", "", False).display_name
    for token in reversed(re.split(r"[-.]", stem)):
        if _QUANT_TOKEN.match(token):
            return token.upper()
    return "unknown"


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
    """Parse and check one catalog. `builtin` demands every field (the shipped catalog must
    be complete); user catalogs may leave out everything but names, repos and filenames."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise _syntax_error(exc, text, source) from None
    lines = _Lines(text)
    return _Checker(source, lines, builtin).catalog(data)


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


_PAIR_FIELDS = (
    "name",
    "description",
    "shines_on",
    "draft_max",
    "p_min",
    "context",
    "gpu_memory_bytes",
    "hybrid",
    "cross_tokenizer",
    "target",
    "draft",
)
_FILE_FIELDS = ("repo_id", "filename", "size_bytes", "quantization", "license", "gated", "confirmed")
_TOP_FIELDS = ("default", "include_builtin", "pair")
# What a user catalog may leave out, and what it then means: the engine's own defaults.
_PAIR_DEFAULTS: dict[str, Any] = {
    "description": "",
    "shines_on": "",
    "draft_max": ADAPTIVE_K_MAX,
    "p_min": GenerationConfig.p_min,
    "context": LoadOptions.n_ctx,
    "gpu_memory_bytes": 0,
    "hybrid": False,
    "cross_tokenizer": False,
}
# A user who names a file vouches for it: only the built-in catalog has to say `confirmed`.
_FILE_DEFAULTS: dict[str, Any] = {"size_bytes": 0, "license": "", "gated": False, "confirmed": True}


class _Checker:
    def __init__(self, source: Path, lines: _Lines, builtin: bool) -> None:
        self.source = source
        self.lines = lines
        self.builtin = builtin

    def fail(self, line: int, msg: str) -> CatalogError:
        return CatalogError(f"{self.source}:{line}: {msg}")

    def unknown(self, keys: Mapping[str, Any], allowed: tuple[str, ...], where: str, line_of: Any) -> None:
        for key in keys:
            if key not in allowed:
                close = difflib.get_close_matches(key, allowed, n=1)
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                raise self.fail(line_of(key), f"{where}unknown field {key!r}{hint}")

    def catalog(self, data: dict[str, Any]) -> ParsedCatalog:
        self.unknown(data, _TOP_FIELDS, "", lambda k: self.lines.of(-1, None, k))
        default = data.get("default")
        if default is not None and not isinstance(default, str):
            raise self.fail(
                self.lines.of(-1, None, "default"), "field 'default' must be a pair name (a string)"
            )
        if self.builtin and default is None:
            raise self.fail(1, "field 'default' is missing (the built-in catalog must name its default pair)")
        include = data.get("include_builtin", True)
        if not isinstance(include, bool):
            raise self.fail(
                self.lines.of(-1, None, "include_builtin"), "field 'include_builtin' must be true or false"
            )
        raw_pairs = data.get("pair", [])
        if not isinstance(raw_pairs, list) or not all(isinstance(p, dict) for p in raw_pairs):
            raise self.fail(self.lines.of(-1, None, "pair"), "'pair' must be a list of [[pair]] tables")
        pairs: list[PairSpec] = []
        seen: dict[str, int] = {}
        for i, raw in enumerate(raw_pairs):
            spec = self.pair(i, raw)
            if spec.name in seen:
                raise self.fail(
                    self.lines.of(i, None, "name"),
                    f"pair {spec.name!r} is defined twice in this file (first at line {seen[spec.name]})",
                )
            seen[spec.name] = self.lines.of(i, None, "name")
            pairs.append(spec)
        return ParsedCatalog(tuple(pairs), default, self.lines.of(-1, None, "default"), include)

    def pair(self, i: int, raw: dict[str, Any]) -> PairSpec:
        name_raw = raw.get("name")
        label = f"pair {name_raw!r}: " if isinstance(name_raw, str) else f"pair #{i + 1}: "
        self.unknown(raw, _PAIR_FIELDS, label, lambda k: self.lines.of(i, None, k))
        get = _FieldReader(self, i, None, raw, label, _PAIR_DEFAULTS)
        name = get.text("name")
        if not _PAIR_NAME.match(name):
            raise get.error(
                "name", "must be letters, digits, '.', '_' or '-' (it is typed on the command line)"
            )
        draft_max = get.integer("draft_max", minimum=1)
        if draft_max > DRAFT_MAX_LIMIT:
            raise get.error("draft_max", f"must be at most {DRAFT_MAX_LIMIT}")
        p_min = get.number("p_min")
        if not 0.0 <= p_min < 1.0:
            raise get.error("p_min", "must be at least 0 and below 1")
        return PairSpec(
            name=name,
            description=get.text("description", empty_ok=True),
            shines_on=get.text("shines_on", empty_ok=True),
            target=self.model_file(i, "target", raw, label),
            draft=self.draft_file(i, raw, label),
            draft_max=draft_max,
            p_min=p_min,
            context=get.integer("context", minimum=64),
            gpu_memory_bytes=get.integer("gpu_memory_bytes", minimum=0 if not self.builtin else 1),
            hybrid=get.boolean("hybrid"),
            # (optional in every catalog: a pair of one tokenizer need not say so)
            cross_tokenizer=get.boolean("cross_tokenizer") if "cross_tokenizer" in raw else False,
        )

    def draft_file(self, i: int, pair: dict[str, Any], label: str) -> ModelFile | None:
        """The [pair.draft] table, or None for `draft = "mtp"` (the target's own heads)."""
        raw = pair.get("draft")
        if isinstance(raw, str):
            if raw.strip().lower() == BUILTIN_DRAFT:
                return None
            raise self.fail(
                self.lines.of(i, None, "draft"),
                f"{label}field 'draft' must be a [pair.draft] table or \"mtp\" (the target's own "
                f"draft heads), got {raw!r}",
            )
        return self.model_file(i, "draft", pair, label)

    def model_file(self, i: int, which: str, pair: dict[str, Any], label: str) -> ModelFile:
        raw = pair.get(which)
        if raw is None:
            also = ', or draft = "mtp" for a target with its own draft heads' if which == "draft" else ""
            raise self.fail(
                self.lines.of(i), f"{label}field '{which}' is missing (add a [pair.{which}] table{also})"
            )
        if not isinstance(raw, dict):
            also = ' or "mtp" (the target\'s own draft heads)' if which == "draft" else ""
            raise self.fail(
                self.lines.of(i, None, which), f"{label}field '{which}' must be a [pair.{which}] table{also}"
            )
        self.unknown(raw, _FILE_FIELDS, f"{label}{which}: ", lambda k: self.lines.of(i, which, k))
        defaults = dict(_FILE_DEFAULTS)
        if isinstance(raw.get("filename"), str):
            defaults["quantization"] = quantization_from_name(raw["filename"])
        get = _FieldReader(self, i, which, raw, label, defaults)
        repo_id = get.text("repo_id")
        if not _REPO_ID.match(repo_id):
            raise get.error("repo_id", f"must look like 'owner/name', got {repo_id!r}")
        filename = get.text("filename")
        if not filename.lower().endswith(".gguf") or filename.startswith("/") or ".." in filename.split("/"):
            raise get.error("filename", f"must be a .gguf file inside the repository, got {filename!r}")
        info = split_info(filename)
        if info and info[0] != 1:
            raise get.error("filename", "must name the first part of a split model (…-00001-of-…)")
        return ModelFile(
            repo_id=repo_id,
            filename=filename,
            size_bytes=get.integer("size_bytes", minimum=0 if not self.builtin else 1),
            quantization=get.text("quantization"),
            license=get.text("license", empty_ok=not self.builtin),
            gated=get.boolean("gated"),
            confirmed=get.boolean("confirmed"),
        )


class _FieldReader:
    """Typed access to one table's fields, with errors that name file, line and field."""

    def __init__(
        self,
        checker: _Checker,
        pair: int,
        table: str | None,
        raw: dict[str, Any],
        label: str,
        defaults: dict[str, Any],
    ) -> None:
        self.c, self.pair, self.table, self.raw, self.label = checker, pair, table, raw, label
        self.defaults = {} if checker.builtin else defaults

    def field(self, key: str) -> str:
        return f"{self.table}.{key}" if self.table else key

    def error(self, key: str, msg: str) -> CatalogError:
        line = self.c.lines.of(self.pair, self.table, key)
        return self.c.fail(line, f"{self.label}field '{self.field(key)}' {msg}")

    def value(self, key: str) -> Any:
        if key in self.raw:
            return self.raw[key]
        if key in self.defaults:
            return self.defaults[key]
        line = self.c.lines.of(self.pair, self.table)
        where = f"[pair.{self.table}]" if self.table else "[[pair]]"
        raise self.c.fail(line, f"{self.label}field '{self.field(key)}' is missing from this {where} table")

    def text(self, key: str, *, empty_ok: bool = False) -> str:
        v = self.value(key)
        if not isinstance(v, str):
            raise self.error(key, f"must be a string, got {_shown(v)}")
        if not v.strip() and not empty_ok:
            raise self.error(key, "must not be empty")
        return v

    def integer(self, key: str, *, minimum: int) -> int:
        v = self.value(key)
        if isinstance(v, bool) or not isinstance(v, int):
            raise self.error(key, f"must be an integer, got {_shown(v)}")
        if v < minimum:
            raise self.error(key, f"must be at least {minimum}, got {v}")
        return v

    def number(self, key: str) -> float:
        v = self.value(key)
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise self.error(key, f"must be a number, got {_shown(v)}")
        return float(v)

    def boolean(self, key: str) -> bool:
        v = self.value(key)
        if not isinstance(v, bool):
            raise self.error(key, f"must be true or false, got {_shown(v)}")
        return v


def _shown(v: Any) -> str:
    kind = {
        str: "a string",
        int: "an integer",
        float: "a number",
        bool: "a boolean",
        list: "a list",
        dict: "a table",
    }
    return (
        f"{kind.get(type(v), type(v).__name__)} ({v!r})" if not isinstance(v, (list, dict)) else kind[type(v)]
    )
