"""Exact output's plan (exact.py): what makes a target exact, and how large its verify batch may
be, from what is known of it (no model loaded)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tandem.engine.files.gguf_info import GGUFInfo, TensorInfo
from tandem.engine.llama.exact import (
    REPACK_GEMV_ROWS,
    VULKAN_INVARIANT_ROWS,
    ExactPlan,
    float_matrices,
    has_experts,
    plan,
)

pytestmark = pytest.mark.fast  # pure logic: the fast lane (pytest -m fast)

F32, F16, Q4_K, Q6_K, BF16 = 0, 1, 12, 14, 30


def facts(**over: object) -> dict[str, object]:
    base: dict[str, object] = {
        "backends": ["CPU"],
        "cpu_backends": 1,
        "flash_attn_off": False,
        "recurrent": False,
        "float_matrices": [],
        "buffers": {"CPU_Mapped"},
    }
    return {**base, **over}


def test_plain_cpu_weights_are_exact_at_any_batch() -> None:
    p = plan(**facts())  # type: ignore[arg-type]
    assert p == ExactPlan(rows=None, why_not=None) and p.possible
    assert p.k_max(12) == 12


def test_repacked_weights_keep_the_batch_to_their_gemv_rows() -> None:
    p = plan(**facts(buffers={"CPU_Mapped", "CPU_REPACK"}))  # type: ignore[arg-type]
    assert p.possible and p.rows == REPACK_GEMV_ROWS == 3
    assert p.k_max(12) == 2 and p.k_max(1) == 1 and p.k_max(0) == 0


@pytest.mark.parametrize(
    ("over", "words"),
    [
        ({"backends": ["CPU", "CUDA0"]}, "CUDA0"),
        ({"cpu_backends": 0}, "this llama.cpp build"),
        ({"flash_attn_off": True}, "flash attention is off"),
        ({"recurrent": True}, "recurrent state"),
        ({"float_matrices": ["a.weight", "b.weight", "c.weight"]}, "a.weight, b.weight and 1 more"),
        ({"buffers": {"CPU", "AMX"}}, "AMX buffers"),
    ],
)
def test_what_rules_exactness_out_is_said_in_one_line(over: dict[str, object], words: str) -> None:
    p = plan(**facts(**over))  # type: ignore[arg-type]
    assert not p.possible
    assert p.why_not is not None and words in p.why_not and "\n" not in p.why_not


def vulkan(**over: object) -> dict[str, object]:
    """A target with every layer on a Vulkan device whose backend has the batch-invariant switch."""
    gpu = {"backends": ["Vulkan0", "CPU"], "invariant_gpus": ["Vulkan0"]}
    return facts(**{**gpu, "buffers": {"Vulkan0", "CPU_Mapped"}, **over})


def test_vulkan_with_the_invariant_kernels_is_exact_up_to_their_rows() -> None:
    p = plan(**vulkan())  # type: ignore[arg-type]
    assert p.possible and p.rows == VULKAN_INVARIANT_ROWS == 16
    assert p.k_max(8) == 8 and p.k_max(24) == 15
    # (float weights go through the same mat-vec shaders there: no sgemm to rule them out)
    assert plan(**vulkan(float_matrices=["token_embd.weight"])).possible  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("over", "words"),
    [
        ({"invariant_gpus": []}, "lacks Tandem's batch-invariant kernels"),
        ({"backends": ["CUDA0", "CPU"], "invariant_gpus": []}, "CUDA0, whose kernels depend on the batch"),
        ({"backends": ["Vulkan0", "Vulkan1", "CPU"]}, "lacks Tandem's batch-invariant kernels"),
        ({"every_layer_on_gpu": False}, "only some of the target's layers"),
        ({"flash_attn_off": True}, "flash attention is off"),
        ({"recurrent": True}, "recurrent state"),
        ({"experts": True}, "mixture of experts"),
    ],
)
def test_what_rules_exactness_out_on_a_gpu_is_said_in_one_line(over: dict[str, object], words: str) -> None:
    p = plan(**vulkan(**over))  # type: ignore[arg-type]
    assert not p.possible
    assert p.why_not is not None and words in p.why_not and "\n" not in p.why_not


def test_expert_weights_are_found_by_name() -> None:
    assert has_experts(_info(("blk.0.ffn_up_exps.weight", (64, 128, 8), Q4_K)))
    assert not has_experts(_info(("blk.0.ffn_up.weight", (64, 128), Q4_K)))


def _info(*tensors: tuple[str, tuple[int, ...], int]) -> GGUFInfo:
    return GGUFInfo(Path("x.gguf"), 3, 0, {}, [TensorInfo(n, s, t, 0) for n, s, t in tensors])


def test_float_matrices_are_the_multiplied_ones() -> None:
    info = _info(
        ("token_embd.weight", (1536, 151936), F16),  # looked up by row: output.weight is the head
        ("output.weight", (1536, 151936), Q6_K),
        ("blk.0.attn_norm.weight", (1536,), F32),
        ("blk.0.attn_q.bias", (1536,), F32),
        ("blk.0.attn_q.weight", (1536, 1536), Q4_K),
        ("blk.0.ffn_gate_inp.weight", (1536, 64), F32),  # a MoE router: a matmul
        ("blk.0.ssm_conv1d.weight", (4, 1536), F32),
        ("blk.0.ffn_up.weight", (1536, 8960), BF16),
    )
    assert float_matrices(info) == ["blk.0.ffn_gate_inp.weight", "blk.0.ffn_up.weight"]


def test_tied_float_embeddings_are_the_output_head() -> None:
    info = _info(("token_embd.weight", (576, 49152), F16), ("blk.0.attn_q.weight", (576, 576), Q4_K))
    assert float_matrices(info) == ["token_embd.weight"]
    assert float_matrices(_info(("blk.0.attn_q.weight", (576, 576), Q4_K))) == []
