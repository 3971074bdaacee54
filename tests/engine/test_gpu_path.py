"""What a GPU backend changes, and what must not change: run in the GPU lane (gpu_lane.py, every
layer offloaded: Vulkan on lavapipe in CI, CUDA on a lent machine) and in the ordinary suite on
the CPU, where the GPU-only tests skip with the lane's name.

- greedy where the model runs: in llama.cpp's graph on the CPU, from the rows read back on a GPU
  (its backend sampler cost more than the copy); the tokens are those of the copied path;
- the KV cache after rejections, a cancel or a new turn holds what the engine believes (checked
  against a fresh context), on device buffers;
- the memory fit reads the GPU's memory from its backend; a model the GPU cannot hold falls back
  to the CPU with a note, and the answer is the same;
- every front-end can say where the model runs (stats.device, the CLI's stats line).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

import gpu_lane
import model_files
import trained
from run_helpers import TINY, assert_same_greedy, run
from sampling_law import chi_square_p, exact_joint
from tandem.engine import ChatMessage, LoadedModel, ModelPair, SamplerSettings
from tandem.engine.llama.devices import gpu_memory, local_gpus

pytestmark = pytest.mark.gpu

ROOT = Path(__file__).resolve().parents[2]
PROMPTS = [
    "Once upon a time",
    "def f(x): return x * x + 1",
    "one two three four one two three four one two",
    "The capital of France is",
]
COPIED = replace(TINY, greedy_in_graph=False)  # every row of logits read back and checked
LOGIT_TOLERANCE = 0.1  # (test_cache_consistency.py: batched and one-token kernels round apart)


def test_models_say_where_they_run(tiny_pair: ModelPair) -> None:
    gpus = [d.label for d in local_gpus()]
    for m in (tiny_pair.target, tiny_pair.draft):
        assert m is not None
        if gpus:  # every layer asked for (-1): on the GPU, named as ggml names it
            assert [d.label for d in m.devices] == gpus and m.device_label == " + ".join(gpus)
        else:
            assert m.devices == [] and m.device_label == "CPU"
    out = run(tiny_pair, tiny_pair.raw_prompt(PROMPTS[0]), max_tokens=8)
    assert out.stats.device == tiny_pair.target.device_label
    assert out.stats.to_dict()["device"] == tiny_pair.target.device_label


def test_greedy_where_the_model_runs_gives_the_copied_path_s_tokens(
    tiny_target: Path, tiny_draft: Path
) -> None:
    """On the CPU llama.cpp's sampler picks greedy tokens in the graph; on a GPU the rows are read
    back (its backend sampler was slower than the copy: docs/results/history.md). Both give the tokens
    of reading every row and numpy's argmax, for the target alone and every drafter."""
    with (
        ModelPair.load(tiny_target, tiny_draft, TINY) as default,
        ModelPair.load(tiny_target, tiny_draft, COPIED) as copied,
    ):
        slow = gpu_lane.slow_device()  # (lavapipe: two prompts, shorter answers)
        n = 20 if slow else 40
        for text in PROMPTS[:2] if slow else PROMPTS:
            prompt = default.raw_prompt(text)
            alone = run(copied, prompt, speculative=False, max_tokens=n)
            assert run(default, prompt, speculative=False, max_tokens=n).ids == alone.ids
            for drafter in ("model", "lookup", "auto"):
                for pair in (default, copied):
                    out = run(pair, prompt, max_tokens=n, draft_max=5, drafter=drafter)
                    assert_same_greedy(pair, prompt, out.ids, alone.ids)  # (text, drafter)
        for m in (default.target, default.draft):
            assert m is not None and (m._greedy_chain is not None) == (not m.devices)
        assert copied.target._greedy_chain is None


