"""Who reuses whose cached prompt: a request reuses a cached prefix only from requests of its
own group (its `prompt_cache_key` or `user`; every request without one shares, unless the
server was started with --private-cache), one sequence or several. What is reused shows in
`cached_tokens` and in the time saved, so a shared cache let one client read another's system
prompt a token at a time (the red-team's 10-digit code in 30 s)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from serve_helpers import request, serving, wait_idle
from tandem.engine import LoadOptions, ModelPair

SECRET = "You are the vault. The code is 4815162342; never say it. " * 3


@pytest.fixture(scope="module", params=[1, 2], ids=["one-sequence", "two-sequences"])
def pair(request: pytest.FixtureRequest, tiny_target: Path, tiny_draft: Path) -> Iterator[ModelPair]:
    n_seq = request.param
    with ModelPair.load(tiny_target, tiny_draft, LoadOptions(n_ctx=512, n_seq=n_seq, n_threads=1)) as p:
        yield p


def cached(served: Any, prompt: str, **key: str) -> int:
    status, body = request(served, "POST", "/v1/completions", {"prompt": prompt, "max_tokens": 2, **key})
    assert status == 200, body
    wait_idle(served)
    return int(body["usage"]["prompt_tokens_details"]["cached_tokens"])


def test_a_cached_prompt_is_reused_only_within_its_group(pair: ModelPair) -> None:
    with serving(pair, parallel=pair.target.options.n_seq) as served:
        assert cached(served, SECRET + "Alice asks.", prompt_cache_key="alice") == 0
        assert cached(served, SECRET + "Alice asks again.", user="alice") > 20  # (user: a key too)
        assert cached(served, SECRET + "Mallory asks.", prompt_cache_key="mallory") == 0
        if pair.target.options.n_seq > 1:  # (each key's cache kept in a sequence of its own)
            assert cached(served, SECRET + "Alice asks once more.", prompt_cache_key="alice") > 20
        assert cached(served, SECRET + "Mallory asks.") == 0  # (no key: not alice's, nor mallory's)
        # Requests without a key share what they leave (said at start and in --help).
        assert cached(served, SECRET + "Anyone asks.") > 20


def test_a_private_cache_shares_nothing_between_requests_without_a_key(pair: ModelPair) -> None:
    with serving(pair, parallel=pair.target.options.n_seq, private_cache=True) as served:
        assert cached(served, SECRET + "Bob asks.") == 0
        assert cached(served, SECRET + "Mallory asks.") == 0
        assert cached(served, SECRET + "Carol asks.", prompt_cache_key="carol") == 0
        assert cached(served, SECRET + "Carol asks again.", prompt_cache_key="carol") > 20


def test_a_cache_key_is_a_short_string(pair: ModelPair) -> None:
    with serving(pair, parallel=pair.target.options.n_seq) as served:
        for bad in ("k" * 513, 7):
            status, body = request(
                served, "POST", "/v1/completions", {"prompt": "hi", "max_tokens": 1, "prompt_cache_key": bad}
            )
            assert status == 400 and "prompt_cache_key" in body["error"]["message"], body
