"""The catalog: the built-in models.toml, user catalogs, and line-precise errors."""

from __future__ import annotations

from pathlib import Path

import pytest
from catalogs import TINY_CATALOG

from app.catalog import CatalogError, load_catalog
from app.catalog.spec import BUILTIN_CATALOG, parse_catalog_file, quantization_from_name, split_parts


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
        for f in (p.target, p.draft):
            assert "/" in f.repo_id and f.filename.endswith(".gguf") and f.size_bytes > 0, p.name
            assert f.quantization != "unknown" and f.license and isinstance(f.gated, bool), p.name
        assert p.draft.size_bytes < p.target.size_bytes, p.name
    # From about 2 GB to the 70B class, one of them split across files.
    sizes = sorted(p.total_bytes for p in catalog.pairs)
    assert sizes[0] < 3e9 and sizes[-1] > 40e9
    split = [p for p in catalog.pairs if len(p.target.parts) > 1]
    assert split and all(f.endswith(".gguf") for f in split[0].target.parts)
    # A reasoning distill is drafted by its own distilled sibling, never a stock model.
    r1 = catalog.get("r1-distill-32b")
    assert "R1-Distill" in r1.target.repo_id and "R1-Distill" in r1.draft.repo_id


def test_builtin_catalog_is_checked_strictly(tmp_path: Path):
    """Everything a user catalog may leave out, the shipped one must state."""
    text = BUILTIN_CATALOG.read_text().replace('license = "llama3.1"\n', "", 1)
    bad = tmp_path / "models.toml"
    bad.write_text(text)
    with pytest.raises(CatalogError, match=r"field 'target\.license' is missing"):
        parse_catalog_file(bad, builtin=True)
    parse_catalog_file(bad, builtin=False)  # fine for a user


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
