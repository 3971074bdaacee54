"""What llama.cpp would abort or hang on, checked from a GGUF header before llama.cpp sees it.

llama.cpp checks many of a file's values with GGML_ASSERT, which ends the whole process
(SIGABRT) instead of returning an error; it divides by a few of them (SIGFPE), and one, a
rotary dimension of 0, makes ggml_graph_compute loop forever, where no cancel reaches it. A file
beside a target is found and loaded without the user naming it, and any model file can carry
such a value, so each is refused here with one sentence naming the file, the key and the value.
read_gguf runs these checks on every header it reads (gguf_file.py); only headers are read.

Where a value only has to match the tensors (a feed-forward width, a head count the weights
disagree with), llama.cpp refuses the file with an error of its own, which Tandem reports; the
checks here are for the values it trusts. docs/reliability.md lists the asserts covered, from
llama.cpp's load (llama-model.cpp load_hparams, llama-vocab.cpp), its graph builders
(src/models/) and the CPU kernels they reach (ggml-cpu/ops.cpp).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from ..errors import ModelFileError
from .gguf_info import GGUFInfo

# llama-hparams.h
MAX_LAYERS = 512
MAX_EXPERTS = 1024
# llama-model.cpp's rope scaling names; any other makes load_hparams assert.
ROPE_SCALING_TYPES = ("none", "linear", "yarn", "longrope")

# Architectures without rotary embeddings (llama_model_rope_type: LLAMA_ROPE_TYPE_NONE): their
# rope.dimension_count is never used.
NO_ROPE = frozenset(
    {
        "gpt2",
        "gptj",
        "mpt",
        "refact",
        "bloom",
        "mamba",
        "mamba2",
        "jamba",
        "jina-bert-v2",
        "t5",
        "t5encoder",
        "jais",
        "rwkv6",
        "rwkv6qwen2",
        "rwkv7",
        "arwkv7",
        "wavtokenizer-dec",
        "nemotron_h",
        "nemotron_h_moe",
        "kimi-linear",
        "kimi-k3",
        "glm5-next",
    }
)
# Graph builders that assert the rotary dimension is the whole head (src/models/*.cpp:
# GGML_ASSERT(n_embd_head == n_rot)), and the architectures built by one of those graphs.
ROPE_IS_HEAD = frozenset(
    {
        "apertus",
        "arcee",
        "arctic",
        "baichuan",
        "chameleon",
        "codeshell",
        "cogvlm",
        "cohere2moe",
        "dbrx",
        "deci",
        "deepseek",
        "dots1",
        "dream",
        "ernie4_5",
        "ernie4_5-moe",
        "exaone",
        "exaone4",
        "exaone-moe",
        "falcon",
        "granite",
        "granitemoe",
        "granite_swa",
        "graniteswitch",
        "grok",
        "grovemoe",
        "hunyuan-moe",
        "hunyuan-dense",  # (hunyuan_vl's graph)
        "hunyuan_vl",
        "hy_v3",
        "internlm2",
        "jais2",
        "llada",
        "llada-moe",
        "llama",
        "llama-embed",  # (llama's graph)
        "llama4",
        "maincoder",
        "mellum",
        "minicpm",  # (granite's graph)
        "minimax-01",
        "minimax-m2",
        "mistral3",
        "nemotron",
        "olmo",
        "olmo2",
        "olmoe",
        "orion",
        "paddleocr",
        "pangu-embedded",
        "plamo",
        "pockettts",
        "qwen2",
        "qwen2moe",
        "qwen2vl",
        "qwen3",
        "qwen3moe",
        "qwen3vl",
        "qwen3vlmoe",
        "rnd1",
        "seed_oss",
        "smallthinker",
        "smollm3",
        "starcoder2",
        "talkie",
        "xverse",
    }
)
# Graph builders that assert keys and values have one head size (GGML_ASSERT(n_embd_head ==
# hparams.n_embd_head_k()), n_embd_head being the value head size): the architectures above,
# the trained drafters and the hybrids Tandem runs, and the common others.
SAME_HEAD_SIZES = ROPE_IS_HEAD | frozenset(
    {
        "eagle3",
        "dflash",
        "qwen35",
        "qwen35moe",
        "qwen3next",
        "qwen4exp",
        "afmoe",
        "bailingmoe2",
        "bert",
        "bitnet",
        "bloom",
        "chatglm",
        "cohere2",
        "command-r",
        "eurobert",
        "glm4",
        "glm4moe",
        "gpt2",
        "gptneox",
        "granitehybrid",
        "jais",
        "jina-bert-v2",  # (bert's graph, as the nomic ones)
        "jina-bert-v3",
        "laguna",
        "maple",
        "minimax-m3",
        "modern-bert",
        "mpt",
        "muse-glimmer",
        "nanbeige",
        "nemotron_h",
        "nemotron_h_moe",
        "neo-bert",
        "nomic-bert",
        "nomic-bert-moe",
        "openelm",
        "phi2",
        "phi3",
        "phimoe",  # (phi3's graph)
        "qwen",
        "refact",
        "spark2_5",
        "stablelm",
        "starcoder",
        "t5",
        "t5encoder",  # (t5's graph)
    }
)
# Rotary embeddings in sections (M-RoPE): the CPU kernel asserts one of the first three
# sections is not empty, and divides by their sum.
MROPE = frozenset(
    {"qwen2vl", "paddleocr", "qwen3vl", "qwen3vlmoe", "qwen35", "qwen35moe", "qwen4exp", "qwen3tts"}
)
# Gated delta nets (Qwen3.5, Qwen3-Next): heads of `ssm.state_size` keys and of
# `ssm.inner_size / ssm.time_step_rank` values, which the kernel asserts are the same, and
# value heads that repeat the key heads.
DELTA_NET = frozenset({"qwen35", "qwen35moe", "qwen3next", "qwen4exp"})
# Their MTP graph handles one MTP block only (qwen35.cpp, qwen3next.cpp).
ONE_MTP_BLOCK = DELTA_NET
# Mamba-2 layers: the inner size splits into `ssm.time_step_rank` heads and `ssm.group_count`
# groups (mamba-base.cpp).
MAMBA2_LAYERS = frozenset({"mamba2", "granitehybrid", "nemotron_h", "nemotron_h_moe", "falcon-h1"})
# Which BOS/EOS ids llama.cpp assumes when a file names none, per tokenizer (llama-vocab.cpp).
_DEFAULT_BOS = {"llama": 1, "bert": 101, "gpt2": 11, "plamo2": 1}
_DEFAULT_EOS = {"llama": 2, "gpt2": 11, "t5": 1, "plamo2": 2}


@dataclass(frozen=True)
class _Problem:
    key: str
    value: Any  # as found (shown with _show), or a phrase saying what was found
    need: str  # what llama.cpp needs, as a clause: "llama.cpp needs 1 to 512 layers"
    hang: bool = False  # it would hang (else: stop the process)


def check_native(info: GGUFInfo) -> None:
    """Raise ModelFileError, one sentence, for the first value of `info` llama.cpp would abort
    or hang on."""
    for p in _problems(info):
        effect = "hang" if p.hang else "crash"
        raise ModelFileError(
            f"{info.path.name} is not a usable GGUF file: {p.key} is {_show(p.value)}, and "
            f"{p.need} (llama.cpp would {effect} on it)"
        )


def _problems(info: GGUFInfo) -> Iterator[_Problem]:
    arch = info.get("general.architecture")
    if isinstance(arch, str):
        yield from _hparams(info, arch)
    yield from _vocabulary(info)


# ----------------------------------------------------------------------------- hyperparameters
def _hparams(info: GGUFInfo, arch: str) -> Iterator[_Problem]:
    def key(name: str) -> str:
        return f"{arch}.{name}"

    def get(name: str) -> Any:
        return info.get(key(name))

    n_layer = _int(get("block_count"))
    if n_layer is None:
        return  # (llama.cpp refuses a file without one, with an error of its own)
    if not 1 <= n_layer <= MAX_LAYERS:
        yield _Problem(key("block_count"), n_layer, f"llama.cpp needs 1 to {MAX_LAYERS} layers")
        return
    nextn = _int(get("nextn_predict_layers"))
    if nextn is not None and nextn > n_layer:
        yield _Problem(
            key("nextn_predict_layers"),
            nextn,
            f"a model has at most as many MTP blocks as layers ({n_layer})",
        )
    if nextn is not None and nextn > 1 and arch in ONE_MTP_BLOCK:
        yield _Problem(key("nextn_predict_layers"), nextn, f"llama.cpp runs one MTP block of a {arch} model")
    yield from _experts(info, arch, n_layer)
    scaling = get("rope.scaling.type")
    if isinstance(scaling, str) and scaling not in ROPE_SCALING_TYPES:
        yield _Problem(key("rope.scaling.type"), scaling, f"llama.cpp knows {', '.join(ROPE_SCALING_TYPES)}")
    yield from _floats(info, arch)
    yield from _heads(info, arch, n_layer)
    yield from _sections(info, arch)
    yield from _recurrent(info, arch)


def _experts(info: GGUFInfo, arch: str, n_layer: int) -> Iterator[_Problem]:
    """load_hparams' asserts on mixtures of experts."""
    n_expert = _int(info.get(f"{arch}.expert_count")) or 0
    used_key = f"{arch}.expert_used_count"
    used = max(_per_layer(info.get(used_key), n_layer) or [0])
    groups = _int(info.get(f"{arch}.expert_group_count")) or 0
    group_used = _int(info.get(f"{arch}.expert_group_used_count")) or 0
    if n_expert > MAX_EXPERTS:
        yield _Problem(f"{arch}.expert_count", n_expert, f"llama.cpp allows at most {MAX_EXPERTS} experts")
    elif used > n_expert:
        yield _Problem(used_key, used, f"a token cannot use more experts than the {n_expert} there are")
    elif n_expert > 0 and used == 0:
        yield _Problem(used_key, used, f"a model of {n_expert} experts must use at least one per token")
    elif n_expert > 0 and groups >= n_expert:
        yield _Problem(
            f"{arch}.expert_group_count", groups, f"there must be fewer groups than {n_expert} experts"
        )
    elif n_expert > 0 and groups > 1 and (n_expert % groups or not 0 < group_used < groups):
        what = f"{arch}.expert_count" if n_expert % groups else f"{arch}.expert_group_used_count"
        value = n_expert if n_expert % groups else group_used
        yield _Problem(what, value, f"the experts must split evenly into {groups} groups, fewer of them used")
    elif n_expert == 0 and groups:
        yield _Problem(f"{arch}.expert_group_count", groups, "a model without experts has no expert groups")


