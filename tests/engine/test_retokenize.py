"""Translation and alignment between two tokenizers (retokenize.py, drafters/cross.py), as
properties over random text, with the real tokenizers of SmolLM2 (byte-level BPE) and Gemma 3
(SentencePiece with byte fallback): whatever the text (any script, emoji, whitespace runs,
digits, characters that byte-level tokens split), the tokens always spell exactly the text,
alignment never moves a token the target already emitted, and at a boundary both encodings
share it gives exactly the tokens of encoding the whole text at once.
"""

from __future__ import annotations

import random
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import model_files
from tandem.engine import LoadOptions
from tandem.engine.drafters.cross import CrossDrafter
from tandem.engine.llama.model import LoadedModel
from tandem.engine.sampling import SamplerSettings
from tandem.engine.text.retokenize import complete_utf8, reencode, spelled, window

OPTS = LoadOptions(n_ctx=512, n_threads=1)

# Text a model writes: words and spaces, other scripts, emoji, digits, newlines and tabs.
ALPHABET = st.sampled_from(
    [*"abcdefghijklmnopqrstuvwxyz ABC", *"  \n\n\t", *"0123456789.,;:!?()-_'\"", *"éàüßø",
     *"日本語のテキスト東京", *"Ωλπ", *"🎉👍🙂", "\u200b", "🇫🇷"]
)  # fmt: skip
TEXT = st.lists(ALPHABET, min_size=0, max_size=40).map("".join)
PROPS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@pytest.fixture(scope="module")
def smol() -> Iterator[LoadedModel]:
    m = LoadedModel(model_files.smollm2_q4_1(), OPTS)
    yield m
    m.close()


@pytest.fixture(scope="module")
def gemma() -> Iterator[LoadedModel]:
    m = LoadedModel(model_files.gemma3_270m(), OPTS)
    yield m
    m.close()


def _encode(m: LoadedModel):  # type: ignore[no-untyped-def]
    return lambda text: m.tokenize(text, add_special=False, parse_special=False)


@pytest.mark.parametrize("name", ["smol", "gemma"])
@PROPS
@given(a=TEXT, b=TEXT)
def test_reencoding_spells_the_text_and_keeps_what_is_fixed(
    request: pytest.FixtureRequest, name: str, a: str, b: str
) -> None:
    m: LoadedModel = request.getfixturevalue(name)
    encode = _encode(m)
    whole = encode(a + b)
    before = encode(a)
    new = b.encode("utf-8")
    # The target's side: its tokens are fixed, and what follows them spells the new text.
    fixed = reencode(encode, m.piece, before, new, fixed=True)
    assert fixed is not None  # both tokenizers give any text back unchanged
    keep, tokens = fixed
    assert keep == len(before) and spelled(m.piece, tokens) == new
    # Where the whole text's encoding begins with the tokens of `a`, it has a boundary at the end
    # of `a`: alignment finds it and gives exactly the whole encoding's tokens after it.
    if whole[: len(before)] == before:
        assert tokens == whole[len(before) :]
    # The draft's side: the window may be cut anew; the text is always exactly a + b.
    free = reencode(encode, m.piece, before, new, fixed=False)
    assert free is not None
    keep, tokens = free
    assert spelled(m.piece, [*before[:keep], *tokens]) == (a + b).encode("utf-8")
    if not a or spelled(m.piece, before) == a.encode():
        assert [*before[:keep], *tokens] == whole  # the window reaches the start: canonical tokens


@PROPS
@given(text=TEXT, cuts=st.lists(st.integers(0, 60), max_size=6), seed=st.integers(0, 1000))
def test_the_drafts_tokens_follow_the_targets_text_in_any_pieces(
    smol: LoadedModel, gemma: LoadedModel, text: str, cuts: list[int], seed: int
) -> None:
    """The target's tokens arrive a few at a time (rounds), split anywhere, even inside a
    character: the draft's tokens always spell the target's text, but for an incomplete
    character held back, whichever model is the target."""
    rng = random.Random(seed)
    target, draft = (smol, gemma) if seed % 2 else (gemma, smol)
    history = target.tokenize(text, add_special=False, parse_special=False)
    drafter = CrossDrafter(target, draft, SamplerSettings(), rng, 0.0, None)
    drafter._restart()
    points = sorted({min(c, len(history)) for c in cuts} | {len(history)})
    for end in points:
        drafter._sync(history[:end])
        said = spelled(target.piece, history[:end])
        held = len(said) - complete_utf8(said) if complete_utf8(said) < len(said) else 0
        assert drafter.held == said[len(said) - held :]
        assert spelled(draft.piece, drafter.tokens) == said[: len(said) - held]


@PROPS
@given(context=TEXT, drafted=TEXT)
def test_a_drafts_text_becomes_target_tokens_that_spell_it(
    smol: LoadedModel, gemma: LoadedModel, context: str, drafted: str
) -> None:
    """What the draft wrote, in the target's tokens after the answer so far: they spell it
    exactly (up to a character the draft has not finished), starting right after the
    answer's last token."""
    for target, draft in ((gemma, smol), (smol, gemma)):
        history = target.tokenize(context, add_special=False, parse_special=False)
        drafter = CrossDrafter(target, draft, SamplerSettings(), random.Random(0), 0.0, None)
        drafter._restart()
        drafter._sync(history)
        text = drafter.held + drafted.encode("utf-8")
        before = history[window(history, target.piece) :]
        tokens, whole = drafter._translate(before, text)
        if drafter.held and not tokens:
            continue  # the answer ends inside a character the draft's text completes: no boundary
        assert whole and spelled(target.piece, tokens) == drafted.encode("utf-8")
