"""Every option a user sets, declared once.

`Options` is a pydantic model: each field's type, bounds and default are the field's, and its
`Opt` metadata says the rest (its label, its help, its flag, whether the settings screen shows
it, whether a server request or a catalog pair may set it). The CLI's flags (cli/options.py),
the app's settings screen and file (ui/settings.py, ui/screens/settings.py), the server's
request fields (server/schema.py) and a catalog pair's defaults are all derived from it, so a
new option is one field here.

A value left out is "not chosen". `layered` decides what a generation runs with: a request
over the user's settings over the pair's over the defaults, in one place.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from types import UnionType
from typing import TYPE_CHECKING, Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, ValidationError
from pydantic.fields import FieldInfo

from tandem.engine.config import (
    ADAPTIVE_K_MAX,
    DRAFT_MAX_LIMIT,
    FIXED_K,
    MIN_CONTEXT,
    RPC_PORT_DEFAULT,
    GenerationConfig,
    LoadOptions,
    check_rpc_server,
    check_stops,
)
from tandem.engine.drafters import registry
from tandem.engine.errors import TandemError
from tandem.engine.sampling import SamplerSettings

if TYPE_CHECKING:
    from typing_extensions import Self  # (typing's from Python 3.11)

    from tandem.catalog.spec import PairSpec

Group = Literal["models", "generation", "thinking"]


@dataclass(frozen=True)
class Opt:
    """What an option is to people, beside its type and bounds."""

    label: str  # its name on the settings screen and in error sentences ("K (draft max)")
    hint: str  # the settings screen's line beside it (and the CLI's help, unless `help` is given)
    help: str = ""
    flag: str | None = None  # its command-line flag; None: none
    short: str | None = None  # a one-letter flag beside it ("-n")
    metavar: str | None = None
    off: str | None = None  # the flag that turns a switch off ("--no-adaptive")
    off_help: str = ""
    group: Group = "generation"
    screen: bool = True  # shown on the app's settings screen
    request: bool = False  # a server request may set it (an OpenAI field of the same name)
    pair: str | None = None  # the catalog pair's field that sets it ("context" for n_ctx)
    unset: str = ""  # what leaving it out means ("the pair's, else 4096"); "": it cannot be left out
    rule: str = ""  # what a bad value is told, where the bounds do not say it well
    choices: tuple[tuple[str, object], ...] = ()  # (label, value): a select on the screen
    reload: bool = False  # applies when the pair is next loaded
    # A list typed as one line ("a,b"), split at commas: the screen's and the CLI's form.
    commas: bool = False


def _tuple(v: Any) -> Any:
    """A list (TOML, JSON) as a tuple; anything else as it is, for the type check to refuse."""
    if isinstance(v, list):
        return tuple(v)
    return v


def _listed(v: Any) -> Any:
    """A list, or one line split at commas ("a:1, b:2": a flag, the screen, an older file)."""
    if isinstance(v, str):
        return tuple(s.strip() for s in v.split(",") if s.strip())
    return _tuple(v)


def _stops(v: Any) -> Any:
    if v is not None and not isinstance(v, (str, list, tuple)):
        raise ValueError("must be a string or a list of strings")
    return (v,) if isinstance(v, str) else _tuple(v)


def _checked_stops(v: tuple[str, ...] | None) -> tuple[str, ...] | None:
    if v is not None:
        check_stops(v)  # (ValueError: one sentence)
    return v


def _checked_servers(v: tuple[str, ...]) -> tuple[str, ...]:
    for server in v or ():
        try:
            check_rpc_server(server)
        except TandemError as exc:
            raise ValueError(str(exc)) from None
    return v


def _checked_drafter(v: str) -> str:
    try:
        registry.check_choice(v)
    except TandemError as exc:
        raise ValueError(str(exc)) from None
    return v


_DRAFTERS = tuple(
    (f"{registry.AUTO} (the fastest)" if name == registry.AUTO else registry.label(name), name)
    for name in (registry.AUTO, *registry.names())
)
_SAMPLER = SamplerSettings()
_LOAD = LoadOptions()


class Options(BaseModel):
    """The options of one generation and of loading its pair. None: not chosen."""

    model_config = ConfigDict(frozen=True, strict=True, extra="forbid")

    # Declared as a table, one option to a few lines (the formatter would give each argument a
    # line of its own). Opt(label, screen hint, CLI help if other than the hint, ...).
    # fmt: off
    # ---------------------------------------------------------------- generation
    draft_max: Annotated[int | None, Field(ge=0, le=DRAFT_MAX_LIMIT), Opt(
        "K (draft max)", f"most guesses per round, 0..{DRAFT_MAX_LIMIT}",
        f"most tokens drafted per round, max {DRAFT_MAX_LIMIT}: adaptive drafting picks 0..K each round; "
        "with --no-adaptive, or a --seed when sampling, exactly K",
        flag="--draft-max", metavar="K", pair="draft_max",
        unset=f"the pair's, else {ADAPTIVE_K_MAX} adaptive / {FIXED_K} fixed")] = None
    adaptive: Annotated[bool, Opt(
        "Adaptive drafting", "on: K chosen each round (≤ K max); off: always K",
        "draft exactly K tokens every round instead of choosing K from measured speed",
        off="--no-adaptive")] = True
    exact: Annotated[bool | None, Opt(
        "Exact output", "bit-identical to the target alone's: wherever possible (CPU), required, or off",
        "require output bit-identical to the target alone's: verified rows are computed as the target "
        "computes them one at a time (CPU, quantized weights; K at most 2 where the weights are "
        "repacked); refused, saying why, where that is not possible",
        flag="--exact", off="--no-exact", request=True, unset="exact wherever the target allows it",
        off_help="verify with llama.cpp's fastest kernels: the output may differ from the target "
        "alone's at near-ties (its batched rows round differently)",
        choices=(("wherever possible", None), ("required", True), ("off", False)))] = None
    drafter: Annotated[str, AfterValidator(_checked_drafter), Opt(
        "Drafter", f"one kind, or {registry.AUTO}: the fastest the pair offers, each round",
        f"who drafts: {registry.help_text()}", flag="--drafter", choices=_DRAFTERS)] = registry.AUTO
    p_min: Annotated[float | None, Field(ge=0.0, lt=1.0, allow_inf_nan=False), Opt(
        "p-min", "stop drafting when the draft's confidence drops below P", flag="--p-min", metavar="P",
        pair="p_min", screen=False, unset=f"the pair's, else {GenerationConfig.p_min}")] = None
    temperature: Annotated[float, Field(ge=0.0, le=2.0, allow_inf_nan=False), Opt(
        "Temperature", "0 = greedy: the output is then exactly reproducible", "temperature; 0 = greedy",
        flag="--temp", metavar="T", request=True)] = _SAMPLER.temperature
    top_p: Annotated[float, Field(gt=0.0, le=1.0, allow_inf_nan=False), Opt(
        "Top-p", "nucleus sampling, (0, 1]; 1 = off", "top-p when sampling; 1 = off",
        flag="--top-p", metavar="P", request=True)] = _SAMPLER.top_p
    top_k: Annotated[int, Field(ge=0), Opt(
        "Top-k", "0 = off", "top-k when sampling; 0 = off", flag="--top-k", metavar="K", request=True,
        rule="must be 0 (off) or positive")] = _SAMPLER.top_k
    min_p: Annotated[float, Field(ge=0.0, lt=1.0, allow_inf_nan=False), Opt(
        "Min-p", "[0, 1); 0 = off", "min-p when sampling; 0 = off",
        flag="--min-p", metavar="P", request=True)] = _SAMPLER.min_p
    seed: Annotated[int | None, Opt(
        "Seed", "a seeded sampling run repeats exactly", "random seed for sampling",
        flag="--seed", metavar="S", request=True, unset="random")] = None
    max_tokens: Annotated[int | None, Field(ge=1), Opt(
        "Max tokens", "longest answer", "most tokens to generate",
        flag="--max-tokens", short="-n", metavar="N", request=True)] = None
    stop: Annotated[tuple[str, ...], BeforeValidator(_stops), AfterValidator(_checked_stops), Opt(
        "Stop", "stop when this text appears", "stop when this text appears (repeatable)",
        flag="--stop", metavar="TEXT", screen=False, request=True)] = ()
    # ---------------------------------------------------------------- loading
    n_ctx: Annotated[int | None, Field(ge=MIN_CONTEXT), Opt(
        "Context size", "tokens", "context size in tokens", flag="--ctx", metavar="N", group="models",
        pair="context", unset=f"the pair's, else {_LOAD.n_ctx}", reload=True)] = None
    n_gpu_layers: Annotated[int, Field(ge=-1), Opt(
        "GPU layers", "-1 = all, 0 = CPU only", "layers to put on the GPU: -1 all, 0 none",
        flag="--gpu-layers", metavar="N", group="models", reload=True,
        rule="must be -1 (all), 0 (none) or a positive number")] = _LOAD.n_gpu_layers
    n_threads: Annotated[int | None, Field(ge=1), Opt(
        "CPU threads", "threads for the CPU", "CPU threads, at most the logical CPUs",
        flag="--threads", metavar="N", group="models", reload=True,
        unset="from the CPU count: all up to 4, half above that, at most 8")] = None
    rpc_servers: Annotated[tuple[str, ...], BeforeValidator(_listed), AfterValidator(_checked_servers), Opt(
        "RPC servers",
        "HOST:PORT,...: the target's layers run there (rpc-server, trusted networks only); empty = here",
        f"spread the target's layers over these llama.cpp rpc-server hosts (port {RPC_PORT_DEFAULT} by "
        "default there); the draft stays on this machine. rpc-server has no authentication: trusted "
        "networks only",
        flag="--rpc", metavar="HOST:PORT[,HOST:PORT...]", group="models", reload=True, commas=True,
        unset="none: the target runs on this machine")] = ()
    # ---------------------------------------------------------------- the chat
    think: Annotated[bool | None, Opt(
        "Thinking", "reasoning models: think before answering? F5 switches one chat",
        "a thinking model reasons before it answers, where its chat template can be told to",
        flag="--think", off="--no-think", group="thinking", unset="the model's own choice",
        off_help="a thinking model answers without reasoning (enable_thinking=false); one whose "
        "template cannot be told still reasons, and its reasoning is hidden",
        choices=(("the model's default", None), ("on", True), ("off", False)))] = None
    system_prompt: Annotated[str | None, Opt(
        "System prompt", "for new chats (Ctrl+G edits the current one)")] = None
    # fmt: on

    # ---------------------------------------------------------------- reading
    @classmethod
    def parse(cls, values: Mapping[str, Any]) -> Self:
        """Options from `values`; TandemError says what is wrong with the first bad one, in one
        sentence (the same one the CLI, the screen and the settings file show)."""
        try:
            return cls.model_validate(dict(values))
        except ValidationError as exc:
            raise TandemError(sentence(exc)) from None

    def updated(self, **changes: Any) -> Self:
        """These options with `changes` (checked), keeping which were chosen."""
        return self.parse({**self.model_dump(include=self.model_fields_set), **changes})

    def chosen(self) -> dict[str, Any]:
        """The values this layer sets: those given, None excepted (None is never a choice that
        hides another layer's: it means "not chosen" or the default)."""
        return {k: v for k, v in self.model_dump(include=self.model_fields_set).items() if v is not None}

    def validate_all(self) -> None:
        """TandemError when the values, fine alone, are not together (or not on this machine:
        more threads than CPUs)."""
        self.generation_config().validate()
        self.load_options().validate()

    # ---------------------------------------------------------------- what the engine gets
    @property
    def sampler(self) -> SamplerSettings:
        return SamplerSettings(self.temperature, self.top_k, self.top_p, self.min_p, self.seed)

    @property
    def greedy(self) -> bool:
        return self.sampler.greedy

    def generation_config(self, pair: PairSpec | None = None) -> GenerationConfig:
        o = layered(self, pair=pair) if pair is not None else self
        cfg = GenerationConfig(
            adaptive=o.adaptive,
            drafter=o.drafter,
            sampler=o.sampler,
            stop=o.stop,
            exact=o.exact,
            draft_max=o.draft_max,
        )
        if o.max_tokens is not None:
            cfg = replace(cfg, max_tokens=o.max_tokens)
        return cfg if o.p_min is None else replace(cfg, p_min=o.p_min)

    def load_options(self, pair: PairSpec | None = None) -> LoadOptions:
        o = layered(self, pair=pair) if pair is not None else self
        default = LoadOptions()
        return replace(
            default,
            n_ctx=default.n_ctx if o.n_ctx is None else o.n_ctx,
            n_threads=o.n_threads,
            n_gpu_layers=o.n_gpu_layers,
            rpc_servers=o.rpc_servers,
        )

    def needs_reload(self, other: Options, pair: PairSpec | None = None) -> bool:
        """Whether going from `other` to these options changes how models are loaded."""
        return self.load_options(pair) != other.load_options(pair)


# ---------------------------------------------------------------------------------- layers
def pair_options(pair: PairSpec) -> Options:
    """A catalog pair's settings as a layer of options (its `context` is n_ctx, ...)."""
    return Options.model_validate({name: getattr(pair, str(o.pair)) for name, o in fields_with("pair")})


def layered(*layers: Options, pair: PairSpec | None = None) -> Options:
    """What a generation runs with: each option from the last layer that chose it, else the
    catalog pair's, else the default. The layers go from the user's settings (or the server's
    flags) to a request. A pair's draft_max is the most its adaptive drafting may draft: a fixed
    K, unless a layer chose one, stays the engine's (FIXED_K)."""
    values: dict[str, Any] = {}
    for layer in layers:
        values.update(layer.chosen())
    result = type(layers[0]).model_validate(values) if layers else Options.model_validate(values)
    if pair is None:
        return result
    from_pair = {k: v for k, v in pair_options(pair).chosen().items() if k not in values}
    if not result.generation_config().drafts_adaptively:
        from_pair.pop("draft_max", None)
    return type(result).model_validate({**values, **from_pair}) if from_pair else result


# ---------------------------------------------------------------------------------- the schema
def opt(name: str) -> Opt:
    return next(m for m in Options.model_fields[name].metadata if isinstance(m, Opt))


def fields_with(what: str) -> list[tuple[str, Opt]]:
    """The options whose `Opt.<what>` is set, in declaration order."""
    return [(name, opt(name)) for name in Options.model_fields if getattr(opt(name), what)]


def base_type(name: str) -> type:
    """The option's type without None: int, float, bool, str or tuple."""
    kind = Options.model_fields[name].annotation
    if get_origin(kind) in (Union, UnionType):  # (X | None)
        kind = next(a for a in get_args(kind) if a is not type(None))
    return tuple if get_origin(kind) is tuple else kind  # type: ignore[return-value]


def optional(name: str) -> bool:
    """Whether the option may be left out (None: not chosen)."""
    return type(None) in get_args(Options.model_fields[name].annotation)


def request_fields() -> dict[str, Any]:
    """The options a server request may set, as fields for a request model (server/schema.py):
    the same types, bounds and checks, each optional (left out: the server's)."""
    fields: dict[str, Any] = {}
    for name, _ in fields_with("request"):
        info = Options.model_fields[name]
        kind = info.annotation if optional(name) else Union[info.annotation, None]  # noqa: UP007
        checks = [m for m in info.metadata if not isinstance(m, Opt)]
        params = (kind, *checks)
        typed = Annotated[params] if checks else kind  # type: ignore[valid-type]
        fields[name] = (typed, FieldInfo(default=None))
    return fields


def from_request(values: Mapping[str, Any]) -> Options:
    """A request's fields (already checked by its model) as a layer of options."""
    return Options.model_validate({k: v for k, v in values.items() if v is not None})


# ---------------------------------------------------------------------------------- sentences
_TYPE_WORDS = {int: "a whole number", float: "a number", bool: "true or false", str: "text", tuple: "a list"}


def bounds(name: str) -> dict[str, Any]:
    """The option's bounds as Field's keywords ({"ge": 0, "le": 32})."""
    found: dict[str, Any] = {}
    for m in Options.model_fields[name].metadata:
        for key in ("ge", "gt", "le", "lt"):
            if getattr(m, key, None) is not None:
                found[key] = getattr(m, key)
    return found


def rule(name: str) -> str:
    """What a good value is ("must be between 0 and 32"), from the bounds unless said."""
    said = opt(name).rule
    if said:
        return said
    b = bounds(name)
    low, high = b.get("ge", b.get("gt")), b.get("le", b.get("lt"))
    if low is None:
        return f"must be {_TYPE_WORDS.get(base_type(name), 'a value')}"
    if high is None:
        return f"must be at least {low}" if "ge" in b else f"must be above {low}"
    if base_type(name) is int:
        return f"must be between {low} and {high}"
    return f"must be in {'[' if 'ge' in b else '('}{low:g}, {high:g}{']' if 'le' in b else ')'}"


def sentence(exc: ValidationError) -> str:
    """The first problem of `exc`, said as one sentence naming the option."""
    error = exc.errors()[0]
    name = str(error["loc"][0]) if error["loc"] else ""
    if name not in Options.model_fields:
        return f"unknown option '{name}'" if error["type"] == "extra_forbidden" else error["msg"]
    if error["type"] == "value_error":  # a check of its own (stop strings, drafters, servers)
        return str(error["ctx"]["error"]) if "ctx" in error else error["msg"]
    label = opt(name).label
    if error["type"].endswith("_type") and error["type"] != "finite_number":
        return f"{label} must be {_TYPE_WORDS.get(base_type(name), 'a value')}"
    return f"{label} {rule(name)}"
