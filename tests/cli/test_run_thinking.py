"""`tandem run` with thinking models (tiny random-weight GGUFs carrying real chat templates):
the reasoning apart from the answer in --json and on the terminal, --think/--no-think, and the
notes for templates that cannot switch or take no system prompt."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

import model_files
from tandem.cli.main import main
from tandem.engine import ChatMessage, LoadOptions, ModelPair

FIXED = ("--threads", "1", "--ctx", "1024", "--no-adaptive", "--draft-max", "4", "-n", "24")


def run(
    capsys: pytest.CaptureFixture[str], target: Path, *args: str, draft: Path | None = None
) -> tuple[str, str]:
    capsys.readouterr()
    models = ["--target", str(target), *(["--draft", str(draft)] if draft else [])]
    assert main(["run", *models, *FIXED, *args]) == 0
    out = capsys.readouterr()
    return out.out, out.err


def run_json(capsys: pytest.CaptureFixture[str], target: Path, *args: str, draft: Path | None = None) -> Any:
    out, _ = run(capsys, target, "--json", *args, draft=draft)
    return json.loads(out)


@pytest.fixture(scope="module")
def qwen35() -> tuple[Path, Path]:
    return model_files.tiny_thinker(), model_files.tiny_thinker(draft=True)


def test_json_has_the_reasoning_beside_the_text(
    capsys: pytest.CaptureFixture[str], qwen35: tuple[Path, Path]
) -> None:
    target, draft = qwen35
    result = run_json(capsys, target, "Hello", draft=draft)
    # Qwen3.5's prompt opens <think>, and a random model never closes it: all reasoning.
    assert result["reasoning"] and result["text"] == ""
    assert all(t["part"] == "reasoning" and t["text"] == "" for t in result["tokens"])
    assert "".join(t.get("reasoning", "") for t in result["tokens"]) == result["reasoning"]
    stats = result["stats"]
    assert stats["reasoning"]["tokens"] == stats["generated"] == len(result["tokens"])
    assert stats["reasoning"]["accepted"] == sum(t["origin"] == "draft" for t in result["tokens"])
    assert stats["answer"]["tokens"] == 0 and result["config"]["think"] is None


def test_no_think_changes_the_prompt_as_the_template_says(
    capsys: pytest.CaptureFixture[str], qwen35: tuple[Path, Path]
) -> None:
    target, draft = qwen35
    on = run_json(capsys, target, "--think", "Hello", draft=draft)
    off = run_json(capsys, target, "--no-think", "Hello", draft=draft)
    assert off["reasoning"] == "" and off["text"] and off["config"]["think"] is False
    assert all(t["part"] == "answer" for t in off["tokens"])
    with ModelPair.load(target, None, LoadOptions(n_ctx=1024, n_threads=1)) as pair:
        messages = [ChatMessage("user", "Hello")]
        with_thinking, without = pair.chat(messages, think=True), pair.chat(messages, think=False)
    assert without.text == with_thinking.text.removesuffix("<think>\n") + "<think>\n\n</think>\n\n"
    assert on["stats"]["prompt_tokens"] == len(with_thinking.tokens)
    assert off["stats"]["prompt_tokens"] == len(without.tokens)


def test_terminal_shows_the_reasoning_apart(
    capsys: pytest.CaptureFixture[str], qwen35: tuple[Path, Path]
) -> None:
    target, draft = qwen35
    reasoning = run_json(capsys, target, "Hello", draft=draft)["reasoning"]
    out, err = run(capsys, target, "--color", "always", "Hello", draft=draft)
    assert out.strip() == ""  # standard output holds the answer alone: there is none
    assert re.search(r"\x1b\[2[;m]", err) and reasoning in re.sub(r"\x1b\[[0-9;]*m", "", err)  # dimmed
    plain = run(capsys, target, "--color", "never", "Hello", draft=draft)[1]
    assert reasoning in plain and "reasoning 24 tok" in plain
    answer = run_json(capsys, target, "--no-think", "Hello", draft=draft)["text"]
    out, err = run(capsys, target, "--no-think", "--color", "never", "Hello", draft=draft)
    assert out == answer + "\n" and answer not in err


def test_no_switch_hides_the_reasoning(capsys: pytest.CaptureFixture[str]) -> None:
    r1 = model_files.tiny_thinker("deepseek-ai-DeepSeek-R1-Distill-Llama-8B")
    result = run_json(capsys, r1, "--no-think", "Hello")
    assert result["reasoning"] and result["text"] == ""  # it still thinks
    out, err = run(capsys, r1, "--no-think", "--color", "never", "Hello")
    assert "has no thinking switch: it still thinks, and its reasoning is hidden" in err
    assert out.strip() == "" and result["reasoning"] not in err


def test_template_without_a_system_role(capsys: pytest.CaptureFixture[str]) -> None:
    gemma = model_files.tiny_thinker("google-gemma-2-2b-it")
    _, err = run(capsys, gemma, "--system", "Be brief.", "Hello")
    assert "chat template takes no system prompt: it was put at the start of the first message" in err
    assert "Traceback" not in err
