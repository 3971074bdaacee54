"""The round, verification and the scheduler as pure logic: a fake target (a deterministic rule
for its next token, and the same KV-cache bookkeeping LoadedModel keeps) and fake drafters.
These run in milliseconds (the fast lane: `pytest -m fast`); the real-llama.cpp tests beside
them prove the same on real models (test_greedy_lossless.py, test_sampling_lossless.py...).
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import pytest

from tandem.engine.config import GenerationConfig
from tandem.engine.decoding.round import PLAIN, Plan, run_round, verify
from tandem.engine.decoding.scheduler import Scheduler
from tandem.engine.drafters import Proposal, registry
from tandem.engine.drafters.lookup import LookupDrafter
from tandem.engine.drafters.policy import CostModel
from tandem.engine.drafters.spec import Drafter, DrafterSpec, Needs, Offer, RoundView, Traits, Words
from tandem.engine.errors import TandemError
from tandem.engine.events import Origin, RoundEvent
from tandem.engine.sampling import Dist, SamplerSettings

pytestmark = pytest.mark.fast

V = 50  # the fake vocabulary
GREEDY = SamplerSettings(temperature=0.0)


def rule(history: Sequence[int]) -> int:
    """The fake target's next token after `history`."""
    return (history[-1] * 7 + len(history)) % V


class FakeTarget:
    """What the round asks of a target: batched greedy decoding (or logits rows), a mirror of
    its cache, rollback. Its choice after a prefix is `rule`; logits put +8 on it."""

    def __init__(self, *, recurrent: bool = False) -> None:
        self.cached: list[int] = []
        self.recurrent = recurrent
        self.checkpoints = 0
        self.cuts: list[int] = []
        self.n_vocab = V
        self.listeners: list[object] = []

    def _rows(self, tokens: Sequence[int]) -> list[int]:
        out = []
        for t in tokens:
            self.cached.append(t)
            out.append(rule(self.cached))
        return out

    def decode_greedy(self, tokens: Sequence[int], outputs: str = "last") -> list[int]:
        best = self._rows(tokens)
        return best if outputs == "all" else best[-1:]

    def decode(self, tokens: Sequence[int], outputs: str = "last") -> np.ndarray:
        best = self._rows(tokens)
        logits = np.zeros((len(best), V), dtype=np.float32)
        logits[np.arange(len(best)), best] = 8.0
        return logits if outputs == "all" else logits[-1:]

    def can_roll_back(self, k: int) -> bool:
        return not self.recurrent

    def checkpoint(self, slot: str = "round") -> None:
        self.checkpoints += 1

    def truncate(self, n: int, *, replay: bool = True) -> None:
        self.cuts.append(n)
        del self.cached[n:]


@dataclass
class ScriptedDrafter:
    """Proposes the target's own tokens for its first `right` guesses, then wrong ones."""

    right: int
    kind: str = "fake"
    kept: list[int] = field(default_factory=list)
    qs: bool = False

    def draft(self, history: Sequence[int], k: int) -> Proposal:
        h = list(history)
        out = Proposal()
        for i in range(k):
            tok = rule(h) if i < self.right else (rule(h) + 1) % V
            out.tokens.append(tok)
            out.qs.append(Dist(np.array([tok]), np.ones(1), V) if self.qs else None)
            h.append(tok)
        out.passes = k
        return out

    def accept(self, keep: int) -> None:
        self.kept.append(keep)


def start(history: list[int]) -> FakeTarget:
    target = FakeTarget()
    target.cached = history[:-1]  # the round's invariant: the target holds all but the last
    return target


# ---------------------------------------------------------------------- the round
def test_all_drafts_accepted_then_the_bonus() -> None:
    history = [3, 9, 4]
    target, drafter = start(history), ScriptedDrafter(right=5)
    rnd = run_round(target, Plan(drafter, 4), history, GREEDY, random.Random(0))  # type: ignore[arg-type]
    assert rnd is not None
    expected = list(history)
    for _ in range(5):
        expected.append(rule(expected))
    assert list(rnd.tokens) == expected[3:]  # four drafts and the target's bonus
    assert (rnd.drafted, rnd.accepted, rnd.emitted, rnd.k, rnd.drafter) == (4, 4, 5, 4, "fake")
    assert rnd.origin(3) is Origin.DRAFT and rnd.origin(4) is Origin.BONUS
    assert target.cached == expected[:-1] and not target.cuts  # nothing to roll back
    assert drafter.kept == [len(history) + 4]


