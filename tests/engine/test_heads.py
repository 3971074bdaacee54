"""The drafters that read the target's rows (drafters/heads/: MTP heads, EAGLE-3, DFlash) keep
their own cache in step with the target's by token comparison alone: after a session of turns,
regenerated and cancelled answers and a plain run, a head's state is a freshly loaded one's
(the same first-step logits, or block rows, for the same history)."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import numpy as np
import numpy.typing as npt
import pytest

from drafter_cases import CASES, Case
from run_helpers import TINY, logit_tolerance, run
from tandem.engine import ChatMessage, ModelPair
from tandem.engine.drafters.heads.base import EntryHead, Head
from tandem.engine.drafters.heads.dflash import DFlashHead

pytestmark = pytest.mark.gpu(heavy=True)  # (in the GPU lane too: the rows come off the device)

HEADS = ("mtp", "eagle3", "dflash")


@pytest.fixture(scope="module", params=HEADS)
def case(request: pytest.FixtureRequest) -> Iterator[tuple[str, Case]]:
    with CASES[request.param][0]() as c:
        yield request.param, c


def _head(pair: ModelPair) -> Head:
    heads = [x for x in pair.target.listeners if isinstance(x, Head)]
    assert len(heads) == 1
    return heads[0]


def _rows(pair: ModelPair, history: list[int]) -> list[npt.NDArray[np.float32]]:
    """What the pair's head drafts from after `history` (its first step's logits, or a block's
    rows), its state brought up to the history's all-but-last tokens first."""
    head, target = _head(pair), pair.target
    target.truncate(min(len(history) - 1, len(target.cached)))
    head.set_following(True)
    target.decode(history[len(target.cached) : len(history) - 1], "none")
    if isinstance(head, EntryHead):
        rows = [np.array(head.first_step(history)[0])]
    else:
        assert isinstance(head, DFlashHead)
        rows = [np.array(r) for r in head.block(history, 3)[0]]
    head.end_draft()
    return rows


def test_after_a_session_a_head_is_a_fresh_one(case: tuple[str, Case]) -> None:
    kind, c = case
    messages: list[ChatMessage] = []
    for text in ["Tell me about boats.", "And about trains?"]:
        messages.append(ChatMessage("user", text))
        prompt = c.pair.chat_prompt(messages)
        out = run(c.pair, prompt, drafter=kind, draft_max=3, max_tokens=40)
        run(c.pair, prompt, drafter=kind, draft_max=3, max_tokens=40)  # regenerated
        messages.append(ChatMessage("assistant", out.text))
    run(c.pair, prompt, speculative=False, max_tokens=20)  # a plain run: the head not fed
    cut = run(c.pair, prompt, drafter=kind, max_tokens=40, cancel=threading.Event(), cancel_after=10)
    history = prompt + cut.ids
    mine = _rows(c.pair, history)
    with ModelPair.load(c.pair.target.path, c.pair.sidecar, TINY) as fresh:
        theirs = _rows(fresh, history)
    tolerance = logit_tolerance(c.pair.target, 2e-3)  # (a GPU rounds batches apart)
    for a, b in zip(mine, theirs, strict=True):
        assert np.allclose(a, b, atol=tolerance)