def _floats(info: GGUFInfo, arch: str) -> Iterator[_Problem]:
    """Normalisation epsilons (the norm kernels assert eps >= 0, which NaN fails) and rotary
    scales (NaN or infinite ones make every logit NaN)."""
    for k, v in info.metadata.items():
        if not k.startswith(f"{arch}.") or not isinstance(v, float):
            continue
        leaf = k.rsplit(".", 1)[-1]
        if leaf.endswith(("epsilon", "_eps")) and not (math.isfinite(v) and v >= 0):
            yield _Problem(k, v, "a normalisation epsilon must be a finite number of at least 0")
        elif k.startswith(f"{arch}.rope.") and not math.isfinite(v):
            yield _Problem(k, v, "a rotary embedding's parameters must be finite numbers")
        elif leaf.startswith("freq_base") and v <= 0:
            yield _Problem(k, v, "a rotary base frequency must be above 0")


def _heads(info: GGUFInfo, arch: str, n_layer: int) -> Iterator[_Problem]:
    """Heads, their sizes and the rotary dimension (ggml-cpu's rope kernel asserts an even
    dimension within the head, and loops forever on 0; attention asserts the query heads are a
    multiple of the key/value heads; graph builders assert head sizes)."""
    heads = _per_layer(info.get(f"{arch}.attention.head_count"), n_layer)
    kv_heads = _per_layer(info.get(f"{arch}.attention.head_count_kv"), n_layer)
    if heads is None:
        return
    per_layer = isinstance(info.get(f"{arch}.attention.head_count_kv"), tuple)
    for i, (n, kv) in enumerate(zip(heads, kv_heads or heads, strict=False)):
        if n > 0 and kv > 0 and n % kv:
            which = f"{arch}.attention.head_count_kv" + (f" (layer {i})" if per_layer else "")
            yield _Problem(which, kv, f"its {n} query heads must be a whole multiple of the key/value heads")
            return
    sizes = info.head_sizes
    if sizes is None:
        return  # (no attention in layer 0: llama.cpp uses no rotary dimension)
    head_k, head_v = sizes
    if arch in SAME_HEAD_SIZES and head_v != head_k:
        yield _Problem(
            f"{arch}.attention.value_length",
            head_v,
            f"a {arch} model's value heads are its key heads' size ({head_k})",
        )
    if arch in NO_ROPE:
        return
    for suffix, size in (
        ("", head_k),
        ("_swa", _int(info.get(f"{arch}.attention.key_length_swa")) or head_k),
    ):
        k = f"{arch}.rope.dimension_count{suffix}"
        n_rot = _int(info.get(k))
        if n_rot is None:
            continue
        if n_rot == 0:
            yield _Problem(
                k, n_rot, f"a rotary dimension must be an even number from 2 to the head size ({size})", True
            )
        elif n_rot % 2 or n_rot > size:
            yield _Problem(
                k, n_rot, f"a rotary dimension must be an even number from 2 to the head size ({size})"
            )
        elif not suffix and arch in ROPE_IS_HEAD and n_rot != size:
            yield _Problem(k, n_rot, f"a {arch} model rotates whole heads ({size})")


