"""`tandem serve` with a thinking model (a tiny GGUF carrying Qwen3.5's real chat template), as
OpenAI's own client sees it: reasoning_content apart from the content, streamed or not, the
same as `tandem run --json`; chat_template_kwargs turn thinking off; earlier turns'
reasoning_content is rendered as the template says; bad kwargs are one clear 400."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

import model_files
from run_helpers import TINY
from serve_helpers import request, serving
from tandem.cli.main import main
from tandem.engine import ModelPair
from tandem.session.options import Options

ASK = [{"role": "user", "content": "Hello there"}]
FIXED = Options(n_threads=1, adaptive=False, draft_max=4, max_tokens=24)


@pytest.fixture(scope="module")
def files() -> tuple[Path, Path]:
    return model_files.tiny_thinker(), model_files.tiny_thinker(draft=True)


@pytest.fixture(scope="module")
def thinker(files: tuple[Path, Path]) -> Iterator[ModelPair]:
    pair = ModelPair.load(*files, TINY)
    yield pair
    pair.close()


def client(base: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=base, api_key="unused", max_retries=0)


def tandem_run(capsys: pytest.CaptureFixture[str], files: tuple[Path, Path], *args: str) -> Any:
    capsys.readouterr()
    target, draft = files
    argv = ["run", "--target", str(target), "--draft", str(draft), "--ctx", "1024", "--threads", "1"]
    assert main([*argv, "--no-adaptive", "--draft-max", "4", "-n", "24", "--json", *args]) == 0
    return json.loads(capsys.readouterr().out)


def test_reasoning_content_apart_as_tandem_run_gives_it(
    thinker: ModelPair, files: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    expected = tandem_run(capsys, files, "Hello there")
    with serving(thinker, options=FIXED) as s:
        c = client(s.v1)
        whole = c.chat.completions.create(model="test-pair", messages=ASK)  # type: ignore[arg-type]
        message = whole.choices[0].message
        assert getattr(message, "reasoning_content", None) == expected["reasoning"] != ""
        assert (message.content or "") == expected["text"] == ""
        assert whole.usage is not None and whole.usage.completion_tokens_details is not None
        assert whole.usage.completion_tokens_details.reasoning_tokens == whole.usage.completion_tokens == 24
        reasoning, content = [], []
        for chunk in c.chat.completions.create(model="test-pair", messages=ASK, stream=True):  # type: ignore[call-overload]
            for choice in chunk.choices:
                reasoning.append(getattr(choice.delta, "reasoning_content", None) or "")
                content.append(choice.delta.content or "")
        assert "".join(reasoning) == expected["reasoning"] and "".join(content) == ""


def test_chat_template_kwargs_turn_thinking_off(
    thinker: ModelPair, files: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    expected = tandem_run(capsys, files, "--no-think", "Hello there")
    with serving(thinker, options=FIXED) as s:
        whole = client(s.v1).chat.completions.create(
            model="test-pair",
            messages=ASK,  # type: ignore[arg-type]
            extra_body={"chat_template_kwargs": {"enable_thinking": False}},
        )
    message = whole.choices[0].message
    assert message.content == expected["text"] != "" and getattr(message, "reasoning_content", None) is None
    assert whole.usage is not None and whole.usage.completion_tokens_details is not None
    assert whole.usage.completion_tokens_details.reasoning_tokens == 0
    assert whole.usage.prompt_tokens == expected["stats"]["prompt_tokens"]
    assert whole.model_extra is not None
    assert all(t["part"] == "answer" for t in whole.model_extra["tandem"]["tokens"])


def test_server_no_think_default_and_a_request_that_asks(thinker: ModelPair) -> None:
    with serving(thinker, options=FIXED.updated(think=False)) as s:
        _, off = request(s, "POST", "/v1/chat/completions", {"messages": ASK})
        body = {"messages": ASK, "chat_template_kwargs": {"enable_thinking": True}}
        _, on = request(s, "POST", "/v1/chat/completions", body)
    assert "reasoning_content" not in off["choices"][0]["message"]
    assert on["choices"][0]["message"]["reasoning_content"]


def history(reasoning: str | None) -> list[dict[str, Any]]:
    answer: dict[str, Any] = {"role": "assistant", "content": "Hi!"}
    if reasoning is not None:
        answer["reasoning_content"] = reasoning
    return [{"role": "user", "content": "Hello"}, answer, {"role": "user", "content": "And now?"}]


def test_earlier_reasoning_is_rendered_as_the_template_says(thinker: ModelPair) -> None:
    thought = "The user greets me; I greet back, briefly and kindly."
    with serving(thinker, options=FIXED) as s:
        prompts = [
            request(s, "POST", "/v1/chat/completions", {"messages": history(r), "max_tokens": 1})[1]
            for r in (None, thought)
        ]
    # Qwen3.5's template drops the reasoning of turns before the last question.
    assert prompts[0]["usage"]["prompt_tokens"] == prompts[1]["usage"]["prompt_tokens"]
    laguna = model_files.tiny_thinker("poolside-Laguna-XS.2")
    with ModelPair.load(laguna, None, TINY) as pair, serving(pair, options=FIXED) as s:
        kept = [
            request(s, "POST", "/v1/chat/completions", {"messages": history(r), "max_tokens": 1})[1]
            for r in (None, thought)
        ]
    # Laguna's keeps it: the prompt grows by the reasoning and its tags.
    assert kept[1]["usage"]["prompt_tokens"] > kept[0]["usage"]["prompt_tokens"] + 10


@pytest.mark.parametrize(
    ("kwargs", "says"),
    [
        ({"enable_thinking": {"deep": True}}, "'enable_thinking' must be a string, number, boolean or null"),
        ({"messages": "x"}, "'messages' is set by the server and cannot be given"),
        # A template's own function, which a variable would hide (its refusals would not happen).
        ({"raise_exception": "x"}, "'raise_exception' is set by the server and cannot be given"),
        ({"tools": "[]"}, "'tools' (function calling) are not supported by tandem serve"),
        ({"bad name": 1}, "'bad name' is not a variable name"),
        ({f"k{i}": i for i in range(17)}, "at most 16 variables"),
        ({"x": "y" * 2000}, "'x' is longer than 1024 characters"),
        ([1, 2], "must be a JSON object of template variables"),
    ],
)
def test_bad_chat_template_kwargs_are_one_line(thinker: ModelPair, kwargs: Any, says: str) -> None:
    with serving(thinker, options=FIXED) as s:
        status, body = request(
            s, "POST", "/v1/chat/completions", {"messages": ASK, "chat_template_kwargs": kwargs}
        )
    assert status == 400
    message = body["error"]["message"]
    assert says in message and "\n" not in message and body["error"]["param"] == "chat_template_kwargs"