def test_a_rejection_rolls_back_to_the_kept_tokens() -> None:
    history = [1, 2, 3]
    target, drafter = start(history), ScriptedDrafter(right=2)
    rnd = run_round(target, Plan(drafter, 5), history, GREEDY, random.Random(0))  # type: ignore[arg-type]
    assert rnd is not None and (rnd.drafted, rnd.accepted, rnd.emitted) == (5, 2, 3)
    kept = [*history]
    for _ in range(3):
        kept.append(rule(kept))
    assert list(rnd.tokens) == kept[3:]  # two drafts, then the target's correction
    assert rnd.origin(2) is Origin.TARGET
    assert target.cuts == [len(history) + 2] and target.cached == kept[:-1]
    assert drafter.kept == [len(history) + 2]


def test_a_plain_step_drafts_nothing() -> None:
    history = [5, 6]
    target = start(history)
    rnd = run_round(target, PLAIN, history, GREEDY, random.Random(0))  # type: ignore[arg-type]
    assert rnd is not None and list(rnd.tokens) == [rule(history)]
    assert (rnd.drafted, rnd.drafter, rnd.origin(0)) == (0, "", Origin.TARGET)


def test_a_recurrent_target_is_checkpointed_only_when_drafting() -> None:
    history = [1, 2]
    target = start(history)
    target.recurrent = True
    run_round(target, Plan(ScriptedDrafter(right=0), 3), history, GREEDY, random.Random(0))  # type: ignore[arg-type]
    assert target.checkpoints == 1
    run_round(target, PLAIN, [*history, rule(history)], GREEDY, random.Random(0))  # type: ignore[arg-type]
    assert target.checkpoints == 1


def test_cancel_while_drafting_skips_the_verify() -> None:
    history = [1, 2]
    target, cancel = start(history), threading.Event()
    cancel.set()
    rnd = run_round(target, Plan(ScriptedDrafter(right=3), 3), history, GREEDY, random.Random(0), cancel)  # type: ignore[arg-type]
    assert rnd is None and target.cached == history[:-1]


# ---------------------------------------------------------------------- verify
def test_greedy_verify_accepts_the_agreeing_prefix() -> None:
    history = [4, 4]
    target = start(history)
    good = rule(history)
    accepted, own = verify(target, history[-1], [good, 0, 0], [None] * 3, GREEDY, random.Random(0))  # type: ignore[arg-type]
    assert accepted == 1 and own == rule([*history, good])


def test_sampled_verify_accepts_what_the_target_would_sample() -> None:
    # The target puts nearly all its mass on rule(...): a draft of exactly that, from a one-hot
    # q, is accepted (p/q ~ 1); a draft of another token (p ~ 0) is rejected and replaced by a
    # draw from the residual, which is then the target's choice.
    sampler = SamplerSettings(temperature=1.0, top_k=1)
    history = [7, 1]
    right = rule(history)
    target = start(history)
    q = [Dist(np.array([right]), np.ones(1), V)]
    assert verify(target, history[-1], [right], q, sampler, random.Random(1))[0] == 1  # type: ignore[arg-type]
    target = start(history)
    wrong = (right + 1) % V
    accepted, own = verify(
        target, history[-1], [wrong], [Dist(np.array([wrong]), np.ones(1), V)], sampler, random.Random(1)
    )  # type: ignore[arg-type]
    assert (accepted, own) == (0, right)


# ---------------------------------------------------------------------- the scheduler
@dataclass
class BiddingDrafter:
    """A drafter that bids a fixed rate and K, and credits its rounds to its kind."""

    kind: str
    rate: float
    k: int = 3
    begun: int = 0

    def begin(self, prompt: Sequence[int], should_stop: Callable[[], bool]) -> None:
        self.begun += 1

    def began(self, prompt: Sequence[int]) -> bool:
        return True

    def draft(self, history: Sequence[int], k: int) -> Proposal:
        return Proposal([0] * k, [None] * k, passes=k)

    def accept(self, keep: int) -> None:
        pass

    def search(self, view: RoundView) -> None:
        pass

    def offer(self, view: RoundView) -> Offer | None:
        return Offer(self.rate, min(self.k, view.budget))

    def chosen(self, k: int, view: RoundView) -> Drafter:
        return self

    def credit(self, rnd: RoundEvent) -> list[tuple[str, int, int]]:
        return [(self.kind, rnd.drafted, rnd.accepted)]

    def listener(self) -> None:
        return None


def _spec(name: str, rank: int, *, timed_by_drafting: bool = True) -> DrafterSpec:
    return DrafterSpec(
        name=name,
        words=Words(label=name, help=f"the {name} kind"),
        needs=Needs.NOTHING,
        build=lambda ctx: None,
        missing=lambda target, draft: None,
        traits=Traits(
            draft_cost=lambda costs, drafted, caught_up, looked_up, draft_s: 0.0,
            untimed_rank=rank,
            timed_by_drafting=timed_by_drafting,
        ),
    )


