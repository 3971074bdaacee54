"""`--drafter mtp` and auto with a target that has its own draft heads (multi-token prediction),
in every command: run, bench, serve's help, models. The tiny random Qwen3.5 with one MTP block
(model_files.tiny_mtp_model) drafts for itself; a tiny llama without heads is refused."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from catalogs import mtp_target, no_heads_target
from tandem.bench.settings import parse_drafters, parse_settings
from tandem.cli.main import main
from tandem.engine import GenerationConfig
from tandem.engine.drafters import registry

ROOT = Path(__file__).resolve().parents[2]
TANDEM = [sys.executable, "-m", "tandem.cli.main"]
PROMPT = "Write a story about the ocean and a lighthouse keeper."
FAST = ["--threads", "1", "--ctx", "512"]


def _run_json(capsys: pytest.CaptureFixture[str], *args: str) -> Any:
    assert main(["run", "--target", str(mtp_target()), "--json", *FAST, *args, PROMPT]) == 0
    return json.loads(capsys.readouterr().out)


def test_run_drafts_with_the_heads_and_the_answer_is_the_target_s(capsys: pytest.CaptureFixture[str]) -> None:
    alone = _run_json(capsys, "--baseline", "-n", "40")
    # (A fixed K: adaptive drafting's schedule follows timings, and may stop drafting early.)
    mtp = _run_json(capsys, "--drafter", "mtp", "--no-adaptive", "-n", "40")
    auto = _run_json(capsys, "-n", "40")
    for out in (mtp, auto):
        assert out["text"] == alone["text"]  # greedy: exactly the target's answer
    assert mtp["config"]["drafter"] == mtp["stats"]["drafter"] == "mtp"
    assert auto["stats"]["drafter"] == "auto"
    stats = mtp["stats"]
    assert stats["drafted"] > 0 and 0 < stats["accepted"] < stats["drafted"]
    # Accepted guesses, corrections: the colours come from the origins, as for any drafter.
    assert {t["origin"] for t in mtp["tokens"]} >= {"draft", "target"}
    assert mtp["memory"]["model_file_bytes"] == mtp_target().stat().st_size


def test_run_says_who_drafts_and_colours_the_tokens(capsys: pytest.CaptureFixture[str]) -> None:
    fixed_k = ["--no-adaptive", "-n", "24"]  # (adaptive K follows timings: it may stop drafting early)
    assert main(["run", "--target", str(mtp_target()), *FAST, *fixed_k, "--color", "always", PROMPT]) == 0
    out, err = capsys.readouterr()
    assert (
        "note: no draft model given: drafting with the target's built-in draft heads (MTP) and prompt lookup"
        in err.splitlines()
    )
    assert "\x1b[32m" in out and "\x1b[33m" in out  # green accepted guesses, yellow corrections
    assert "acceptance" in err.splitlines()[-1]
    # A target without heads, and no draft model: prompt lookup, as before.
    assert main(["run", "--target", str(no_heads_target()), *FAST, "-n", "4", PROMPT]) == 0
    assert "note: no draft model given: drafting with prompt lookup only" in capsys.readouterr().err


def test_mtp_without_heads_is_one_line_before_anything_is_loaded() -> None:
    res = subprocess.run(
        [*TANDEM, "run", "--target", str(no_heads_target()), "--drafter", "mtp", "hello"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert res.returncode == 1 and res.stdout == ""
    # One line, and no loading note before it: the header was read, no weights.
    assert res.stderr.splitlines() == [
        f"tandem: error: {no_heads_target().name} has no built-in draft heads (multi-token prediction "
        "layers): use a draft model (--draft) or prompt lookup (--drafter lookup)"
    ]


def test_drafter_help_names_every_kind(capsys: pytest.CaptureFixture[str]) -> None:
    """`--drafter`'s choices and help come from the registry: every kind, in its own words (and
    `bench --compare` names them all)."""
    for command in ("run", "bench", "serve"):
        with pytest.raises(SystemExit):
            main([command, "--help"])
        text = " ".join(capsys.readouterr().out.split())
        assert "{" + ",".join([registry.AUTO, *registry.names()]) + "}" in text, (
            command
        )  # (the default first)
        for kind in registry.KINDS:
            assert f"{kind.name}: {' '.join(kind.words.help.split())}" in text, (command, kind.name)
        if command == "bench":
            assert ", ".join(registry.choices()) in text


def test_bench_compares_the_heads_with_lookup(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert parse_drafters("mtp, lookup:k=3", "auto") == {"mtp", "lookup"}
    settings = parse_settings("mtp:k=3:p=0.1,auto", GenerationConfig())
    assert [(s.name, s.config.drafter, s.config.k_max) for s in settings] == [
        ("mtp:k=3:p=0.1", "mtp", 3),
        ("auto", "auto", GenerationConfig().k_max),
    ]
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("story: Write a story about the ocean and a lighthouse keeper.\n")
    out = tmp_path / "bench.json"
    args = [
        "bench",
        "--target",
        str(mtp_target()),
        *FAST,
        "--runs",
        "1",
        "-n",
        "16",
        "--prompts",
        str(prompts),
    ]
    # A fixed K: adaptive drafting may measure the tiny model's heads as not worth it and draft
    # nothing, which would leave nothing to check.
    assert main([*args, "--compare", "mtp:k=3,lookup", "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["settings"]["mtp:k=3"]["drafter"] == "mtp" and report["draft"] is None
    mtp = report["overall"]["mtp:k=3"]
    assert mtp["acceptance_rate"] > 0
    assert mtp["identical_output"] is True
    assert mtp["predicted_speedup"] > 0 and mtp["efficiency"] > 0
    capsys.readouterr()
    # Without heads, `--compare mtp` is refused before loading, in one line.
    plain = ["bench", "--target", str(no_heads_target()), "--prompts", str(prompts), "--compare", "mtp"]
    assert main(plain) == 1
    assert "has no built-in draft heads" in capsys.readouterr().err


def test_models_marks_a_model_with_its_own_heads(capsys: pytest.CaptureFixture[str], hf_env: Path) -> None:
    assert main(["models", "--json", str(mtp_target()), str(no_heads_target())]) == 0
    found = {Path(m["path"]).name: m for m in json.loads(capsys.readouterr().out)["models"]}
    assert found[mtp_target().name]["mtp_layers"] == 1 and found[no_heads_target().name]["mtp_layers"] == 0
    assert main(["models", str(mtp_target())]) == 0
    text = capsys.readouterr().out
    (row,) = [line for line in text.splitlines() if mtp_target().name in line and line[:1].isdigit()]
    assert row.rstrip().endswith("built-in")
    assert "built-in: the model's own draft heads (multi-token prediction layers)" in text
    assert "--drafter mtp" in text
