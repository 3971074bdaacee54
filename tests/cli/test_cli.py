"""The `tandem` command as scripts and users run it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

import model_files
from cli_child import ROOT, TANDEM, tandem
from tandem.cli.main import main


def test_run_json_contract(smollm2_f16: Path, smollm2_q4_1: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(
        [
            "run",
            "--target",
            str(smollm2_f16),
            "--draft",
            str(smollm2_q4_1),
            "-n",
            "24",
            "--json",
            "--draft-max",
            "4",
            "Explain gravity in detail.",
        ]
    )
    assert rc == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out) >= {"text", "tokens", "stats"}
    assert out["text"] == "".join(t["text"] for t in out["tokens"])
    assert len(out["tokens"]) == 24
    assert {t["origin"] for t in out["tokens"]} <= {"draft", "target", "bonus"}
    assert all(isinstance(t["id"], int) for t in out["tokens"])
    s = out["stats"]
    for key in (
        "decode_tokens_per_s",
        "prefill_s",
        "acceptance_rate",
        "tokens_per_round",
        "rounds",
        "drafted",
        "accepted",
    ):
        assert key in s
    assert s["decode_tokens_per_s"] > 0 and 0 <= s["acceptance_rate"] <= 1
    assert s["accepted"] <= s["drafted"] and s["tokens_per_round"] == pytest.approx(24 / s["rounds"])
    assert sum(t["origin"] == "draft" for t in out["tokens"]) == s["accepted"]


def test_run_baseline_json(smollm2_f16: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "--target", str(smollm2_f16), "--baseline", "-n", "8", "--json", "Hi"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert {t["origin"] for t in out["tokens"]} == {"target"}
    assert out["stats"]["drafted"] == 0 and out["stats"]["rounds"] == len(out["tokens"])


def test_run_streams_colours_legend_and_stats(
    smollm2_f16: Path, smollm2_q4_1: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert (
        main(
            [
                "run",
                "--target",
                str(smollm2_f16),
                "--draft",
                str(smollm2_q4_1),
                "-n",
                "20",
                "--color",
                "always",
                "Write a story about a cat.",
            ]
        )
        == 0
    )
    captured = capsys.readouterr()
    assert "\x1b[32m" in captured.out  # accepted draft tokens are green
    assert "draft accepted" in captured.err and "target correction" in captured.err
    assert "tok/s" in captured.err and "acceptance" in captured.err and "stop: max tokens" in captured.err


def test_run_with_a_draft_of_another_tokenizer_notes_it_and_drafts(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`tandem run --target gemma.gguf --draft smol.gguf`: the note says it drafts across
    tokenizers, and the answer shows accepted drafts in their colour."""
    gemma, smol = model_files.gemma3_270m(), model_files.smollm2_q4_1()
    args = ["run", "--target", str(gemma), "--draft", str(smol), "--threads", "1", "-n", "32"]
    assert (
        main([*args, "--drafter", "cross", "--no-adaptive", "--color", "always", "Count: 1, 2, 3, 4,"]) == 0
    )
    captured = capsys.readouterr()
    assert "has another tokenizer than gemma-3-270m-Q4_K_M.gguf" in captured.err
    assert "drafts across tokenizers" in captured.err
    assert "\x1b[32m" in captured.out  # accepted draft tokens are green
    assert "cross" in captured.err  # the stats line names who drafted


