"""Which architectures carry a recurrent state, and how Tandem rolls it back.

An attention model's KV cache holds one entry per position: a rejected draft is dropped by
truncating it. A recurrent model (Mamba, RWKV) folds every token into a fixed-size state, and a
hybrid (LFM2, Qwen3.5, Nemotron-H, Granite 4...) has such layers beside attention ones: the
state after position n cannot be had back from the state after n + k. Two ways out:

* `snapshots`: llama.cpp itself keeps the states of the last `n_rs_seq` positions of the last
  batch, for the architectures its `llm_arch_supports_rs_rollback` lists, and then a partial
  `llama_memory_seq_rm` works (LoadedModel.truncate knows its limits).
* `checkpoint`: for every other one, Tandem copies the sequence's recurrent state out before a
  batch it may have to undo, copies it back after a rejection and re-decodes what was kept.

The lists are the vendored llama.cpp's (src/llama-arch.cpp), by GGUF architecture name; a
loaded model is asked llama.cpp directly (llama_model_is_recurrent / _is_hybrid, llama_n_rs_seq),
so a newer llama.cpp that knows more architectures is handled as it says.
"""

from __future__ import annotations

from typing import Literal

# llm_arch_is_recurrent: the whole model is one recurrent state.
RECURRENT_ARCHS = frozenset({"mamba", "mamba2", "rwkv6", "rwkv6qwen2", "rwkv7", "arwkv7"})
# llm_arch_is_hybrid: recurrent layers beside attention layers.
HYBRID_ARCHS = frozenset(
    {
        "jamba",
        "falcon-h1",
        "plamo2",
        "granitehybrid",
        "lfm2",
        "lfm2moe",
        "nemotron_h",
        "nemotron_h_moe",
        "qwen3next",
        "kimi-linear",
        "bailingmoe3",
        "kimi-k3",
        "glm5-next",
        "qwen35",
        "qwen35moe",
        "qwen4exp",
        "deepseek4",
        "minimax-01",
    }
)
# llm_arch_supports_rs_rollback: llama.cpp keeps per-position snapshots (n_rs_seq) for these.
SNAPSHOT_ARCHS = frozenset(
    {
        "kimi-k3",
        "qwen35",
        "qwen35moe",
        "qwen4exp",
        "deepseek4",
        "glm5-next",
        "nemotron_h",
        "nemotron_h_moe",
        "lfm2",
        "lfm2moe",
        "bailingmoe3",
    }
)

StateKind = Literal["attention", "hybrid", "recurrent"]
Rollback = Literal["truncate", "snapshots", "checkpoint"]


def state_kind(arch: str) -> StateKind:
    if arch in RECURRENT_ARCHS:
        return "recurrent"
    if arch in HYBRID_ARCHS:
        return "hybrid"
    return "attention"


def rollback_of(arch: str) -> Rollback:
    """How a rejected draft is undone on a model of this architecture."""
    if state_kind(arch) == "attention":
        return "truncate"
    return "snapshots" if arch in SNAPSHOT_ARCHS else "checkpoint"


def describe(arch: str) -> str:
    """A few words for listings: '' for plain attention models."""
    kind = state_kind(arch)
    if kind == "attention":
        return ""
    how = "llama.cpp snapshots" if arch in SNAPSHOT_ARCHS else "checkpointed"
    return f"{kind}, {how}"


def rollback_note(role: str, arch: str, snapshots: int, sequences: int = 1) -> str:
    """What a user of this pair should know about a recurrent model in it (`sequences`: the
    parallel ones its context holds, whose drafts are capped at the snapshots instead)."""
    if snapshots:
        more = "more are checkpointed" if sequences == 1 else "a parallel sequence drafts no more"
        how = f"llama.cpp rolls its state back (up to {snapshots} drafts a round; {more})"
    else:
        how = "its state is copied before drafts are checked and restored after a rejection (a cost)"
    return f"{role}: {arch} is a {state_kind(arch)} model: {how}"
