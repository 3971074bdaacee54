"""Memory estimates: KV caches from GGUF metadata, verdicts, and the device reading."""

from __future__ import annotations

from pathlib import Path

import pytest

import model_files
from tandem.catalog import FitVerdict, device_memory, files_fit, load_catalog, pair_fit
from tandem.catalog.fit import estimate_pair_bytes, judge, kv_cache_bytes, runtime_overhead
from tandem.engine import LoadedModel, LoadOptions, read_gguf


def test_kv_cache_estimate_matches_the_engine(smollm2_f16: Path):
    """The estimate from metadata alone equals what the loaded model's context reserves."""
    model = LoadedModel(smollm2_f16, LoadOptions(n_ctx=512))
    try:
        assert kv_cache_bytes(read_gguf(smollm2_f16), 512) == model.kv_cache_bytes()
    finally:
        model.close()
    # SmolLM2-135M: 30 layers x 3 KV heads x (64 + 64) x 2 bytes per token; capped at its
    # training context (8192).
    assert kv_cache_bytes(read_gguf(smollm2_f16), 1000) == 1000 * 30 * 3 * 128 * 2
    assert kv_cache_bytes(read_gguf(smollm2_f16), 10**6) == 8192 * 30 * 3 * 128 * 2


def test_verdict_thresholds():
    assert judge(85, 100, "d") == FitVerdict("fits", 85, 100, "d")
    assert judge(86, 100, "d").verdict == "tight"
    assert judge(100, 100, "d").verdict == "tight"
    assert judge(101, 100, "d").verdict == "won't fit"


def test_files_fit_adds_weights_kv_and_runtime(
    smollm2_f16: Path, smollm2_q4_1: Path, monkeypatch: pytest.MonkeyPatch
):
    weights = smollm2_f16.stat().st_size + smollm2_q4_1.stat().st_size
    kv = 2 * 4096 * 30 * 3 * 128 * 2
    need = weights + kv + runtime_overhead(weights)
    monkeypatch.setenv("TANDEM_MEMORY", "4G")
    assert files_fit(smollm2_f16, smollm2_q4_1, 4096) == FitVerdict(
        "fits", need, 4 * 10**9, "TANDEM_MEMORY=4G"
    )
    monkeypatch.setenv("TANDEM_MEMORY", str(int(need / 0.9)))
    assert files_fit(smollm2_f16, smollm2_q4_1, 4096).verdict == "tight"
    monkeypatch.setenv("TANDEM_MEMORY", "512MiB")
    assert files_fit(smollm2_f16, smollm2_q4_1, 4096).verdict == "won't fit"
    alone = files_fit(smollm2_f16, None, 4096)
    assert alone.need_bytes < need


def test_catalog_pair_fit_scales_with_context(hf_env: Path, monkeypatch: pytest.MonkeyPatch):
    pair = load_catalog().get("llama3.1-8b")
    monkeypatch.setenv("TANDEM_MEMORY", "24GB")
    at_own = pair_fit(pair)
    assert at_own == FitVerdict("fits", pair.gpu_memory_bytes, 24 * 10**9, "TANDEM_MEMORY=24GB")
    double = estimate_pair_bytes(pair, 2 * pair.context)
    kv = pair.gpu_memory_bytes - pair.total_bytes - runtime_overhead(pair.total_bytes)
    assert double == pair.gpu_memory_bytes + kv
    assert pair_fit(pair, 2 * pair.context).need_bytes == double
    monkeypatch.setenv("TANDEM_MEMORY", "8GB")
    assert pair_fit(pair).verdict == "tight"
    assert pair_fit(load_catalog().get("llama3.3-70b")).verdict == "won't fit"


def test_device_memory_reads_this_machine(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv("TANDEM_MEMORY", raising=False)
    available, description = device_memory()
    assert available > 0 and description
    # A machine with a CPU-only build reports system RAM; with a GPU build, the GPU's memory.
    assert any(word in description for word in ("RAM", "GPU", "NVIDIA", "free", "unified"))


def test_tiny_models_fit_anywhere(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("TANDEM_MEMORY", "2G")
    t = model_files.tiny_model("a", seed=1)
    assert files_fit(t, t, 512).verdict == "fits"


def test_user_pair_without_sizes_is_estimated_from_file_names(hf_env: Path, monkeypatch: pytest.MonkeyPatch):
    from tandem.catalog import ModelFile, PairSpec

    def f(repo: str, name: str, quant: str) -> ModelFile:
        return ModelFile(repo, name, 0, quant, "", False)

    named = PairSpec(
        "mine", "", "", f("a/Qwen2.5-14B-GGUF", "Qwen2.5-14B-Instruct-Q4_K_M.gguf", "Q4_K_M"),
        f("b/c", "qwen2.5-0.5b-instruct-q8_0.gguf", "Q8_0"), 12, 0.0, 4096, 0,
    )  # fmt: skip
    weights = int(14e9 * 4.9 / 8) + int(0.5e9 * 8.5 / 8)
    need = estimate_pair_bytes(named)
    assert need is not None and weights < need < 1.3 * weights + 2**30
    monkeypatch.setenv("TANDEM_MEMORY", "64G")
    assert pair_fit(named).need_bytes == need

    anonymous = PairSpec(
        "x", "", "", f("a/b", "model.gguf", "unknown"), f("a/b", "small.gguf", "Q8_0"), 12, 0.0, 4096, 0
    )
    assert estimate_pair_bytes(anonymous) is None and pair_fit(anonymous).need_bytes == 0


def test_a_pair_drafted_by_its_own_heads_needs_the_target_and_its_kv_only(
    hf_env: Path, monkeypatch: pytest.MonkeyPatch
):
    from tandem.catalog import ModelFile, PairSpec

    monkeypatch.setenv("TANDEM_MEMORY", "64G")
    builtin = load_catalog().get("qwen3.6-27b-mtp")
    assert estimate_pair_bytes(builtin) == builtin.gpu_memory_bytes == pair_fit(builtin).need_bytes
    # A user pair without sizes: estimated from the target's name alone.
    target = ModelFile("a/Qwen3.6-27B-GGUF", "Qwen3.6-27B-Q4_K_M-mtp.gguf", 0, "Q4_K_M", "", False)
    mine = PairSpec("mine", "", "", target, None, 4, 0.0, 4096, 0)
    weights = int(27e9 * 4.9 / 8)
    need = estimate_pair_bytes(mine)
    assert need is not None and weights < need < 1.3 * weights + 2**30