def test_raw_prompt_and_sampling(
    smollm2_f16: Path, smollm2_q4_1: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = [
        "run",
        "--target",
        str(smollm2_f16),
        "--draft",
        str(smollm2_q4_1),
        "-n",
        "16",
        "--json",
        "--raw",
        "--temp",
        "0.8",
        "--seed",
        "7",
        "Once upon a time",
    ]
    assert main(args) == 0
    first = json.loads(capsys.readouterr().out)["text"]
    assert main(args) == 0
    assert json.loads(capsys.readouterr().out)["text"] == first  # seeded: reproducible


@pytest.mark.parametrize(
    "case",
    [
        "missing",
        "not-gguf",
        "truncated",
        "incompatible",
        "no-draft",
        "empty-prompt",
        "bad-k",
        "unknown-arch",
        "exact-impossible",
    ],
)
def test_bad_input_is_one_line_and_nonzero(
    case: str, smollm2_f16: Path, smollm2_q4_1: Path, tmp_path: Path
) -> None:
    target, draft, prompt = str(smollm2_f16), str(smollm2_q4_1), "hello"
    extra: list[str] = []
    expect = ""
    if case == "missing":
        draft, expect = str(tmp_path / "missing.gguf"), "model file not found"
    elif case == "not-gguf":
        (tmp_path / "notes.gguf").write_text("these are my notes, not a model\n" * 4)
        draft, expect = str(tmp_path / "notes.gguf"), "not a GGUF model file"
    elif case == "truncated":
        draft = str(model_files.truncated_copy(smollm2_q4_1, tmp_path / "cut.gguf", 0.5))
        expect = "truncated"
    elif case == "incompatible":
        draft = str(model_files.tiny_model("word-level-vocab", seed=3, vocab_edit="word-level"))
        expect = "cannot draft for"
    elif case == "no-draft":
        extra, expect = ["--drafter", "model"], "needs a draft model"
    elif case == "empty-prompt":
        prompt, expect = "   ", "prompt is empty"
    elif case == "bad-k":
        extra, expect = ["--draft-max", "99"], "K (draft max) must be between"  # the app's words too
    elif case == "exact-impossible":  # an F16 target: llamafile's sgemm rounds batches its own way
        extra, expect = ["--exact"], "exact output is not possible here: the target has float weight matrices"
    elif case == "unknown-arch":
        target = draft = str(model_files.tiny_model("alien-arch", seed=4, arch="fancy-new-arch"))
        expect = "does not support the 'fancy-new-arch' architecture"
    args = ["run", "--target", target, *(["--draft", draft] if case != "no-draft" else []), *extra, prompt]
    res = tandem(*args)
    assert res.returncode == 1, res.stderr
    assert "Traceback" not in res.stderr
    lines = [line for line in res.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("tandem: error: "), res.stderr
    assert expect in lines[0]
    assert res.stdout == ""


def test_ctrl_c_keeps_the_answer_and_exits_cleanly(smollm2_f16: Path, smollm2_q4_1: Path) -> None:
    proc = subprocess.Popen(
        [
            *TANDEM,
            "run",
            "--target",
            str(smollm2_f16),
            "--draft",
            str(smollm2_q4_1),
            "-n",
            "2000",
            "Write a very long story about the sea.",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=ROOT,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    assert proc.stdout is not None
    first = proc.stdout.read(20)  # wait until the answer is streaming
    time.sleep(0.5)
    proc.send_signal(signal.SIGINT)
    rest, err = proc.communicate(timeout=60)
    out = (first + rest).decode()
    assert proc.returncode == 130
    assert len(out.strip()) >= 20  # everything streamed before Ctrl+C is still there
    assert b"Traceback" not in err
    assert b"stop: cancelled" in err


def test_bench_prints_table_and_writes_json(
    tiny_target: Path, tiny_draft: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("# two prompts\nchat: Once upon a time\ncode: def main():\n")
    out_json = tmp_path / "bench.json"
    chart = tmp_path / "bench.png"
    assert (
        main(
            [
                "bench",
                "--target",
                str(tiny_target),
                "--draft",
                str(tiny_draft),
                "--prompts",
                str(prompts),
                "-n",
                "16",
                "--runs",
                "2",
                "--raw",
                "--compare",
                "model:k=3,model,lookup,auto",
                "--json",
                str(out_json),
                "--chart",
                str(chart),
            ]
        )
        == 0
    )
    table = capsys.readouterr().out
    assert "speedup" in table and "chat" in table and "code" in table and "efficiency" in table
    assert "adaptive vs the best fixed K" in table
    report = json.loads(out_json.read_text())
    assert len(report["prompts"]) == 2
    assert list(report["settings"]) == ["model:k=3", "model", "lookup", "auto"]
    for p in report["prompts"]:
        for s in p["settings"].values():
            assert s["speedup"] > 0 and s["identical_output"] is True  # greedy: same tokens
    for cat in ("chat", "code"):
        for s in report["categories"][cat].values():
            assert s["runs"] == 2 and s["predicted_speedup"] > 0 and 0 <= s["alpha"] <= 1
    assert report["overall"]["model:k=3"]["mean_draft_length"] <= 3
    assert report["costs"]["c"] > 0 and report["costs"]["v"]["4"] >= 1
    assert report["run"]["runs"] == 2
    assert report["costs_measured"] == 3  # at the start, then after each of the two prompts
    # Adaptive settings against the best fixed K: paired runs of the same round, with an interval.
    for cat in ("chat", "code", "overall"):
        vs = report["adaptive_vs_best_fixed"][cat]
        assert vs["best_fixed"] == "model:k=3"
        for name in ("model", "auto"):
            p = vs["paired"][name]
            assert p["runs"] == (4 if cat == "overall" else 2)
            assert 0 < p["low"] <= p["median"] <= p["high"]
    assert "paired" in table
    assert chart.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")


def test_bench_measures_a_pair_of_two_tokenizers(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The costs are timed on each model in its own tokens: the target's ids are not a draft of
    another tokenizer's vocabulary (Gemma 3's 262k tokens into SmolLM2's 49k failed at once)."""
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("chat: Once upon a time\n")
    out_json = tmp_path / "bench.json"
    args = [
        "bench",
        "--target",
        str(model_files.gemma3_270m_as("F16")),
        "--draft",
        str(model_files.smollm2_q4_1()),
    ]
    args += ["--prompts", str(prompts), "-n", "8", "--runs", "1", "--raw", "--compare", "cross,auto"]
    assert main([*args, "--threads", "1", "--json", str(out_json)]) == 0
    report = json.loads(out_json.read_text())
    assert report["costs"]["c"] > 0 and set(report["overall"]) == {"cross", "auto"}
    assert report["overall"]["cross"]["identical_output"] is True


def test_bench_rejects_a_bad_prompt_file(tiny_target: Path, tiny_draft: Path, tmp_path: Path) -> None:
    res = tandem(
        "bench",
        "--target",
        str(tiny_target),
        "--draft",
        str(tiny_draft),
        "--prompts",
        str(tmp_path / "none.txt"),
    )
    assert res.returncode == 1 and "prompt file not found" in res.stderr and "Traceback" not in res.stderr
