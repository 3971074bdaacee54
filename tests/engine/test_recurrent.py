"""Recurrent and hybrid models, as target and as draft: the answer is still exactly the target's.

Tiny random-weight models (model_files.tiny_stateful_model, F32, SmolLM2's tokenizer, one
shared embedding and output head so that they agree 65-85% of the time):

* lfm2: a hybrid llama.cpp rolls back itself (n_rs_seq snapshots): as a target, no checkpoint;
* mamba2: a pure state-space model llama.cpp cannot roll back: checkpointed and replayed;
* llama: a plain attention draft for the mamba2 target.

A recurrent draft is always checkpointed (it decodes one token at a time, and snapshots only
cover the positions of the last batch).
"""

from __future__ import annotations

import json
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

import model_files
from batch_helpers import Asked, fresh, running
from batch_helpers import run as run_batch
from run_helpers import assert_same_greedy, logit_tolerance, run
from sampling_law import chi_square_p, exact_joint
from tandem.cli.main import main
from tandem.engine import (
    BatchEngine,
    ChatMessage,
    GenerationConfig,
    LoadedModel,
    LoadOptions,
    ModelPair,
    RoundEvent,
    SamplerSettings,
)
from tandem.engine.drafters.lookup import KIND as LOOKUP
from tandem.engine.drafters.model import KIND as MODEL
from tandem.engine.drafters.policy import CostModel
from tandem.engine.files.gguf_file import read_gguf
from tandem.engine.files.memory import kv_cache_bytes, recurrent_state_bytes
from tandem.engine.llama.llama_lib import llama_cpp
from tandem.engine.llama.sequences import Piece

# In the GPU lane too (gpu_lane.py): checkpoints copied out of device buffers, snapshots there.
pytestmark = pytest.mark.gpu(heavy=True)  # (on lavapipe: test_gpu_path's compact ones)

OPTIONS = LoadOptions(n_ctx=512, n_threads=1)

MODELS = {
    "lfm2-t": ("lfm2", 11),
    "lfm2-d": ("lfm2", 12),
    "mamba2-t": ("mamba2", 21),
    "mamba2-d": ("mamba2", 22),
    "llama-d": ("llama", 31),
}
PAIRS = {
    "lfm2<mamba2": ("lfm2-t", "mamba2-d"),  # snapshot target, checkpointed recurrent draft
    "mamba2<lfm2": ("mamba2-t", "lfm2-d"),  # checkpointed target, checkpointed hybrid draft
    "mamba2<llama": ("mamba2-t", "llama-d"),  # checkpointed target, plain draft
}
PROMPTS = [
    "Explain in detail why the sky is blue.",
    "Write a story about the ocean and a lighthouse keeper.",
    "Describe five red fruits and what they taste like.",
]


def model_path(name: str) -> Path:
    arch, seed = MODELS[name]
    return model_files.tiny_stateful_model(name, arch, seed=seed)


@pytest.fixture(scope="module", params=list(PAIRS))
def pair(request: pytest.FixtureRequest) -> Iterator[ModelPair]:
    target, draft = PAIRS[request.param]
    p = ModelPair.load(model_path(target), model_path(draft), OPTIONS)
    yield p
    p.close()


def _prompt(pair: ModelPair, text: str) -> list[int]:
    return pair.chat_prompt([ChatMessage("user", text)])


def _assert_state_is_mirror(model: LoadedModel, path: Path, history: list[int]) -> None:
    """The model's state is what `cached` says: its next logits equal a fresh context's."""
    assert model.cached == history[: len(model.cached)]
    tokens = [*model.cached, history[len(model.cached)]]
    out = model.decode(tokens[-1:], "last")
    assert out is not None
    mine = np.array(out[0])
    fresh = LoadedModel(path, LoadOptions(n_ctx=model.n_ctx, n_threads=1, max_outputs=1), role="fresh")
    try:
        ref = fresh.decode(tokens, "last")
        assert ref is not None
        assert float(np.abs(mine - ref[0]).max()) < logit_tolerance(model, 1e-3)
    finally:
        fresh.close()
    model.truncate(len(tokens) - 1)
    assert model.cached == tokens[:-1]


