"""Prompt-lookup drafting and the auto drafter: proposals, losslessness, cache consistency."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from run_helpers import run
from sampling_law import chi_square_p, exact_joint
from tandem.engine import ChatMessage, LoadedModel, LoadOptions, ModelPair, SamplerSettings
from tandem.engine.drafters.lookup import LookupDrafter
from tandem.engine.drafters.policy import CostModel

SUMMARY = (
    "Summarize this text, quoting its key sentences.\n\nThe Old Mill Bridge was designed by the engineer "
    "Clara Hoff and built by the Reinhardt company between 1931 and 1934. It opened to traffic in May 1934 "
    "and carried the main road across the river for more than sixty years. In 1998 inspectors found deep "
    "cracks in two of its stone arches, and the bridge was closed to cars while it was repaired."
)


def test_candidates_continue_the_latest_longest_match() -> None:
    lk = LookupDrafter(100, ngram_max=3, ngram_min=2)
    history = [1, 2, 3, 4, 5, 9, 2, 3, 7, 8, 1, 2, 3]
    # Suffix [1, 2, 3] occurred at 0 (followed by 4, 5); [2, 3] also later (7, 8), but the
    # longest n-gram wins.
    assert lk.candidates(history, 2) == [4, 5]
    assert lk.candidates([5, 6, 2, 3, 9, 2, 3, 8, 2, 3], 3) == [8, 2, 3]  # most recent [2, 3]
    assert lk.candidates([1, 2, 3, 4], 3) == []  # no earlier occurrence
    assert lk.candidates([1, 2, 1, 2], 5) == [1, 2]  # runs up to the end of the history
    assert lk.candidates([1], 3) == []


def _brute_force(history: list[int], k: int, n_max: int = 4, n_min: int = 2) -> list[int]:
    for n in range(min(n_max, len(history) - 1), n_min - 1, -1):
        pattern = history[-n:]
        starts = [i for i in range(len(history) - n) if history[i : i + n] == pattern]
        if starts:
            return history[starts[-1] + n : starts[-1] + n + k]
    return []


def test_the_ngram_index_agrees_with_a_plain_search_as_the_history_grows() -> None:
    rng = np.random.default_rng(7)
    for _ in range(20):
        lk = LookupDrafter(100)
        history: list[int] = []
        for tok in rng.integers(0, 6, size=120).tolist():  # a small vocabulary repeats a lot
            history.append(tok)
            assert lk.candidates(history, 5) == _brute_force(history, 5)
        # A different history (a new generation) rebuilds the index.
        other = rng.integers(0, 6, size=50).tolist()
        assert lk.candidates(other, 5) == _brute_force(other, 5)


def test_continuation_of_history_plus_drafts() -> None:
    lk = LookupDrafter(100, ngram_max=3, ngram_min=2)
    history = [1, 2, 3, 4, 5, 6, 7, 9, 9]
    # The drafts [1, 2] end with the n-gram that began the history: continue from there.
    assert lk.continuation(history, [1, 2], 3) == [3, 4, 5]
    assert lk.continuation(history, [5, 6], 2) == [7, 9]
    assert lk.continuation(history, [8, 8], 2) == []


def test_lookup_proposals_are_one_hot() -> None:
    p = LookupDrafter(10).proposal_from([3, 4])
    assert p.tokens == [3, 4]
    assert all(q is not None and q.prob_of(t) == 1.0 for q, t in zip(p.qs, p.tokens, strict=True))


def test_greedy_lookup_and_auto_match_target_only(smollm2_pair: ModelPair) -> None:
    prompt = smollm2_pair.chat_prompt([ChatMessage("user", SUMMARY)])
    base = run(smollm2_pair, prompt, speculative=False, max_tokens=96)
    for drafter in ("lookup", "auto"):
        # From no measured costs: what the session's pair learnt in earlier tests may rightly
        # have switched drafting off on a host where batches are dear (then nothing is drafted).
        spec = run(
            smollm2_pair,
            prompt,
            max_tokens=96,
            draft_max=8,
            adaptive=True,
            drafter=drafter,
            costs=CostModel(),
        )
        assert spec.ids == base.ids, drafter
        assert spec.stats.lookup_rounds > 0, drafter  # lookup really drafted
        assert any(ev.drafter == "lookup" and ev.accepted for ev in spec.rounds), drafter
    fixed = run(smollm2_pair, prompt, max_tokens=96, draft_max=6, drafter="lookup")
    assert fixed.ids == base.ids


def test_a_lookup_only_run_leaves_the_draft_model_s_record_alone(smollm2_pair: ModelPair) -> None:
    # Its plain rounds are no evidence about the draft model (it was not asked), so they must
    # not count as rounds in which the model did not draft (that weakens its prior).
    prompt = smollm2_pair.chat_prompt([ChatMessage("user", SUMMARY)])
    model = smollm2_pair.costs.of("model")
    before = (model.accepted, model.trials, model.idle_rounds)
    spec = run(smollm2_pair, prompt, max_tokens=64, draft_max=8, adaptive=True, drafter="lookup")
    assert any(ev.drafter == "" for ev in spec.rounds)  # it had plain rounds
    assert (model.accepted, model.trials, model.idle_rounds) == before


def test_lookup_works_without_a_draft_model(smollm2_f16: Path) -> None:
    with ModelPair.load(smollm2_f16, None, LoadOptions(n_ctx=1024)) as pair:
        prompt = pair.chat_prompt([ChatMessage("user", SUMMARY)])
        base = run(pair, prompt, speculative=False, max_tokens=64)
        for drafter in ("lookup", "auto"):
            spec = run(pair, prompt, max_tokens=64, draft_max=8, adaptive=True, drafter=drafter)
            assert spec.ids == base.ids
            assert spec.stats.lookup_rounds > 0
            assert all(ev.drafter in ("lookup", "") for ev in spec.rounds)


def test_caches_consistent_after_mixed_drafters(smollm2_pair: ModelPair, smollm2_f16: Path) -> None:
    prompt = smollm2_pair.chat_prompt([ChatMessage("user", SUMMARY)])
    r = run(smollm2_pair, prompt, max_tokens=80, draft_max=8, adaptive=True, drafter="auto")
    kinds = {ev.drafter for ev in r.rounds}
    history = [*prompt, *r.ids]
    target, draft = smollm2_pair.target, smollm2_pair.draft
    assert draft is not None
    assert target.cached == history[:-1] or r.stats.stop_reason != "max_tokens"
    assert history[: len(draft.cached)] == draft.cached  # always a prefix, even after lookup rounds
    assert target.kv_pos_max() == len(target.cached) - 1
    assert draft.kv_pos_max() == len(draft.cached) - 1
    # Next logits from the reused cache equal a fresh context's.
    if r.stats.stop_reason == "max_tokens":
        out = target.decode(history[-1:], "last")
        assert out is not None
        got = np.array(out[0])
        fresh = LoadedModel(smollm2_f16, LoadOptions(n_ctx=target.n_ctx, max_outputs=1))
        try:
            ref = fresh.decode(history, "last")
            assert ref is not None
            assert int(np.argmax(got)) == int(np.argmax(ref[0]))
            assert float(np.abs(got - ref[0]).max()) < 0.1
        finally:
            fresh.close()
        target.truncate(len(history) - 1)
    assert "lookup" in kinds


@pytest.mark.gpu(heavy=True)
@pytest.mark.parametrize("drafter", ["lookup", "auto"])
def test_lookup_sampling_matches_target_distribution(sampling_pair: ModelPair, drafter: str) -> None:
    """Rejection sampling with lookup's one-hot q: the joint law of 3 tokens is the target's.
    With auto, lookup rounds and draft-model rounds alternate within a generation."""
    settings = SamplerSettings(temperature=1.0, top_k=4, top_p=1.0, min_p=0.0)
    prompt = sampling_pair.raw_prompt("one two three four one two three four one two three four one two")
    joint = exact_joint(sampling_pair, prompt, settings, 3)
    counts: Counter[tuple[int, ...]] = Counter()
    lookup_rounds = hybrid_rounds = model_rounds = 0
    n = 4000
    for seed in range(n):
        r = run(
            sampling_pair,
            prompt,
            max_tokens=3,
            draft_max=3,
            temperature=1.0,
            top_k=4,
            seed=seed,
            drafter=drafter,
        )
        counts[tuple(r.ids)] += 1
        lookup_rounds += r.stats.lookup_rounds
        hybrid_rounds += sum(1 for ev in r.rounds if ev.drafter == "model" and ev.looked_up)
        model_rounds += sum(1 for ev in r.rounds if ev.drafter == "model")
    # The repeated pattern really gives lookup something to draft.
    assert lookup_rounds + hybrid_rounds > n // 2
    if drafter == "auto":
        assert model_rounds > n // 4  # and auto also drafts with the model
    assert set(counts) <= set(joint)
    p_value = chi_square_p(joint, counts)
    print(f"\n{drafter} drafting, {hybrid_rounds} hybrid rounds, chi-square p-value: {p_value:.3f}")
    assert p_value > 1e-3


def test_round_accounting_catch_up_and_hybrid_tails(smollm2_pair: ModelPair) -> None:
    """Each model round's catch-up is exactly what the draft model had not seen (1, 2 after a
    fully accepted round, more after lookup rounds), and auto rounds may end with lookup
    tokens: the output stays the target's."""
    prompt = smollm2_pair.chat_prompt([ChatMessage("user", SUMMARY)])
    base = run(smollm2_pair, prompt, speculative=False, max_tokens=96)
    # Adaptive runs follow this machine's timings; the fixed-K auto run's schedule does not
    # (lookup where it has a match, else the model, its draft finished by lookup), so it is
    # the one that must show hybrid rounds.
    for drafter, adaptive in (("model", True), ("auto", True), ("auto", False)):
        r = run(smollm2_pair, prompt, max_tokens=96, draft_max=8, adaptive=adaptive, drafter=drafter)
        assert r.ids == base.ids
        behind = 1  # prefill leaves the prompt's last token for round one
        for ev in r.rounds:
            if ev.drafter == "model":
                assert ev.caught_up == behind
                own = ev.drafted - ev.looked_up  # the draft model decodes all its tokens but the last
                behind = ev.accepted + 1 - min(ev.accepted, own - 1)
            else:
                assert ev.caught_up == 0
                behind += ev.accepted + 1
        if drafter == "model":
            assert all(ev.looked_up == 0 for ev in r.rounds)
            pairs = zip(r.rounds, r.rounds[1:], strict=False)
            assert all(b.caught_up in (1, 2) for a, b in pairs if a.drafter == b.drafter == "model")
        else:
            if not adaptive:
                assert any(ev.drafter == "model" and ev.looked_up for ev in r.rounds)  # hybrid rounds
            assert all(ev.drafted <= 8 for ev in r.rounds)  # a lookup tail never exceeds K
