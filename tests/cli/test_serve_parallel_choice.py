"""How many requests `tandem serve` answers at once (cli/serve_cmd.parallel_sequences): as asked
when memory holds them, else one line saying how many it holds; by default as many as memory
holds up to 8, or one where the pair's drafting or state runs one sequence only."""

from __future__ import annotations

from pathlib import Path

import pytest

import model_files
import trained
from tandem.cli.serve_cmd import PARALLEL_DEFAULT_MAX, parallel_sequences
from tandem.engine import LoadOptions, TandemError
from tandem.session.refs import PairRef


def test_the_default_is_what_memory_holds_up_to_the_most(smollm2_f16: Path, smollm2_q4_1: Path) -> None:
    n, said = parallel_sequences(PairRef(smollm2_f16, smollm2_q4_1), LoadOptions(n_ctx=2048), None)
    assert n == PARALLEL_DEFAULT_MAX
    assert f"up to {n} requests at once" in said and "2,048 tokens of context each" in said


def test_more_than_memory_holds_is_one_line(smollm2_f16: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TANDEM_MEMORY", "600MiB")  # (the fit's override of what is available)
    with pytest.raises(TandemError, match=r"holds \d+ sequences of 4,096 tokens beside the models, not 64"):
        parallel_sequences(PairRef(smollm2_f16, None), LoadOptions(n_ctx=4096), 64)


def test_heads_and_a_recurrent_state_keep_one_by_default() -> None:
    mtp = model_files.tiny_mtp_model("qwen35-mtp-s16", seed=7)
    n, said = parallel_sequences(PairRef(mtp, None), LoadOptions(n_ctx=512), None)
    assert n == 1 and "one request at a time" in said
    assert parallel_sequences(PairRef(mtp, None), LoadOptions(n_ctx=512), 2)[0] == 2  # as asked
    eagle3 = trained.eagle3()  # (given as the draft: the same as found beside the target)
    n, said = parallel_sequences(PairRef(trained.target(), eagle3), LoadOptions(n_ctx=512), None)
    assert n == 1 and "its eagle3 drafter drafts for one sequence after another" in said
    mamba = model_files.tiny_stateful_model("mamba2-t", "mamba2", seed=21)
    assert parallel_sequences(PairRef(mamba, None), LoadOptions(n_ctx=512), None)[0] == 1