def test_greedy_is_the_target_alone(pair: ModelPair) -> None:
    drafted = accepted = rounds_restored = 0
    checkpointed: list[bool] = []  # per drafted round: whether the target's state was copied
    expected: list[bool] = []  # ... and whether it had to be (llama.cpp's snapshots fell short)
    for text in PROMPTS:
        prompt = _prompt(pair, text)
        base = run(pair, prompt, speculative=False, max_tokens=40)
        assert base.stats.generated == 40
        for k in (1, 3, 5, 8, 16):
            spec = run(pair, prompt, max_tokens=40, draft_max=k)
            assert_same_greedy(pair, prompt, spec.ids, base.ids)  # (K = k)
            drafted += spec.stats.drafted
            accepted += spec.stats.accepted
            rounds_restored += sum(r.restore_s > 0 for r in spec.rounds)
            checkpointed += [r.checkpoint_s > 0 for r in spec.rounds if r.drafted]
            expected += [r.drafted > pair.target.snapshots for r in spec.rounds if r.drafted]
        spec = run(pair, prompt, max_tokens=40, draft_max=12, adaptive=True, costs=CostModel())
        assert_same_greedy(pair, prompt, spec.ids, base.ids)  # adaptive
        spec = run(pair, prompt, max_tokens=40, draft_max=6, drafter="auto")  # lookup rounds too
        assert_same_greedy(pair, prompt, spec.ids, base.ids)  # auto
    # Both paths ran: accepted drafts, and rejections that rolled the states back.
    assert 0.15 < accepted / drafted < 0.95, (accepted, drafted)
    assert rounds_restored > 10
    target, draft = pair.target, pair.draft
    assert draft is not None and draft.recurrent == (draft.info.architecture != "llama")
    assert target.recurrent
    # lfm2: llama.cpp's snapshots rolled it back, a checkpoint only for drafts longer than
    # they reach (K = 16); mamba2: every drafted round checkpointed.
    assert target.snapshots == (OPTIONS.rs_snapshots if target.info.architecture == "lfm2" else 0)
    assert checkpointed == expected and any(expected) and (target.snapshots == 0) == all(expected)
    assert target.restore_seconds > 0.0


def test_snapshot_rollback_never_reads_a_stale_snapshot(pair: ModelPair) -> None:
    """llama.cpp's seq_rm accepts a rollback of up to n_rs_seq positions whatever the last batch
    was; only the last batch's positions have snapshots. After one-token steps the engine must
    not use them (it restores a checkpoint, or starts over): the state stays the mirror's."""
    target = pair.target
    tokens = _prompt(pair, PROMPTS[0])[:20]
    target.reset()
    target.decode(tokens[:10], "none")
    for t in tokens[10:14]:
        target.decode([t], "last")
    target.truncate(12)  # two positions back, after one-token steps
    assert target.cached == tokens[:12]
    _assert_state_is_mirror(target, model_path(_name_of(target)), tokens)
    target.decode(tokens[12:18], "none")  # a batch of six: five positions back are covered
    target.truncate(14)
    _assert_state_is_mirror(target, model_path(_name_of(target)), tokens)
    target.truncate(13)  # a second rollback before any decode: refused by llama.cpp
    _assert_state_is_mirror(target, model_path(_name_of(target)), tokens)


def _name_of(model: LoadedModel) -> str:
    return model.path.name.removeprefix("tiny-").removesuffix(".gguf")


def test_states_match_a_fresh_context_after_rejections(pair: ModelPair) -> None:
    prompt = _prompt(pair, PROMPTS[1])
    r = run(pair, prompt, max_tokens=40, draft_max=5)
    assert r.stats.drafted > r.stats.accepted
    history = [*prompt, *r.ids]
    assert pair.target.cached == history[:-1]
    _assert_state_is_mirror(pair.target, model_path(_name_of(pair.target)), history)
    draft = pair.draft
    assert draft is not None
    _assert_state_is_mirror(draft, model_path(_name_of(draft)), history)


