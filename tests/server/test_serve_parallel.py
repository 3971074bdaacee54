"""`tandem serve --parallel N`: several clients answered at once in one batch (engine/decoding/batch.py),
each getting the answer it gets alone; more than N wait their turn; what a parallel sequence
cannot do is a 400 with the reason."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import openai
import pytest

from serve_helpers import request, serving, streamed_text, wait_idle
from tandem.engine import GenerationConfig, LoadOptions, ModelPair
from tandem.server.slot import Mailbox
from tandem.session.collect import collect
from tandem.session.prompts import chat_prompt, messages_for

QUESTIONS = [f"Name {i + 2} animals that live in the sea, and say one thing about each." for i in range(6)]


@pytest.fixture(scope="module")
def pair4(smollm2_f16: Path, smollm2_q4_1: Path) -> Iterator[ModelPair]:
    pair = ModelPair.load(smollm2_f16, smollm2_q4_1, LoadOptions(n_ctx=1024, n_seq=4))
    yield pair
    pair.close()


def test_six_clients_on_four_sequences_get_the_target_s_answers(
    pair4: ModelPair, smollm2_pair: ModelPair
) -> None:
    want = {
        q: collect(
            smollm2_pair.generate(
                chat_prompt(smollm2_pair, messages_for(q)), GenerationConfig(max_tokens=24), speculative=False
            )
        ).text
        for q in QUESTIONS
    }
    with serving(pair4, parallel=4) as served:
        c = openai.OpenAI(base_url=served.v1, api_key="x", max_retries=0)

        with ThreadPoolExecutor(6) as pool:
            got = dict(zip(QUESTIONS, pool.map(lambda q: streamed_text(c, q, 24), QUESTIONS), strict=True))
        assert got == want
        wait_idle(served)
        status, health = request(served, "GET", "/health")
        assert status == 200 and health["parallel"] == 4
        assert health["answers"].get("max_tokens", 0) + health["answers"].get("eog", 0) == 6
        # What a parallel sequence cannot do: one sentence, a 400.
        status, body = request(
            served,
            "POST",
            "/v1/chat/completions",
            {"messages": [{"role": "user", "content": "hi"}], "exact": True, "max_tokens": 4},
        )
        assert status == 400 and "parallel sequences" in body["error"]["message"]
        # The kinds it drafts with are those of the batched engine (what it says it offers).
        status, models = request(served, "GET", "/v1/models")
        assert status == 200 and models["data"][0]["tandem"]["drafters"] == ["model", "lookup"]


def test_past_the_sequences_and_the_queue_a_429_says_so(pair4: ModelPair) -> None:
    with serving(pair4, parallel=4, max_waiting=1) as served:
        c = openai.OpenAI(base_url=served.v1, api_key="x", max_retries=0)

        def ask(q: str) -> str:
            try:
                c.chat.completions.create(
                    model="test-pair", messages=[{"role": "user", "content": q}], max_tokens=160
                )
            except openai.RateLimitError as exc:
                return f"429: {exc.message}"
            return "ok"

        with ThreadPoolExecutor(8) as pool:
            got = list(pool.map(ask, QUESTIONS + QUESTIONS[:2]))
        refused = [g for g in got if g.startswith("429")]
        assert got.count("ok") >= 5 and refused  # 4 running, 1 waiting; the rest told to retry
        assert all("4 requests are being answered" in g for g in refused)
        wait_idle(served)


def test_the_mailbox_hands_a_round_over_with_one_wakeup() -> None:
    """Everything the engine's thread posts before the loop runs is run in order, after one
    wakeup of the loop; a call that fails is reported to the loop and the others still run."""
    loop = asyncio.new_event_loop()
    wakeups = 0
    handed = loop.call_soon_threadsafe

    def counted(*args: Any, **kw: Any) -> Any:
        nonlocal wakeups
        wakeups += 1
        return handed(*args, **kw)

    loop.call_soon_threadsafe = counted  # type: ignore[method-assign,assignment]
    reported: list[BaseException] = []
    loop.set_exception_handler(lambda _loop, context: reported.append(context["exception"]))
    box = Mailbox(loop)
    got: list[int] = []

    def fails() -> None:
        raise ValueError("a broken callback")

    def engine_round() -> None:
        for i in range(20):
            box.post(got.append, i)
        box.post(fails)
        box.post(got.append, 20)

    try:
        thread = threading.Thread(target=engine_round)
        thread.start()
        thread.join()
        loop.run_until_complete(asyncio.sleep(0.01))
        assert got == list(range(21))
        assert wakeups == 1
        assert [str(e) for e in reported] == ["a broken callback"]
        box.post(got.append, 21)  # the next round wakes the loop again
        loop.run_until_complete(asyncio.sleep(0.01))
        assert got[-1] == 21 and wakeups == 2
    finally:
        loop.close()
