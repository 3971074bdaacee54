"""`tandem serve` as OpenAI's own Python client sees it: greedy answers are exactly `tandem run`'s,
streamed or not, chat or text; the model list names the pair; the `tandem` extension carries
each token's origin and the drafting stats; a growing chat history is prefilled only where new."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import openai
import pytest

from serve_helpers import serving
from tandem.cli.main import main
from tandem.engine import ModelPair
from tandem.session.options import Options

MESSAGES: list[dict[str, str]] = [
    {"role": "system", "content": "You are a terse assistant."},
    {"role": "user", "content": "List three rivers of Europe."},
]


def tandem_run(capsys: pytest.CaptureFixture[str], target: Path, draft: Path, *args: str) -> dict[str, Any]:
    """`tandem run --json` on the same files, as a user would run it."""
    capsys.readouterr()
    code = main(
        [
            "run",
            "--target",
            str(target),
            "--draft",
            str(draft),
            "--ctx",
            "1024",
            "--threads",
            "1",
            "--json",
            *args,
        ]
    )
    assert code == 0
    out: dict[str, Any] = json.loads(capsys.readouterr().out)
    return out


def client(base: str, **kw: Any) -> openai.OpenAI:
    return openai.OpenAI(base_url=base, api_key=kw.pop("api_key", "unused"), max_retries=0, **kw)


def test_greedy_answers_are_tandem_runs(
    tiny_pair: ModelPair, tiny_target: Path, tiny_draft: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # K fixed on both sides, so that the rounds, and with them each token's origin, are the same
    # (adaptive drafting follows timings, which differ from run to run).
    fixed = ("--no-adaptive", "--draft-max", "4", "-n", "40")
    chat = tandem_run(
        capsys, tiny_target, tiny_draft, *fixed, "--system", MESSAGES[0]["content"], MESSAGES[1]["content"]
    )
    raw = tandem_run(capsys, tiny_target, tiny_draft, *fixed, "--raw", "Once upon a time")
    assert chat["text"] and raw["text"]

    with serving(tiny_pair, options=Options(n_threads=1, adaptive=False, draft_max=4)) as served:
        c = client(served.v1)
        whole = c.chat.completions.create(model="test-pair", messages=MESSAGES, max_tokens=40)  # type: ignore[arg-type]
        assert whole.choices[0].message.content == chat["text"]
        assert whole.choices[0].finish_reason == "length"
        assert whole.usage is not None and whole.usage.completion_tokens == 40

        stream = c.chat.completions.create(
            model="test-pair",
            messages=MESSAGES,
            max_tokens=40,
            stream=True,  # type: ignore[arg-type]
            stream_options={"include_usage": True},
        )
        pieces: list[str] = []
        origins: list[str] = []
        usage: Any = None
        finish = None
        for chunk in stream:
            if chunk.choices:
                pieces.append(chunk.choices[0].delta.content or "")
                finish = chunk.choices[0].finish_reason or finish
                origins += [
                    t["origin"] for t in (chunk.model_extra or {}).get("tandem", {}).get("tokens", [])
                ]
            if chunk.usage is not None:
                usage = chunk.usage
        assert "".join(pieces) == chat["text"]
        assert finish == "length"
        # Every token's origin travels with its chunk, as `tandem run --json` reports them.
        assert origins == [t["origin"] for t in chat["tokens"]]
        assert {"draft", "target"} <= set(origins)  # (the tiny draft agrees about half the time)
        ext = usage.model_extra["tandem"]
        assert ext["mode"] == "speculative" and ext["target_passes"] >= 1
        assert ext["accepted"] <= ext["drafted"]
        assert ext["tokens_per_pass"] == pytest.approx(40 / ext["target_passes"], abs=1e-3)
        assert ext["decode_tokens_per_s"] > 0
        # The second request repeated the first one's prompt: all but its last token was cached.
        assert usage.prompt_tokens_details.cached_tokens == usage.prompt_tokens - 1

        # A stop string cuts the answer where `tandem run --stop` would.
        cut = chat["text"][len(chat["text"]) // 2 :][:6]
        stopped = c.chat.completions.create(model="test-pair", messages=MESSAGES, max_tokens=40, stop=[cut])  # type: ignore[arg-type]
        assert stopped.choices[0].message.content == chat["text"][: chat["text"].index(cut)]
        assert stopped.choices[0].finish_reason == "stop"

        text = c.completions.create(model="test-pair", prompt="Once upon a time", max_tokens=40)
        assert text.choices[0].text == raw["text"]
        streamed = "".join(
            ch.choices[0].text
            for ch in c.completions.create(
                model="test-pair", prompt="Once upon a time", max_tokens=40, stream=True
            )
            if ch.choices
        )
        assert streamed == raw["text"]

        models = c.models.list().data
        assert [m.id for m in models] == ["test-pair"]
        assert models[0].model_extra["tandem"]["draft"] == tiny_draft.name  # type: ignore[index]


def test_sampled_answers_follow_the_seed(tiny_pair: ModelPair) -> None:
    """A seeded sampling request repeats exactly (a fixed K, as `tandem run --seed`); another
    seed gives another answer."""
    with serving(tiny_pair) as served:
        c = client(served.v1)

        def ask(seed: int) -> str:
            r = c.chat.completions.create(
                model="test-pair",
                messages=MESSAGES,
                max_tokens=24,
                temperature=0.9,
                top_p=0.95,  # type: ignore[arg-type]
                seed=seed,
            )
            return r.choices[0].message.content or ""

        first = ask(7)
        assert ask(7) == first
        assert ask(8) != first


def test_a_growing_chat_prefills_only_the_new_turn(tiny_pair: ModelPair) -> None:
    with serving(tiny_pair) as served:
        c = client(served.v1)
        history: list[dict[str, str]] = [{"role": "user", "content": "Hello there."}]
        previous_prompt = 0
        for turn in range(3):
            r = c.chat.completions.create(model="test-pair", messages=history, max_tokens=12)  # type: ignore[arg-type]
            assert r.usage is not None
            cached = r.usage.prompt_tokens_details.cached_tokens  # type: ignore[union-attr]
            # The whole previous exchange was in the cache; only the new turn was read.
            assert cached >= previous_prompt, (turn, cached, previous_prompt)
            previous_prompt = r.usage.prompt_tokens
            history += [
                {"role": "assistant", "content": r.choices[0].message.content or ""},
                {"role": "user", "content": f"And number {turn + 2}?"},
            ]


def test_the_api_key_is_required_when_set(tiny_pair: ModelPair) -> None:
    with serving(tiny_pair, api_key="s3cret") as served:
        with pytest.raises(openai.AuthenticationError, match="API key"):
            client(served.v1, api_key="wrong").models.list()
        assert [m.id for m in client(served.v1, api_key="s3cret").models.list().data] == ["test-pair"]
        # A streamed answer passes the key's check once, then streams (KeyGuard wraps nothing).
        stream = client(served.v1, api_key="s3cret").completions.create(
            model="test-pair", prompt="Hello", max_tokens=6, temperature=0, stream=True
        )
        assert "".join(c.choices[0].text for c in stream if c.choices)
        with pytest.raises(openai.AuthenticationError, match="API key"):
            wrong = client(served.v1, api_key="wrong")
            wrong.completions.create(model="test-pair", prompt="Hello", max_tokens=2)