def test_multi_turn_and_regenerate(pair: ModelPair) -> None:
    turn1 = [ChatMessage("user", "Name a colour.")]
    p1 = pair.chat_prompt(turn1)
    a1 = run(pair, p1, max_tokens=24, draft_max=4)
    again = run(pair, p1, max_tokens=24, draft_max=4)  # regenerate: the prompt's checkpoint
    assert again.ids == a1.ids
    assert again.prefill is not None and again.prefill.prefill_tokens == 1
    turn2 = [*turn1, ChatMessage("assistant", a1.text), ChatMessage("user", "And another one?")]
    p2 = pair.chat_prompt(turn2)
    a2 = run(pair, p2, max_tokens=24, draft_max=4)
    assert a2.prefill is not None and a2.prefill.prefill_tokens < len(p2)  # something was reused
    for m in (pair.target, pair.draft):
        assert m is not None
        m.reset()
    fresh = run(pair, p2, max_tokens=24, speculative=False)
    assert a2.ids == fresh.ids


def test_cancel_mid_round_then_a_correct_answer(pair: ModelPair, monkeypatch: pytest.MonkeyPatch) -> None:
    """Cancelled while the draft model drafts (its state holds unverified drafts), the next
    answer, to the same prompt or another, is still exactly the target's."""
    draft = pair.draft
    assert draft is not None
    prompt = _prompt(pair, PROMPTS[2])
    reference = run(pair, prompt, max_tokens=40, speculative=False)
    cancel = threading.Event()
    armed = threading.Event()
    steps = 0
    real = draft.decode_greedy

    def decode_greedy(tokens: list[int], outputs: str = "last") -> list[int]:
        nonlocal steps
        best = real(tokens, outputs)  # type: ignore[arg-type]
        if armed.is_set():
            steps += 1
            if steps == 3:  # the third draft step: well inside a round
                cancel.set()
        return best

    monkeypatch.setattr(draft, "decode_greedy", decode_greedy)

    def arm(out: object) -> None:
        if len(getattr(out, "tokens", ())) >= 12:
            armed.set()

    from tandem.engine import GenerationConfig
    from tandem.session.collect import collect

    cfg = GenerationConfig(max_tokens=40, draft_max=6, adaptive=False, drafter="model")
    cut = collect(pair.generate(prompt, cfg, cancel=cancel), arm)
    monkeypatch.undo()
    assert cut.stats.stop_reason == "cancelled"
    assert cut.ids == reference.ids[: len(cut.ids)]
    assert len(draft.cached) > len(prompt) + len(cut.ids) - 1  # it held unverified drafts
    again = run(pair, prompt, max_tokens=40, draft_max=6)
    assert again.ids == reference.ids
    other = _prompt(pair, PROMPTS[0])
    alone = run(pair, other, max_tokens=30, speculative=False)
    assert_same_greedy(pair, other, run(pair, other, max_tokens=30, draft_max=3).ids, alone.ids)


SETTINGS = SamplerSettings(temperature=1.0, top_k=4, top_p=1.0, min_p=0.0)


@pytest.mark.slow
def test_sampling_keeps_the_target_distribution(pair: ModelPair) -> None:
    prompt = pair.raw_prompt("Once upon a time")
    joint = exact_joint(pair, prompt, SETTINGS, 3)
    counts: dict[tuple[int, ...], int] = {}
    restored = 0
    for seed in range(2000):
        r = run(pair, prompt, max_tokens=3, draft_max=2, temperature=1.0, top_k=4, seed=seed)
        counts[tuple(r.ids)] = counts.get(tuple(r.ids), 0) + 1
        restored += sum(x.restore_s > 0 for x in r.rounds)
    p = chi_square_p(joint, Counter(counts))
    print(f"\nchi-square p-value: {p:.3f}; rounds with a rollback: {restored}")
    assert restored > 200
    assert p > 1e-3