def _sections(info: GGUFInfo, arch: str) -> Iterator[_Problem]:
    """M-RoPE sections: the kernel asserts one of the first three is not empty."""
    key = f"{arch}.rope.dimension_sections"
    sections = info.get(key)
    if not isinstance(sections, tuple):
        return
    signed = [s - (1 << 32) if s >= 1 << 31 else s for s in sections]  # (llama.cpp reads int32)
    if any(s < 0 for s in signed):
        yield _Problem(key, list(signed), "rotary sections are sizes, 0 or more")
    elif (arch in MROPE or any(signed)) and not any(signed[:3]):
        yield _Problem(key, list(signed), "one of the first three rotary sections must not be empty")


def _recurrent(info: GGUFInfo, arch: str) -> Iterator[_Problem]:
    """State-space and convolution layers: sizes the graphs divide by or assert on."""

    def get(name: str) -> int | None:
        return _int(info.get(f"{arch}.{name}"))

    if arch in DELTA_NET:
        d_state, d_inner = get("ssm.state_size"), get("ssm.inner_size")
        rank, groups = get("ssm.time_step_rank"), get("ssm.group_count")
        interval = get("full_attention_interval")
        if interval == 0:
            yield _Problem(
                f"{arch}.full_attention_interval", 0, "it must be 1 or more (llama.cpp divides by it)"
            )
        for name, value in (
            ("ssm.time_step_rank", rank),
            ("ssm.group_count", groups),
            ("ssm.state_size", d_state),
        ):
            if value == 0:
                yield _Problem(f"{arch}.{name}", 0, "it must be 1 or more (llama.cpp divides by it)")
                return
        if rank and groups and rank % groups:
            yield _Problem(
                f"{arch}.ssm.time_step_rank", rank, f"its value heads must repeat its {groups} key heads"
            )
        elif d_state and rank and d_inner is not None and d_inner != d_state * rank:
            yield _Problem(
                f"{arch}.ssm.inner_size",
                d_inner,
                f"its {rank} value heads are {d_state} wide like its keys ({d_state * rank} in all)",
            )
    elif arch in MAMBA2_LAYERS:
        d_inner, rank, groups = get("ssm.inner_size"), get("ssm.time_step_rank"), get("ssm.group_count")
        for name, value in (("ssm.time_step_rank", rank), ("ssm.group_count", groups)):
            if value == 0 or (value and d_inner is not None and d_inner % value):
                yield _Problem(f"{arch}.{name}", value, f"the inner size ({d_inner}) must split evenly by it")
                return
    elif arch == "lfm2" or arch == "lfm2moe":
        l_cache = get("shortconv.l_cache")
        if l_cache is not None and l_cache < 2:
            yield _Problem(
                f"{arch}.shortconv.l_cache", l_cache, "a short convolution spans at least 2 tokens"
            )


