"""Each drafter kind's case for the drafter contract (tests/engine/test_drafter_contract.py): a
pair that drafts with the kind, the target alone to compare it with, and what to ask of it.

A new kind adds its case here (CASES, by the kind's name); the contract test fails for a kind of
the registry that has none. Tiny random-weight models (model_files.py, trained.py): each
drafter agrees with its target part of the time, so drafts are both accepted and rejected.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import model_files
import trained
from run_helpers import TINY
from tandem.engine import LoadOptions, ModelPair

CHAT = (
    "Explain in detail why the sky is blue.",
    "Write a story about the ocean and a lighthouse keeper.",
    "Describe five red fruits and what they taste like.",
)


@dataclass(frozen=True)
class Case:
    pair: ModelPair  # drafts with the kind
    alone: ModelPair  # the same target alone: the reference for every answer
    prompts: tuple[str, ...] = CHAT  # chat messages the greedy answers start from
    sample_text: str = "Once upon a time"  # a raw prompt for the sampled law (3 tokens)
    samples: bool = True  # it drafts in a sampled answer too (False: greedy only)
    # Its sampled drafts are accepted often (False: rarely, as prompt lookup's on a random model).
    accepts_samples: bool = True


Opens = Callable[[], Iterator[Case]]


@contextmanager
def _pair(target: Path, draft: Path | None, *, alone: LoadOptions = TINY, **kw: object) -> Iterator[Case]:
    with ModelPair.load(target, draft, TINY) as pair, ModelPair.load(target, None, alone) as ref:
        yield Case(pair, ref, **kw)  # type: ignore[arg-type]


def _tiny() -> Path:
    return model_files.tiny_model("a", seed=1)


def _draft() -> Path:
    """Agrees with the tiny target most of the time greedily, and about a third of its drafts
    when sampling (temperature 1, top-k 4)."""
    return model_files.tiny_close_draft()


def _foreign_draft() -> Path:
    """The same, with another tokenizer (two token texts swapped): it drafts across tokenizers."""
    return model_files.tiny_model("a-draft-close-swapped", seed=2, base_seed=1, noise=0.2, vocab_edit="swap")


REPEATS = "one two three four one two three four one two three four one two"
# Text that repeats itself, for the kinds that continue what came before.
REPEATING = (f"Repeat after me: {REPEATS}", "Count: 1 2 3 1 2 3 1 2 3 1 2 3", CHAT[0])

# kind -> its cases (a kind with variants has several), each a context manager's function.
CASES: dict[str, list[Opens]] = {
    "model": [lambda: _pair(_tiny(), _draft())],
    "cross": [lambda: _pair(_tiny(), _foreign_draft())],
    "lookup": [lambda: _pair(_tiny(), None, prompts=REPEATING, sample_text=REPEATS, accepts_samples=False)],
    "mtp": [
        lambda: _pair(
            trained.hybrid_target(), None, alone=LoadOptions(n_ctx=1024, n_threads=1, load_mtp=False)
        )
    ],
    "eagle3": [lambda: _pair(trained.target(), trained.eagle3())],
    "dflash": [
        lambda: _pair(trained.target(), trained.dflash()),
        lambda: _pair(trained.target(), trained.dspark()),
        lambda: _pair(trained.target(), trained.dflash2()),
    ],
}
