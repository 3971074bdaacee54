"""Reading GGUF headers, refusing bad files, and comparing tokenizers: on real files."""

from __future__ import annotations

import re
import struct
from pathlib import Path

import pytest

import model_files
from tandem.engine import (
    IncompatiblePairError,
    LoadedModel,
    ModelFileError,
    ModelLoadError,
    ModelPair,
    check_pair,
    compatibility_problems,
    read_gguf,
)


def test_reads_real_metadata_without_loading(smollm2_q4_1: Path, smollm2_f16: Path) -> None:
    info = read_gguf(smollm2_q4_1)
    assert info.architecture == "llama"
    assert info.vocab_type == "gpt2"
    assert len(info.tokens) == 49152
    assert info.tokens[1] == "<|im_start|>"
    assert info.context_length == 8192
    assert info.quantization == "Q4_1"
    assert "im_start" in (info.chat_template or "")
    assert 130e6 < info.n_params < 140e6
    assert read_gguf(smollm2_f16).quantization == "F16"
    assert info.missing_data_bytes() == 0


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ModelFileError, match="not found"):
        read_gguf(tmp_path / "nope.gguf")


def test_folder_is_not_a_model(tmp_path: Path) -> None:
    with pytest.raises(ModelFileError, match="folder"):
        read_gguf(tmp_path)


def test_not_a_gguf(tmp_path: Path) -> None:
    bad = tmp_path / "page.gguf"
    bad.write_text("<html>404 not found</html>" * 10)
    with pytest.raises(ModelFileError, match=r"not a GGUF model file.*web page"):
        read_gguf(bad)


def test_truncated_download_is_detected(smollm2_q4_1: Path, tmp_path: Path) -> None:
    cut = model_files.truncated_copy(smollm2_q4_1, tmp_path / "cut.gguf", 0.6)
    with pytest.raises(ModelFileError, match=r"truncated: .* \(4\d%\) of its tensor data are missing"):
        read_gguf(cut)
    header_only = model_files.truncated_copy(smollm2_q4_1, tmp_path / "head.gguf", 0.001)
    with pytest.raises(ModelFileError, match="truncated"):
        read_gguf(header_only)


def test_truncated_file_is_refused_before_llama_cpp_sees_it(
    smollm2_q4_1: Path, smollm2_f16: Path, tmp_path: Path
) -> None:
    cut = model_files.truncated_copy(smollm2_q4_1, tmp_path / "cut.gguf", 0.9)
    with pytest.raises(ModelFileError, match="truncated"):
        ModelPair.load(smollm2_f16, cut)


def test_same_model_family_is_compatible(smollm2_q4_1: Path, smollm2_f16: Path, tiny_target: Path) -> None:
    assert compatibility_problems(read_gguf(smollm2_f16), read_gguf(smollm2_q4_1)) == []
    assert compatibility_problems(read_gguf(smollm2_f16), read_gguf(tiny_target)) == []


def test_different_token_text_is_named_and_drafts_across_tokenizers() -> None:
    swapped = model_files.tiny_model("swapped-vocab", seed=3, vocab_edit="swap")
    verdict = check_pair(read_gguf(model_files.smollm2_q4_1()), read_gguf(swapped))
    assert not verdict.same
    assert re.search(r"token 1000 is .* in the target but .* in the draft", verdict.differences[0])
    assert "drafts across tokenizers" in verdict.note("smol.gguf", "swapped.gguf")


def test_a_vocabulary_that_cannot_round_trip_is_refused_with_the_reason() -> None:
    word_level = model_files.tiny_model("word-level-vocab", seed=3, vocab_edit="word-level")
    with pytest.raises(IncompatiblePairError, match=r"cannot draft across them either .*word-level"):
        check_pair(read_gguf(model_files.smollm2_q4_1()), read_gguf(word_level))


def test_vocabulary_size_difference_is_named() -> None:
    shrunk = model_files.tiny_model("shrunk-vocab", seed=3, vocab_edit="shrink")
    problems = compatibility_problems(read_gguf(model_files.smollm2_q4_1()), read_gguf(shrunk))
    assert any("vocabulary sizes differ by 200" in p for p in problems)


def test_unknown_architecture_is_explained() -> None:
    alien = model_files.tiny_model("alien-arch", seed=4, arch="fancy-new-arch")
    with pytest.raises(ModelLoadError, match="does not support the 'fancy-new-arch' architecture"):
        LoadedModel(alien)


def test_a_file_only_llama_cpp_can_tell_is_damaged_says_why(tmp_path: Path) -> None:
    # A tensor's type changed from F32 to Q4_0: the header still reads as GGUF (Tandem's parser
    # accepts it), but the tensor offsets no longer add up, which only llama.cpp's reader checks.
    src = model_files.tiny_model("a", seed=1)
    data = bytearray(src.read_bytes())
    name = b"token_embd.weight"
    start = data.find(struct.pack("<Q", len(name)) + name) + 8 + len(name)
    n_dims = struct.unpack_from("<I", data, start)[0]
    struct.pack_into("<I", data, start + 4 + 8 * n_dims, 2)  # GGML_TYPE_Q4_0
    bad = tmp_path / "retyped.gguf"
    bad.write_bytes(bytes(data))
    read_gguf(bad)  # accepted here...
    with pytest.raises(ModelLoadError) as err:  # ...and refused by llama.cpp, with its reason
        LoadedModel(bad)
    assert "its GGUF data is damaged (tensor 'output_norm.weight' has offset" in str(err.value)
