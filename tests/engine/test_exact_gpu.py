"""Exact output where the target runs, for the weight types the catalog uses: the greedy
speculative answer at K = 4 and K = 8 is the target alone's token for token, and says so.

In the GPU lane (pytest --gpu-lane) every layer is on Vulkan, where Tandem's batch-invariant
kernels (scripts/patches/vulkan-batch-invariant.patch) compute each row of a verify batch as a
one-row decode does; without them these rows differ by up to 0.7 in logit (measured with
scripts/row_invariance.py on the lane's lavapipe: docs/benchmarks.md). In the ordinary
suite the same test holds on the CPU with ggml's reference kernels. The models are random
llamas 256 wide quantized by llama.cpp, whose logits are full of near-ties: a row that rounds
differently in a batch shows up as another token.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

import gpu_lane
import model_files
from run_helpers import TINY, run
from tandem.engine import LoadedModel, ModelPair
from tandem.engine.llama.exact import VULKAN_INVARIANT_ROWS

FTYPES = ("F16", "Q8_0", "Q4_0", "Q4_K_M", "Q5_K_M", "Q6_K")
PROMPTS = ("Once upon a time", "def f(x): return x * x + 1")
# Exact output needs flash attention; every layer on the GPU where there is one (TINY's default).
FLASH = replace(TINY, flash_attn=1)


@pytest.mark.gpu
@pytest.mark.parametrize("ftype", FTYPES)
def test_greedy_at_k4_and_k8_is_the_target_alone_s(ftype: str) -> None:
    if gpu_lane.slow_device() and ftype not in ("F16", "Q4_K_M"):
        # (25 s a type on lavapipe: the row test below holds every type there, bit for bit)
        pytest.skip("lavapipe: the answers of two weight types; every type's rows below")
    target = model_files.tiny_quantized(ftype)
    draft = model_files.tiny_quantized("Q8_0", draft=True)
    n = 16 if gpu_lane.slow_device() else 32
    with ModelPair.load(target, draft, FLASH) as pair:
        plan = pair.target.exact_plan
        if ftype == "F16" and not pair.target.devices:  # (the CPU's sgemm: README, "Exact output")
            assert plan.why_not is not None and "float weight matrices" in plan.why_not
            return
        assert plan.possible, plan.why_not
        if pair.target.devices:  # (on Vulkan: up to 16 rows a verify)
            assert plan.rows == VULKAN_INVARIANT_ROWS
        widest = accepted = 0
        for text in PROMPTS:
            prompt = pair.raw_prompt(text)
            alone = run(pair, prompt, speculative=False, max_tokens=n)
            assert alone.stats.exact
            for k in (4, 8):
                out = run(pair, prompt, max_tokens=n, draft_max=k)
                assert out.stats.exact, (ftype, k, text)
                assert out.ids == alone.ids, (ftype, k, text)
                widest = max(widest, out.stats.draft_max)
                accepted += out.stats.accepted
        # Verify batches of several rows were taken (K = 8 on Vulkan and plain CPU weights;
        # repacked CPU weights keep K at 2), and drafts were accepted from them.
        assert widest == plan.k_max(8) and accepted > 0


CODE = "def quicksort(arr):\n    if len(arr) < 2:\n        return arr\n    pivot = arr[0]\n" * 8


@pytest.mark.gpu
@pytest.mark.parametrize("ftype", FTYPES)
def test_verify_rows_are_bit_identical_to_one_token_decodes(ftype: str) -> None:
    """What the answers rest on, row by row: each row of a 5- and a 9-row verify (K = 4 and 8;
    3 rows for repacked CPU weights) equals, bit for bit, the same token decoded alone; on
    Vulkan, without exact output's kernels, they do not (this test fails if the switch is not
    thrown, where the answers above, 16 tokens each, did not show it)."""
    m = LoadedModel(model_files.tiny_quantized(ftype), replace(FLASH, greedy_in_graph=False))
    try:
        plan = m.exact_plan
        if not plan.possible:
            assert ftype == "F16" and not m.devices, plan.why_not  # (as above)
            return
        toks = m.tokenize(CODE)
        kv, sizes = 40, sorted({min(n, plan.rows or n) for n in (5, 9)})  # (repacked CPU weights: 3)

        def rows(exact: bool) -> tuple[list[np.ndarray], dict[int, np.ndarray]]:
            m.exact = exact
            alone = []
            for i in range(max(sizes)):
                out = m.decode(toks[kv + i : kv + i + 1], "all")
                assert out is not None
                alone.append(np.array(out[0]))
            m.truncate(kv)
            batches = {}
            for n in sizes:
                out = m.decode(toks[kv : kv + n], "all")
                assert out is not None
                batches[n] = np.array(out)
                m.truncate(kv)
            return alone, batches

        m.decode(toks[:kv], "none")
        alone, batches = rows(exact=True)
        for n, batch in batches.items():
            assert all(np.array_equal(batch[i], alone[i]) for i in range(n)), (ftype, n)
        if m.devices:
            alone, batches = rows(exact=False)
            assert not all(np.array_equal(batches[9][i], alone[i]) for i in range(9)), ftype  # (K = 8)
    finally:
        m.close()
