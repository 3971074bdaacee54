"""Every option declared once (session/options.py), and everything derived from it: each
option with a flag is a flag of the commands, each on the screen is a row of it, each a
request may set is a request field with the same bounds, each a pair sets comes from the
catalog; every one round-trips through the settings file; and one function layers a request
over the settings over the pair over the defaults. Pure logic over the schema: no model."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from tandem.catalog.spec import load_catalog
from tandem.cli.main import build_parser
from tandem.cli.options import given_options
from tandem.engine import TandemError
from tandem.server.schema import ChatCompletionRequest
from tandem.session.options import (
    Options,
    base_type,
    bounds,
    fields_with,
    layered,
    opt,
    optional,
    pair_options,
)
from tandem.ui.screens.settings import FIELDS
from tandem.ui.settings import Settings, load_settings, save_settings

pytestmark = pytest.mark.fast

HI = [{"role": "user", "content": "Hi"}]


def _another(name: str) -> Any:
    """A valid value of the option that is not its default (for round trips)."""
    o, kind, b = opt(name), base_type(name), bounds(name)
    if o.choices:
        default = Options.model_fields[name].default
        return next(v for _, v in o.choices if v != default)
    examples: dict[type, Any] = {
        bool: not Options.model_fields[name].default,
        int: max(2, int(b.get("ge", b.get("gt", 0))) + 1) if name != "n_threads" else 1,
        float: 0.5,
        str: "Be brief.",
        tuple: ("10.0.0.1:50052",) if name == "rpc_servers" else ("END",),
    }
    return examples[kind]


def _parsed(*argv: str) -> Options:
    return given_options(build_parser().parse_args(list(argv)))


def test_every_option_with_a_flag_is_a_flag_of_the_commands_that_take_it() -> None:
    for name, o in fields_with("flag"):
        assert o.flag is not None
        value = _another(name)
        text = ",".join(value) if isinstance(value, tuple) else str(value)
        flag = [o.flag] if isinstance(value, bool) and value else [o.flag, text]
        if isinstance(value, bool) and not value:
            flag = [o.off] if o.off else []
        command = "serve" if o.group != "thinking" else "run"
        extra = ["x"] if command == "run" else []
        given = _parsed(command, "--target", "t.gguf", *flag, *extra)
        assert getattr(given, name) == value, name
    # A flag left out is not chosen: the pair's value or the default applies.
    assert _parsed("serve", "--target", "t.gguf").chosen() == {}
    assert _parsed("run", "--target", "t.gguf", "x").chosen() == {"max_tokens": 256}  # run's own
    # The app's loading flags change its settings for the session.
    assert _parsed("chat", "--ctx", "2048", "--threads", "1").chosen() == {"n_ctx": 2048, "n_threads": 1}


def test_a_bad_flag_is_one_sentence_naming_the_option() -> None:
    with pytest.raises(TandemError, match=r"^K \(draft max\) must be between 0 and 32$"):
        _parsed("run", "--draft-max", "99", "x")
    with pytest.raises(TandemError, match=r"^Top-p must be in \(0, 1\]$"):
        _parsed("run", "--top-p", "0", "x")
    with pytest.raises(TandemError, match=r"^p-min must be in \[0, 1\)$"):
        _parsed("run", "--p-min", "nan", "x")
    with pytest.raises(TandemError, match=r"RPC server 'gpu-box' is not HOST:PORT"):
        _parsed("run", "--rpc", "10.0.0.1:1,gpu-box", "x")


def test_every_option_on_the_screen_is_one_of_its_rows_and_round_trips_through_the_file(
    tmp_path: Path,
) -> None:
    assert [name for name, _ in FIELDS] == [name for name, o in fields_with("screen")]
    path = tmp_path / "settings.toml"
    for name in Options.model_fields:
        chosen = Settings.parse({name: _another(name)})
        save_settings(path, chosen)
        assert load_settings(path) == (chosen, []), name
    everything = Settings.parse({name: _another(name) for name in Options.model_fields})
    save_settings(path, everything)
    assert load_settings(path) == (everything, [])


def test_every_option_a_request_may_set_is_a_request_field_with_the_option_s_bounds() -> None:
    requested = {name for name, _ in fields_with("request")}
    assert requested <= set(ChatCompletionRequest.model_fields)
    assert {"max_tokens", "temperature", "top_p", "top_k", "min_p", "seed", "stop", "exact"} <= requested
    for name in requested:
        value = _another(name)
        body = ChatCompletionRequest.model_validate({"messages": HI, name: value})
        asked = body.request_options(Options())
        assert getattr(asked, name) == value, name
        b = bounds(name)
        too_high = b.get("le", b.get("lt"))
        if too_high is not None:
            with pytest.raises(ValidationError) as refused:
                ChatCompletionRequest.model_validate({"messages": HI, name: too_high + 1})
            assert refused.value.errors()[0]["loc"] == (name,)
    # Left out, a field is the server's: its flags' choices stand.
    server = Options(temperature=0.7, seed=3, stop=("END",))
    body = ChatCompletionRequest.model_validate({"messages": HI, "top_k": 5, "seed": None})
    assert body.request_options(server).chosen() == {
        "temperature": 0.7,
        "seed": 3,
        "stop": ("END",),
        "top_k": 5,
    }


def test_layers_a_request_over_the_settings_over_the_pair_over_the_defaults() -> None:
    spec = load_catalog().get(load_catalog().default)
    assert {name for name, _ in fields_with("pair")} == {"draft_max", "p_min", "n_ctx"}
    from_pair = pair_options(spec)
    assert (from_pair.draft_max, from_pair.p_min, from_pair.n_ctx) == (
        spec.draft_max,
        spec.p_min,
        spec.context,
    )
    assert layered(pair=spec).n_ctx == spec.context  # the pair's over the default
    settings = Options(n_ctx=2048, temperature=0.5)
    request = Options(temperature=0.9)
    o = layered(settings, request, pair=spec)
    assert (o.n_ctx, o.temperature, o.draft_max) == (2048, 0.9, spec.draft_max)
    assert layered(Options(draft_max=3), pair=spec).draft_max == 3  # the user's over the pair's
    # A pair's draft_max caps adaptive drafting; a fixed K stays the engine's.
    assert layered(Options(adaptive=False), pair=spec).draft_max is None
    assert Options(adaptive=False).generation_config(spec).k_max == 5
    # None is never a choice that hides a lower layer's value.
    assert layered(Options(n_ctx=2048), Options(n_ctx=None)).n_ctx == 2048


def test_the_schema_says_each_option_once() -> None:
    for name in Options.model_fields:
        o = opt(name)
        assert o.label and o.hint, name
        if optional(name) and o.screen and base_type(name) in (int, float):
            assert o.unset or name == "max_tokens", f"{name}: what does leaving it empty mean?"
        if o.flag:
            assert o.flag.startswith("--") and (o.metavar or base_type(name) is bool or o.choices), name