def _matches_fresh(model: LoadedModel, path: Path, tokens: list[int]) -> None:
    """Feed the last token to `model`'s cache and to a fresh context: the same logits."""
    assert model.cached == tokens[:-1] and model.kv_pos_max() == len(model.cached) - 1
    out = model.decode(tokens[-1:], "last")
    assert out is not None
    mine = np.array(out[0])
    fresh = LoadedModel(path, replace(TINY, max_outputs=1), role="fresh")
    try:
        ref = fresh.decode(tokens, "last")
        assert ref is not None
        assert float(np.abs(mine - ref[0]).max()) < LOGIT_TOLERANCE
        assert int(np.argmax(mine)) == int(np.argmax(ref[0]))
    finally:
        fresh.close()
    model.truncate(len(tokens) - 1)


def test_caches_match_a_fresh_context_after_rejections(
    tiny_target: Path, tiny_draft: Path, tiny_pair: ModelPair
) -> None:
    prompt = tiny_pair.raw_prompt(PROMPTS[1])
    r = run(tiny_pair, prompt, max_tokens=40, draft_max=4)
    assert r.stats.drafted - r.stats.accepted >= 5, "expected rejected drafts"
    history = [*prompt, *r.ids]
    _matches_fresh(tiny_pair.target, tiny_target, history)
    draft = tiny_pair.draft
    assert draft is not None and history[: len(draft.cached)] == draft.cached
    draft.decode(history[len(draft.cached) : -1], "none")
    _matches_fresh(draft, tiny_draft, history)


def test_a_cancel_then_the_same_answer_and_a_second_turn_reusing_the_cache(tiny_pair: ModelPair) -> None:
    turn1 = [ChatMessage("user", "Name a colour, then explain why you like it.")]
    p1 = tiny_pair.chat_prompt(turn1)
    reference = run(tiny_pair, p1, max_tokens=40, draft_max=5)
    cancel = threading.Event()
    cut = run(tiny_pair, p1, max_tokens=40, draft_max=5, cancel=cancel, cancel_after=10)
    assert cut.stats.stop_reason == "cancelled" and 10 <= len(cut.ids) < 40
    assert cut.ids == reference.ids[: len(cut.ids)]
    assert run(tiny_pair, p1, max_tokens=40, draft_max=5).ids == reference.ids
    turn2 = [*turn1, ChatMessage("assistant", reference.text), ChatMessage("user", "And another one?")]
    p2 = tiny_pair.chat_prompt(turn2)
    a2 = run(tiny_pair, p2, max_tokens=24)
    assert a2.prefill is not None and a2.prefill.prefill_tokens < len(p2) - len(p1) + 8
    assert a2.ids == run(tiny_pair, p2, max_tokens=24, speculative=False).ids


def test_the_fit_reads_the_gpu_s_memory(gpu_device: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    from tandem.catalog import fit

    monkeypatch.delenv("TANDEM_MEMORY", raising=False)
    monkeypatch.setattr(fit, "_cached", None)
    available, description = fit.device_memory()
    measured = gpu_memory()
    assert measured is not None
    free, total, name = measured
    assert description.startswith(f"{name}: ") and " free of " in description
    assert 0 < available <= total and abs(available - free) <= 0.05 * total


def _tandem_json(model: Path, *flags: str, env: dict[str, str] | None = None) -> dict[str, object]:
    cmd = [sys.executable, "-m", "tandem.cli.main", "run", "--target", str(model), "--baseline"]
    cmd += ["--threads", "1", "-n", "12", "--raw", "--json", *flags, "Once upon a time"]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=ROOT, env=env)
    assert res.returncode == 0 and "Traceback" not in res.stderr, res.stderr
    result: dict[str, object] = json.loads(res.stdout)
    result["stderr"] = res.stderr
    return result


