"""The CLI, the app and the benchmark agree: one prompt rule, one way to apply a catalog pair,
one set of defaults, and the numbers on screen are what the engine ran.

Each test pins one of the disagreements the session layer (app/tandem/session) removed."""

from __future__ import annotations

import argparse
import ast
import json
from dataclasses import replace
from pathlib import Path

import model_files
from catalogs import TINY_CATALOG
from cli_child import ROOT, tandem
from source_tree import parse
from tandem.catalog.spec import load_catalog
from tandem.cli.main import build_parser
from tandem.cli.options import given_options
from tandem.engine import ChatMessage, GenerationConfig, LoadOptions, ModelPair, SamplerSettings
from tandem.engine.config import ADAPTIVE_K_MAX, FIXED_K
from tandem.session.options import Options
from tandem.session.prompts import FittingChatPrompt, pair_notes, text_prompt, transcript
from tandem.ui.settings import Settings


# ---------------------------------------------------------------------- one prompt rule
def test_a_model_without_a_chat_template_gets_the_same_transcript_from_run_and_the_app() -> None:
    base_model = model_files.tiny_model("no-template", seed=5, chat_template=False)
    text = "Name three rivers."
    with ModelPair.load(base_model, None, LoadOptions(n_ctx=512, n_threads=1)) as pair:
        assert not pair.has_chat_template()
        expected = pair.raw_prompt(transcript([ChatMessage("user", text)]))
        assert text_prompt(pair, text) == expected  # `tandem run`, the bench and the demo
        chat = FittingChatPrompt([ChatMessage("user", text)], answer_room=64)  # the app's chat
        assert chat(pair) == expected
        # The app says so too, without pointing at a --raw option it does not have.
        (app_note,) = pair_notes(pair, raw_hint=False)
        assert "no chat template" in app_note and "--raw" not in app_note
    res = tandem("run", "--target", str(base_model), "--baseline", "--json", "-n", "4", text)
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["stats"]["prompt_tokens"] == len(expected)
    assert "no chat template" in res.stderr and "transcript" in res.stderr and "--raw" in res.stderr


# ---------------------------------------------------------------------- one way to apply a pair
# (run, chat and the picker applying a pair alike: tests/ui/test_pair_settings.py)


def test_a_pair_s_draft_max_is_an_adaptive_cap_and_a_user_s_choice_wins(distinct_catalog: Path) -> None:
    spec = load_catalog().get("tiny")
    assert Options().generation_config(spec).k_max == 3
    assert Options(draft_max=7).generation_config(spec).k_max == 7
    assert Options(adaptive=False).generation_config(spec).k_max == FIXED_K  # a fixed K is the engine's
    assert Options().load_options(spec).n_ctx == 768 and Options(n_ctx=2048).load_options(spec).n_ctx == 2048


# ---------------------------------------------------------------------- one set of defaults
def test_every_front_end_starts_from_the_engine_s_defaults() -> None:
    sampler = SamplerSettings()
    run = build_parser().parse_args(["run", "--target", "t.gguf", "x"])
    given = given_options(run)
    assert given.chosen() == {"max_tokens": 256} and given.sampler == sampler  # the rest: layered later
    assert Settings().sampler == sampler  # the app
    assert Options().generation_config() == GenerationConfig()
    assert Options().load_options() == LoadOptions()
    assert GenerationConfig().k_max == ADAPTIVE_K_MAX
    assert replace(GenerationConfig(), adaptive=False).k_max == FIXED_K
    seeded = replace(GenerationConfig(), sampler=SamplerSettings(temperature=0.7, seed=1))
    assert seeded.k_max == FIXED_K and not seeded.drafts_adaptively  # the one fixed K of a seeded run


def test_a_catalog_pair_without_settings_gets_the_engine_s_defaults(tmp_path: Path) -> None:
    bare = tmp_path / "bare.toml"
    text = TINY_CATALOG.replace("draft_max = 4\n", "").replace("context = 512\n", "")
    bare.write_text("include_builtin = false\n" + text)
    spec = load_catalog(bare).get("tiny")
    assert spec.context == LoadOptions().n_ctx
    assert spec.draft_max == ADAPTIVE_K_MAX and spec.p_min == GenerationConfig().p_min


# ---------------------------------------------------------------------- what the engine ran
def test_a_seeded_sampling_run_says_it_drafts_a_fixed_k(smollm2_f16: Path, smollm2_q4_1: Path) -> None:
    res = tandem(
        "run",
        "--target",
        str(smollm2_f16),
        "--draft",
        str(smollm2_q4_1),
        "--temp",
        "0.8",
        "--seed",
        "7",
        "-n",
        "8",
        "--json",
        "Hello",
    )
    assert res.returncode == 0, res.stderr
    stats = json.loads(res.stdout)["stats"]
    assert (stats["draft_max"], stats["adaptive"]) == (FIXED_K, False)


# ---------------------------------------------------------------------- structure
def _names(path: Path) -> set[str]:
    tree = parse(path.read_text())
    return {
        n.attr if isinstance(n, ast.Attribute) else n.id
        for n in ast.walk(tree)
        if isinstance(n, (ast.Attribute, ast.Name))
    }


def test_argparse_s_namespace_stays_in_the_cli_s_options_module() -> None:
    app_dir = ROOT / "app" / "tandem"
    users = sorted(str(p.relative_to(ROOT)) for p in app_dir.rglob("*.py") if "Namespace" in _names(p))
    assert users == ["app/tandem/cli/options.py"]
    options = parse((app_dir / "cli" / "options.py").read_text())
    imported = {n.module or "" for n in ast.walk(options) if isinstance(n, ast.ImportFrom)} | {
        a.name for n in ast.walk(options) if isinstance(n, ast.Import) for a in n.names
    }
    assert not any(m.endswith("_cmd") for m in imported)  # no command module
    assert not {"input", "stdin"} & _names(app_dir / "cli" / "options.py")  # no terminal I/O
    assert isinstance(build_parser().parse_args([]), argparse.Namespace)


# ---------------------------------------------------------------------- one runner
def test_no_front_end_runs_the_engine_itself() -> None:
    """The app, the CLI, the benchmark and the server get answers from the session's runner
    (session/runner.py): none calls a pair's `generate` or makes an engine of its own, so each
    gets the same queue, cancelling and failures."""
    app_dir = ROOT / "app" / "tandem"
    front_ends = [p for d in ("ui", "cli", "bench", "server") for p in (app_dir / d).rglob("*.py")]
    engine_names = {"generate", "BatchEngine", "SerialEngine"}
    running = sorted(str(p.relative_to(ROOT)) for p in front_ends if engine_names & _names(p))
    assert running == []
    users = {p.parent.name for p in front_ends if "Runner" in _names(p)}
    assert users == {"ui", "cli", "bench", "server"}
