"""Where draft tokens come from. Every drafter has the same three calls, so the round
(app/engine/decoding/round.py) never asks which one it holds:

    begin(prompt)       a generation starts: get ready for this prompt (a draft model prefills it)
    draft(history, k)   propose up to k tokens that would follow `history`
    accept(keep)        the target kept history[:keep] (last token + accepted drafts): roll back

Each kind is one module with one `SPEC` (spec.py says what a spec holds; registry.py lists them):

* model.py: a small draft model, autoregressively.
* lookup.py: prompt lookup, continuing an n-gram found earlier in the context.
* hybrid.py: the draft model until prompt lookup can finish the draft (a composition).
* cross.py: a draft model of another tokenizer, its text re-encoded into the target's tokens.
* heads/: the drafters that read the target's rows: its own MTP heads, EAGLE-3, DFlash.

Which drafter runs a round, and with which K, is the scheduler's business (scheduler.py): it
asks each drafter for an offer and ranks them, without knowing any kind.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from ..sampling import Dist, NonFiniteLogits, SamplerSettings, distribution


@dataclass(slots=True)
class Proposal:
    """A drafter's guesses for one round, and what producing them cost."""

    tokens: list[int] = field(default_factory=list)
    # The distribution each token was drawn from (q in the acceptance test min(1, p/q));
    # None when decoding greedily.
    qs: list[Dist | None] = field(default_factory=list)
    looked_up: int = 0  # of the tokens, how many (at the end) came from prompt lookup
    caught_up: int = 0  # tokens the draft model decoded in its first (catch-up) batch
    first_s: float = 0.0  # seconds of the draft model's first batch (catch-up + first step)
    passes: int = 0  # draft-model decode calls this round (the first batch included)
    translate_s: float = 0.0  # of the drafting, re-encoding text between tokenizers (cross.py)


def draw(
    row: npt.NDArray[np.float32], sampler: SamplerSettings, rng: random.Random, p_min: float
) -> tuple[int, Dist | None] | None:
    """A drafter's next token from its logits row (and q when sampling), or None when its
    confidence in its best token is below p-min. When sampling, q is built once for both.
    Raises NonFiniteLogits for a row holding NaN or infinity."""
    if sampler.greedy:
        if p_min > 0.0 and top_prob(row) < p_min:
            return None
        best = int(np.argmax(row))
        if not np.isfinite(row[best]):  # NaN and +inf win an argmax
            raise NonFiniteLogits("NaN or infinite logits")
        return best, None
    q = distribution(row, sampler)
    if q.max_prob() < p_min:
        return None
    return q.sample(rng), q


def top_prob(logits: npt.NDArray[np.float32]) -> float:
    """The confidence in the best token, greedy decoding (plain softmax)."""
    m = logits.max()
    if not np.isfinite(m):  # NaN propagates through max; +inf is no probability either
        raise NonFiniteLogits("NaN or infinite logits")
    return float(1.0 / np.exp(logits - m).sum())
