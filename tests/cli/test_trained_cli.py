"""Trained drafters (EAGLE-3, DFlash) as a user meets them: given with --draft, found beside the
target (its folder, or its Hugging Face repository's snapshots), listed by `tandem models` and
`tandem pairs` with their kind, served by `tandem serve`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import openai
import pytest

import model_files
import trained
from catalogs import install_catalog, link_or_copy
from serve_helpers import serving
from tandem.catalog import companions_of, usable_companion
from tandem.cli.main import main
from tandem.engine import LoadOptions, ModelPair
from tandem.session.options import Options
from tandem.session.pairs import resolve_pair
from tandem.session.refs import DraftNeeds, PairRequest

FAST = ["--threads", "1", "--ctx", "512"]
PROMPT = "Write a story about the ocean and a lighthouse keeper."


def _fetch(*args: object) -> None:
    raise AssertionError("nothing to download")


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """A target as a download leaves it, with what ships beside it: an EAGLE-3 drafter named as
    ggml-org names them, a DFlash drafter under another name (found by its header), an EAGLE-3
    drafter of another target, and an unrelated model."""
    target = trained.folder_with(
        tmp_path / "models",
        trained.target(),
        **{"eagle3-tiny": trained.eagle3(), "block-drafter": trained.dflash()},
    )
    other = model_files.tiny_eagle3_model("eagle3-wide", seed=9, target_hidden=64)
    link_or_copy(other, target.parent / "eagle3-other.gguf")
    link_or_copy(model_files.tiny_model("a", seed=1), target.parent / "unrelated.gguf")
    return target


def test_companions_are_found_beside_the_target_and_checked(folder: Path) -> None:
    found = companions_of(folder)
    assert [(c.path.name, c.kind, c.label, c.usable) for c in found] == [
        ("eagle3-tiny.gguf", "eagle3", "EAGLE-3 drafter", True),
        ("block-drafter.gguf", "dflash", "DFlash drafter", True),
        ("eagle3-other.gguf", "eagle3", "EAGLE-3 drafter", False),
    ]
    assert found[2].problem.startswith("it was trained on a target 64 wide, and tiny-target.gguf is 32 wide")
    assert usable_companion(folder) == found[0]
    assert usable_companion(folder, "dflash") == found[1]
    assert companions_of(folder.parent / "eagle3-tiny.gguf") == []  # a drafter has none


def test_a_companion_in_another_snapshot_of_the_repository_is_found(tmp_path: Path) -> None:
    """A drafter downloaded later lands in a newer snapshot folder of the same repository."""
    repo = tmp_path / "hub" / "models--org--Tiny-GGUF" / "snapshots"
    target = link_or_copy(trained.target(), repo / "aaaa" / "tiny-Q8_0.gguf")
    link_or_copy(trained.dspark(), repo / "bbbb" / "dspark-tiny.gguf")
    elsewhere = tmp_path / "hub" / "models--org--Other" / "snapshots" / "c"
    link_or_copy(trained.eagle3(), elsewhere / "eagle3-x.gguf")
    (found,) = companions_of(target)
    assert (found.path.name, found.label, found.usable) == ("dspark-tiny.gguf", "DSpark drafter", True)


def test_the_target_alone_drafts_with_what_ships_beside_it(
    folder: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ref = resolve_pair(PairRequest(target=folder), DraftNeeds.of(["auto"]), fetch=_fetch)
    assert ref.draft == folder.parent / "eagle3-tiny.gguf" and "found beside tiny-target.gguf" in ref.found
    assert resolve_pair(PairRequest(target=folder), DraftNeeds.of(["dflash"]), fetch=_fetch).draft == (
        folder.parent / "block-drafter.gguf"
    )
    # Asked not to use a draft file (prompt lookup, the target alone): nothing is picked up.
    for needs in (DraftNeeds.of(["lookup"]), DraftNeeds.of(["auto"], speculative=False)):
        assert resolve_pair(PairRequest(target=folder), needs, fetch=_fetch).draft is None

    base = ["run", "--target", str(folder), *FAST, "-n", "40", "--json"]
    assert main([*base, "--baseline", PROMPT]) == 0
    alone: dict[str, Any] = json.loads(capsys.readouterr().out)
    assert main([*base, PROMPT]) == 0
    out, err = capsys.readouterr()
    auto: dict[str, Any] = json.loads(out)
    assert "note: drafting with eagle3-tiny.gguf, the EAGLE-3 drafter found beside tiny-target.gguf" in err
    assert auto["text"] == alone["text"]
    assert auto["stats"]["drafters"]["eagle3"]["drafted"] > 0 and auto["stats"]["eagle3_rounds"] > 0
    drafter_bytes = (folder.parent / "eagle3-tiny.gguf").stat().st_size
    assert auto["memory"]["model_file_bytes"] == folder.stat().st_size + drafter_bytes
    assert main([*base, "--drafter", "dflash", "--no-adaptive", "--draft-max", "3", PROMPT]) == 0
    block: dict[str, Any] = json.loads(capsys.readouterr().out)
    assert block["text"] == alone["text"] and block["stats"]["drafters"]["dflash"]["accepted"] > 0
    assert {t["origin"] for t in block["tokens"]} >= {"draft", "target"}


def test_run_with_the_drafter_named_colours_and_counts_its_drafts(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["run", "--target", str(trained.target()), "--draft", str(trained.eagle3()), *FAST, "-n", "32"]
    assert main([*args, "--color", "always", "--no-adaptive", PROMPT]) == 0
    out, err = capsys.readouterr()
    assert "\x1b[32m" in out  # accepted guesses, as for any drafter
    assert "rounds drafted:" in err.splitlines()[-1] and "eagle3" in err.splitlines()[-1]


def test_models_lists_companions_with_their_kind(folder: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["models", str(folder.parent)]) == 0
    out = capsys.readouterr().out
    rows = {line.split()[2]: line for line in out.splitlines()[1:] if line[:1].isdigit()}
    target_row = rows["tiny-target.gguf"]
    number = {name: line.split()[0] for name, line in rows.items()}
    assert f"{number['eagle3-tiny.gguf']} (EAGLE-3)" in target_row
    assert f"{number['block-drafter.gguf']} (DFlash)" in target_row
    assert "eagle3 (EAGLE-3 drafter)" in rows["eagle3-tiny.gguf"]
    assert rows["eagle3-tiny.gguf"].rstrip().endswith(f"for {number['tiny-target.gguf']}")
    assert rows["eagle3-other.gguf"].rstrip().endswith("-")  # nobody's here
    assert "drafters shipped beside their target" in out
    assert main(["models", "--json", str(folder.parent)]) == 0
    models = {Path(m["path"]).name: m for m in json.loads(capsys.readouterr().out)["models"]}
    companions = models["tiny-target.gguf"]["companions"]
    assert [(Path(c["path"]).name, c["kind"], c["usable"]) for c in companions] == [
        ("eagle3-tiny.gguf", "eagle3", True),
        ("block-drafter.gguf", "dflash", True),
        ("eagle3-other.gguf", "eagle3", False),
    ]
    drafter = models["eagle3-tiny.gguf"]
    assert drafter["sidecar"] == "EAGLE-3 drafter" and drafter["drafts"] == []
    # A trained drafter is nobody's draft model: only its own target's companion.
    assert all("eagle3" not in Path(d).name for m in models.values() for d in m["drafts"])


def test_pairs_names_a_trained_drafter_given_as_a_pair_s_draft(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    install_catalog(
        tmp_path,
        """include_builtin = false
