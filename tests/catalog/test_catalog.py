"""The catalog: the built-in models.toml, user catalogs, and line-precise errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from catalogs import TINY_CATALOG
from tandem.catalog import CatalogError, load_catalog, unconfirmed_note
from tandem.catalog.spec import BUILTIN_CATALOG, parse_catalog_file, quantization_from_name, split_parts

pytestmark = pytest.mark.fast  # pure logic: the fast lane (pytest -m fast)


def test_builtin_catalog_is_complete(hf_env: Path):
    catalog = load_catalog()
    assert catalog.sources == (BUILTIN_CATALOG,)
    assert len(catalog.pairs) >= 8
    assert catalog.default == "llama3.1-8b" and catalog.default_pair.target.repo_id.startswith("bartowski/")
    names = [p.name for p in catalog.pairs]
    assert len(set(names)) == len(names)
    for p in catalog.pairs:
        assert p.description and p.shines_on, p.name
        assert 1 <= p.draft_max <= 32 and 0 <= p.p_min < 1 and p.context >= 2048, p.name
        assert p.gpu_memory_bytes > p.total_bytes > 0, p.name
        for f in p.files:
            assert "/" in f.repo_id and f.filename.endswith(".gguf") and f.size_bytes > 0, p.name
            assert f.quantization != "unknown" and f.license and isinstance(f.gated, bool), p.name
        assert p.draft is None or p.draft.size_bytes < p.target.size_bytes, p.name
    # From about 2 GB to the 70B class, one of them split across files.
    sizes = sorted(p.total_bytes for p in catalog.pairs)
    assert sizes[0] < 3e9 and sizes[-1] > 40e9
    split = [p for p in catalog.pairs if len(p.target.parts) > 1]
    assert split and all(f.endswith(".gguf") for f in split[0].target.parts)
    # A reasoning distill is drafted by its own distilled sibling, never a stock model.
    r1 = catalog.get("r1-distill-32b")
    assert r1.draft is not None
    assert "R1-Distill" in r1.target.repo_id and "R1-Distill" in r1.draft.repo_id


def test_builtin_catalog_current_pairs(hf_env: Path):
    catalog = load_catalog()
    # The Qwen3 files whose names and exact sizes were read from the hub.
    q14, q32 = catalog.get("qwen3-14b"), catalog.get("qwen3-32b")
    assert (q14.target.repo_id, q14.target.filename, q14.target.size_bytes) == (
        "Qwen/Qwen3-14B-GGUF",
        "Qwen3-14B-Q4_K_M.gguf",
        9_001_753_376,
    )
    assert (q32.target.filename, q32.target.size_bytes) == ("Qwen3-32B-Q4_K_M.gguf", 19_762_149_024)
    for p in (q14, q32, catalog.get("qwen3-8b")):
        assert p.draft is not None
        assert (p.draft.repo_id, p.draft.filename, p.draft.size_bytes) == (
            "Qwen/Qwen3-0.6B-GGUF",
            "Qwen3-0.6B-Q8_0.gguf",
            639_446_688,
        )
    # Converters differ in special-token ids: Gemma's draft comes from the target's publisher.
    gemma = catalog.get("gemma3-12b")
    assert gemma.draft is not None
    assert gemma.draft.repo_id == "ggml-org/gemma-3-1b-it-GGUF" and gemma.draft.size_bytes == 806_058_240
    assert gemma.target.repo_id.split("/")[0] == gemma.draft.repo_id.split("/")[0]
    # Hybrid pairs, flagged: drafted by a small model of its own family and publisher, by the
    # target's own draft heads, or by a trained drafter beside it.
    hybrid = [p for p in catalog.pairs if p.hybrid]
    assert [p.name for p in hybrid] == [
        "qwen3.5-9b-mtp",
        "qwen3.5-27b",
        "qwen3.6-27b-mtp",
        "qwen3.6-27b-dflash",
    ]
    h = catalog.get("qwen3.5-27b")
    assert h.draft is not None
    assert h.target.repo_id.split("/")[0] == h.draft.repo_id.split("/")[0]
    assert "Qwen3.5" in h.target.filename and "Qwen3.5-0.8B" in h.draft.filename
    # A 1.5B target drafted by 0.5B is a CPU pair, and says so.
    assert "CPU" in catalog.get("qwen2.5-coder-1.5b").description
    # docs/catalog.md says where each shipped file name was confirmed (an unconfirmed one was not).
    docs = (BUILTIN_CATALOG.parent / "docs" / "catalog.md").read_text()
    for p in catalog.pairs:
        for f in p.files:
            assert not f.confirmed or f"`{f.repo_id}/{f.filename}`" in docs, (p.name, f.filename)


def test_builtin_pair_drafted_by_its_own_heads(hf_env: Path):
    """A Qwen3.6 27B GGUF that kept its MTP block: one file, no draft model, said honestly."""
    p = load_catalog().get("qwen3.6-27b-mtp")
    assert p.draft is None and p.builtin_draft and p.files == (p.target,)
    assert "Qwen3.6-27B" in p.target.filename and "mtp" in p.target.filename.lower()
    assert p.hybrid and "own MTP heads" in p.description
    # Its file name was never seen in the hub's listing: marked, and warned about before a download.
    assert not p.target.confirmed and p.unconfirmed == (p.target,)
    assert p.target.repo_id in unconfirmed_note(p)
    # Memory: the target and its KV cache, nothing for a draft.
    assert p.total_bytes == p.target.size_bytes < p.gpu_memory_bytes < p.target.size_bytes * 1.2


def test_builtin_catalog_is_checked_strictly(tmp_path: Path):
    """Everything a user catalog may leave out, the shipped one must state."""
    text = BUILTIN_CATALOG.read_text().replace('license = "llama3.1"\n', "", 1)
    bad = tmp_path / "models.toml"
    bad.write_text(text)
    with pytest.raises(CatalogError, match=r"field 'target\.license' is missing"):
        parse_catalog_file(bad, builtin=True)
    parse_catalog_file(bad, builtin=False)  # fine for a user
    # Whether a file name was confirmed, and whether a pair is hybrid, are never left implicit.
    for field, pattern in (
        ("confirmed = true", r"field 'target\.confirmed' is missing"),
        ("hybrid = false", r"field 'hybrid' is missing"),
    ):
        bad.write_text(BUILTIN_CATALOG.read_text().replace(field + "\n", "", 1))
        with pytest.raises(CatalogError, match=pattern):
            parse_catalog_file(bad, builtin=True)
        parse_catalog_file(bad, builtin=False)


def test_confirmed_and_hybrid_fields(hf_env: Path, tmp_path: Path):
    """A user pair is taken as confirmed and not hybrid unless it says otherwise; the fields are
    booleans, checked like the others; an unconfirmed file gets one warning sentence."""
    path = tmp_path / "mine.toml"
    path.write_text(TINY_CATALOG)
    tiny = load_catalog(path).get("tiny")
    assert tiny.target.confirmed and tiny.draft.confirmed and not tiny.hybrid
    assert unconfirmed_note(tiny) == ""

    text = TINY_CATALOG.replace("context = 512", "context = 512\nhybrid = true").replace(
        'filename = "tiny-a-draft.gguf"', 'filename = "tiny-a-draft.gguf"\nconfirmed = false'
    )
    path.write_text(text)
    tiny = load_catalog(path).get("tiny")
    assert tiny.hybrid and tiny.target.confirmed and not tiny.draft.confirmed
    assert tiny.unconfirmed == (tiny.draft,)
    assert unconfirmed_note(tiny) == (
        "pair tiny: test-org/tiny-GGUF/tiny-a-draft.gguf was not confirmed on the Hugging Face hub; "
        "if that name is wrong, the download stops with 'not found'"
    )
    # Only the files still to fetch count: a draft already on disk had the right name.
    assert unconfirmed_note(tiny, (tiny.target,)) == ""
    both = load_catalog(_write(tmp_path, text.replace('"tiny-a.gguf"', '"tiny-a.gguf"\nconfirmed = false')))
    note = unconfirmed_note(both.get("tiny"))
    assert "tiny-a.gguf and test-org/tiny-GGUF/tiny-a-draft.gguf were not confirmed" in note
    assert "if those names are wrong" in note

    typo = _error(tmp_path, TINY_CATALOG.replace("context = 512", 'context = 512\nhybrid = "yes"'))
    assert "pair 'tiny': field 'hybrid' must be true or false, got a string ('yes')" in typo
    wrong = _error(
        tmp_path, TINY_CATALOG.replace('filename = "tiny-a.gguf"', 'filename = "tiny-a.gguf"\nconfirmed = 1')
    )
    assert "field 'target.confirmed' must be true or false, got an integer (1)" in wrong
    near = _error(tmp_path, TINY_CATALOG.replace("context = 512", "context = 512\nhybird = true"))
    assert "unknown field 'hybird' (did you mean 'hybrid'?)" in near


def _write(folder: Path, text: str) -> Path:
    path = folder / "other.toml"
    path.write_text(text)
    return path


def test_user_catalog_extends_and_overrides(hf_env: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    user = tmp_path / "mine.toml"
    user.write_text(
        TINY_CATALOG
        + """
