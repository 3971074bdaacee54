"""Finding GGUFs in fake HF-cache, LM Studio and Ollama layouts, and matching drafts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import model_files
from catalogs import link_or_copy
from split_gguf import write_split
from tandem.catalog import LocalGGUF, cross_tokenizer, discover_ggufs, drafts_for
from tandem.catalog.discovery import scan

COMMIT = "0123456789abcdef0123456789abcdef01234567"


def hf_cache_entry(cache: Path, repo_id: str, filename: str, src: Path, blob_name: str) -> Path:
    """The layout huggingface_hub writes: a blob, a snapshot symlink to it, refs/main."""
    folder = cache / ("models--" + repo_id.replace("/", "--"))
    blob = link_or_copy(src, folder / "blobs" / blob_name)
    pointer = folder / "snapshots" / COMMIT / filename
    pointer.parent.mkdir(parents=True, exist_ok=True)
    pointer.symlink_to(Path("../../blobs") / blob.name)
    (folder / "refs").mkdir(exist_ok=True)
    (folder / "refs" / "main").write_text(COMMIT)
    return pointer


def ollama_model(
    root: Path, model: str, tag: str, src: Path, digest: str, namespace: str = "library"
) -> Path:
    blob = link_or_copy(src, root / "blobs" / f"sha256-{digest}")
    manifest = root / "manifests" / "registry.ollama.ai" / namespace / model / tag
    manifest.parent.mkdir(parents=True, exist_ok=True)
    layers = [
        {
            "mediaType": "application/vnd.ollama.image.model",
            "digest": f"sha256:{digest}",
            "size": src.stat().st_size,
        },
        {"mediaType": "application/vnd.ollama.image.template", "digest": "sha256:" + "e" * 64, "size": 10},
    ]
    manifest.write_text(json.dumps({"schemaVersion": 2, "layers": layers}))
    return blob


@pytest.fixture
def machine(hf_env: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    """A machine with models in all three stores (hard links to the cached test models)."""
    home = Path(tmp_path / "home")
    target = hf_cache_entry(
        hf_env, "HuggingFaceTB/SmolLM2-135M-Instruct-GGUF", "SmolLM2-135M-Instruct.F16.gguf",
        model_files.smollm2("F16"), "a" * 64,
    )  # fmt: skip
    lms_root = home / ".lmstudio" / "models"
    lms = link_or_copy(
        model_files.smollm2_q4_1(), lms_root / "bartowski" / "SmolLM2-GGUF" / "SmolLM2-Q4_1.gguf"
    )
    (lms_root / "junk" / "repo").mkdir(parents=True)
    (lms_root / "junk" / "repo" / "not-a-model.gguf").write_bytes(b"<html>oops</html>" * 10)
    (
        hf_env / "models--HuggingFaceTB--SmolLM2-135M-Instruct-GGUF" / "blobs" / ("b" * 64 + ".incomplete")
    ).write_bytes(b"GGUF partial")
    ollama_root = tmp_path / "ollama"
    monkeypatch.setenv("OLLAMA_MODELS", str(ollama_root))
    ollama = ollama_model(ollama_root, "tiny", "latest", model_files.tiny_model("a", seed=1), "c" * 64)
    swapped = model_files.tiny_model("swapped-vocab", seed=1, vocab_edit="swap")
    return {"target": target, "lms": lms, "ollama": ollama, "swapped": swapped, "lms_root": lms_root}


def by_source(found: list[LocalGGUF]) -> dict[str, list[LocalGGUF]]:
    out: dict[str, list[LocalGGUF]] = {}
    for m in found:
        out.setdefault(m.source, []).append(m)
    return out


def test_discovers_hf_cache_lm_studio_ollama_and_given_paths(machine: dict[str, Path]):
    found, skipped = scan([machine["swapped"]])
    groups = by_source(found)
    assert sorted(groups) == ["hf-cache", "lm-studio", "ollama", "path"]

    (hf,) = groups["hf-cache"]
    assert hf.path == machine["target"]
    assert hf.name == "HuggingFaceTB/SmolLM2-135M-Instruct-GGUF/SmolLM2-135M-Instruct.F16.gguf"
    assert (hf.architecture, hf.quantization, hf.n_vocab) == ("llama", "F16", 49152)
    assert 130e6 < hf.n_params < 140e6 and hf.has_chat_template and hf.context_length == 8192
    assert hf.size_bytes == machine["target"].stat().st_size

    (lms,) = groups["lm-studio"]
    assert lms.name == "bartowski/SmolLM2-GGUF/SmolLM2-Q4_1.gguf" and lms.quantization == "Q4_1"
    (ollama,) = groups["ollama"]
    assert ollama.name == "tiny:latest" and ollama.path == machine["ollama"] and ollama.n_params < 5e6
    (given,) = groups["path"]
    assert given.path == machine["swapped"]

    # The HTML file named .gguf is skipped with a reason; the .incomplete download is not listed.
    assert [s.path.name for s in skipped] == ["not-a-model.gguf"]
    assert "not a GGUF" in skipped[0].reason
    assert discover_ggufs([machine["swapped"]]) == found


def test_drafts_for_a_target_are_compatible_and_smaller(machine: dict[str, Path]):
    found = discover_ggufs([machine["swapped"]])
    get = {m.source: m for m in found}
    target = get["hf-cache"]  # SmolLM2 F16
    drafts = drafts_for(target, found)
    # The tiny model (fewest parameters) and the Q4_1 quantization of the same model, then the
    # model with a swapped vocabulary (another tokenizer: it drafts across tokenizers); not the
    # target itself.
    assert [d.source for d in drafts] == ["ollama", "lm-studio", "path"]
    assert [cross_tokenizer(target, d) for d in drafts] == [False, False, True]
    assert drafts_for(get["lm-studio"], found) == [get["ollama"], get["path"]]  # Q4_1: the tiny ones
    assert drafts_for(get["ollama"], found) == []  # nothing smaller shares its tokenizer


def test_duplicates_and_split_models(hf_env: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("OLLAMA_MODELS", str(tmp_path / "no-ollama"))
    tiny = model_files.tiny_model("a", seed=1)
    parts = write_split(tiny, tmp_path / "models" / "split", "tiny-split", 3)
    alias = tmp_path / "models" / "alias.gguf"
    alias.symlink_to(tiny)
    found = discover_ggufs([tmp_path / "models", tiny, tiny])
    assert sorted(m.name for m in found) == ["alias.gguf", "split/tiny-split-00001-of-00003.gguf"]
    split = next(m for m in found if "split" in m.name)
    assert split.path == parts[0]
    assert split.size_bytes == sum(p.stat().st_size for p in parts)
    assert split.n_params == next(m for m in found if m.name == "alias.gguf").n_params

    parts[2].unlink()  # an incomplete split model is reported, not listed
    found, skipped = scan([tmp_path / "models"])
    assert [m.name for m in found] == ["alias.gguf"]
    assert "part 1 of 3" in skipped[0].reason


def test_lm_studio_home_pointer_and_settings(hf_env: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("OLLAMA_MODELS", str(tmp_path / "no-ollama"))
    home = tmp_path / "home"
    moved = tmp_path / "elsewhere" / "lmstudio-home"
    link_or_copy(model_files.tiny_model("a", seed=1), moved / "models" / "pub" / "repo" / "a.gguf")
    (home / ".lmstudio-home-pointer").write_text(str(moved))
    downloads = tmp_path / "big-disk" / "models"
    link_or_copy(model_files.smollm2_q4_1(), downloads / "pub" / "repo" / "b.gguf")
    (home / ".lmstudio").mkdir()
    (home / ".lmstudio" / "settings.json").write_text(json.dumps({"downloadsFolder": str(downloads)}))
    found = discover_ggufs()
    assert sorted((m.source, m.name) for m in found) == [
        ("lm-studio", "pub/repo/a.gguf"),
        ("lm-studio", "pub/repo/b.gguf"),
    ]


def test_nothing_found_on_an_empty_machine(hf_env: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("OLLAMA_MODELS", str(tmp_path / "no-ollama"))
    assert discover_ggufs() == []


def test_a_model_with_its_own_draft_heads_says_so(hf_env: Path):
    from catalogs import mtp_target, no_heads_target
    from tandem.catalog import has_heads

    heads, plain = discover_ggufs([mtp_target(), no_heads_target()])
    if heads.path != mtp_target():
        heads, plain = plain, heads
    assert heads.mtp_layers == 1 and heads.architecture == "qwen35" and plain.mtp_layers == 0
    assert has_heads(mtp_target()) and not has_heads(no_heads_target())