def test_memory_estimate_is_the_state_llama_cpp_holds() -> None:
    """The fit estimate's recurrent state (metadata only) is what llama.cpp copies out of a
    loaded model, and snapshots multiply it where llama.cpp keeps them."""
    for name in ("lfm2-t", "mamba2-t"):
        path = model_path(name)
        info = read_gguf(path)
        one = recurrent_state_bytes(info, 0)
        model = LoadedModel(path, OPTIONS)
        try:
            model.decode(model.tokenize("Hello there"), "none")
            copied = int(llama_cpp.llama_state_seq_get_size_ext(model._ctx, 0, 1))
            assert copied <= one + 1024  # (plus a small header)
            # Exact for a pure recurrent model; a hybrid's attention layers are counted too.
            assert one <= copied if name == "mamba2-t" else one * 2 // 3 <= copied
            copies = 1 + model.snapshots
            assert recurrent_state_bytes(info, model.snapshots) == one * copies
            assert kv_cache_bytes(info, 512, model.snapshots) >= one * copies
            assert model.kv_cache_bytes() == kv_cache_bytes(info, 512, model.snapshots)
        finally:
            model.close()
    assert recurrent_state_bytes(read_gguf(model_path("llama-d"))) == 0


def test_pairs_say_how_their_states_are_rolled_back(pair: ModelPair) -> None:
    notes = " ".join(pair.notes)
    assert f"target: {pair.target.info.architecture}" in notes
    assert ("llama.cpp rolls its state back" in notes) == (pair.target.info.architecture == "lfm2")


def test_models_command_knows_the_architectures(hf_env: Path, capsys: pytest.CaptureFixture[str]) -> None:
    paths = [str(model_path(n)) for n in ("lfm2-t", "mamba2-d", "llama-d")]
    assert main(["models", "--json", *paths]) == 0
    found = {Path(m["path"]).name: m for m in json.loads(capsys.readouterr().out)["models"]}
    assert found["tiny-lfm2-t.gguf"]["state"] == "hybrid"
    assert found["tiny-lfm2-t.gguf"]["rollback"] == "snapshots"
    assert found["tiny-mamba2-d.gguf"]["rollback"] == "checkpoint"
    assert found["tiny-llama-d.gguf"]["rollback"] == "truncate"
    assert main(["models", *paths]) == 0
    text = capsys.readouterr().out
    assert "lfm2 (hybrid, llama.cpp snapshots)" in text and "mamba2 (recurrent, checkpointed)" in text


# ---------------------------------------------------------------------- parallel sequences
def _alone(target: Path, draft: Path, n: int) -> tuple[list[list[int]], list[list[int]]]:
    """The module's prompts for this pair, and the target alone's greedy answer (n tokens) to each."""
    with ModelPair.load(target, draft, OPTIONS) as alone:
        prompts = [_prompt(alone, text) for text in PROMPTS]
        return prompts, [run(alone, p, speculative=False, max_tokens=n).ids for p in prompts]