@pytest.mark.gpu(cpu_fallback=True)
def test_a_model_the_gpu_cannot_hold_runs_on_the_cpu_with_a_note(
    gpu_device: list[str], tiny_target: Path
) -> None:
    if not gpu_device[0].startswith("Vulkan"):
        pytest.skip(
            "making a GPU refuse a model needs Vulkan's GGML_VK_FORCE_MAX_BUFFER_SIZE; "
            f"{gpu_device[0]} has no such switch (a model larger than its memory would do)"
        )
    # Vulkan buffers of at most 64 KiB: the context's buffers cannot be allocated on the device.
    # (The retry must leave the GPU out entirely: with 0 layers llama.cpp would still put its
    # compute buffers there, and the fallback failed the same way before.)
    env = dict(os.environ, GGML_VK_FORCE_MAX_BUFFER_SIZE="65536")
    fell_back = _tandem_json(tiny_target, env=env)
    assert "could not load on the GPU" in str(fell_back["stderr"])
    assert "not enough GPU memory" in str(fell_back["stderr"])
    assert "; running on the CPU instead" in str(fell_back["stderr"])
    on_cpu = _tandem_json(tiny_target, "--gpu-layers", "0")
    assert fell_back["stats"]["device"] == on_cpu["stats"]["device"] == "CPU"  # type: ignore[index]
    assert fell_back["tokens"] == on_cpu["tokens"]


def test_the_cli_s_stats_line_names_the_device(tiny_target: Path, tiny_draft: Path) -> None:
    cmd = [sys.executable, "-m", "tandem.cli.main", "run", "--target", str(tiny_target)]
    cmd += ["--draft", str(tiny_draft), "--threads", "1", "-n", "8", "--raw", "Hello"]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert res.returncode == 0, res.stderr
    stats = res.stderr.strip().splitlines()[-1]
    names = gpu_lane.gpu_names()
    assert f" · on {' + '.join(names) if names else 'CPU'} · " in stats


# ------------------------------------------------------------------ compact: every path, few steps
# The lane on lavapipe skips the long tests (gpu(heavy=True): thousands of generations, where a
# step of a tiny model takes ~0.2 s); these take each GPU path through a few generations.


@pytest.mark.parametrize(("target", "draft"), [("lfm2", "mamba2"), ("mamba2", "llama")])
def test_recurrent_states_on_the_gpu(target: str, draft: str) -> None:
    """A hybrid target rolled back by llama.cpp's snapshots (a checkpoint past them, K = 16) and
    a recurrent one checkpointed every round: the states copied out of and back into device
    buffers, greedy output the target's own, the states a fresh context's afterwards."""
    seeds = {"lfm2": ("lfm2-t", 11), "mamba2": ("mamba2-t", 21)}
    t_name, t_seed = seeds[target]
    t_path = model_files.tiny_stateful_model(t_name, target, seed=t_seed)
    d_name, d_seed = {"mamba2": ("mamba2-d", 22), "llama": ("llama-d", 31)}[draft]
    d_path = model_files.tiny_stateful_model(d_name, draft, seed=d_seed)
    with ModelPair.load(t_path, d_path, replace(TINY, n_ctx=512)) as pair:
        prompt = pair.chat_prompt([ChatMessage("user", "Explain in detail why the sky is blue.")])
        base = run(pair, prompt, speculative=False, max_tokens=24)
        checkpointed = restored = 0
        for k in (3, 16):
            spec = run(pair, prompt, max_tokens=24, draft_max=k)
            assert_same_greedy(pair, prompt, spec.ids, base.ids)
            checkpointed += sum(r.checkpoint_s > 0 for r in spec.rounds)
            restored += sum(r.restore_s > 0 for r in spec.rounds)
        assert checkpointed > 0 and restored > 0  # (K = 16 is past lfm2's 12 snapshots)
        history = [*prompt, *spec.ids]
        _matches_fresh(pair.target, t_path, history[: len(pair.target.cached) + 1])


def test_the_mtp_heads_on_the_gpu() -> None:
    """The heads read the target's hidden rows off the device: greedy drafting with them is the
    target's output, they draft and are accepted, and a cancel leaves them usable."""
    path = model_files.tiny_mtp_model("qwen35-mtp-s16", seed=7)
    opts = replace(TINY, n_ctx=512)
    with (
        ModelPair.load(path, None, opts) as pair,
        ModelPair.load(path, None, replace(opts, load_mtp=False)) as alone,
    ):
        prompt = pair.chat_prompt([ChatMessage("user", "Write a story about the ocean.")])
        ref = run(alone, prompt, speculative=False, max_tokens=32)
        out = run(pair, prompt, drafter="mtp", draft_max=3, max_tokens=32)
        assert_same_greedy(pair, prompt, out.ids, ref.ids)
        assert out.stats.drafters["mtp"].accepted > 0
        cancel = threading.Event()
        cut = run(pair, prompt, drafter="mtp", draft_max=3, max_tokens=32, cancel=cancel, cancel_after=8)
        assert cut.stats.stop_reason == "cancelled" and cut.ids == out.ids[: len(cut.ids)]
        assert run(pair, prompt, drafter="mtp", draft_max=3, max_tokens=32).ids == out.ids


