"""Every way a generation ends, in both modes, on real models."""

from __future__ import annotations

from pathlib import Path

import pytest

from run_helpers import run
from tandem.engine import ChatMessage, ContextOverflowError, LoadOptions, ModelPair, TandemError


@pytest.mark.parametrize("speculative", [False, True])
@pytest.mark.parametrize("max_tokens", [1, 2, 7])
def test_max_tokens_is_exact(smollm2_pair: ModelPair, speculative: bool, max_tokens: int) -> None:
    prompt = smollm2_pair.chat_prompt([ChatMessage("user", "Write a long story about a fox.")])
    r = run(smollm2_pair, prompt, speculative=speculative, max_tokens=max_tokens, draft_max=8)
    assert len(r.ids) == max_tokens == r.stats.generated
    assert r.stats.stop_reason == "max_tokens"


@pytest.mark.parametrize("speculative", [False, True])
def test_end_of_generation_stops_and_is_not_shown(smollm2_pair: ModelPair, speculative: bool) -> None:
    prompt = smollm2_pair.chat_prompt([ChatMessage("user", "What is the capital of France? One word.")])
    r = run(smollm2_pair, prompt, speculative=speculative, max_tokens=64, draft_max=8)
    assert r.stats.stop_reason == "eog"
    assert "Paris" in r.text
    assert "<|im_end|>" not in r.text
    assert not any(smollm2_pair.target.is_eog(t) for t in r.ids)


def test_draft_proposing_end_of_generation(smollm2_pair: ModelPair) -> None:
    """The draft proposes <|im_end|> inside its run; accepted, it ends the answer there."""
    prompt = smollm2_pair.chat_prompt([ChatMessage("user", "Say just the word yes.")])
    r = run(smollm2_pair, prompt, max_tokens=64, draft_max=16)
    base = run(smollm2_pair, prompt, speculative=False, max_tokens=64)
    assert r.stats.stop_reason == base.stats.stop_reason == "eog"
    assert r.ids == base.ids
    assert r.stats.accepted >= 1


@pytest.mark.parametrize("speculative", [False, True])
def test_stop_string_across_token_boundary(smollm2_pair: ModelPair, speculative: bool) -> None:
    prompt = smollm2_pair.chat_prompt([ChatMessage("user", "Explain in detail why the sky is blue.")])
    full = run(smollm2_pair, prompt, speculative=False, max_tokens=60)
    # A stop string made of the end of one token and the start of the next.
    pieces = [t.text for t in full.tokens]
    i = next(k for k in range(5, len(pieces) - 1) if len(pieces[k]) >= 3 and len(pieces[k + 1]) >= 3)
    stop = pieces[i][-2:] + pieces[i + 1][:2]
    expected = full.text[: full.text.index(stop)]
    r = run(smollm2_pair, prompt, speculative=speculative, max_tokens=60, stop=(stop,))
    assert r.stats.stop_reason == "stop_string"
    assert r.text == expected
    assert r.done is not None and r.done.text == expected


def test_stop_string_never_seen_changes_nothing(smollm2_pair: ModelPair) -> None:
    prompt = smollm2_pair.chat_prompt([ChatMessage("user", "Name three planets.")])
    a = run(smollm2_pair, prompt, max_tokens=40)
    b = run(smollm2_pair, prompt, max_tokens=40, stop=("zzz-never",))
    assert a.text == b.text and a.ids == b.ids


def test_context_full_stops_cleanly(tiny_target: Path, tiny_draft: Path) -> None:
    with ModelPair.load(tiny_target, tiny_draft, LoadOptions(n_ctx=64)) as pair:
        prompt = pair.raw_prompt("Once upon a time there was")
        r = run(pair, prompt, max_tokens=500, draft_max=8)
        assert r.stats.stop_reason == "context_full"
        # Every position is used, and K was clipped near the end instead of overflowing.
        assert len(prompt) + len(r.ids) == pair.target.n_ctx + 1
        base = run(pair, prompt, max_tokens=500, speculative=False)
        assert base.ids == r.ids


def test_prompt_longer_than_context_is_refused(tiny_target: Path, tiny_draft: Path) -> None:
    with ModelPair.load(tiny_target, tiny_draft, LoadOptions(n_ctx=64)) as pair:
        n_ctx = pair.target.n_ctx  # llama.cpp may round the size up
        prompt = pair.raw_prompt("word " * (n_ctx + 10))
        assert len(prompt) > n_ctx
        with pytest.raises(ContextOverflowError, match=f"context holds {n_ctx}"):
            run(pair, prompt)


def test_invalid_settings_are_refused(tiny_pair: ModelPair) -> None:
    prompt = tiny_pair.raw_prompt("Hello")
    for kwargs in (
        {"max_tokens": 0},
        {"draft_max": 99},
        {"temperature": -1.0},
        {"top_p": 0.0},
        {"p_min": 1.5},
    ):
        with pytest.raises(TandemError):
            run(tiny_pair, prompt, **kwargs)  # type: ignore[arg-type]


def test_multibyte_characters_never_print_as_garbage(smollm2_pair: ModelPair) -> None:
    """Byte-level BPE splits emoji and CJK across tokens; streamed text must stay clean."""
    text = "Café 👩‍💻 naïve 東京 🎉 Ελληνικά שלום"
    ids = smollm2_pair.target.tokenize(text, add_special=False, parse_special=False)
    from tandem.engine.events import Origin
    from tandem.engine.text.text_stream import TokenStream

    stream = TokenStream(smollm2_pair.target.piece)
    pieces = [e.text for t in ids for e in stream.add(t, Origin.TARGET)]
    pieces += [e.text for e in stream.finish()]
    assert "".join(pieces) == text
    assert "\ufffd" not in "".join(pieces)
    assert "" in pieces  # some tokens really were partial characters
