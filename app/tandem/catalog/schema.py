"""A catalog file's schema: pydantic models of its tables, and a validation error said as one
sentence naming the pair and the field (spec.py adds the file and the line).

Two sets of models: a user's catalog may leave out everything but names, repositories and file
names (the engine's defaults then apply, and a file it names counts as confirmed), while the
built-in catalog must state every field. Values are strict: TOML has types, and `draft_max = 4.5`
or `gated = 1` is a mistake to report, not a value to coerce.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic_core import ErrorDetails, PydanticCustomError

from tandem.engine.config import ADAPTIVE_K_MAX, DRAFT_MAX_LIMIT, MIN_CONTEXT, GenerationConfig, LoadOptions

from .names import quantization_from_name, split_info

# `draft = "mtp"`: the target's own draft heads draft (no draft file).
BUILTIN_DRAFT = "mtp"

PAIR_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
REPO_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")


def _problem(message: str) -> PydanticCustomError:
    """A rule's own sentence ("must ..."), carried as it is (a template would read its braces)."""
    return PydanticCustomError("catalog", "{message}", {"message": message})


class _Table(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


# ---------------------------------------------------------------------------------- files
class UserFile(_Table):
    """A `[pair.target]` / `[pair.draft]` table of a user's catalog."""

    repo_id: str
    filename: str
    size_bytes: int = Field(0, ge=0)
    quantization: str = Field(min_length=1)  # (from the file name when not given)
    license: str = ""
    gated: bool = False
    # A user who names a file vouches for it: only the built-in catalog has to say `confirmed`.
    confirmed: bool = True

    @model_validator(mode="before")
    @classmethod
    def _quantization_from_filename(cls, data: Any) -> Any:
        named = isinstance(data, dict) and isinstance(data.get("filename"), str)
        if named and "quantization" not in data and cls is UserFile:  # (the built-in's states it)
            return {**data, "quantization": quantization_from_name(data["filename"])}
        return data

    @field_validator("repo_id")
    @classmethod
    def _repo(cls, v: str) -> str:
        if not v.strip():
            raise _problem("must not be empty")
        if not REPO_ID.match(v):
            raise _problem(f"must look like 'owner/name', got {v!r}")
        return v

    @field_validator("filename")
    @classmethod
    def _gguf_inside_the_repo(cls, v: str) -> str:
        if not v.strip():
            raise _problem("must not be empty")
        if not v.lower().endswith(".gguf") or v.startswith("/") or ".." in v.split("/"):
            raise _problem(f"must be a .gguf file inside the repository, got {v!r}")
        part = split_info(v)
        if part and part[0] != 1:
            raise _problem("must name the first part of a split model (…-00001-of-…)")
        return v


class BuiltinFile(UserFile):
    """The built-in catalog's: every field stated, sizes and licenses known."""

    size_bytes: int = Field(ge=1)
    quantization: str = Field(min_length=1)
    license: str = Field(min_length=1)
    gated: bool
    confirmed: bool


# ---------------------------------------------------------------------------------- pairs
def _number(v: Any) -> float:
    """An integer or a float (TOML's `0` is as good as `0.0`); a boolean or a string is not."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise _problem(f"must be a number, got {shown(v)}")
    return float(v)


class UserPair(_Table):
    """A `[[pair]]` table of a user's catalog."""

    name: str
    description: str = ""
    shines_on: str = ""
    target: UserFile
    # None: `draft = "mtp"`, the target drafts with its own heads.
    draft: UserFile | None
    draft_max: int = Field(ADAPTIVE_K_MAX, ge=1, le=DRAFT_MAX_LIMIT)
    p_min: float = GenerationConfig.p_min
    context: int = Field(LoadOptions.n_ctx, ge=MIN_CONTEXT)
    gpu_memory_bytes: int = Field(0, ge=0)
    # The target mixes attention with recurrent layers: said to the user.
    hybrid: bool = False
    # The draft has another tokenizer (drafts across tokenizers): optional in every catalog.
    cross_tokenizer: bool = False

    @field_validator("name")
    @classmethod
    def _typed_on_the_command_line(cls, v: str) -> str:
        if not v.strip():
            raise _problem("must not be empty")
        if not PAIR_NAME.match(v):
            raise _problem("must be letters, digits, '.', '_' or '-' (it is typed on the command line)")
        return v

    @field_validator("draft", mode="before")
    @classmethod
    def _table_or_mtp(cls, v: Any) -> Any:
        if isinstance(v, str) and v.strip().lower() == BUILTIN_DRAFT:
            return None
        if not isinstance(v, dict):
            got = f", got {v!r}" if isinstance(v, str) else ""
            raise _problem(f'must be a [pair.draft] table or "mtp" (the target\'s own draft heads){got}')
        return v

    @field_validator("p_min", mode="before")
    @classmethod
    def _probability(cls, v: Any) -> float:
        p = _number(v)
        if not 0.0 <= p < 1.0:
            raise _problem("must be at least 0 and below 1")
        return p


class BuiltinPair(UserPair):
    """The built-in catalog's: every field stated (the description may be empty)."""

    description: str
    shines_on: str
    target: BuiltinFile
    draft: BuiltinFile | None
    draft_max: int = Field(ge=1, le=DRAFT_MAX_LIMIT)
    p_min: float
    context: int = Field(ge=MIN_CONTEXT)
    gpu_memory_bytes: int = Field(ge=1)
    hybrid: bool


# ------------------------------------------------------------------------------- catalogs
class _Catalog(_Table):
    default: str | None = None  # the pair `tandem run` uses without --pair
    include_builtin: bool = True  # false: this file's pairs replace the built-in ones


class UserCatalog(_Catalog):
    pair: list[UserPair] = Field(default_factory=list)


class BuiltinCatalog(_Catalog):
    default: str
    pair: list[BuiltinPair] = Field(default_factory=list)


# -------------------------------------------------------------------------- in one sentence
_TYPES = {
    "string_type": "must be a string",
    "int_type": "must be an integer",
    "bool_type": "must be true or false",
    "float_type": "must be a number",
}


def shown(v: Any) -> str:
    """A value as a message quotes it: its kind, and itself when it is short."""
    kind = {
        str: "a string",
        int: "an integer",
        float: "a number",
        bool: "a boolean",
        list: "a list",
        dict: "a table",
    }
    if isinstance(v, (list, dict)):
        return kind[type(v)]
    return f"{kind.get(type(v), type(v).__name__)} ({v!r})"


@dataclass(frozen=True)
class SchemaProblem:
    """The first error of a catalog's validation, placed: which pair (its index, -1 for the top
    level), which table (None: the pair's own fields, or the top level's), which key, and the
    sentence after the pair's label."""

    pair: int
    table: str | None
    key: str | None
    sentence: str
    label: str


def _unknown(key: str, model: type[BaseModel]) -> str:
    """A field `model` does not have, with the one it most likely meant."""
    close = difflib.get_close_matches(key, list(model.model_fields), n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return f"unknown field {key!r}{hint}"


def first_problem(exc: ValidationError, data: dict[str, Any]) -> SchemaProblem:
    """The first of `exc`'s errors as one sentence, with where it belongs."""
    # (A misspelt field first: the field it was meant to be is reported missing beside it.)
    error = sorted(exc.errors(include_url=False), key=lambda e: e["type"] != "extra_forbidden")[0]
    loc = list(error["loc"])
    if not loc or loc[0] != "pair" or len(loc) < 2 or not isinstance(loc[1], int):
        return _top_level(error, loc)
    i = loc[1]
    raw = data["pair"][i] if isinstance(data.get("pair"), list) and i < len(data["pair"]) else {}
    name = raw.get("name") if isinstance(raw, dict) else None
    label = f"pair {name!r}: " if isinstance(name, str) else f"pair #{i + 1}: "
    rest = [str(p) for p in loc[2:]]
    if not rest:  # the [[pair]] entry itself is not a table
        return SchemaProblem(-1, None, "pair", "'pair' must be a list of [[pair]] tables", "")
    table = rest[0] if len(rest) > 1 else None
    key = rest[-1]
    field = ".".join(rest)
    kind = error["type"]
    if kind == "extra_forbidden":  # (the built-in models have the user ones' fields)
        return SchemaProblem(i, table, key, _unknown(key, UserFile if table else UserPair), label)
    if kind == "missing":
        if table is None and key in ("target", "draft"):
            also = ', or draft = "mtp" for a target with its own draft heads' if key == "draft" else ""
            return SchemaProblem(
                i, None, None, f"field '{key}' is missing (add a [pair.{key}] table{also})", label
            )
        where = f"[pair.{table}]" if table else "[[pair]]"
        return SchemaProblem(i, table, None, f"field '{field}' is missing from this {where} table", label)
    if kind == "model_type":  # a target or a draft that is not a table
        return SchemaProblem(i, None, key, f"field '{key}' must be a [pair.{key}] table", label)
    return SchemaProblem(i, table, key, f"field '{field}' {_rule(error)}", label)


def _top_level(error: ErrorDetails, loc: list[Any]) -> SchemaProblem:
    key = str(loc[0]) if loc else None
    kind = error["type"]
    if kind == "extra_forbidden" and key is not None:
        return SchemaProblem(-1, None, key, _unknown(key, UserCatalog), "")
    if key == "default":
        if kind == "missing":
            sentence = "field 'default' is missing (the built-in catalog must name its default pair)"
            return SchemaProblem(-1, None, None, sentence, "")
        return SchemaProblem(-1, None, key, "field 'default' must be a pair name (a string)", "")
    if key == "include_builtin":
        return SchemaProblem(-1, None, key, "field 'include_builtin' must be true or false", "")
    return SchemaProblem(-1, None, "pair", "'pair' must be a list of [[pair]] tables", "")


def _rule(error: ErrorDetails) -> str:
    """What the value broke, as the rest of a sentence that starts with the field."""
    kind, ctx, value = error["type"], error.get("ctx") or {}, error.get("input")
    if kind == "catalog":
        return str(ctx["message"])
    if kind in _TYPES:
        return f"{_TYPES[kind]}, got {shown(value)}"
    if kind == "greater_than_equal":
        return f"must be at least {ctx['ge']}, got {value}"
    if kind == "less_than_equal":
        return f"must be at most {ctx['le']}"
    if kind == "string_too_short":
        return "must not be empty"
    return str(error["msg"])  # (no other rule is declared: pydantic's own words)
