"""Values llama.cpp would abort or hang on are refused from the header (engine/files/native_checks.py),
each in one sentence naming the file, the key and the value; real models pass.

The fuzz harness (tests/cli/test_native_fuzz.py) proves no edge of a checked key ends in a
signal; this file pins each check's words, and the vocabulary rule (llama.cpp asserts every
token text is unique, reading each as a C string) everywhere a file is loaded: `tandem run` as
target and as draft, `tandem serve` at start, and the app's preflight.
"""

from __future__ import annotations

import struct
import subprocess
import sys
from array import array
from pathlib import Path
from typing import Any

import pytest

import model_files
import trained
from gguf_edit import I32, STR, Typed, tokens_of, with_metadata
from tandem.cli.main import main
from tandem.engine import ModelFileError, TandemError
from tandem.engine.files.gguf_file import read_gguf
from tandem.engine.files.gguf_info import TokenTable
from tandem.session.preflight import preflight
from tandem.session.refs import DraftNeeds, PairRef

LLAMA = trained.target  # 32 wide, 4 heads of 8, 2 key/value heads, 3 layers
QWEN35 = trained.hybrid_target
EAGLE3 = trained.eagle3  # 2 heads of 16


def _lfm2() -> Path:
    return model_files.tiny_stateful_model("lfm2-t", "lfm2", seed=1)


def _mamba2() -> Path:
    return model_files.tiny_stateful_model("mamba2-t", "mamba2", seed=21)


