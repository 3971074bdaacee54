"""Targets that draft with their own heads (multi-token prediction): which files a session
loads for them, and the one-line refusals that come before anything is loaded."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from catalogs import MTP_CATALOG, MTP_FILE, MTP_REPO, install_catalog, mtp_target, no_heads_target
from hub_server import FakeHub
from tandem.catalog import ModelFile, PairSpec, download_file, pull_pair
from tandem.engine import LoadOptions, ModelPair, TandemError
from tandem.engine.drafters.heads.mtp import head_of
from tandem.session.drafting import drafted_by, no_draft_note
from tandem.session.pairs import resolve_pair
from tandem.session.refs import DraftNeeds, PairRef, PairRequest


def _no_fetch(spec: PairSpec, missing: Sequence[ModelFile]) -> None:
    raise AssertionError(f"nothing should be downloaded, asked for {missing}")


def test_what_each_drafter_needs() -> None:
    # (use_sidecar: a draft file that is a drafter of a kind it uses is kept: the MTP heads in a
    # file of their own, an EAGLE-3 or DFlash drafter)
    assert DraftNeeds.of(["auto"]) == DraftNeeds(use_draft=True, use_sidecar=True)
    assert DraftNeeds.of(["model"]) == DraftNeeds(use_draft=True, need_draft=True)
    # no draft model, the heads (or the heads in a file of their own)
    assert DraftNeeds.of(["mtp"]) == DraftNeeds(need_heads=True, use_sidecar=True)
    assert DraftNeeds.of(["eagle3"]) == DraftNeeds(use_draft=True, need_sidecar="eagle3", use_sidecar=True)
    assert DraftNeeds.of(["lookup"]) == DraftNeeds()
    assert DraftNeeds.of(["mtp"], speculative=False) == DraftNeeds()  # the target alone
    benchmark = DraftNeeds.of(["lookup", "mtp", "model"])
    assert benchmark == DraftNeeds(True, True, True, use_sidecar=True)


def test_mtp_with_a_target_without_heads_is_refused_before_loading(tmp_path: Path) -> None:
    plain = no_heads_target()
    with pytest.raises(TandemError) as err:
        resolve_pair(PairRequest(target=plain), DraftNeeds.of(["mtp"]), fetch=_no_fetch)
    assert str(err.value) == (
        f"{plain.name} has no built-in draft heads (multi-token prediction layers): use a draft model "
        "(--draft) or prompt lookup (--drafter lookup)"
    )
    # A target with heads: no draft file, even when one is given (the heads draft).
    ref = resolve_pair(PairRequest(target=mtp_target(), draft=plain), DraftNeeds.of(["mtp"]), fetch=_no_fetch)
    assert ref == PairRef(mtp_target(), None)
    # A file that is not there is the usual one line too.
    with pytest.raises(TandemError, match="model file not found"):
        resolve_pair(PairRequest(target=tmp_path / "gone.gguf"), DraftNeeds.of(["mtp"]), fetch=_no_fetch)


def test_a_catalog_pair_drafted_by_its_heads_fetches_and_loads_no_draft(
    hub: FakeHub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    hub.add(MTP_REPO, MTP_FILE, mtp_target())
    install_catalog(tmp_path, MTP_CATALOG, monkeypatch)
    asked: list[list[str]] = []

    def fetch(spec: PairSpec, missing: Sequence[ModelFile]) -> None:
        asked.append([f.filename for f in missing])
        pull_pair(spec)

    for drafter in ("auto", "mtp", "lookup"):
        ref = resolve_pair(PairRequest(pair="tiny-mtp"), DraftNeeds.of([drafter]), fetch=fetch)
        assert ref.draft is None and ref.target.name == MTP_FILE and ref.name == "tiny-mtp"
    assert asked == [[MTP_FILE]]  # once, the target alone
    with pytest.raises(TandemError, match="pair tiny-mtp has no draft model"):
        resolve_pair(PairRequest(pair="tiny-mtp"), DraftNeeds.of(["model"]), fetch=fetch)


def test_a_catalog_pair_whose_target_has_no_heads_refuses_mtp(tiny_hub: FakeHub, tiny_catalog: Path) -> None:
    def fetch(spec: PairSpec, missing: Sequence[ModelFile]) -> None:
        assert [f.filename for f in missing] == ["tiny-a.gguf"]  # the heads would draft: no draft file
        for f in missing:
            download_file(f)

    with pytest.raises(TandemError, match=r"tiny-a\.gguf has no built-in draft heads"):
        resolve_pair(PairRequest(pair="tiny"), DraftNeeds.of(["mtp"]), fetch=fetch)


def test_who_drafts_in_words(tiny_target: Path, tiny_draft: Path) -> None:
    options = LoadOptions(n_ctx=512, n_threads=1)
    with ModelPair.load(mtp_target(), None, options) as pair:
        assert head_of(pair.target) is not None
        assert no_draft_note(pair, "auto") == (
            "no draft model given: drafting with the target's built-in draft heads (MTP) and prompt lookup"
        )
        assert no_draft_note(pair, "mtp") is None and no_draft_note(pair, "lookup") is None
        assert drafted_by(pair, "mtp") == "drafted by its built-in MTP draft heads"
        assert drafted_by(pair, "auto") == "drafted by its built-in MTP draft heads and prompt lookup"
        assert drafted_by(pair, "auto", speculative=False) == "the target alone"
    # The heads stay on disk: prompt lookup only, and why.
    with ModelPair.load(mtp_target(), None, LoadOptions(n_ctx=512, n_threads=1, load_mtp=False)) as pair:
        note = no_draft_note(pair, "auto")
        assert note is not None and note.startswith(
            "no draft model given: drafting with prompt lookup only ("
        )
        assert "draft heads were not loaded" in note
    with ModelPair.load(tiny_target, tiny_draft, options) as pair:
        assert no_draft_note(pair, "auto") is None
        assert drafted_by(pair, "auto") == "drafted by tiny-a-draft.gguf and prompt lookup"
        assert drafted_by(pair, "model") == "drafted by tiny-a-draft.gguf"
