"""What every drafter kind promises, tested once for all of them: each kind of the registry, on
its case (tests/drafter_cases.py), gives exactly the target's output, greedy and sampled, turn
after turn, with the target alone in between, after a cancel (mid-answer, or while it drafts),
and again when an answer is regenerated; and it really drafts (drafts both accepted and
rejected). Per-kind tests keep only what is particular to a kind.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any

import pytest

from batch_helpers import Asked, running
from batch_helpers import run as answer_all
from drafter_cases import CASES, Case
from run_helpers import TINY, Run, assert_same_greedy, run
from sampling_law import chi_square_p, exact_joint
from tandem.engine import ChatMessage, GenerationConfig, ModelPair, RoundEvent, SamplerSettings
from tandem.engine.drafters import registry
from tandem.engine.drafters.spec import BuildContext, Drafter

# In the GPU lane too (gpu_lane.py): every kind with the target on the device.
pytestmark = pytest.mark.gpu(heavy=True)  # (on lavapipe: test_gpu_path's compact ones)

KINDS = [(kind, i) for kind in registry.names() for i in range(len(CASES.get(kind, [None])))]


@pytest.fixture(scope="module", params=KINDS, ids=[f"{k}-{i}" if i else k for k, i in KINDS])
def case(request: pytest.FixtureRequest) -> Iterator[tuple[str, Case]]:
    kind, i = request.param
    assert kind in CASES, f"the drafter kind {kind!r} has no case in tests/drafter_cases.py"
    with CASES[kind][i]() as c:
        yield kind, c


def _chat(pair: ModelPair, text: str) -> list[int]:
    return pair.chat_prompt([ChatMessage("user", text)])


def _clocks(pair: ModelPair) -> float:
    """Seconds inside llama.cpp so far: the models' decodes and their listeners'."""
    models = [m for m in (pair.target, pair.draft) if m is not None]
    return sum(m.decode_seconds for m in models) + sum(x.decode_seconds for x in pair.target.listeners)


@pytest.mark.parametrize("k", [1, 3, 6])
def test_greedy_output_is_exactly_the_target_s(case: tuple[str, Case], k: int) -> None:
    kind, c = case
    accepted = rejected = 0
    for text in c.prompts:
        prompt = _chat(c.pair, text)
        ref = run(c.alone, prompt, speculative=False, max_tokens=96)
        spent = _clocks(c.pair)
        out = run(c.pair, prompt, drafter=kind, draft_max=k, max_tokens=96)
        assert_same_greedy(c.pair, prompt, out.ids, ref.ids)
        assert out.start is not None and out.start.drafter == kind
        assert {r.drafter for r in out.rounds if r.drafted} <= {kind}
        assert out.stats.drafters[kind].drafted == sum(r.drafted for r in out.rounds)
        # Origins: accepted drafts are "draft", the rest the target's own.
        assert sum(t.origin.value == "draft" for t in out.tokens) == sum(r.accepted for r in out.rounds)
        # Time inside llama.cpp counts whatever drafted (a draft model, heads beside the target);
        # prefill aside, it falls within the rounds.
        inside = _clocks(c.pair) - spent
        assert 0.5 * inside < out.stats.llama_s <= inside
        accepted += sum(r.accepted for r in out.rounds)
        rejected += sum(r.accepted < r.drafted for r in out.rounds)
    assert accepted > 10 and rejected > 0  # both paths taken


SETTINGS = SamplerSettings(temperature=1.0, top_k=4, top_p=1.0, min_p=0.0)


def test_sampling_keeps_the_target_s_distribution(case: tuple[str, Case]) -> None:
    """Seeded runs of three tokens at K=2 against the exact law of the target alone."""
    kind, c = case
    prompt = c.pair.raw_prompt(c.sample_text)
    joint = exact_joint(c.pair, prompt, SETTINGS, 3)
    counts: Counter[tuple[int, ...]] = Counter()
    drafted = accepted = rejected = 0
    for seed in range(2000):
        r = run(c.pair, prompt, drafter=kind, max_tokens=3, draft_max=2, temperature=1.0, top_k=4, seed=seed)
        counts[tuple(r.ids)] += 1
        drafted += sum(x.drafted for x in r.rounds)
        accepted += sum(x.accepted for x in r.rounds)
        rejected += sum(x.accepted < x.drafted for x in r.rounds)
    p = chi_square_p(joint, counts)
    print(f"\n{kind}: chi-square p-value {p:.3f}; accepted {accepted}, rejected rounds {rejected}")
    if c.samples:
        assert drafted > 1000 and rejected > 100
    if c.samples and c.accepts_samples:
        assert accepted > 100
    assert p > 1e-3


def test_a_chat_goes_on_turn_after_turn_and_regenerates(case: tuple[str, Case]) -> None:
    """Each turn reuses the cache and the drafter keeps up with it; regenerating an answer
    gives it again."""
    kind, c = case
    messages: list[ChatMessage] = []
    before: list[int] = []
    for text in ["Tell me about boats.", "And about trains?", "Which one is faster?"]:
        messages.append(ChatMessage("user", text))
        prompt = c.pair.chat_prompt(messages)
        ref = run(c.alone, prompt, speculative=False, max_tokens=48)
        out = run(c.pair, prompt, drafter=kind, draft_max=4, max_tokens=48)
        assert_same_greedy(c.pair, prompt, out.ids, ref.ids)
        assert out.prefill is not None
        if before:
            assert out.prefill.prefill_tokens <= len(prompt) - len(before) + 1
        before = prompt
        again = run(c.pair, prompt, drafter=kind, draft_max=4, max_tokens=48)
        assert_same_greedy(c.pair, prompt, again.ids, ref.ids)
        messages.append(ChatMessage("assistant", out.text))


def test_the_target_alone_in_between(case: tuple[str, Case]) -> None:
    """A plain run does not feed what follows the target's decodes; the next drafted answer
    catches up on what it missed."""
    kind, c = case
    prompt = _chat(c.pair, c.prompts[0])
    ref = run(c.alone, prompt, speculative=False, max_tokens=40)
    run(c.pair, prompt, drafter=kind, max_tokens=40)
    assert_same_greedy(c.pair, prompt, run(c.pair, prompt, speculative=False, max_tokens=40).ids, ref.ids)
    for x in c.pair.target.listeners:  # (what follows the target's decodes: heads)
        assert not getattr(x, "following", False)
    longer = prompt + ref.ids[:20]
    out = run(c.pair, longer, drafter=kind, max_tokens=30)
    assert_same_greedy(c.pair, longer, out.ids, run(c.alone, longer, speculative=False, max_tokens=30).ids)
    assert sum(r.accepted for r in out.rounds) > 0


def test_cancelling_mid_answer_leaves_every_state_usable(case: tuple[str, Case]) -> None:
    kind, c = case
    prompt = _chat(c.pair, c.prompts[1])
    ref = run(c.alone, prompt, speculative=False, max_tokens=80)
    cancel = threading.Event()
    cut = run(c.pair, prompt, drafter=kind, draft_max=5, max_tokens=80, cancel=cancel, cancel_after=20)
    assert cut.stats.stop_reason == "cancelled" and 20 <= len(cut.ids) < 80
    assert cut.ids == ref.ids[: len(cut.ids)]
    # Regenerate: the same answer; then a continuation of the cancelled one.
    assert_same_greedy(
        c.pair, prompt, run(c.pair, prompt, drafter=kind, draft_max=5, max_tokens=80).ids, ref.ids
    )
    longer = prompt + cut.ids
    out = run(c.pair, longer, drafter=kind, max_tokens=30)
    assert_same_greedy(c.pair, longer, out.ids, run(c.alone, longer, speculative=False, max_tokens=30).ids)


def test_a_cancel_while_it_drafts_ends_the_answer(
    case: tuple[str, Case], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cancel set during a draft ends the answer before its verify batch; the next answer is
    the target's."""
    kind, c = case
    prompt = _chat(c.pair, c.prompts[0])
    cancel = threading.Event()
    spec = registry.spec(kind)
    assert spec is not None

    def build(ctx: BuildContext) -> Drafter | None:
        drafter = spec.build(ctx)
        if drafter is not None:
            real: Callable[..., Any] = drafter.draft

            def draft(history: Any, k: int) -> Any:
                cancel.set()  # the user presses Esc while it drafts
                return real(history, k)

            drafter.draft = draft  # type: ignore[method-assign]
        return drafter

    patched = tuple(replace(s, build=build) if s.name == kind else s for s in registry.KINDS)
    monkeypatch.setattr(registry, "KINDS", patched)
    out = run(c.pair, prompt, drafter=kind, draft_max=6, max_tokens=60, cancel=cancel)
    assert cancel.is_set() and out.stats.stop_reason == "cancelled"
    assert sum(r.drafted for r in out.rounds) == 0  # (no draft was verified)
    monkeypatch.undo()
    ref = run(c.alone, prompt, speculative=False, max_tokens=30)
    assert_same_greedy(c.pair, prompt, run(c.pair, prompt, drafter=kind, max_tokens=30).ids, ref.ids)


