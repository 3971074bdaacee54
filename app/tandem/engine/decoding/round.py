"""One speculative round: start reading here.

    1. draft    a drafter proposes up to K tokens d1..dK (greedy, or sampled from q);
    2. verify   the target decodes [last, d1..dK] in ONE batch, logits for all K+1 rows;
    3. accept   the longest agreeing prefix (greedy: d_i == argmax p_i; sampling: rejection
                sampling), then one token of the target's own: a correction, or the bonus
                after all K were accepted;
    4. roll back both states to what the target kept (llama_memory_seq_rm; a recurrent
                state that llama.cpp cannot roll back that far is checkpointed before the
                verify batch, restored after a rejection and the kept tokens re-decoded).

The output is exactly the target's: every token the user sees is either a draft the target's
own choice agrees with, or the target's choice itself. Which drafter runs and how long K is
come from the scheduler (scheduler.py) as a `Plan`; K = 0, or no drafter, is one plain target
step, which is also how the target alone runs. The loop around rounds (prefill, stopping,
text, statistics) is generation.py.

Invariant at the start of a round: `history` = prompt + answer so far; the target's cache
holds history[:-1] (the last token goes into this round's batch); a draft model's cache holds
a prefix of history (it catches up by itself).
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from ..drafters import Proposal
from ..drafters.spec import Drafter
from ..events import RoundEvent
from ..sampling import Dist, NonFiniteLogits, SamplerSettings, accept_draft, distribution, residual

if TYPE_CHECKING:
    from ..llama.model import LoadedModel


@dataclass(frozen=True, slots=True)
class Plan:
    drafter: Drafter | None  # None: a plain target step
    k: int  # most tokens to draft


PLAIN = Plan(None, 0)
_NO_DRAFTS = Proposal()


def run_round(
    target: LoadedModel,
    plan: Plan,
    history: list[int],
    sampler: SamplerSettings,
    rng: random.Random,
    cancel: threading.Event | None = None,
) -> RoundEvent | None:
    """Draft, verify in one batch, accept, roll back. None when cancelled while drafting."""
    t0 = time.perf_counter()
    drafter = plan.drafter
    proposal = drafter.draft(history, plan.k) if drafter is not None and plan.k else _NO_DRAFTS
    if proposal.tokens and cancel is not None and cancel.is_set():
        return None  # cancelled while drafting: do not verify
    drafts = proposal.tokens
    t1 = time.perf_counter()
    checkpoint_s = 0.0
    if drafts and not target.can_roll_back(len(drafts)):
        target.checkpoint()  # (a recurrent state: see LoadedModel.truncate)
        checkpoint_s = time.perf_counter() - t1
    accepted, own = verify(target, history[-1], drafts, proposal.qs, sampler, rng)
    keep = len(history) + accepted  # the last token and the accepted drafts
    t_back = time.perf_counter()
    if accepted < len(drafts):
        target.truncate(keep)
    if drafter is not None:
        drafter.accept(keep)
    t2 = time.perf_counter()
    tokens = (*drafts[:accepted], own)
    # (Keywords cost 0.44 us more a round than positions, measured: nothing next to a round.)
    return RoundEvent(
        drafted=len(drafts),
        accepted=accepted,
        emitted=len(tokens),
        draft_s=t1 - t0,
        verify_s=t2 - t1,
        k=plan.k,
        drafter=drafter.kind if drafts and drafter is not None else "",
        caught_up=proposal.caught_up,
        looked_up=proposal.looked_up,
        first_draft_s=proposal.first_s,
        draft_passes=proposal.passes,
        tokens=tokens,
        checkpoint_s=checkpoint_s,
        restore_s=t2 - t_back if accepted < len(drafts) else 0.0,  # only a rejection restores
        translate_s=proposal.translate_s,
    )


def verify(
    target: LoadedModel,
    last: int,
    drafts: list[int],
    qs: list[Dist | None],
    sampler: SamplerSettings,
    rng: random.Random,
) -> tuple[int, int]:
    """The target decodes [last, d1..dK] in ONE batch (K + 1 rows of output); returns (how many
    drafts it accepts, its own next token).

    Greedy: accept while the draft is the target's argmax, then the argmax where it is not (or
    after the last draft: the bonus). Sampling (Leviathan et al. 2023): accept d_i with
    probability min(1, p(d_i)/q(d_i)); the first rejection draws from norm(max(0, p - q)), and
    after K acceptances the bonus is drawn from p. p and q went through the same sampler
    settings, which is what makes the result exactly a sample of the target's distribution."""
    k = len(drafts)
    if sampler.greedy:
        return accept_greedy(drafts, target.decode_greedy([last, *drafts], "all"))
    logits = target.decode([last, *drafts], "all")
    assert logits is not None
    try:
        return accept_sampled(logits, drafts, qs, sampler, rng)
    except NonFiniteRow as exc:
        raise target.non_finite(len(target.cached) - k - 1 + exc.row) from None


class NonFiniteRow(NonFiniteLogits):
    """NaN or infinite logits in row `row` of a verify's rows (its position follows)."""

    def __init__(self, row: int) -> None:
        super().__init__(f"NaN or infinite logits in row {row}")
        self.row = row


def accept_greedy(drafts: Sequence[int], best: Sequence[int]) -> tuple[int, int]:
    """Greedy acceptance over the target's argmax of each row (`best`, K + 1 of them): the
    drafts accepted (the longest prefix it agrees with) and its own next token."""
    accepted = 0
    while accepted < len(drafts) and drafts[accepted] == best[accepted]:
        accepted += 1
    return accepted, int(best[accepted])


def accept_sampled(
    logits: npt.NDArray[np.float32],
    drafts: Sequence[int],
    qs: Sequence[Dist | None],
    sampler: SamplerSettings,
    rng: random.Random,
) -> tuple[int, int]:
    """Rejection sampling over the target's K + 1 rows of logits: the drafts accepted and its
    own next token (see verify). NonFiniteRow for a row it cannot use."""
    k = len(drafts)
    j = 0
    try:
        for j in range(k):
            p = distribution(logits[j], sampler)
            q = qs[j]
            assert q is not None
            if not accept_draft(p, q, drafts[j], rng):
                return j, residual(p, q).sample(rng)
        j = k
        return k, distribution(logits[k], sampler).sample(rng)
    except NonFiniteLogits:
        raise NonFiniteRow(j) from None