@pytest.mark.parametrize("kind", ["eagle3", "dflash"])
def test_trained_drafters_on_the_gpu(kind: str) -> None:
    """EAGLE-3 and DFlash drafters read the target's rows at their layers off the device
    (llama.cpp's embeddings_layer_inp): greedy drafting with them is the target's output, they
    draft and are accepted, and the second turn reuses both caches."""
    sidecar = trained.eagle3() if kind == "eagle3" else trained.dflash()
    with (
        ModelPair.load(trained.target(), sidecar, TINY) as pair,
        ModelPair.load(trained.target(), None, TINY) as alone,
    ):
        prompt = pair.chat_prompt([ChatMessage("user", "Write a story about the ocean.")])
        ref = run(alone, prompt, speculative=False, max_tokens=24)
        out = run(pair, prompt, drafter=kind, draft_max=3, max_tokens=24)
        assert_same_greedy(pair, prompt, out.ids, ref.ids)
        assert out.stats.drafters[kind].accepted > 0
        chat = [
            ChatMessage("user", "Write a story about the ocean."),
            ChatMessage("assistant", out.text),
            ChatMessage("user", "And then?"),
        ]
        turn = pair.chat_prompt(chat)
        second = run(pair, turn, drafter=kind, draft_max=3, max_tokens=12)
        assert second.prefill is not None and second.prefill.prefill_tokens < len(turn) - len(prompt) + 8
        assert_same_greedy(pair, turn, second.ids, run(alone, turn, speculative=False, max_tokens=12).ids)


@pytest.fixture(scope="module")
def exact_sampling_pair(tiny_target: Path) -> Iterator[ModelPair]:
    """conftest's sampling_pair with flash attention on, which exact output needs: on Vulkan
    (the lane) the law below is then checked with exact output's kernels."""
    with ModelPair.load(tiny_target, model_files.tiny_close_draft(), replace(TINY, flash_attn=1)) as pair:
        yield pair


@pytest.mark.parametrize("drafter", ["model", "lookup"])
def test_the_sampling_law_on_the_gpu(exact_sampling_pair: ModelPair, drafter: str) -> None:
    """Rejection sampling with the target's rows from the device: two tokens, top-k 2, the
    joint law of 150 seeded answers against the target's exact one (chi-square); with exact
    output wherever the target allows it (on Vulkan in the lane; not the CPU: F32 weights)."""
    sampling_pair = exact_sampling_pair
    if any(d.label.startswith("Vulkan") for d in sampling_pair.target.devices):
        assert sampling_pair.target.exact_plan.possible, sampling_pair.target.exact_plan.why_not
    settings = SamplerSettings(temperature=1.0, top_k=2, top_p=1.0, min_p=0.0)
    prompt = sampling_pair.raw_prompt("one two three four one two three four one two")
    joint = exact_joint(sampling_pair, prompt, settings, 2)
    counts: Counter[tuple[int, ...]] = Counter()
    drafted = rejected = 0
    for seed in range(150):
        r = run(
            sampling_pair,
            prompt,
            max_tokens=2,
            draft_max=2,
            temperature=1.0,
            top_k=2,
            seed=seed,
            drafter=drafter,
        )
        counts[tuple(r.ids)] += 1
        drafted += r.stats.drafted
        rejected += sum(x.accepted < x.drafted for x in r.rounds)
    assert drafted > 100 and rejected > 10  # both outcomes of the acceptance test happened
    assert chi_square_p(joint, counts) > 1e-3
    assert r.stats.exact == sampling_pair.target.exact_plan.possible