# ----------------------------------------------------------------------------- vocabulary
def _vocabulary(info: GGUFInfo) -> Iterator[_Problem]:
    """llama-vocab.cpp asserts every token text is unique (it maps texts to ids), and that a
    tokenizer told to add BOS or EOS has one."""
    tokens = info.tokens
    n = len(tokens)
    if not n:
        return
    repeat = tokens.first_repeat()
    if repeat is not None:
        first, second = repeat
        yield _Problem(
            "tokenizer.ggml.tokens",
            _Phrase(f"a vocabulary where tokens {first:,} and {second:,} are both {tokens[first]!r}"),
            "llama.cpp needs every token's text to be different",
        )
    kind = info.vocab_type
    for what, defaults in (("bos", _DEFAULT_BOS), ("eos", _DEFAULT_EOS)):
        add = info.get(f"tokenizer.ggml.add_{what}_token")
        if add is not True:
            continue
        given = _int(info.get(f"tokenizer.ggml.{what}_token_id"))
        default = defaults.get(kind)
        if (given is None or given >= n) and (default is None or default >= n):
            name = what.upper()
            need = f"a tokenizer that adds {name} needs a {name} token in its {n:,}-token vocabulary"
            yield _Problem(f"tokenizer.ggml.{what}_token_id", given, need)


# ----------------------------------------------------------------------------- values
def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _per_layer(value: Any, n_layer: int) -> list[int] | None:
    """A per-layer value: one integer for every layer, or an array of them (read as llama.cpp's
    uint32); None when absent or of another kind (llama.cpp refuses those itself)."""
    if (v := _int(value)) is not None:
        return [v] * n_layer
    if isinstance(value, tuple) and value:
        return [x & 0xFFFFFFFF for x in value]
    return None


class _Phrase(str):
    """A description of what was found, shown as is (not quoted as a text value)."""


def _show(value: Any) -> str:
    if isinstance(value, _Phrase):
        return str(value)
    if isinstance(value, float):
        return "NaN" if math.isnan(value) else repr(value)
    return repr(value) if isinstance(value, str) else str(value)