# (the good file, its architecture, the keys to change, what the sentence says)
CASES: dict[str, tuple[Any, str, dict[str, Any], str]] = {
    "no-layers": (
        LLAMA,
        "llama",
        {"block_count": 0},
        "llama.block_count is 0, and llama.cpp needs 1 to 512 layers",
    ),
    "too-many-layers": (LLAMA, "llama", {"block_count": 1000}, "llama.block_count is 1000"),
    "mtp-blocks-beyond-layers": (
        LLAMA,
        "llama",
        {"nextn_predict_layers": 7},
        "llama.nextn_predict_layers is 7, and a model has at most as many MTP blocks as layers (3)",
    ),
    "two-mtp-blocks": (
        QWEN35,
        "qwen35",
        {"nextn_predict_layers": 2},
        "llama.cpp runs one MTP block of a qwen35",
    ),
    "too-many-experts": (LLAMA, "llama", {"expert_count": 2000}, "llama.cpp allows at most 1024 experts"),
    "experts-unused": (
        LLAMA,
        "llama",
        {"expert_count": 8},
        "a model of 8 experts must use at least one per token",
    ),
    "more-used-than-experts": (
        LLAMA,
        "llama",
        {"expert_count": 4, "expert_used_count": 5},
        "a token cannot use more experts than the 4 there are",
    ),
    "groups-without-experts": (
        LLAMA,
        "llama",
        {"expert_group_count": 2},
        "a model without experts has no expert",
    ),
    "uneven-groups": (
        LLAMA,
        "llama",
        {"expert_count": 8, "expert_used_count": 2, "expert_group_count": 3, "expert_group_used_count": 1},
        "the experts must split evenly into 3 groups",
    ),
    "rope-scaling-type": (
        LLAMA,
        "llama",
        {"rope.scaling.type": "bogus"},
        "llama.rope.scaling.type is 'bogus', and llama.cpp knows none, linear, yarn, longrope",
    ),
    "negative-epsilon": (
        EAGLE3,
        "eagle3",
        {"attention.layer_norm_rms_epsilon": -1.0},
        "eagle3.attention.layer_norm_rms_epsilon is -1.0, and a normalisation epsilon must be a finite",
    ),
    "nan-epsilon": (EAGLE3, "eagle3", {"attention.layer_norm_rms_epsilon": float("nan")}, "epsilon is NaN"),
    "nan-rope-scale": (
        LLAMA,
        "llama",
        {"rope.scaling.factor": float("nan")},
        "llama.rope.scaling.factor is NaN",
    ),
    "zero-rope-base": (LLAMA, "llama", {"rope.freq_base": 0.0}, "a rotary base frequency must be above 0"),
    "kv-heads-not-dividing": (
        LLAMA,
        "llama",
        {"attention.head_count_kv": 3},
        "llama.attention.head_count_kv is 3, and its 4 query heads must be a whole multiple",
    ),
    "kv-heads-per-layer": (
        _lfm2,
        "lfm2",
        {"attention.head_count_kv": Typed(I32, [0, 3, 0], array=True)},
        "lfm2.attention.head_count_kv (layer 1) is 3",
    ),
    "value-head-size": (
        LLAMA,
        "llama",
        {"attention.value_length": 16},
        "llama.attention.value_length is 16, and a llama model's value heads are its key heads' size (8)",
    ),
    "rotary-dimension-0-hangs": (
        EAGLE3,
        "eagle3",
        {"rope.dimension_count": 0},
        "eagle3.rope.dimension_count is 0, and a rotary dimension must be an even number from 2 to the head "
        "size (16) (llama.cpp would hang on it)",
    ),
    "rotary-dimension-odd": (EAGLE3, "eagle3", {"rope.dimension_count": 15}, "rope.dimension_count is 15"),
    "rotary-dimension-beyond-head": (
        EAGLE3,
        "eagle3",
        {"rope.dimension_count": 1000},
        "eagle3.rope.dimension_count is 1000, and a rotary dimension must be an even number from 2 to the "
        "head size (16) (llama.cpp would crash on it)",
    ),
    "rotary-dimension-partial-llama": (
        LLAMA,
        "llama",
        {"rope.dimension_count": 4},
        "llama.rope.dimension_count is 4, and a llama model rotates whole heads (8)",
    ),
    "rotary-dimension-swa": (
        EAGLE3,
        "eagle3",
        {"rope.dimension_count_swa": 3},
        "rope.dimension_count_swa is 3",
    ),
    "empty-rope-sections": (
        QWEN35,
        "qwen35",
        {"rope.dimension_sections": Typed(I32, [0, 0, 0, 0], array=True)},
        "one of the first three rotary sections must not be empty",
    ),
    "negative-rope-section": (
        QWEN35,
        "qwen35",
        {"rope.dimension_sections": Typed(I32, [-1, 1, 0, 0], array=True)},
        "rotary sections are sizes, 0 or more",
    ),
    "delta-net-inner-size": (
        QWEN35,
        "qwen35",
        {"ssm.inner_size": 48},
        "qwen35.ssm.inner_size is 48, and its 4 value heads are 16 wide like its keys (64 in all)",
    ),
    "delta-net-heads": (
        QWEN35,
        "qwen35",
        {"ssm.group_count": 3},
        "its value heads must repeat its 3 key heads",
    ),
    "delta-net-zero": (QWEN35, "qwen35", {"ssm.time_step_rank": 0}, "qwen35.ssm.time_step_rank is 0"),
    "attention-interval-zero": (
        QWEN35,
        "qwen35",
        {"full_attention_interval": 0},
        "qwen35.full_attention_interval is 0, and it must be 1 or more (llama.cpp divides by it)",
    ),
    "mamba2-groups": (_mamba2, "mamba2", {"ssm.group_count": 3}, "mamba2.ssm.group_count is 3"),
    "short-convolution": (
        _lfm2,
        "lfm2",
        {"shortconv.l_cache": 1},
        "a short convolution spans at least 2 tokens",
    ),
    "add-bos-without-bos": (
        LLAMA,
        "",
        # (SentencePiece's UGM has no BOS of its own to fall back on, unlike BPE's id 11)
        {
            "tokenizer.ggml.model": "t5",
            "tokenizer.ggml.add_bos_token": True,
            "tokenizer.ggml.bos_token_id": 10**6,
        },
        "tokenizer.ggml.bos_token_id is 1000000, and a tokenizer that adds BOS needs a BOS token",
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_each_value_llama_cpp_asserts_on_is_one_sentence(case: str, tmp_path: Path) -> None:
    make, arch, change, says = CASES[case]
    prefix = f"{arch}." if arch else ""
    path = with_metadata(make(), tmp_path / f"{case}.gguf", {prefix + k: v for k, v in change.items()})
    with pytest.raises(ModelFileError) as err:
        read_gguf(path)
    message = str(err.value)
    assert message.startswith(f"{case}.gguf is not a usable GGUF file: ") and says in message, message
    assert "\n" not in message and message.count(". ") == 0


@pytest.mark.parametrize(
    "path",
    [
        model_files.smollm2_q4_1,
        model_files.gemma3_270m,
        trained.target,
        trained.hybrid_target,
        trained.hybrid_trunk,
        trained.mtp_heads,
        trained.eagle3,
        trained.eagle3_d2t,
        trained.dflash,
        trained.dspark,
        trained.dflash2,
        _lfm2,
        _mamba2,
    ],
    ids=lambda f: f.__name__.strip("_"),
)
def test_real_and_test_models_pass(path: Any) -> None:
    read_gguf(path())


def _table(texts: list[bytes]) -> TokenTable:
    offsets = array("Q")
    parts = []
    at = 0
    for t in texts:
        offsets.append(at)
        parts.append(struct.pack("<Q", len(t)) + t)
        at += 8 + len(t)
    offsets.append(at)
    return TokenTable(b"".join(parts), offsets)


@pytest.mark.fast
@pytest.mark.parametrize(
    ("texts", "repeat"),
    [
        ([b"a", b"b", b"c"], None),
        ([b"a", b"b", b"a"], (0, 2)),
        ([b"a", b"b", b"b", b"a"], (1, 2)),
        ([b"x", b"y", b"x", b"x"], (0, 2)),
        # llama.cpp reads each text as a C string: up to its first NUL byte.
        ([b"x\0y", b"x\0z"], (0, 1)),
        ([b"a\0", b"a"], (0, 1)),
        # An empty text becomes "[EMPTY_<id>]", which another token may spell.
        ([b"", b""], None),
        ([b"q", b"", b"[EMPTY_1]"], (1, 2)),
        ([b"\0", b"[EMPTY_0]"], (0, 1)),
    ],
)
def test_a_repeated_token_text_is_found_as_llama_cpp_reads_it(
    texts: list[bytes], repeat: tuple[int, int] | None
) -> None:
    assert _table(texts).first_repeat() == repeat


def _repeated(tmp_path: Path, name: str) -> Path:
    """The tiny target with token 301's text made token 300's (both ' t' and the like)."""
    tokens = tokens_of(LLAMA())
    tokens[301] = tokens[300]
    return with_metadata(LLAMA(), tmp_path / name, {"tokenizer.ggml.tokens": Typed(STR, tokens, array=True)})


def test_a_vocabulary_with_a_repeated_text_is_one_line_wherever_it_loads(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """llama-vocab.cpp asserts id_to_token.size() == token_to_id.size() at load: SIGABRT in
    `tandem run`, in `tandem serve` at start, and in the app when chosen as a draft."""
    bad = _repeated(tmp_path, "repeated.gguf")
    good = LLAMA()
    says = "repeated.gguf is not a usable GGUF file: tokenizer.ggml.tokens is a vocabulary where tokens 300 "
    fast = ["--threads", "1", "--ctx", "256", "-n", "4"]
    for models in (["--target", str(bad)], ["--target", str(good), "--draft", str(bad)]):
        assert main(["run", *models, *fast, "hi"]) == 1
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("tandem: error: ") and says in err[0], err
    # The app: its load and its By-path tab run the preflight.
    with pytest.raises(TandemError, match="tokens 300 and 301"):
        preflight(PairRef(good, bad), DraftNeeds.of_pair(PairRef(good, bad)))
    serve = subprocess.run(
        [
            sys.executable,
            "-m",
            "tandem.cli.main",
            "serve",
            "--target",
            str(bad),
            "--threads",
            "1",
            "--port",
            "0",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    lines = serve.stderr.strip().splitlines()
    assert serve.returncode == 1 and len(lines) == 1 and says in lines[0], serve.stderr
