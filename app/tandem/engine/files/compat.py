"""Can this draft model draft for that target? Decided from GGUF metadata, before loading.

A draft with the target's tokenizer passes its token ids to the target as they are. These are
llama.cpp's own rules for "the same tokenizer" (common/speculative.cpp): same vocabulary type,
same add-BOS/add-EOS behaviour and the same BOS/EOS ids where they are added, vocabulary sizes
within 128 of each other (padding differs between conversions), and identical token text from
id 5 upwards (the first few ids are control tokens that conversions label differently).

Any other draft drafts across tokenizers (drafters/cross.py): its text is re-encoded into the
target's tokens each round. That needs both tokenizers to give back any text they are given
(byte-level BPE, or SentencePiece with byte fallback), and some text in common; a pair that
lacks either is refused, with the reason (`cross_problems`).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from dataclasses import dataclass, field

from ..errors import IncompatiblePairError
from .gguf_info import GGUFInfo, TokenTable

MAX_VOCAB_SIZE_DIFFERENCE = 128
FIRST_CHECKED_TOKEN_ID = 5


@dataclass(frozen=True)
class TokenizerFacts:
    vocab_type: str
    tokens: TokenTable
    add_bos: bool
    add_eos: bool
    bos_id: int | None
    eos_id: int | None

    @classmethod
    def from_gguf(cls, info: GGUFInfo) -> TokenizerFacts:
        vocab_type = info.vocab_type
        # llama.cpp's defaults when a file does not say: SentencePiece adds BOS, others do not.
        add_bos = info.get("tokenizer.ggml.add_bos_token")
        add_eos = info.get("tokenizer.ggml.add_eos_token")
        bos = info.get("tokenizer.ggml.bos_token_id")
        eos = info.get("tokenizer.ggml.eos_token_id")
        return cls(
            vocab_type=vocab_type,
            tokens=info.tokens,
            add_bos=bool(add_bos) if add_bos is not None else vocab_type == "llama",
            add_eos=bool(add_eos) if add_eos is not None else False,
            bos_id=int(bos) if bos is not None else None,
            eos_id=int(eos) if eos is not None else None,
        )


def compatibility_problems(target: GGUFInfo, draft: GGUFInfo) -> list[str]:
    """Every reason the pair cannot work, as short phrases; empty when compatible."""
    t, d = TokenizerFacts.from_gguf(target), TokenizerFacts.from_gguf(draft)
    problems: list[str] = []
    if not t.tokens or not d.tokens:
        which = "target" if not t.tokens else "draft"
        return [f"the {which} file has no tokenizer vocabulary"]
    if t.vocab_type != d.vocab_type:
        problems.append(f"tokenizer types differ (target {t.vocab_type!r}, draft {d.vocab_type!r})")
    if t.add_bos != d.add_bos:
        problems.append(
            f"the target {'adds' if t.add_bos else 'does not add'} a BOS token, the draft does the opposite"
        )
    elif t.add_bos and t.bos_id != d.bos_id:
        problems.append(f"BOS token ids differ (target {t.bos_id}, draft {d.bos_id})")
    if t.add_eos != d.add_eos:
        problems.append(
            f"the target {'adds' if t.add_eos else 'does not add'} an EOS token, the draft does the opposite"
        )
    elif t.add_eos and t.eos_id != d.eos_id:
        problems.append(f"EOS token ids differ (target {t.eos_id}, draft {d.eos_id})")
    n_t, n_d = len(t.tokens), len(d.tokens)
    if abs(n_t - n_d) > MAX_VOCAB_SIZE_DIFFERENCE:
        problems.append(
            f"vocabulary sizes differ by {abs(n_t - n_d):,} (target {n_t:,}, draft {n_d:,}; "
            f"at most {MAX_VOCAB_SIZE_DIFFERENCE} allowed)"
        )
    elif min(n_t, n_d) > FIRST_CHECKED_TOKEN_ID:
        n = min(n_t, n_d)
        if t.tokens.span(FIRST_CHECKED_TOKEN_ID, n) != d.tokens.span(FIRST_CHECKED_TOKEN_ID, n):
            for i in range(FIRST_CHECKED_TOKEN_ID, n):  # rare path: name the first difference
                if t.tokens[i] != d.tokens[i]:
                    problems.append(
                        f"token {i} is {t.tokens[i]!r} in the target but {d.tokens[i]!r} in the draft"
                    )
                    break
    return problems


# Vocabulary types whose text always round-trips: byte-level BPE and the RWKV byte trie.
_BYTE_LEVEL = {"gpt2", "rwkv"}
# SentencePiece-style vocabularies: they round-trip only with byte fallback (`<0x00>`..`<0xFF>`).
_BYTE_FALLBACK = {"llama", "plamo2", "t5"}
_WORD_LEVEL = {"bert"}  # WordPiece: lowercases, drops accents, [UNK] for the rest
# Below this share of the draft's multi-byte tokens being whole target tokens, the two
# vocabularies have no text in common worth drafting with (Smol/Gemma share 58%).
MIN_SHARED_TEXT = 0.02


@dataclass(frozen=True)
class PairTokenizers:
    """How a draft's tokenizer relates to its target's (check_pair's verdict on a usable pair)."""

    differences: tuple[str, ...] = ()  # why it is not the target's tokenizer; empty: it is
    shared_text: float | None = field(default=None, compare=False)  # see shared_text()

    @property
    def same(self) -> bool:
        return not self.differences

    def note(self, target: str, draft: str) -> str:
        """The line a front-end prints for a cross-tokenizer pair ("" for the same tokenizer)."""
        if self.same:
            return ""
        shared = f"; {self.shared_text:.0%} of its tokens are target tokens" if self.shared_text else ""
        return (
            f"{draft} has another tokenizer than {target} ({self.differences[0]}{shared}): it drafts "
            "across tokenizers, its text re-encoded into the target's tokens each round. The output "
            "is the target's; drafting costs more than with a draft of the same tokenizer"
        )


def round_trip_problem(info: GGUFInfo) -> str | None:
    """Why text cannot be encoded by this file's tokenizer and decoded back unchanged (None: it
    can), which drafting across tokenizers needs on both sides."""
    kind = info.vocab_type
    if kind in _BYTE_LEVEL:
        return None
    if kind in _BYTE_FALLBACK:
        if _byte_tokens(info.tokens) == 256:
            return None
        return f"its {kind!r} vocabulary has no byte fallback, so text outside it is lost as <unk>"
    if kind in _WORD_LEVEL:
        return "its vocabulary is word-level (WordPiece): it changes text it encodes (case, accents, [UNK])"
    if kind == "none":
        return "it has no tokenizer"
    return f"its tokenizer type {kind!r} is not known to give text back unchanged"


def cross_problems(target: GGUFInfo, draft: GGUFInfo) -> list[str]:
    """Why the draft cannot draft for the target even across tokenizers; empty when it can."""
    if not target.tokens or not draft.tokens:
        which = "target" if not target.tokens else "draft"
        return [f"the {which} file has no tokenizer vocabulary"]
    problems = [
        f"the {role}'s text cannot round-trip: {why}"
        for role, info in (("target", target), ("draft", draft))
        if (why := round_trip_problem(info)) is not None
    ]
    if not problems:
        share = shared_text(target, draft)
        if share < MIN_SHARED_TEXT:
            problems.append(
                f"the vocabularies have almost no text in common ({share:.1%} of the draft's tokens are "
                "target tokens): its guesses would almost never be the target's"
            )
    return problems


def check_pair(target: GGUFInfo, draft: GGUFInfo) -> PairTokenizers:
    """The verdict on a pair: the same tokenizer, or another one it can draft across. Raise
    IncompatiblePairError naming what is wrong when it cannot draft even across tokenizers."""
    problems = compatibility_problems(target, draft)
    if not problems:
        return PairTokenizers()
    unusable = cross_problems(target, draft)
    if unusable:
        raise IncompatiblePairError(
            f"{draft.path.name} cannot draft for {target.path.name}: they use different tokenizers "
            f"({problems[0]}) and it cannot draft across them either ({'; '.join(unusable)}). Pick "
            "a draft from the same model family, or one whose tokenizer is byte-level."
        )
    return PairTokenizers(tuple(problems), shared_text(target, draft))


# ----------------------------------------------------------------------------- token texts
_texts_cache: weakref.WeakKeyDictionary[TokenTable, frozenset[bytes]] = weakref.WeakKeyDictionary()


def shared_text(target: GGUFInfo, draft: GGUFInfo) -> float:
    """The share of the draft's multi-byte tokens whose text is also one target token."""
    mine = _texts(draft)
    return len(mine & _texts(target)) / len(mine) if mine else 0.0


def _texts(info: GGUFInfo) -> frozenset[bytes]:
    """The bytes each token stands for (multi-byte ones: single bytes every byte-level
    vocabulary has), decoded from the vocabulary's own spelling; remembered per table."""
    table = info.tokens
    found = _texts_cache.get(table)
    if found is None:
        decode = _decoder(info.vocab_type)
        found = _texts_cache[table] = frozenset(b for b in map(decode, table) if len(b) > 1)
    return found


def _decoder(kind: str) -> Callable[[str], bytes]:
    if kind == "gpt2":  # byte-level BPE spells each byte as one printable character
        table = _GPT2_BYTES

        def gpt2(s: str) -> bytes:
            try:
                return s.translate(table).encode("latin-1")
            except UnicodeEncodeError:  # not a byte-level spelling (an added token): as is
                return s.encode("utf-8")

        return gpt2
    if kind in _BYTE_FALLBACK:  # SentencePiece: "\u2581" is a space
        return lambda s: s.replace("\u2581", " ").encode("utf-8")
    return lambda s: s.encode("utf-8")


def _gpt2_bytes() -> dict[int, int]:
    """GPT-2's byte-to-character table, inverted (code point -> byte): printable bytes stand
    for themselves, the others for characters from U+0100 on, in order."""
    printable = [*range(0x21, 0x7F), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    table = {b: b for b in printable}
    n = 0
    for b in range(256):
        if b not in printable:
            table[0x100 + n] = b
            n += 1
    return table


_GPT2_BYTES = _gpt2_bytes()


def _byte_tokens(tokens: TokenTable) -> int:
    """How many of the 256 byte-fallback tokens (`<0x00>`..`<0xFF>`) the vocabulary has
    (SentencePiece conversions put them near the start: looked for there first)."""
    wanted = {f"<0x{b:02X}>" for b in range(256)}
    head = sum(1 for i in range(min(len(tokens), 1024)) if tokens[i] in wanted)
    return head if head == 256 else sum(1 for t in tokens if t in wanted)
