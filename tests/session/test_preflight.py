"""One preflight before every load (app/tandem/session/preflight.py): what it refuses, in one line
worded once, and that the CLI's resolution, the app's main load and its By-path tab all reach
it (so they refuse the same files with the same words)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

import model_files
from catalogs import mtp_target, no_heads_target
from tandem.catalog import ModelFile, PairSpec
from tandem.engine import IncompatiblePairError, ModelFileError, TandemError
from tandem.engine.drafters.heads.mtp import CLI_REMEDY, no_heads_message
from tandem.session.pairs import resolve_pair
from tandem.session.preflight import APP_REMEDY, preflight
from tandem.session.refs import DraftNeeds, PairRef, PairRequest
from tandem.ui.picker.path_tab import check_paths


def _no_fetch(spec: PairSpec, missing: Sequence[ModelFile]) -> None:
    raise AssertionError(f"nothing should be downloaded, asked for {missing}")


def _swapped() -> Path:
    """A tiny model whose vocabulary cannot draft for the tiny target's even across tokenizers
    (labelled word-level: its text cannot round-trip)."""
    return model_files.tiny_model("word-level-vocab", seed=1, vocab_edit="word-level")


def _refusal(call: object) -> str:
    assert callable(call)
    with pytest.raises(TandemError) as err:
        call()
    return str(err.value)


def test_a_good_pair_passes_with_its_headers(tiny_target: Path, tiny_draft: Path) -> None:
    ref = PairRef(tiny_target, tiny_draft)
    checked = preflight(ref, DraftNeeds.of_pair(ref))
    assert checked.ref == ref and checked.fit is None  # no context size: fit not asked
    assert checked.target.path == tiny_target and checked.draft is not None
    assert checked.draft.path == tiny_draft


def test_files_that_cannot_load_are_refused(tiny_target: Path, tmp_path: Path) -> None:
    gone = PairRef(tmp_path / "gone.gguf", None)
    with pytest.raises(ModelFileError, match="model file not found"):
        preflight(gone, DraftNeeds())
    notes = tmp_path / "notes.gguf"
    notes.write_text("not a model\n")
    with pytest.raises(ModelFileError, match="not a GGUF model file"):
        preflight(PairRef(tiny_target, notes), DraftNeeds(use_draft=True))
    half = tmp_path / "half.gguf"
    data = tiny_target.read_bytes()
    half.write_bytes(data[: len(data) // 2])
    with pytest.raises(ModelFileError, match="truncated"):
        preflight(PairRef(tiny_target, half), DraftNeeds(use_draft=True))


def test_a_draft_with_another_tokenizer_is_refused(tiny_target: Path) -> None:
    with pytest.raises(IncompatiblePairError, match=r"cannot draft for tiny-a\.gguf"):
        preflight(PairRef(tiny_target, _swapped()), DraftNeeds(use_draft=True))


def test_drafting_alone_needs_heads() -> None:
    plain = no_heads_target()
    alone = PairRef(plain, None)
    assert preflight(alone, DraftNeeds()).target.mtp_layers == 0  # lookup needs no heads
    assert _refusal(lambda: preflight(alone, DraftNeeds(need_heads=True))) == no_heads_message(plain.name)
    assert no_heads_message(plain.name) == (
        f"{plain.name} has no built-in draft heads (multi-token prediction layers): {CLI_REMEDY}"
    )
    app = _refusal(lambda: preflight(alone, DraftNeeds.of_pair(alone), remedy=APP_REMEDY))
    assert app == no_heads_message(plain.name, APP_REMEDY)  # the same words, the app's advice
    checked = preflight(PairRef(mtp_target(), None), DraftNeeds(need_heads=True))
    assert checked.target.mtp_layers > 0


def test_fit_is_judged_when_a_context_size_is_given(
    tiny_target: Path, tiny_draft: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ref = PairRef(tiny_target, tiny_draft)
    monkeypatch.setenv("TANDEM_MEMORY", "1M")
    fit = preflight(ref, DraftNeeds.of_pair(ref), n_ctx=512).fit
    assert fit is not None and fit.verdict == "won't fit"
    assert fit.need_bytes > tiny_target.stat().st_size + tiny_draft.stat().st_size
    monkeypatch.setenv("TANDEM_MEMORY", "64G")
    fit = preflight(ref, DraftNeeds.of_pair(ref), n_ctx=512).fit
    assert fit is not None and fit.verdict == "fits"


@pytest.mark.parametrize("case", ["incompatible", "missing", "no heads"])
def test_the_cli_and_the_app_refuse_alike(tiny_target: Path, tmp_path: Path, case: str) -> None:
    """The same files, refused by the CLI's resolution and the app's By-path tab: the same line
    (the advice after a missing-heads refusal is each front-end's own)."""
    if case == "incompatible":
        target, draft = tiny_target, _swapped()
    elif case == "missing":
        target, draft = tiny_target, tmp_path / "nope.gguf"
    else:
        target, draft = no_heads_target(), None
    needs = DraftNeeds(use_draft=True, need_heads=draft is None)
    cli = _refusal(lambda: resolve_pair(PairRequest(target=target, draft=draft), needs, fetch=_no_fetch))
    app = _refusal(lambda: check_paths(str(target), str(draft or "")))
    if case == "no heads":
        assert cli == no_heads_message(target.name) and app == no_heads_message(target.name, APP_REMEDY)
    else:
        assert cli == app
