"""Trained drafters' headers, checked against the target before anything loads
(registry.check_file, with each kind's own checks).

A crafted or damaged EAGLE-3 / DFlash header, or one made for another target, would make
llama.cpp abort the process (an assertion on the layer it is asked to hand over, on the width of
a row, on d2t) or draft nonsense; each is refused with one line that says why, by the engine's
load and by the session's preflight alike, and no weights are read.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

import model_files
import trained
from run_helpers import TINY
from tandem.cli.main import main
from tandem.engine import ModelPair, TandemError
from tandem.engine.drafters.registry import check_file, named, read_file
from tandem.engine.files.gguf_file import read_gguf
from tandem.session.preflight import preflight
from tandem.session.refs import DraftNeeds, PairRef

E3 = model_files.tiny_eagle3_model
DF = model_files.tiny_dflash_model

# (a crafted file, what its refusal says)
CRAFTED: dict[str, tuple[Callable[[], Path], str]] = {
    "eagle3-four-layers": (
        lambda: E3("bad-e3-four", seed=3, layers=(0, 1, 2, 2)),
        "EAGLE-3 reads exactly 3 target layers, its header lists 4",
    ),
    "eagle3-layer-beyond": (
        lambda: E3("bad-e3-beyond", seed=3, layers=(0, 1, 7)),
        "it reads the target's layer 7, and tiny-llama-d.gguf has 3 layers",
    ),
    "eagle3-last-layer": (
        # (the last layer's output: llama.cpp hands it over for a few architectures, not llama)
        lambda: E3("bad-e3-last", seed=3, layers=(0, 1, 3)),
        "it reads the target's layer 3, and tiny-llama-d.gguf has 3 layers",
    ),
    "eagle3-negative-layer": (
        lambda: E3("bad-e3-negative", seed=3, metadata={"eagle3.target_layers": [0, -1, 2]}),
        "it lists a negative target layer (-1)",
    ),
    "eagle3-no-layers": (
        lambda: E3("bad-e3-nolayers", seed=3, metadata={"eagle3.target_layers": None}),
        "its header does not list the target layers it reads (eagle3.target_layers)",
    ),
    "eagle3-no-width": (
        lambda: E3("bad-e3-nowidth", seed=3, metadata={"eagle3.target_hidden_size": None}),
        "its header does not say the target's width (eagle3.target_hidden_size)",
    ),
    "eagle3-wrong-width": (
        lambda: E3("bad-e3-width", seed=3, target_hidden=64),
        "it was trained on a target 64 wide, and tiny-llama-d.gguf is 32 wide",
    ),
    "eagle3-two-layers": (
        lambda: E3("bad-e3-blocks", seed=3, block_count=2),
        "EAGLE-3 has one decoder layer, its header says 2",
    ),
    "eagle3-d2t-without-head": (
        lambda: E3("bad-e3-d2t-nohead", seed=3, d2t_keep=0.5, own_head=False),
        "it maps a reduced vocabulary (d2t) but has no LM head of its own",
    ),
    "eagle3-d2t-outside": (
        lambda: E3("bad-e3-d2t-shift", seed=3, d2t_keep=0.5, d2t_shift=49152),
        "outside the target's 49,152-token vocabulary",
    ),
    "dflash-block-0": (
        lambda: DF("bad-df-block0", seed=4, block_size=0),
        "its block size is 0; a block has 2 to 256 positions",
    ),
    "dflash-block-1e9": (
        lambda: DF("bad-df-block1e9", seed=4, block_size=10**9),
        "its block size is 1000000000; a block has 2 to 256 positions",
    ),
    "dflash-block-text": (
        lambda: DF("bad-df-blocktext", seed=4, metadata={"dflash.block_size": "16"}),
        "its block size is '16'",
    ),
    "dflash-no-mask": (
        lambda: DF("bad-df-nomask", seed=4, metadata={"tokenizer.ggml.mask_token_id": None}),
        "it has no valid mask token (tokenizer.ggml.mask_token_id is None)",
    ),
    "dflash-mask-outside": (
        lambda: DF("bad-df-mask", seed=4, mask_token=3, metadata={"tokenizer.ggml.mask_token_id": 10**6}),
        "it has no valid mask token (tokenizer.ggml.mask_token_id is 1000000)",
    ),
    "dflash-layer-beyond": (
        lambda: DF("bad-df-beyond", seed=4, layers=(1, 9)),
        "it reads the target's layer 9, and tiny-llama-d.gguf has 3 layers",
    ),
}


@pytest.mark.parametrize("case", list(CRAFTED))
def test_a_crafted_header_is_one_line_before_anything_loads(
    case: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    make, reason = CRAFTED[case]
    path = make()
    target = trained.target()
    with pytest.raises(TandemError) as err:
        check_file(read_gguf(target), read_gguf(path))
    assert reason in str(err.value) and "\n" not in str(err.value)
    with pytest.raises(TandemError, match=r"\w"):
        preflight(PairRef(target, path), DraftNeeds.of(["auto"]))

    import tandem.engine.pair as pair_module

    def no_loading(*args: object, **kwargs: object) -> None:
        raise AssertionError("nothing may load")

    monkeypatch.setattr(pair_module, "LoadedModel", no_loading)
    with pytest.raises(TandemError):
        ModelPair.load(target, path, TINY)
    monkeypatch.undo()
    # The command line: one line on standard error, no traceback.
    assert main(["run", "--target", str(target), "--draft", str(path), "--threads", "1", "hi"]) == 1
    err_lines = capsys.readouterr().err.strip().splitlines()
    assert len(err_lines) == 1 and err_lines[0].startswith("tandem: error: ") and reason in err_lines[0]


def test_the_facts_of_each_kind() -> None:
    e3 = read_file(read_gguf(trained.eagle3()))
    assert (e3.kind, e3.label, e3.layers, e3.target_hidden, e3.max_draft) == (
        "eagle3",
        "EAGLE-3 drafter",
        (0, 1, 2),
        32,
        32,
    )
    d2t = read_file(read_gguf(trained.eagle3_d2t()))
    assert d2t.draft_vocab == 49152 // 2 and d2t.own_head and not d2t.own_embeddings
    df = read_file(read_gguf(trained.dflash()))
    assert (df.variant, df.block_size, df.max_draft, df.mask_token) == ("DFlash", 4, 3, 3)
    assert not df.anchor_first
    ds = read_file(read_gguf(trained.dspark()))
    assert (ds.label, ds.max_draft, ds.anchor_first) == ("DSpark drafter", 4, True)
    assert read_file(read_gguf(trained.dflash2())).variant == "DFlash2"
    names = ("eagle3-Qwen3-8B.gguf", "org/dspark-x.gguf", "mtp-y.gguf", "x.gguf")
    assert [k.name if (k := named(n)) else None for n in names] == ["eagle3", "dflash", "mtp", None]


def test_a_target_whose_layers_llama_cpp_cannot_hand_over_is_refused() -> None:
    """A mamba2 model's graph keeps no layer inputs: llama.cpp would assert."""
    mamba = model_files.tiny_stateful_model("mamba2-t", "mamba2", seed=21)
    with pytest.raises(TandemError, match="cannot hand over the hidden rows of a mamba2 model's layers"):
        check_file(read_gguf(mamba), read_gguf(trained.eagle3()))


def test_a_drafter_given_as_the_target_or_as_a_draft_model_is_refused() -> None:
    with pytest.raises(TandemError, match="is an EAGLE-3 drafter, not a model to chat with"):
        preflight(PairRef(trained.eagle3(), None), DraftNeeds.of(["auto"]))
    with pytest.raises(TandemError, match="is a DFlash drafter, not a model to chat with"):
        ModelPair.load(trained.dflash(), None, TINY)
    with pytest.raises(TandemError, match="is an EAGLE-3 drafter, not a draft model: draft with it"):
        preflight(PairRef(trained.target(), trained.eagle3()), DraftNeeds.of(["model"]))
    with pytest.raises(TandemError, match="is a DSpark drafter, not an EAGLE-3 drafter: use --drafter"):
        preflight(PairRef(trained.target(), trained.dspark()), DraftNeeds.of(["eagle3"]))
    with pytest.raises(TandemError, match=r"--drafter dflash needs the DFlash drafter trained for tiny"):
        preflight(PairRef(trained.target(), None), DraftNeeds.of(["dflash"]))