def test_a_hybrid_target_answers_parallel_sequences_as_the_target_alone() -> None:
    """tandem serve --parallel with a hybrid llama.cpp rolls back itself (lfm2): each sequence's
    rejected drafts are cut back within the snapshots (K is capped there, even when asked for
    more), a sequence taken again for a prompt that shares a prefix is read anew (its state
    cannot be cut that far back), and every answer is the target alone's."""
    target, draft = model_path("lfm2-t"), model_path("llama-d")
    n = 40
    prompts, want = _alone(target, draft, n)
    parallel = LoadOptions(n_ctx=512, n_threads=1, n_seq=2)
    with ModelPair.load(target, draft, parallel) as pair, running(pair) as engine:
        room = pair.target.snapshots
        assert room == OPTIONS.rs_snapshots
        asks = [
            Asked(prompts[0], GenerationConfig(max_tokens=n, drafter=MODEL, draft_max=24, adaptive=False)),
            Asked(prompts[1], GenerationConfig(max_tokens=n, drafter=LOOKUP)),
            Asked(prompts[2], GenerationConfig(max_tokens=n)),
        ]
        together = run_batch(engine, [fresh(a) for a in asks])
        again = run_batch(engine, [fresh(asks[0])])  # its sequence's cache shares the prompt
    for got, expected in zip([*together, *again], [*want, want[0]], strict=True):
        assert got.error is None and got.tokens == expected
    rounds = [e for a in together for e in a.events if isinstance(e, RoundEvent)]
    assert max(r.drafted for r in rounds) <= room  # (24 asked for)
    drafted, accepted = sum(r.drafted for r in rounds), sum(r.accepted for r in rounds)
    assert drafted > 0 and 0 < accepted < drafted  # drafts kept, and rejections cut back
    assert not BatchEngine.left_out(pair.target, pair.draft)  # (every kind serves several)


@pytest.mark.parametrize("name", list(PAIRS))
def test_checkpointed_states_answer_parallel_sequences_as_the_target_alone(name: str) -> None:
    """Every pair of the module with two parallel sequences: a target llama.cpp cannot roll back
    (mamba2) is checkpointed per sequence before a verify that drafts and brought back after a
    rejection, its accepted tokens read again; a recurrent draft model (mamba2, and lfm2 whose
    snapshots reach within one decode only) is checkpointed once caught up, its drafts being a
    decode each. Each answer is the target alone's, drafts are accepted and rejected, and a
    sequence taken again for a prompt sharing a prefix keeps what it can of its state."""
    target, draft = (model_path(m) for m in PAIRS[name])
    n = 40
    prompts, want = _alone(target, draft, n)
    parallel = LoadOptions(n_ctx=512, n_threads=1, n_seq=2)
    with ModelPair.load(target, draft, parallel) as pair, running(pair) as engine:
        assert not BatchEngine.left_out(pair.target, pair.draft)
        reread: list[int] = []  # tokens the target read again after a rejection
        prefill = engine.t_ctx.prefill

        def counting(pieces: list[Piece]) -> None:
            reread.extend(len(p.tokens) for p in pieces)
            prefill(pieces)

        engine.t_ctx.prefill = counting  # type: ignore[method-assign]
        asks = [
            Asked(prompts[0], GenerationConfig(max_tokens=n, drafter=MODEL, draft_max=6, adaptive=False)),
            Asked(prompts[1], GenerationConfig(max_tokens=n, drafter=MODEL, draft_max=3, adaptive=False)),
            Asked(prompts[2], GenerationConfig(max_tokens=n)),
        ]
        together = run_batch(engine, [fresh(a) for a in asks])
        again = run_batch(engine, [fresh(asks[0])])  # its sequence's cache shares the prompt
    for got, expected in zip([*together, *again], [*want, want[0]], strict=True):
        assert got.error is None and got.tokens == expected
    rounds = [e for a in together[:2] for e in a.events if isinstance(e, RoundEvent)]
    drafted, accepted = sum(r.drafted for r in rounds), sum(r.accepted for r in rounds)
    assert drafted > 0 and 0 < accepted < drafted  # drafts kept, and rejections taken back
    for a in together[:2]:  # the draft model catches up on a round's tokens, not on all again
        later = [e.caught_up for e in a.events if isinstance(e, RoundEvent) and e.drafted][1:]
        assert later and max(later) <= 8, later
    if pair.target.snapshots:
        assert not reread  # (K within its snapshots: llama.cpp rolls back itself)
    else:  # back to the checkpoint before the verify: the last token and the accepted drafts
        every = [e for a in (*together, *again) for e in a.events if isinstance(e, RoundEvent)]
        assert 0 < len(reread) <= sum(r.accepted < r.drafted for r in every) and max(reread) <= 7
