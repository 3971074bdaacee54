"""`tandem serve --parallel` under the red team's findings (issue 49), through HTTP on loopback:
an `exact` answer is not claimed where a shared cache cannot give it, a draft model with a
shorter context than the target's does not end its neighbours' streams, and usage says where
the time went."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import openai

import gguf_edit
from serve_helpers import request, serving, wait_idle
from tandem.engine import LoadOptions, ModelPair


def ended(chunks: list[Any]) -> tuple[str | None, Any]:
    """A stream's finish_reason and its usage (the last chunk's)."""
    reasons = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    return (reasons[0] if reasons else None), chunks[-1].usage


def test_exact_is_refused_with_the_reason_and_not_claimed_beside_others(smollm2_q4_1: Path) -> None:
    # A Q4_1 target is exact alone (not repacked); with two sequences it is not.
    with ModelPair.load(smollm2_q4_1, smollm2_q4_1, LoadOptions(n_ctx=512, n_seq=2)) as pair:
        assert pair.target.exact_plan.possible
        with serving(pair, parallel=2) as served:
            ask = {"messages": [{"role": "user", "content": "Name three rivers."}], "max_tokens": 8}
            status, body = request(served, "POST", "/v1/chat/completions", {**ask, "exact": True})
            assert status == 400, body
            assert "parallel sequences share one KV cache" in body["error"]["message"]
            assert "--parallel 1" in body["error"]["message"]
            status, body = request(served, "POST", "/v1/chat/completions", ask)
            assert status == 200 and body["usage"]["tandem"]["exact"] is False


def test_a_short_draft_context_ends_no_stream_and_usage_is_true(
    smollm2_f16: Path, smollm2_q4_1: Path, tmp_path: Path
) -> None:
    """Client A's answer outgrows the draft's context (96 tokens, padded to 128) while client B
    streams beside it: both end with a finish_reason (they both used to end with "sequence 0 of
    the draft is full"); the usage's prefill time is the prompt's read, tokens per pass >= 1."""
    short = gguf_edit.with_metadata(smollm2_q4_1, tmp_path / "short.gguf", {"llama.context_length": 96})
    pair = ModelPair.load(smollm2_f16, short, LoadOptions(n_ctx=1024, n_seq=2))
    with pair, serving(pair, parallel=2) as s:
        client = openai.OpenAI(base_url=s.v1, api_key="x", max_retries=0)

        def count() -> tuple[str | None, Any]:
            stream = client.completions.create(
                model="test-pair",
                prompt="1, 2, 3, 4, 5, 6, 7, 8, 9, 10,",
                max_tokens=240,
                temperature=0.7,
                seed=1,
                stream=True,
                stream_options={"include_usage": True},
            )
            return ended(list(stream))

        def chat() -> tuple[str | None, Any]:
            stream = client.chat.completions.create(
                model="test-pair",
                messages=[{"role": "user", "content": "Tell me about the sea."}],
                max_tokens=120,
                stream=True,
                stream_options={"include_usage": True},
            )
            return ended(list(stream))

        with ThreadPoolExecutor(2) as pool:
            a, b = pool.submit(count), pool.submit(chat)
            (a_end, a_usage), (b_end, b_usage) = a.result(120), b.result(120)
        wait_idle(s)
    assert a_end == "length" and a_usage.completion_tokens == 240
    assert b_end in ("length", "stop")
    for used in (a_usage, b_usage):
        extra = used.model_extra["tandem"]
        assert extra["tokens_per_pass"] >= 1.0
        assert extra["prefill_s"] > 0.001, extra  # (it used to read 0.0002 s: the read went to decode_s)