@pytest.mark.parametrize("n_seq", [2, 4])
def test_beside_other_sequences_each_answer_is_the_target_s(case: tuple[str, Case], n_seq: int) -> None:
    """`tandem serve --parallel N`: the kind drafts for every sequence of the batched engine
    (four requests on N sequences, a fixed K: on tiny models drafting pays nothing), and each
    answer is the target alone's; a kind that cannot is refused with the reason its spec
    gives, never served by another kind."""
    kind, c = case
    spec = registry.spec(kind)
    assert spec is not None
    if spec.batching.build is None:
        why = registry.batch_refusal(kind, [], c.pair.target, c.pair.draft)
        assert why is not None and spec.batching.why_not in why and "--parallel 1" in why
        return
    # (A drafter in a file of its own is loaded as the pair's draft file, beside the target.)
    draft = c.pair.draft.path if c.pair.draft is not None else c.pair.sidecar
    with ModelPair.load(c.pair.target.path, draft, replace(TINY, n_seq=n_seq)) as pair, running(pair) as eng:
        assert kind in eng.kinds
        config = GenerationConfig(max_tokens=64, drafter=kind, draft_max=4, adaptive=False)
        asks = [Asked(_chat(pair, text), config) for text in (*c.prompts, c.prompts[0])]
        # And a seeded sampled answer beside them, drafted with q (compared below).
        seeded = replace(config, max_tokens=32, sampler=replace(SETTINGS, seed=7))
        sampled = Asked(_chat(pair, c.prompts[1]), seeded)
        answer_all(eng, [*asks, sampled])
    for a in asks:
        ref = run(c.alone, a.prompt, speculative=False, max_tokens=64)
        assert_same_greedy(c.alone, a.prompt, a.tokens, ref.ids)
    rounds = [e for a in asks for e in a.events if isinstance(e, RoundEvent)]
    assert {r.drafter for r in rounds if r.drafted} == {kind}
    assert sum(r.accepted for r in rounds) > 10 and any(r.accepted < r.drafted for r in rounds)

    # It drafts for each sequence what it drafts for that request alone: its state follows that
    # sequence, not a neighbour's (a head given another sequence's rows drafts otherwise for
    # two requests of the four), and the seeded answer is the one it gets alone, token for
    # token. One may differ: rows computed beside other sequences round differently, which can
    # flip a near-tie in a draft.
    def drafted(a: Asked, ref: Run) -> tuple[bool, bool]:
        mine = [e for e in a.events if isinstance(e, RoundEvent)]
        counts = [(r.drafted, r.accepted) for r in mine]
        return counts == [(r.drafted, r.accepted) for r in ref.rounds], a.tokens == ref.ids

    alone = [run(c.pair, a.prompt, drafter=kind, max_tokens=64) for a in asks]
    s = seeded.sampler
    alone.append(
        run(c.pair, sampled.prompt, drafter=kind, max_tokens=32, temperature=s.temperature, top_k=4, seed=7)
    )
    same = [drafted(a, ref) for a, ref in zip([*asks, sampled], alone, strict=True)]
    assert sum(not (d and t) for d, t in same) <= 1, same
    assert sum(r.drafted for r in sampled.events if isinstance(r, RoundEvent)) > 0