[[pair]]
name = "qwen2.5-7b"
description = "my own take on the built-in pair"
[pair.target]
repo_id = "me/Qwen2.5-7B-GGUF"
filename = "qwen2.5-7b-q6_k.gguf"
[pair.draft]
repo_id = "me/Qwen2.5-0.5B-GGUF"
filename = "qwen2.5-0.5b-q8_0.gguf"
"""
    )
    monkeypatch.setenv("TANDEM_CATALOG", str(user))
    catalog = load_catalog()
    assert catalog.sources == (BUILTIN_CATALOG, user)
    mine = catalog.get("qwen2.5-7b")
    assert mine.target.repo_id == "me/Qwen2.5-7B-GGUF" and mine.description.startswith("my own")
    assert mine.target.quantization == "Q6_K" and mine.context == 4096 and mine.draft_max == 12  # defaults
    assert [p.name for p in catalog.pairs].index("qwen2.5-7b") == 1  # keeps the built-in's place
    assert catalog.get("tiny").context == 512
    assert catalog.default == "llama3.1-8b"

    # --catalog comes last and wins; `include_builtin = false` replaces the built-in catalog.
    only = tmp_path / "only.toml"
    only.write_text(
        'include_builtin = false\ndefault = "tiny2"\n' + TINY_CATALOG.replace('"tiny"', '"tiny2"')
    )
    catalog = load_catalog(only)
    assert [p.name for p in catalog.pairs] == ["tiny2"] and catalog.default == "tiny2"


def test_unknown_pair_names_the_known_ones(hf_env: Path):
    with pytest.raises(
        CatalogError, match=r"unknown pair 'llama3.1-8B-x'.*Did you mean 'llama3.1-8b'.*qwen3-8b"
    ):
        load_catalog().get("llama3.1-8B-x")
    assert load_catalog().get("LLAMA3.1-8B").name == "llama3.1-8b"


def test_missing_catalog_file(hf_env: Path, tmp_path: Path):
    with pytest.raises(CatalogError, match=r"catalog file not found: .*nope\.toml \(given by --catalog\)"):
        load_catalog(tmp_path / "nope.toml")


def _error(tmp_path: Path, text: str) -> str:
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(CatalogError) as err:
        load_catalog(path)
    return str(err.value)


def test_toml_syntax_error_names_file_line_and_field(hf_env: Path, tmp_path: Path):
    text = TINY_CATALOG.replace("context = 512", "context = 512 tokens")
    line = text.splitlines().index("context = 512 tokens") + 1
    msg = _error(tmp_path, text)
    assert msg.startswith(f"{tmp_path / 'bad.toml'}:{line}: invalid TOML in field 'context'")


def test_missing_field_names_file_line_and_field(hf_env: Path, tmp_path: Path):
    text = TINY_CATALOG.replace('filename = "tiny-a-draft.gguf"\n', "")
    line = text.splitlines().index("[pair.draft]") + 1
    msg = _error(tmp_path, text)
    assert msg == (
        f"{tmp_path / 'bad.toml'}:{line}: pair 'tiny': "
        "field 'draft.filename' is missing from this [pair.draft] table"
    )


def test_wrong_type_names_file_line_and_field(hf_env: Path, tmp_path: Path):
    text = TINY_CATALOG.replace('filename = "tiny-a.gguf"', 'filename = "tiny-a.gguf"\nsize_bytes = "big"')
    line = text.splitlines().index('size_bytes = "big"') + 1
    msg = _error(tmp_path, text)
    assert msg == (
        f"{tmp_path / 'bad.toml'}:{line}: pair 'tiny': field 'target.size_bytes' must be an integer, "
        "got a string ('big')"
    )
    text = TINY_CATALOG.replace("draft_max = 4", "draft_max = 4.5")
    assert ": pair 'tiny': field 'draft_max' must be an integer, got a number (4.5)" in _error(tmp_path, text)


def test_other_schema_errors(hf_env: Path, tmp_path: Path):
    typo = TINY_CATALOG.replace("context = 512", "contxt = 512")
    line = typo.splitlines().index("contxt = 512") + 1
    assert _error(tmp_path, typo).endswith(
        f":{line}: pair 'tiny': unknown field 'contxt' (did you mean 'context'?)"
    )
    assert "field 'target.repo_id' must look like 'owner/name'" in _error(
        tmp_path, TINY_CATALOG.replace('"test-org/tiny-GGUF"', '"tiny-GGUF"', 1)
    )
    assert "must name the first part of a split model" in _error(
        tmp_path, TINY_CATALOG.replace('"tiny-a.gguf"', '"x-00002-of-00003.gguf"')
    )
    p_min = _error(tmp_path, TINY_CATALOG.replace("draft_max = 4", "draft_max = 4\np_min = 1.5"))
    assert "field 'p_min' must be at least 0 and below 1" in p_min
    twice = _error(tmp_path, TINY_CATALOG + TINY_CATALOG)
    assert "pair 'tiny' is defined twice in this file" in twice
    default = _error(tmp_path, 'default = "nope"\n' + TINY_CATALOG)
    assert default.startswith(f"{tmp_path / 'bad.toml'}:1: field 'default' names pair 'nope'")


def test_split_part_names_and_quantization_from_file_names():
    assert split_parts("a/M-Q6_K-00001-of-00003.gguf") == (
        "a/M-Q6_K-00001-of-00003.gguf",
        "a/M-Q6_K-00002-of-00003.gguf",
        "a/M-Q6_K-00003-of-00003.gguf",
    )
    assert split_parts("model.gguf") == ("model.gguf",)
    assert quantization_from_name("Meta-Llama-3.1-8B-Instruct-Q4_K_M.gguf") == "Q4_K_M"
    assert quantization_from_name("qwen2.5-0.5b-instruct-q8_0.gguf") == "Q8_0"
    assert quantization_from_name("x/Llama-3.3-70B-Instruct-Q6_K-00001-of-00002.gguf") == "Q6_K"
    assert quantization_from_name("SmolLM2-135M-Instruct.F16.gguf") == "F16"
    assert quantization_from_name("gemma-3-1b-it-UD-IQ2_XXS.gguf") == "IQ2_XXS"
    assert quantization_from_name("model.gguf") == "unknown"


def test_a_pair_drafted_by_its_target_s_heads(hf_env: Path, tmp_path: Path):
    """`draft = "mtp"` instead of a [pair.draft] table: nothing to download for a draft."""
    from catalogs import MTP_CATALOG

    spec = load_catalog(_write(tmp_path, MTP_CATALOG)).get("tiny-mtp")
    assert spec.draft is None and spec.builtin_draft and spec.files == (spec.target,)
    assert spec.total_bytes == spec.target.size_bytes and spec.unconfirmed == ()
    tiny = load_catalog(_write(tmp_path, TINY_CATALOG)).get("tiny")
    assert not tiny.builtin_draft and tiny.files == (tiny.target, tiny.draft)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ('"eagle"', "field 'draft' must be a [pair.draft] table or \"mtp\" (the target's own draft heads), "
         "got 'eagle'"),
        ("3", "field 'draft' must be a [pair.draft] table or \"mtp\" (the target's own draft heads)"),
        ("true", "field 'draft' must be a [pair.draft] table or \"mtp\""),
    ],
)  # fmt: skip
def test_a_draft_that_is_neither_a_table_nor_mtp_is_one_line_naming_the_pair(
    hf_env: Path, tmp_path: Path, value: str, expected: str
):
    from catalogs import MTP_CATALOG

    text = MTP_CATALOG.replace('draft = "mtp"', f"draft = {value}")
    line = text.splitlines().index(f"draft = {value}") + 1
    msg = _error(tmp_path, text)
    assert msg.startswith(f"{tmp_path / 'bad.toml'}:{line}: pair 'tiny-mtp': {expected}")
    assert "\n" not in msg
    # No draft at all: the message says both ways of giving one.
    missing = _error(tmp_path, MTP_CATALOG.replace('draft = "mtp"\n', ""))
    assert "field 'draft' is missing (add a [pair.draft] table, or draft = \"mtp\"" in missing