@pytest.fixture
def fakes(monkeypatch: pytest.MonkeyPatch) -> Callable[..., Scheduler]:
    """A scheduler over fake kinds, registered as a new kind would be (registry.KINDS)."""

    def make(*drafters: BiddingDrafter, specs: Sequence[DrafterSpec], adaptive: bool = False) -> Scheduler:
        monkeypatch.setattr(registry, "KINDS", tuple(specs))
        monkeypatch.setattr(registry, "build", lambda ctx: list(drafters))
        config = GenerationConfig(adaptive=adaptive, drafter="auto")
        return Scheduler(FakeTarget(), None, config, random.Random(0), None, CostModel())  # type: ignore[arg-type]

    return make


def test_the_fastest_offer_wins(fakes: Callable[..., Scheduler]) -> None:
    slow, fast = BiddingDrafter("slow", 10.0), BiddingDrafter("quick", 30.0, k=5)
    s = fakes(slow, fast, specs=[_spec("slow", 0), _spec("quick", 1)])
    plan = s.plan([1, 2, 3], budget=8)
    assert plan.drafter is fast and plan.k == 5
    assert s.plan([1, 2, 3], budget=2).k == 2  # clipped to the budget


def test_unmeasured_rates_go_to_the_cheapest_kind_to_try(fakes: Callable[..., Scheduler]) -> None:
    a, b = BiddingDrafter("a", 0.0), BiddingDrafter("b", 0.0)
    s = fakes(a, b, specs=[_spec("a", 2), _spec("b", 1)])
    assert s.plan([1, 2], budget=8).drafter is b


def test_a_kind_never_measured_is_tried_once(fakes: Callable[..., Scheduler]) -> None:
    measured, new = BiddingDrafter("m", 20.0), BiddingDrafter("n", 0.0)
    s = fakes(measured, new, specs=[_spec("m", 0), _spec("n", 1)])
    assert s.plan([1, 2], budget=8).drafter is new
    # A kind timed without drafting (a search) is not "unmeasured" for that rule.
    s = fakes(measured, new, specs=[_spec("m", 0), _spec("n", 1, timed_by_drafting=False)])
    assert s.plan([1, 2], budget=8).drafter is measured


def test_no_offer_is_a_plain_step(fakes: Callable[..., Scheduler]) -> None:
    s = fakes(specs=[])
    assert s.plan([1, 2], budget=8) == PLAIN and s.begin([1], lambda: False)


def test_observe_credits_the_kind_that_drafted(fakes: Callable[..., Scheduler]) -> None:
    d = BiddingDrafter("a", 5.0)
    s = fakes(d, specs=[_spec("a", 0)], adaptive=True)
    before = s.policies["a"].alpha  # type: ignore[union-attr]
    s.plan([1, 2], budget=8)
    s.observe(RoundEvent(drafted=3, accepted=0, emitted=1, draft_s=0.0, verify_s=0.0, k=3, drafter="a"))
    assert s.policies["a"].alpha < before  # type: ignore[union-attr]
    assert s.costs.of("a").trials > 5.0  # the long-run acceptance heard of it too


def test_auto_is_every_kind_the_pair_offers() -> None:
    # A target without heads and no draft model: prompt lookup alone, from the registry.
    config = GenerationConfig(drafter="auto")
    s = Scheduler(FakeTarget(), None, config, random.Random(0), None, CostModel())  # type: ignore[arg-type]
    specs = [registry.spec(d.kind) for d in s.drafters]
    assert all(k is not None and k.needs is Needs.NOTHING for k in specs)  # (nor heads, nor a draft)
    lookup = next(d for d in s.drafters if isinstance(d, LookupDrafter))
    history = [1, 2, 3, 4, 1, 2]
    plan = s.plan(history, budget=8)
    assert plan.drafter is lookup and plan.k == 4  # "1 2" went on with "3 4 1 2"
    assert plan.drafter.draft(history, plan.k).tokens == [3, 4, 1, 2]


def test_choices_are_the_registry_kinds(monkeypatch: pytest.MonkeyPatch) -> None:
    assert registry.choices() == (*registry.names(), registry.AUTO)
    registry.check_choice(registry.AUTO)
    with pytest.raises(TandemError, match="the drafter must be one of: "):
        registry.check_choice("toy")
    # A kind registered is a choice, with its help, and the config accepts it.
    monkeypatch.setattr(registry, "KINDS", (*registry.KINDS, _spec("toy", 3)))
    registry.check_choice("toy")
    assert "toy: the toy kind" in registry.help_text() and registry.label("toy") == "toy"
    GenerationConfig(drafter="toy").validate()
