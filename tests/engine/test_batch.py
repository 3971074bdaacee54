"""Parallel sequences (engine/decoding/batch.py) on the real SmolLM2 pair: each request's output is the
one it gets alone, whatever runs beside it, its drafter, its length or its sampler; a cancel,
a slow reader or a long prompt changes nobody else's answer."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

import gguf_edit
import model_files
import tandem.engine.decoding.round as round_module  # the acceptance both engines verify with
from batch_helpers import Asked, fresh, run, running, submit
from sampling_law import chi_square_p, exact_joint
from tandem.engine import (
    BatchEngine,
    GenerationConfig,
    LoadOptions,
    ModelPair,
    RoundEvent,
    SamplerSettings,
    TandemError,
)
from tandem.engine.drafters.lookup import KIND as LOOKUP
from tandem.engine.drafters.model import KIND as MODEL
from tandem.engine.drafters.registry import AUTO
from tandem.session.collect import collect
from tandem.session.prompts import chat_prompt, messages_for

N_SEQ = 4
TEXTS = [
    "Write a long story about a dragon.",
    "Explain how a refrigerator works.",
    "Write a Python function that sums a list, then write it again with comments.",
    "Describe the history of the printing press.",
]


@pytest.fixture(scope="module")
def parallel_pair(smollm2_f16: Path, smollm2_q4_1: Path) -> Iterator[ModelPair]:
    pair = ModelPair.load(smollm2_f16, smollm2_q4_1, LoadOptions(n_ctx=1024, n_seq=N_SEQ))
    yield pair
    pair.close()


@pytest.fixture
def engine(parallel_pair: ModelPair) -> Iterator[BatchEngine]:
    with running(parallel_pair) as eng:
        yield eng


def prompts(pair: ModelPair) -> list[list[int]]:
    return [chat_prompt(pair, messages_for(t)) for t in TEXTS]


def test_each_answer_is_the_one_it_gets_alone_and_the_target_s(
    parallel_pair: ModelPair, engine: BatchEngine, smollm2_pair: ModelPair
) -> None:
    ps = prompts(parallel_pair)
    # A mixture: drafters, fixed and adaptive K, the target alone, lengths.
    asks = [
        Asked(ps[0], GenerationConfig(max_tokens=48)),
        Asked(ps[1], GenerationConfig(max_tokens=40, drafter=MODEL, draft_max=4, adaptive=False)),
        Asked(ps[2], GenerationConfig(max_tokens=56, drafter=LOOKUP)),
        Asked(ps[3], GenerationConfig(max_tokens=24), speculative=False),
    ]
    alone = [run(engine, [fresh(a)])[0] for a in asks]
    together = run(engine, [fresh(a) for a in asks])
    for a, t in zip(alone, together, strict=True):
        assert t.tokens == a.tokens
        assert t.done is not None and a.done is not None and t.done.text == a.done.text
    # And the target's own greedy answer (`tandem run --baseline`, one sequence).
    for a in together:
        want = collect(smollm2_pair.generate(a.prompt, replace(a.config, exact=False), speculative=False))
        assert a.done is not None and a.done.text == want.text
    # Drafts were proposed and accepted somewhere: the test covers drafting, not only K = 0.
    assert together[1].done is not None and together[1].done.stats.drafted > 0
    assert sum(t.done.stats.accepted for t in together if t.done) > 0


def test_sampling_side_by_side_drafts_and_keeps_each_request_s_settings(
    parallel_pair: ModelPair, engine: BatchEngine
) -> None:
    """Sampled requests with their own seeds and settings, side by side: each answers, drafts are
    accepted by the rejection test, and each follows its own settings (a greedy one beside them
    is still the target's greedy answer). Seeded answers are not compared alone and together:
    this F16 target's rows round differently in a wider batch (exact.py), which moves a sample
    at a boundary; greedy answers stay the same (the test above)."""
    ps = prompts(parallel_pair)
    sampler = SamplerSettings(temperature=0.9, top_p=0.95)
    greedy = Asked(ps[0], GenerationConfig(max_tokens=32))
    want = run(engine, [fresh(greedy)])[0].tokens
    asks = [
        Asked(
            p,
            GenerationConfig(
                max_tokens=32, sampler=replace(sampler, seed=i), drafter=LOOKUP if i % 2 else MODEL
            ),
        )
        for i, p in enumerate(ps[1:])
    ]
    got = run(engine, [greedy, *asks])
    assert got[0].tokens == want
    assert all(a.done is not None and a.done.stats.generated > 0 for a in got)
    assert sum(a.done.stats.drafted for a in asks if a.done) > 0
    assert len({tuple(a.tokens) for a in asks}) == len(asks)


def test_a_cancel_and_a_slow_reader_change_nobody_else_s_answer(
    parallel_pair: ModelPair, engine: BatchEngine
) -> None:
    ps = prompts(parallel_pair)
    asks = [Asked(p, GenerationConfig(max_tokens=40)) for p in ps[:3]]
    alone = [run(engine, [fresh(a)])[0] for a in asks]
    leaving, slow, other = (fresh(a) for a in asks)
    slow.unread = 10**6  # its reader has fallen behind: its sequence waits, the others go on
    for a in (leaving, slow, other):
        submit(engine, a)
    t0 = time.perf_counter()
    while not leaving.tokens and time.perf_counter() - t0 < 30:
        time.sleep(0.005)
    leaving.cancel.set()
    assert other.ended.wait(60) and leaving.ended.wait(60)
    assert not slow.ended.is_set() and slow.tokens == []
    slow.unread = 0
    assert slow.ended.wait(60)
    assert leaving.done is not None and leaving.done.stats.stop_reason == "cancelled"
    assert other.tokens == alone[2].tokens
    assert slow.tokens == alone[1].tokens


def test_a_long_prompt_is_read_in_chunks_while_others_answer(
    parallel_pair: ModelPair, engine: BatchEngine
) -> None:
    ps = prompts(parallel_pair)
    long_text = " ".join(f"Item {i} is a box of {i * 7 % 13} apples." for i in range(70))
    long_prompt = chat_prompt(parallel_pair, messages_for(long_text + " How many boxes are there?"))
    # More than three rounds' reading, however the two arrive: a round with no answer waiting
    # reads a whole micro-batch (256 tokens), then one beside the short prompt, then chunks.
    assert 700 < len(long_prompt) < 1000
    short = Asked(ps[1], GenerationConfig(max_tokens=24))
    want = run(engine, [fresh(short)])[0].tokens
    big = Asked(long_prompt, GenerationConfig(max_tokens=8))
    submit(engine, big)
    submit(engine, short)
    assert short.ended.wait(60) and big.ended.wait(60)
    assert short.done is not None, short.error
    assert short.tokens == want, (short.done.stats.stop_reason, len(short.tokens), len(want))
    # The short answer's first token came before the long prompt was read.
    assert big.done is not None, big.error
    assert 0 < short.first_token_at < big.prefilled_at


def test_a_prompt_s_read_is_its_prefill_time_and_each_pass_gives_a_token(
    parallel_pair: ModelPair, engine: BatchEngine
) -> None:
    """Usage under --parallel: a prompt read in one decode with its first token counts that
    decode as its prefill (it used to show 0.0002 s, its time in the answer's), and tokens per
    pass count each pass's own token (an end-of-generation one too: a 1-token answer read 0.5)."""
    text = " ".join(f"Line {i}: the {i}th lamp is lit." for i in range(14))
    prompt = chat_prompt(parallel_pair, messages_for(text + " Which lamp is the last?"))
    assert 150 < len(prompt) < 256  # (read in one decode, with its last token)
    asked = run(engine, [Asked(prompt, GenerationConfig(max_tokens=8))])[0]
    assert asked.done is not None
    stats = asked.done.stats
    assert stats.prefill_tokens == len(prompt) and stats.prefill_s > 0.02, stats.prefill_s
    one_token_then_eog = replace(stats, generated=1, rounds=2, drafted=0, accepted=0)
    assert one_token_then_eog.tokens_per_round == 1.0
    assert stats.tokens_per_round >= 1.0


def test_prompt_lookup_finishes_a_model_draft_beside_other_sequences(
    parallel_pair: ModelPair, engine: BatchEngine, smollm2_pair: ModelPair
) -> None:
    """auto with a draft model: after a model step, prompt lookup may continue the draft from
    an earlier occurrence (the single sequence's hybrid drafter, hybrid.py); those rounds are the
    model's, their looked-up tail counted apart. Each answer is the target's, as alone."""
    text = (
        "Repeat this text exactly, twice: The quick brown fox jumps over the lazy dog. Pack my "
        "box with five dozen liquor jugs. How vexingly quick daft zebras jump."
    )
    fixed = GenerationConfig(max_tokens=96, draft_max=6, adaptive=False)  # (auto)
    asks = [Asked(chat_prompt(parallel_pair, messages_for(t)), fixed) for t in (text, TEXTS[2])]
    alone = [run(engine, [fresh(a)])[0] for a in asks]
    together = run(engine, [fresh(a) for a in asks])
    for a, t in zip(alone, together, strict=True):
        assert t.tokens == a.tokens
        want = collect(smollm2_pair.generate(a.prompt, replace(a.config, exact=False), speculative=False))
        assert t.done is not None and t.done.text == want.text
    rounds = [r for t in together for r in t.events if isinstance(r, RoundEvent)]
    tails = [r for r in rounds if r.drafter == MODEL and 0 < r.looked_up < r.drafted]
    assert tails, "prompt lookup never finished a model draft"
    assert all(r.drafted <= r.k for r in rounds)
    stats = [t.done.stats for t in together if t.done is not None]
    assert sum(s.drafted for s in stats) == sum(r.drafted for r in rounds)


def test_an_answer_alone_measures_its_speedup_and_one_beside_others_does_not(
    parallel_pair: ModelPair, engine: BatchEngine
) -> None:
    """The speedup against the target alone (speedup.py) is timed in rounds that decode one
    answer and nothing else, as a single generation times it (plain rounds, and probes when
    the meter asks). An answer that always has a neighbour in its rounds has no such round:
    it claims no speedup rather than one timed beside others."""
    ps = prompts(parallel_pair)
    alone = run(engine, [Asked(ps[2], GenerationConfig(max_tokens=64))])[0]
    assert alone.done is not None
    stats = alone.done.stats
    assert stats.speedup is not None and stats.speedup_steps >= 2
    assert stats.speedup_low is not None and stats.speedup_high is not None
    assert stats.speedup_low <= stats.speedup <= stats.speedup_high
    long = Asked(ps[0], GenerationConfig(max_tokens=160))
    short = Asked(ps[1], GenerationConfig(max_tokens=24))
    run(engine, [long, short])
    assert long.done is not None and short.done is not None
    assert long.done.stats.generated > short.done.stats.generated  # (the neighbour outlived it)
    assert short.done.stats.speedup is None and short.done.stats.speedup_steps == 0
    assert long.done.stats.speedup_steps >= 1  # (its rounds alone, after the short one ended)


def test_what_a_parallel_sequence_cannot_do_is_refused_with_the_reason(engine: BatchEngine) -> None:
    with pytest.raises(TandemError, match=r"cannot draft with 'mtp': .*has no built-in draft heads"):
        engine.check(GenerationConfig(drafter="mtp"), True)  # (what the pair lacks)
    with pytest.raises(TandemError, match="exact output is not possible"):
        engine.check(GenerationConfig(exact=True), True)  # (an F16 target: never exact)
    assert engine.check(GenerationConfig(), True).exact is False
    alone = BatchEngine(engine.target, None)  # (no draft model: nothing is decoded here)
    try:
        assert alone.kinds == [LOOKUP]
        why = f"cannot draft with {MODEL!r}: .*needs a draft model.*; ask for {LOOKUP}, auto"
        with pytest.raises(TandemError, match=why):
            alone.check(GenerationConfig(drafter=MODEL), True)
    finally:
        alone.close()


def test_a_draft_model_with_a_shorter_context_stops_drafting_not_the_batch(
    smollm2_f16: Path, smollm2_q4_1: Path, tmp_path: Path
) -> None:
    """A draft trained on a shorter context than the target's (a 32k draft beside a 128k
    target, gemma3-12b's case): an answer that outgrows it goes on without the draft model, and
    its neighbour is untouched (it used to fail every sequence of the batch: "sequence 0 of the
    draft is full")."""
    short_draft = gguf_edit.with_metadata(smollm2_q4_1, tmp_path / "short.gguf", {"llama.context_length": 96})
    with ModelPair.load(smollm2_f16, short_draft, LoadOptions(n_ctx=512, n_seq=2)) as pair:
        assert pair.draft is not None and pair.draft.n_ctx <= 128 and pair.target.n_ctx == 512  # (padded)
        counting = pair.target.tokenize("1, 2, 3, 4, 5, 6, 7, 8, 9, 10,")
        with running(pair) as eng:
            long = Asked(counting, GenerationConfig(max_tokens=160, drafter=MODEL, adaptive=False))
            other = Asked(prompts(pair)[1], GenerationConfig(max_tokens=120, drafter=MODEL, adaptive=False))
            run(eng, [long, other])
    assert long.done is not None and long.done.stats.stop_reason == "max_tokens"
    assert other.done is not None and other.done.stats.stop_reason in ("max_tokens", "eog")
    assert len(counting) + 160 > 128  # (it did outgrow the draft's context)
    drafted_at = [r.drafted for r in long.events if isinstance(r, RoundEvent)]
    assert any(drafted_at), "the draft model never drafted"


def test_a_seeded_answer_repeats_and_exact_is_not_claimed_where_it_does_not_hold(
    smollm2_q4_1: Path,
) -> None:
    """A Q4_1 target (not repacked: exact alone) with four sequences: exact output is refused
    with the reason, not claimed (a sequence's cells are not in position order in the shared
    cache: 9 of 34 "exact" answers differed beside sampling neighbours); a seeded sampling
    request asked three times alone gives one answer, its prompt read or cached (the first
    used to take its first token from the prompt's chunk, computed with other kernels)."""
    with ModelPair.load(smollm2_q4_1, smollm2_q4_1, LoadOptions(n_ctx=512, n_seq=4)) as pair:
        assert pair.target.exact_plan.possible
        with running(pair) as eng:
            with pytest.raises(TandemError, match="parallel sequences share one KV cache"):
                eng.check(GenerationConfig(exact=True), True)
            assert eng.check(GenerationConfig(), True).exact is False
            prompt = chat_prompt(pair, messages_for("Name three rivers."))
            seeded = GenerationConfig(max_tokens=40, sampler=SamplerSettings(temperature=0.8, seed=7))
            answers = [run(eng, [Asked(prompt, seeded)])[0].tokens for _ in range(3)]
    assert answers[1] == answers[0] and answers[2] == answers[0]


@pytest.fixture(scope="module")
def tiny_parallel(tiny_target: Path) -> Iterator[BatchEngine]:
    """The sampling test's pair (a draft accepted about a third of the time at temperature 1,
    top-k 4: accepts, rejections and bonus tokens all occur) with 4 sequences."""
    draft = model_files.tiny_close_draft()
    options = LoadOptions(n_ctx=256, n_seq=4, n_threads=1)
    with ModelPair.load(tiny_target, draft, options) as pair, running(pair) as eng:
        yield eng


def law_p(
    engine: BatchEngine,
    pair: ModelPair,
    waves: int = 600,
    prompt: list[int] | None = None,
    drafter: str = MODEL,
) -> tuple[float, float, int]:
    """Four sampled requests at once, `waves` times, each with its own seed, the draft model
    drafting K = 2 for all in one batch: the chi-square p-value of their three tokens against
    the target alone's exact law, the share of drafts accepted, and the rounds whose model
    draft prompt lookup finished (its tail: one-hot q beside the model's)."""
    settings = SamplerSettings(temperature=1.0, top_k=4, top_p=1.0, min_p=0.0)
    prompt = prompt or pair.raw_prompt("Once upon a time")
    joint = exact_joint(pair, prompt, settings, 3)
    counts: Counter[tuple[int, ...]] = Counter()
    drafted = accepted = tails = 0
    for wave in range(waves):
        asks = [
            Asked(
                prompt,
                GenerationConfig(
                    max_tokens=3,
                    drafter=drafter,
                    draft_max=2,
                    adaptive=False,
                    sampler=replace(settings, seed=wave * 4 + i),
                ),
            )
            for i in range(4)
        ]
        for a in run(engine, asks):
            assert len(a.tokens) == 3 and a.done is not None
            counts[tuple(a.tokens)] += 1
            drafted += a.done.stats.drafted
            accepted += a.done.stats.accepted
            tails += sum(
                1 for r in a.events if isinstance(r, RoundEvent) and r.drafter == MODEL and r.looked_up
            )
    return chi_square_p(joint, counts), accepted / drafted, tails


def test_the_sampling_law_holds_for_each_sequence_of_a_batch(
    tiny_parallel: BatchEngine, sampling_pair: ModelPair
) -> None:
    """The three tokens each of 2,400 requests gets follow the target alone's law, as one
    sequence's do (test_sampling_lossless.py); rejections and acceptances both occur."""
    p, rate, _ = law_p(tiny_parallel, sampling_pair)
    assert 0.15 < rate < 0.85
    assert p > 1e-3, p


def test_the_sampling_law_holds_where_prompt_lookup_finishes_a_model_draft(
    tiny_parallel: BatchEngine, sampling_pair: ModelPair
) -> None:
    """auto: after the draft model's token, prompt lookup may continue the draft from an earlier
    occurrence (a prompt that repeats itself), its token drawn from a one-hot q beside the
    model's q. The law holds, with such tails in the rounds. (Its power, checked by hand: with the
    model's q in place of the tail's one-hot q, p = 1.2e-5 at these 1,000 waves.)"""
    prompt = tail_prompt(sampling_pair)
    p, _, tails = law_p(tiny_parallel, sampling_pair, waves=1000, prompt=prompt, drafter=AUTO)
    assert tails > 300, tails
    assert p > 1e-3, p


def tail_prompt(pair: ModelPair) -> list[int]:
    """A prompt whose end prompt lookup cannot continue (its last two tokens occur nowhere
    before), but can once the draft model drafts its likely next token d: [last, d] occurs
    earlier, followed by the draft's next two. d is found by asking the draft (its argmax changes
    with the prompt, so each one seen goes in; on the tiny pair two alternate)."""
    draft = pair.draft
    assert draft is not None
    base, filler = pair.raw_prompt("Once upon a time"), pair.raw_prompt(" and then the end came")
    last = base[-1]
    seen: list[int] = []
    seen_after: list[tuple[int, int, int]] = []
    prompt = [*base, *filler, last]
    for _ in range(4):
        draft.truncate(0)
        d = draft.decode_greedy(prompt)[0]
        if d in seen:
            break
        seen.append(d)
        # Followed by what the draft would say next (tokens the target may accept or reject:
        # where the test has power), not by tokens it never samples.
        then = draft.decode_greedy([d])[0]
        seen_after.append((d, then, draft.decode_greedy([then])[0]))
        earlier = [t for run in seen_after for t in (last, *run, 7)]
        prompt = [*base, *earlier, *filler, last]
    draft.truncate(0)
    return prompt


def test_the_law_test_catches_a_broken_verification(
    tiny_parallel: BatchEngine, sampling_pair: ModelPair, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With every draft accepted (verification skipped) the same test fails."""
    monkeypatch.setattr(round_module, "accept_draft", lambda p, q, token, rng: True)
    p, _, _ = law_p(tiny_parallel, sampling_pair)
    assert p < 1e-3, p