[[pair]]
name = "tiny-eagle3"
[pair.target]
repo_id = "org/Tiny-GGUF"
filename = "tiny-Q8_0.gguf"
[pair.draft]
repo_id = "org/Tiny-GGUF"
filename = "eagle3-tiny-Q8_0.gguf"
""",
        monkeypatch,
    )
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    assert main(["pairs"]) == 0
    (row,) = [line for line in capsys.readouterr().out.splitlines() if line.startswith("tiny-eagle3")]
    assert "eagle3-tiny-Q8_0 (EAGLE-3 drafter)" in row
    assert main(["pairs", "--json"]) == 0
    (pair,) = json.loads(capsys.readouterr().out)["pairs"]
    assert pair["draft"]["kind"] == "EAGLE-3 drafter"


def test_serve_drafts_with_it_and_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    messages = [{"role": "user", "content": PROMPT}]
    args = ["run", "--target", str(trained.target()), "--draft", str(trained.dflash()), *FAST, "--json"]
    assert main([*args, "--drafter", "dflash", "--no-adaptive", "--draft-max", "3", "-n", "32", PROMPT]) == 0
    run: dict[str, Any] = json.loads(capsys.readouterr().out)
    with ModelPair.load(trained.target(), trained.dflash(), LoadOptions(n_ctx=512, n_threads=1)) as pair:
        options = Options(n_threads=1, drafter="dflash", adaptive=False, draft_max=3)
        with serving(pair, options=options) as served:
            c = openai.OpenAI(base_url=served.v1, api_key="unused", max_retries=0)
            answer = c.chat.completions.create(model="test-pair", messages=messages, max_tokens=32)  # type: ignore[arg-type]
            assert answer.choices[0].message.content == run["text"]
            extra = answer.model_extra or {}
            assert [t["origin"] for t in extra["tandem"]["tokens"]] == [t["origin"] for t in run["tokens"]]
            assert answer.usage is not None
            usage = (answer.usage.model_extra or {})["tandem"]
            assert usage["drafter"] == "dflash"
            assert usage["drafters"]["dflash"]["drafted"] == run["stats"]["drafted"]
            (model,) = c.models.list().data
            entry = (model.model_extra or {})["tandem"]
            assert entry["draft"] == trained.dflash().name and "dflash" in entry["drafters"]
            assert entry["draft_heads"] is False
