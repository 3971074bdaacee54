"""An EAGLE-3 drafter (a trained one-layer sidecar GGUF): what is particular to it. What every
kind promises the drafter contract holds it to (test_drafter_contract.py).

Tiny random-weight EAGLE-3 GGUFs (model_files.tiny_eagle3_model: architecture "eagle3", F32,
SmolLM2's tokenizer, no embeddings or head of their own) are made for a tiny 32-wide llama and
for the tiny hybrid Qwen3.5; llama.cpp runs them beside the target, fed with the target's rows
at three of its layers (app/tandem/engine/drafters/heads/eagle3.py). They agree with the target about
half the time, at every step of a draft, so drafts are both accepted and rejected. The reference
for every answer is the target alone.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

import numpy as np
import pytest

import trained
from run_helpers import TINY, run
from tandem.engine import ChatMessage, IncompatiblePairError, ModelPair
from tandem.engine.drafters.heads.eagle3 import Eagle3Head, head_of
from tandem.engine.drafters.policy import CostModel
from tandem.engine.files.gguf_file import read_gguf

PROMPTS = [
    "Explain in detail why the sky is blue.",
    "Write a story about the ocean and a lighthouse keeper.",
    "Describe five red fruits and what they taste like.",
]


@pytest.fixture(scope="module")
def alone() -> Iterator[ModelPair]:
    with ModelPair.load(trained.target(), None, TINY) as p:
        yield p


@pytest.fixture(scope="module")
def pair() -> Iterator[ModelPair]:
    with ModelPair.load(trained.target(), trained.eagle3(), TINY) as p:
        yield p


def _chat(pair: ModelPair, text: str) -> list[int]:
    return pair.chat_prompt([ChatMessage("user", text)])


def _head(pair: ModelPair) -> Eagle3Head:
    head = head_of(pair.target)
    assert head is not None
    return head


def test_a_sidecar_loads_beside_the_target_not_as_a_draft_model(pair: ModelPair) -> None:
    head = _head(pair)
    assert pair.draft is None and pair.sidecar == trained.eagle3() and pair.draft_file == trained.eagle3()
    assert head.facts.layers == (0, 1, 2) and head.label == "EAGLE-3 drafter"
    assert head in pair.target.listeners


def test_its_own_rows_chain_step_after_step(pair: ModelPair, alone: ModelPair) -> None:
    """A draft step after the first feeds it its own pre-norm row in place of the target's g:
    runs of two and more accepted drafts show the chain holds (the output is the target's)."""
    deep = 0
    for text in PROMPTS:
        prompt = _chat(pair, text)
        out = run(pair, prompt, drafter="eagle3", draft_max=6, max_tokens=96)
        assert out.ids == run(alone, prompt, speculative=False, max_tokens=96).ids
        deep += sum(r.accepted >= 2 for r in out.rounds)
    assert deep > 5


def test_adaptive_k_and_auto_measure_it_and_keep_the_answer(pair: ModelPair, alone: ModelPair) -> None:
    costs = CostModel()
    kinds: Counter[str] = Counter()
    for text in PROMPTS:
        prompt = _chat(pair, text)
        ref = run(alone, prompt, speculative=False, max_tokens=128)
        for drafter in ("eagle3", "auto"):
            out = run(pair, prompt, drafter=drafter, adaptive=True, draft_max=8, max_tokens=128, costs=costs)
            assert out.ids == ref.ids
            kinds.update(r.drafter for r in out.rounds if r.drafted)
    own = costs.of("eagle3")
    assert own.first.known and own.step.known  # a step per draft token, its own measured costs
    assert costs.draft_time("eagle3", 3) is not None and 0.0 < own.alpha < 1.0
    assert kinds["eagle3"] > 0


def test_p_min_stops_unsure_drafts_and_changes_nothing(pair: ModelPair, alone: ModelPair) -> None:
    prompt = _chat(pair, PROMPTS[1])
    ref = run(alone, prompt, speculative=False, max_tokens=64)
    free = run(pair, prompt, drafter="eagle3", draft_max=6, max_tokens=64)
    sure = run(pair, prompt, drafter="eagle3", draft_max=6, max_tokens=64, p_min=0.6)
    assert free.ids == sure.ids == ref.ids
    assert sum(r.drafted for r in sure.rounds) < sum(r.drafted for r in free.rounds)


def test_its_own_reduced_vocabulary_is_mapped_onto_the_target_s(alone: ModelPair) -> None:
    """d2t: its LM head covers half the target's tokens; llama.cpp scatters its logits onto the
    target's vocabulary (the others at minus infinity), so it only ever proposes those."""
    path = trained.eagle3_d2t()
    info = read_gguf(path)
    d2t = next(t for t in info.tensors if t.name == "d2t")
    with path.open("rb") as fh:
        fh.seek(info.data_offset + d2t.offset)
        kept = np.frombuffer(fh.read(8 * d2t.shape[0]), dtype="<i8")
    with ModelPair.load(trained.target(), path, TINY) as pair:
        head = _head(pair)
        assert head.facts.draft_vocab == len(kept) == pair.target.n_vocab // 2
        prompt = _chat(pair, PROMPTS[0])
        for k in (1, 4):
            out = run(pair, prompt, drafter="eagle3", draft_max=k, max_tokens=64)
            assert out.ids == run(alone, prompt, speculative=False, max_tokens=64).ids
            assert sum(r.accepted for r in out.rounds) > 5
        history = prompt + out.ids
        target = pair.target
        target.truncate(min(len(history) - 1, len(target.cached)))
        head.set_following(True)
        target.decode(history[len(target.cached) : -1], "none")
        logits = np.array(head.first_step(history)[0])
        head.end_draft()
    outside = np.ones(len(logits), dtype=bool)
    outside[kept] = False
    assert np.isneginf(logits[outside]).all() and np.isfinite(logits[kept]).all()


def test_a_hybrid_target_drafts_with_it_and_with_its_own_heads() -> None:
    """Qwen3.5 (gated delta net and attention) with its MTP block: the EAGLE-3 drafter rolls
    back with it (llama.cpp's snapshots, checkpoints beyond), turn after turn; auto measures it
    and the heads side by side."""
    with (
        ModelPair.load(trained.hybrid_target(), None, TINY) as alone,
        ModelPair.load(trained.hybrid_target(), trained.eagle3(), TINY) as pair,
    ):
        costs = CostModel()
        kinds: Counter[str] = Counter()
        messages: list[ChatMessage] = []
        for text, k in zip(PROMPTS, (2, 5, 14), strict=True):  # 14: beyond the snapshots
            messages.append(ChatMessage("user", text))
            prompt = pair.chat_prompt(messages)
            ref = run(alone, prompt, speculative=False, max_tokens=64)
            out = run(pair, prompt, drafter="eagle3", draft_max=k, max_tokens=64)
            assert out.ids == ref.ids
            assert sum(r.accepted for r in out.rounds) > 3 and any(r.accepted < r.drafted for r in out.rounds)
            auto = run(pair, prompt, drafter="auto", adaptive=True, max_tokens=64, costs=costs)
            assert auto.ids == ref.ids
            kinds.update(r.drafter for r in auto.rounds if r.drafted)
            messages.append(ChatMessage("assistant", out.text))
        assert costs.of("eagle3").first.known and costs.of("mtp").first.known
        assert kinds["eagle3"] > 0


def test_a_sidecar_for_another_target_is_refused_before_loading(monkeypatch: pytest.MonkeyPatch) -> None:
    """tiny-a is 64 wide with 2 layers: the drafter (trained on 32-wide rows of layers 0-2)
    would make llama.cpp abort; it is refused from the headers, with the reason."""
    import model_files
    import tandem.engine.pair as pair_module

    def no_loading(*args: object, **kwargs: object) -> None:
        raise AssertionError("nothing may load")

    monkeypatch.setattr(pair_module, "LoadedModel", no_loading)
    with pytest.raises(IncompatiblePairError) as err:
        ModelPair.load(model_files.tiny_model("a", seed=1), trained.eagle3(), TINY)
    message = str(err.value)
    assert "\n" not in message
    assert "EAGLE-3 drafter for another target" in message
    assert "trained on a target 32 wide, and tiny-a.gguf is 64 wide" in message
    assert "reads the target's layer 2, and tiny-a.gguf has 2 layers" in message
