"""Can this draft model draft for that target? Decided from GGUF metadata, before loading.

Speculative decoding passes token ids from one model to the other, so both must use the same
tokenizer. These are llama.cpp's own rules (common/speculative.cpp): same vocabulary type,
same add-BOS/add-EOS behaviour and the same BOS/EOS ids where they are added, vocabulary sizes
within 128 of each other (padding differs between conversions), and identical token text from
id 5 upwards (the first few ids are control tokens that conversions label differently).
"""

from __future__ import annotations

from dataclasses import dataclass

from .errors import IncompatiblePairError
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


def check_pair(target: GGUFInfo, draft: GGUFInfo) -> None:
    """Raise IncompatiblePairError naming what differs."""
    problems = compatibility_problems(target, draft)
    if problems:
        raise IncompatiblePairError(
            f"{draft.path.name} cannot draft for {target.path.name}: they use different "
            f"tokenizers ({'; '.join(problems)}). Pick a draft from the same model family "
            "(e.g. a smaller model of the same series or a lower-bit quantization of the target)."
        )
