"""A model's MTP heads in a file of their own (`mtp-*.gguf`: llama.cpp's `--mtp` export, the MTP
block with the embeddings and head, no trunk) drafting for the model exported without them.

The tiny hybrid Qwen3.5 is written whole, and as its two halves from the same weights
(model_files.tiny_mtp_model part_of="trunk" / "heads"): the halves must draft exactly as the
whole does, round for round.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import model_files
import trained
from run_helpers import TINY, run
from tandem.engine import ChatMessage, ModelPair, TandemError
from tandem.engine.drafters.heads.mtp import head_of
from tandem.engine.drafters.registry import check_file, classify
from tandem.engine.files.gguf_file import read_gguf
from tandem.session.pairs import resolve_pair
from tandem.session.preflight import preflight
from tandem.session.refs import DraftNeeds, PairRequest

PROMPTS = ["Write a story about the ocean and a lighthouse keeper.", "Explain in detail why the sky is blue."]


def _fetch(*args: object) -> None:
    raise AssertionError("nothing to download")


@pytest.mark.parametrize("k", [1, 3])
def test_the_heads_alone_draft_exactly_as_the_whole_model_s(k: int) -> None:
    with (
        ModelPair.load(trained.hybrid_target(), None, TINY) as whole,
        ModelPair.load(trained.hybrid_trunk(), trained.mtp_heads(), TINY) as split,
    ):
        head = head_of(split.target)
        assert head is not None and head.source == split.sidecar == trained.mtp_heads()
        for text in PROMPTS:
            prompt = whole.chat_prompt([ChatMessage("user", text)])
            ref = run(split, prompt, speculative=False, max_tokens=64)
            a = run(whole, prompt, drafter="mtp", draft_max=k, max_tokens=64)
            b = run(split, prompt, drafter="mtp", draft_max=k, max_tokens=64)
            assert a.ids == b.ids == ref.ids
            assert [(r.drafted, r.accepted) for r in a.rounds] == [(r.drafted, r.accepted) for r in b.rounds]
            assert sum(r.accepted for r in b.rounds) > 5


def test_the_heads_alone_are_found_beside_the_trunk(tmp_path: Path) -> None:
    target = trained.folder_with(tmp_path, trained.hybrid_trunk(), **{"mtp-tiny": trained.mtp_heads()})
    for drafter in ("auto", "mtp"):
        ref = resolve_pair(PairRequest(target=target), DraftNeeds.of([drafter]), fetch=_fetch)
        assert ref.draft == tmp_path / "mtp-tiny.gguf" and "the MTP heads found beside" in ref.found
        preflight(ref, DraftNeeds.of([drafter]))
    # Given as the draft with --drafter mtp: kept (a draft model would not be).
    given = resolve_pair(
        PairRequest(target=target, draft=tmp_path / "mtp-tiny.gguf"), DraftNeeds.of(["mtp"]), fetch=_fetch
    )
    assert given.draft == tmp_path / "mtp-tiny.gguf"


def test_heads_for_another_model_are_refused_before_loading() -> None:
    heads = read_gguf(trained.mtp_heads())
    assert (kind := classify(heads)) is not None and kind.name == "mtp"
    with pytest.raises(TandemError, match="carries MTP heads of its own"):
        check_file(read_gguf(trained.hybrid_target()), heads)
    with pytest.raises(TandemError, match=r"they are qwen35 heads, and tiny-llama-d\.gguf is a llama model"):
        check_file(read_gguf(trained.target()), heads)
    deeper = model_files.tiny_mtp_model("qwen35-mtp-s16-trunk-deep", seed=7, part_of="trunk", shape=_deeper())
    with pytest.raises(
        TandemError, match="they follow a trunk 4 layers deep, and tiny-qwen35-mtp-s16-trunk-dee"
    ):
        check_file(read_gguf(deeper), heads)
    with pytest.raises(TandemError, match="is a model's MTP heads alone, not a model to chat with"):
        ModelPair.load(trained.mtp_heads(), None, TINY)


def _deeper() -> model_files.QwenShape:
    return model_files.QwenShape(n_layer=8)
