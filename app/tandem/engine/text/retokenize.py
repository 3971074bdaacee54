"""Text between two tokenizers: what a draft of another tokenizer needs (drafters/cross.py).

Two tokenizers cut the same text differently, and re-encoding a piece of text on its own may
cut its start differently from the whole (" Hel" + "lo" is " Hello" when encoded together). So
new text is never encoded alone: it is encoded together with a look-behind window (the text of
the last few tokens before it, up to LOOK_BEHIND), and the result is aligned with the tokens
already fixed by text offsets: the window's tokens are kept up to a token boundary that the
re-encoding shares with them, and what the re-encoding has after that boundary follows. (This
is transformers' "longest common run within a window", decided by offsets instead of ids: two
encodings of the same text agree exactly up to a boundary they share.)

* target -> draft: the answer's new text is appended to the draft's tokens, and the window may
  be cut anew (`reencode(fixed=False)`): the draft then rolls back to where its tokens differ
  and catches up.
* draft -> target: the target's tokens are the answer so far and cannot change, so the
  proposal starts exactly where the answer's text ends (`reencode(fixed=True)`).

Everything is bytes (a token may hold part of a UTF-8 character); a tokenizer is given only
complete characters (`complete_utf8`). Pure functions over two callables, so the property tests
run them on random text with real tokenizers.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

Encode = Callable[[str], list[int]]  # text -> tokens: no BOS, control-token text kept as text
Piece = Callable[[int], bytes]  # token -> its bytes (b"" for a control token)

# Tokens of look-behind (transformers uses about 10): merges that cross the boundary between
# old and new text reach back a token or two; more costs encoding time every round.
LOOK_BEHIND = 10


def complete_utf8(data: bytes) -> int:
    """How many bytes at the start of `data` are whole, valid UTF-8 characters."""
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as exc:
        return exc.start
    return len(data)


def is_char_start(data: bytes, i: int) -> bool:
    """Whether position i of `data` starts a character (is not a UTF-8 continuation byte)."""
    return i >= len(data) or not 0x80 <= data[i] < 0xC0


def window(tokens: Sequence[int], piece: Piece, floor: int = 0, size: int = LOOK_BEHIND) -> int:
    """Where the look-behind window of `tokens` starts: at most `size` tokens back, never
    before `floor` (a control token: text never merges across one), at a token whose text
    starts a character."""
    start = max(floor, len(tokens) - size)
    while start < len(tokens) and not is_char_start(piece(tokens[start]), 0):
        start += 1
    return start


def encode_exact(encode: Encode, piece: Piece, text: bytes) -> tuple[list[int], list[int], int] | None:
    """`text` (whole characters) as tokens, each token's end offset in `text`, and how many
    bytes the tokenizer put before the text (a SentencePiece dummy-prefix space: offsets are
    counted after them, so the first token may end past 0 yet start before it). None when
    the tokens do not spell the text exactly (the tokenizer changed it: <unk>, normalisation),
    or the text is not whole characters."""
    try:
        tokens = encode(text.decode("utf-8"))
    except UnicodeDecodeError:
        return None
    pieces = [piece(t) for t in tokens]
    spelled = b"".join(pieces)
    junk = len(spelled) - len(text)
    if junk < 0 or spelled[junk:] != text or spelled[:junk].strip() != b"":
        return None
    ends, pos = [], -junk
    for p in pieces:
        pos += len(p)
        ends.append(pos)
    return tokens, ends, junk


def reencode(
    encode: Encode, piece: Piece, before: Sequence[int], new: bytes, *, fixed: bool
) -> tuple[int, list[int]] | None:
    """Tokens for the text of `before` (the look-behind window) followed by `new` (whole
    characters): (keep, tokens), where before[:keep] stays and `tokens` follow it, spelling
    exactly the rest of that text. `fixed`: keep all of `before` (the target's answer).

    The earliest token boundary of `before` that the re-encoding shares is kept (the window is
    cut anew from there: canonical tokens). Where none is shared (a token of the re-encoding
    straddles the end of `before` and `fixed` forbids cutting it), `new` is encoded alone.
    None: the tokenizer does not give the text back unchanged."""
    texts = [piece(t) for t in before]
    left = b"".join(texts)
    starts = [0]
    for t in texts:
        starts.append(starts[-1] + len(t))
    enc = encode_exact(encode, piece, left + new)
    if enc is not None:
        tokens, ends, junk = enc
        bounds = {e: i + 1 for i, e in enumerate(ends)}
        if junk == 0:
            bounds[0] = 0
        for keep in (len(before),) if fixed else range(len(before) + 1):
            at = bounds.get(starts[keep])
            if at is not None:
                return keep, tokens[at:]
    alone = encode_exact(encode, piece, new)
    if alone is None or alone[2]:
        return None
    return len(before), alone[0]


def spelled(piece: Piece, tokens: Sequence[int]) -> bytes:
    return b"".join(piece(t) for t in tokens)
