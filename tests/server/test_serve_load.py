"""`tandem serve` under load and when clients misbehave: many clients at once, a full queue, a
client that leaves mid-answer or while it waits; the engine is free again each time and the next
answer is right."""

from __future__ import annotations

import json
import socket
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import openai

from serve_helpers import Served, request, serving, streamed_text, wait_idle
from tandem.engine import GenerationConfig, ModelPair
from tandem.session.collect import collect
from tandem.session.prompts import chat_prompt, messages_for


def expected(pair: ModelPair, text: str, max_tokens: int) -> str:
    """The engine's own greedy answer (the server is idle while this runs)."""
    prompt = chat_prompt(pair, messages_for(text))
    return collect(pair.generate(prompt, GenerationConfig(max_tokens=max_tokens))).text


def test_twenty_concurrent_clients_all_get_their_answer(tiny_pair: ModelPair) -> None:
    prompts = [f"Question number {i}: what comes next?" for i in range(20)]
    want = {p: expected(tiny_pair, p, 16) for p in prompts}
    with serving(tiny_pair) as served:
        c = openai.OpenAI(base_url=served.v1, api_key="x", max_retries=0)

        def ask(p: str) -> str:
            if hash(p) % 2:
                r = c.chat.completions.create(
                    model="test-pair", messages=[{"role": "user", "content": p}], max_tokens=16
                )
                return r.choices[0].message.content or ""
            return streamed_text(c, p, 16)

        with ThreadPoolExecutor(20) as pool:
            got = dict(zip(prompts, pool.map(ask, prompts), strict=True))
        assert got == want
        wait_idle(served)


def _open_stream(served: Served, body: dict[str, Any]) -> socket.socket:
    """A raw HTTP request whose answer we read a little of, then drop (a client that leaves)."""
    s = socket.create_connection(("127.0.0.1", served.port))
    data = json.dumps(body).encode()
    s.sendall(
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        + f"Content-Length: {len(data)}\r\n\r\n".encode()
        + data
    )
    return s


# On the SmolLM2 pair (tens of tokens a second here), an answer this long takes many seconds:
# a server that is idle within two is one that cancelled it.
LONG = {
    "model": "test-pair",
    "messages": [{"role": "user", "content": "Write a very long story about a dragon and a baker."}],
    "max_tokens": 1500,
}


def cancelled(served: Served) -> int:
    return int(request(served, "GET", "/health")[1]["answers"].get("cancelled", 0))


def test_a_client_that_leaves_mid_stream_frees_the_engine(smollm2_pair: ModelPair) -> None:
    with serving(smollm2_pair) as served:
        s = _open_stream(served, {**LONG, "stream": True})
        got = b""
        while got.count(b"data: ") < 3:  # the role chunk and two rounds' tokens
            got += s.recv(4096)
        assert b"200 OK" in got
        _, health = request(served, "GET", "/health")
        assert health["busy"]
        s.close()
        assert wait_idle(served, timeout=2.0) < 2.0
        assert cancelled(served) == 1
        status, body = request(
            served,
            "POST",
            "/v1/chat/completions",
            {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 8},
        )
        assert status == 200
        assert body["choices"][0]["message"]["content"] == expected(smollm2_pair, "Hi", 8)


def test_a_client_that_leaves_a_whole_answer_frees_the_engine(smollm2_pair: ModelPair) -> None:
    with serving(smollm2_pair) as served:
        s = _open_stream(served, LONG)  # not streamed: the server notices the hang-up itself
        threading.Event().wait(0.3)
        _, health = request(served, "GET", "/health")
        assert health["busy"]
        s.close()
        assert wait_idle(served, timeout=2.0) < 2.0
        assert cancelled(served) == 1


def test_a_full_queue_answers_429_and_a_waiting_client_may_leave(smollm2_pair: ModelPair) -> None:
    with serving(smollm2_pair, max_waiting=1) as served:
        running = _open_stream(served, {**LONG, "stream": True})
        running.recv(4096)
        waiting = _open_stream(served, {**LONG, "stream": True})  # waits its turn
        for _ in range(100):
            if request(served, "GET", "/health")[1]["waiting"] == 1:
                break
            threading.Event().wait(0.02)
        status, body = request(
            served, "POST", "/v1/chat/completions", {"messages": [{"role": "user", "content": "Hi"}]}
        )
        assert status == 429
        assert body["error"]["code"] == "queue_full" and "retry" in body["error"]["message"]
        waiting.close()  # leaves the queue: it never runs, and its place is free at once
        for _ in range(100):
            health = request(served, "GET", "/health")[1]
            if health["waiting"] == 0:
                break
            threading.Event().wait(0.02)
        assert health["waiting"] == 0 and health["busy"], health  # (the long answer still runs)
        running.close()
        wait_idle(served, timeout=2.0)
        assert request(served, "GET", "/health")[1]["answers"] == {"cancelled": 1}
        status, _ = request(
            served,
            "POST",
            "/v1/chat/completions",
            {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4},
        )
        assert status == 200
