"""`tandem pairs`, `tandem pull`, `tandem models` and `--pair`, as users run them."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pytest

import model_files
from catalogs import MTP_CATALOG, MTP_FILE, MTP_REPO, TINY_CATALOG, install_catalog, mtp_target
from cli_child import tandem
from hub_server import FakeHub
from tandem.catalog import load_catalog
from tandem.catalog.hub import DownloadProgress
from tandem.cli.fetch import terminal_fetch
from tandem.cli.main import main
from tandem.cli.progress import ProgressPrinter
from tandem.engine import TandemError


def test_pairs_json_lists_every_pair_with_repos_and_files(hf_env: Path, capsys: pytest.CaptureFixture[str]):
    assert main(["pairs", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    catalog = load_catalog()
    assert [p["name"] for p in out["pairs"]] == [p.name for p in catalog.pairs]
    assert out["default"] == catalog.default and out["device"]["memory_bytes"] > 0
    for entry, spec in zip(out["pairs"], catalog.pairs, strict=True):
        assert entry["target"]["repo_id"] == spec.target.repo_id
        assert entry["target"]["filename"] == spec.target.filename
        assert entry["downloaded"] is False and entry["total_bytes"] == spec.total_bytes
        assert entry["fit"]["verdict"] in ("fits", "tight", "won't fit")
        assert entry["hybrid"] is spec.hybrid
        assert entry["target"]["confirmed"] is spec.target.confirmed
        if spec.draft is None:  # drafted by the target's own heads, as the catalog says it
            assert entry["draft"] == "mtp"
            continue
        assert entry["draft"]["repo_id"] == spec.draft.repo_id
        assert entry["draft"]["filename"] == spec.draft.filename
        assert entry["draft"]["confirmed"] is spec.draft.confirmed
    hybrid = ["qwen3.5-9b-mtp", "qwen3.5-27b", "qwen3.6-27b-mtp", "qwen3.6-27b-dflash"]
    assert [p["name"] for p in out["pairs"] if p["hybrid"]] == hybrid
    assert [p["name"] for p in out["pairs"] if p["draft"] == "mtp"] == ["qwen3.5-9b-mtp", "qwen3.6-27b-mtp"]
    split = next(p for p in out["pairs"] if len(p["target"]["parts"]) > 1)
    assert split["target"]["parts"][0] == split["target"]["filename"]


def test_pairs_table(hf_env: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("TANDEM_MEMORY", "24G")
    assert main(["pairs"]) == 0
    out = capsys.readouterr().out
    for p in load_catalog().pairs:
        assert p.name in out
    assert "llama3.1-8b *" in out and "won't fit" in out and "fits (7.7 GB)" in out
    assert "TANDEM_MEMORY=24G" in out
    lines = out.splitlines()
    assert lines[0].split()[-1] == "NOTES"
    (hybrid,) = [line for line in lines if line.startswith("qwen3.5-27b ")]
    assert hybrid.endswith("  hybrid")
    assert not [line for line in lines if line.startswith("llama3.1-8b") and "hybrid" in line]
    assert "hybrid: attention mixed with recurrent layers" in out
    # The pair drafted by its target's own heads: no draft file, and its file name is a guess.
    (mtp,) = [line for line in lines if line.startswith("qwen3.6-27b-mtp ")]
    assert "  built-in (MTP)  " in mtp and mtp.endswith("  hybrid, unconfirmed")
    assert "built-in (MTP): the target drafts with its own multi-token-prediction heads" in out
    table = lines[: lines.index("")]
    assert [line for line in table if "unconfirmed" in line] == [mtp]  # every other name was confirmed


UNCONFIRMED_DRAFT = 'filename = "tiny-a-draft.gguf"\nconfirmed = false'


def test_unconfirmed_file_is_said_before_the_download_and_not_after(
    tiny_hub: FakeHub, tmp_path: Path, hf_env: Path, capsys: pytest.CaptureFixture[str]
):
    catalog = tmp_path / "guess.toml"
    catalog.write_text(
        TINY_CATALOG.replace('filename = "tiny-a-draft.gguf"', UNCONFIRMED_DRAFT).replace(
            "context = 512", "context = 512\nhybrid = true"
        )
    )
    assert main(["pairs", "--catalog", str(catalog)]) == 0
    out = capsys.readouterr().out
    (row,) = [line for line in out.splitlines() if line.startswith("tiny ")]
    assert row.endswith("  hybrid, unconfirmed")
    assert "unconfirmed: a file name was not confirmed on the hub" in out

    done = tandem("pull", "tiny", "--catalog", str(catalog))
    assert done.returncode == 0, done.stderr
    err = done.stderr.splitlines()
    note = (
        "tandem: note: pair tiny: test-org/tiny-GGUF/tiny-a-draft.gguf was not confirmed on the "
        "Hugging Face hub; if that name is wrong, the download stops with 'not found'"
    )
    assert note in err and err.index(note) < next(i for i, line in enumerate(err) if "downloading" in line)

    # On disk, the name was right: nothing to warn about any more.
    assert main(["pairs", "--catalog", str(catalog)]) == 0
    (row,) = [line for line in capsys.readouterr().out.splitlines() if line.startswith("tiny ")]
    assert row.endswith("  hybrid")
    assert "note:" not in tandem("pull", "tiny", "--catalog", str(catalog)).stderr


def test_run_pair_says_unconfirmed_before_it_downloads(
    tiny_hub: FakeHub, tmp_path: Path, hf_env: Path, capsys: pytest.CaptureFixture[str]
):
    """`run/bench/chat --pair` fetch through terminal_fetch: with --yes the note comes first;
    without a terminal to ask on nothing is downloaded, so there is nothing to warn about."""
    catalog = tmp_path / "guess.toml"
    catalog.write_text(TINY_CATALOG.replace('filename = "tiny-a-draft.gguf"', UNCONFIRMED_DRAFT))
    spec = load_catalog(catalog).get("tiny")
    with pytest.raises(TandemError, match="not downloaded yet"):
        terminal_fetch(yes=False)(spec, [spec.target, spec.draft])
    assert "note:" not in capsys.readouterr().err and not tiny_hub.gets("tiny-a.gguf")

    terminal_fetch(yes=True)(spec, [spec.target, spec.draft])
    err = capsys.readouterr().err
    assert err.index(
        "tandem: note: pair tiny: test-org/tiny-GGUF/tiny-a-draft.gguf was not confirmed"
    ) < err.index("downloading")
    assert tiny_hub.gets("tiny-a-draft.gguf")


def test_pull_shows_progress_resumes_nothing_twice_and_run_uses_the_pair(
    tiny_hub: FakeHub, tiny_catalog: Path, hf_env: Path, monkeypatch: pytest.MonkeyPatch
):
    done = tandem("pull", "tiny")
    assert done.returncode == 0, done.stderr
    err = done.stderr
    assert "downloading tiny-a.gguf (14.8 MB)" in err and "downloading tiny-a-draft.gguf (14.8 MB)" in err
    assert "done: tiny-a.gguf  14.8 MB in" in err and "checksum verified" in err
    assert "\r" not in err and "\x1b[" not in err  # plain lines when not on a terminal
    target, draft = (line.split(maxsplit=1)[1] for line in done.stdout.splitlines())
    assert Path(target).name == "tiny-a.gguf" and Path(draft).name == "tiny-a-draft.gguf"
    assert Path(target).is_relative_to(hf_env)

    again = tandem("pull", "tiny")
    assert again.returncode == 0 and "(already downloaded)" in again.stderr

    # Offline, from the cache: `run --pair` needs no network and uses the pair's settings.
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    before = len(tiny_hub.requests)
    run = tandem("run", "--pair", "tiny", "--json", "-n", "8", "--temp", "0", "Hello")
    assert run.returncode == 0, run.stderr
    result = json.loads(run.stdout)
    assert len(result["tokens"]) == 8 and result["stats"]["generated"] == 8
    assert result["stats"]["draft_max"] == 4  # the pair's draft_max, since none was given
    # The default drafter (auto) gets the pair's draft model too: both files were loaded.
    assert result["memory"]["model_file_bytes"] == Path(target).stat().st_size + Path(draft).stat().st_size
    assert len(tiny_hub.requests) == before


def test_bench_keeps_the_pair_s_figure_and_pairs_says_it(
    tiny_hub: FakeHub, tiny_catalog: Path, hf_env: Path, tmp_path: Path
) -> None:
    assert tandem("pull", "tiny").returncode == 0
    assert json.loads(tandem("pairs", "--json").stdout)["pairs"][-1]["measured_here"] is None
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("chat: Once upon a time\ncode: def main():\n")
    report = tmp_path / "bench.json"
    bench = tandem(
        "bench", "--pair", "tiny", "--prompts", str(prompts), "-n", "8", "--runs", "1", "--raw",
        "--compare", "model,auto", "--json", str(report), timeout=300,
    )  # fmt: skip
    assert bench.returncode == 0, bench.stderr
    assert "kept as this pair's figure on this machine" in bench.stderr
    overall = json.loads(report.read_text())["overall"]
    tiny = next(p for p in json.loads(tandem("pairs", "--json").stdout)["pairs"] if p["name"] == "tiny")
    here = tiny["measured_here"]
    assert here["setting"] == "auto" and here["speedup"] == pytest.approx(overall["auto"]["speedup"])
    assert set(here["settings"]) == {"model", "auto"} and here["prompts"] == 2 and here["runs"] == 1
    assert set(here["categories"]) == {"chat", "code"}
    table = tandem("pairs").stdout
    row = next(line for line in table.splitlines() if line.startswith("tiny "))
    assert f"{overall['auto']['speedup']:.2f}x auto" in row and "HERE: the speedup" in table


def test_failing_pull_is_one_line_without_traceback(tiny_hub: FakeHub, tiny_catalog: Path, tmp_path: Path):
    bad = tmp_path / "bad.toml"
    bad.write_text(
        tiny_catalog.read_text()
        .replace('"tiny-a.gguf"', '"gone.gguf"\nconfirmed = false')
        .replace('"tiny"', '"broken"')
    )
    result = tandem("pull", "broken", "--catalog", str(bad))
    assert result.returncode == 1
    lines = [line for line in result.stderr.splitlines() if line.startswith("tandem: error:")]
    assert len(lines) == 1 and "gone.gguf is not in test-org/tiny-GGUF" in lines[0]
    # The guessed name was flagged before the download, so the 404 is no surprise.
    notes = [line for line in result.stderr.splitlines() if line.startswith("tandem: note:")]
    assert len(notes) == 1 and "test-org/tiny-GGUF/gone.gguf was not confirmed" in notes[0]
    assert result.stderr.index(notes[0]) < result.stderr.index(lines[0])
    assert "Traceback" not in result.stderr

    unknown = tandem("pull", "no-such-pair")
    assert unknown.returncode == 1 and "Traceback" not in unknown.stderr
    assert unknown.stderr.strip().startswith("tandem: error: unknown pair 'no-such-pair'")


def test_pair_not_downloaded_needs_consent(
    tiny_hub: FakeHub, tiny_catalog: Path, capsys: pytest.CaptureFixture[str]
):
    """Not a terminal and no --yes: refuse and say how to get it. With --yes: fetch, then run."""
    refused = tandem("run", "--pair", "tiny", "-n", "4", "Hi")
    assert refused.returncode == 1
    assert "pair tiny is not downloaded yet" in refused.stderr and "tandem pull tiny" in refused.stderr
    assert not tiny_hub.gets("tiny-a.gguf")

    assert main(["run", "--pair", "tiny", "--yes", "--baseline", "-n", "4", "--json", "Hi"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert len(out["tokens"]) == 4
    assert tiny_hub.gets("tiny-a.gguf") and not tiny_hub.gets("tiny-a-draft.gguf")  # baseline: target only


def test_pair_and_target_are_exclusive(hf_env: Path, capsys: pytest.CaptureFixture[str]):
    assert main(["run", "--pair", "llama3.1-8b", "--target", "x.gguf", "Hi"]) == 1
    assert "either --pair NAME or --target/--draft" in capsys.readouterr().err


def test_models_lists_given_files_and_their_drafts(
    hf_env: Path, smollm2_f16: Path, capsys: pytest.CaptureFixture[str]
):
    tiny = Path(__file__).parent  # a folder without GGUFs is fine
    assert main(["models", "--json", str(smollm2_f16), str(tiny)]) == 0
    out = json.loads(capsys.readouterr().out)
    (m,) = out["models"]
    assert m["path"] == str(smollm2_f16) and m["source"] == "path" and m["drafts"] == []
    assert main(["models", str(smollm2_f16.parent)]) == 0
    text = capsys.readouterr().out
    assert "SmolLM2-135M-Instruct.F16.gguf" in text and "tandem run --target" in text


def test_models_marks_drafts_of_another_tokenizer(
    hf_env: Path, tiny_target: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    """A smaller model whose tokenizer differs is listed as a draft, marked `*`, explained."""
    small = model_files.tiny_model("small-swapped", seed=3, n_embd=32, vocab_edit="swap")
    assert main(["models", "--json", str(tiny_target), str(small)]) == 0
    out = json.loads(capsys.readouterr().out)
    target = next(m for m in out["models"] if m["path"] == str(tiny_target))
    assert target["drafts"] == target["cross_tokenizer_drafts"] == [str(small)]
    assert main(["models", str(tiny_target), str(small)]) == 0
    text = capsys.readouterr().out
    assert "  2*" in text and "*: another tokenizer: it drafts across tokenizers" in text


def test_a_catalog_pair_may_name_a_draft_of_another_tokenizer(
    hf_env: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    catalog = tmp_path / "cross.toml"
    catalog.write_text(TINY_CATALOG.replace("context = 512", "context = 512\ncross_tokenizer = true"))
    assert load_catalog(catalog).get("tiny").cross_tokenizer
    assert main(["pairs", "--catalog", str(catalog)]) == 0
    out = capsys.readouterr().out
    (row,) = [line for line in out.splitlines() if line.startswith("tiny ")]
    assert row.endswith("  cross-tokenizer")
    assert "cross-tokenizer: the draft has another tokenizer" in out


def test_bench_with_a_pair_uses_its_draft_and_settings(
    tiny_hub: FakeHub, tiny_catalog: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    from tandem.catalog import pull_pair

    pull_pair(load_catalog().get("tiny"))
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("chat: Once upon a time there was a\n")
    out = tmp_path / "bench.json"
    args = ["bench", "--pair", "tiny", "--runs", "1", "-n", "8", "--raw", "--prompts", str(prompts)]
    assert main([*args, "--drafter", "model", "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    text = json.dumps(report)
    assert '"draft_max": 4' in text  # the pair's draft_max (4), not the default 12
    assert "tiny-a-draft.gguf" in text  # the pair's draft model was loaded
    capsys.readouterr()


def test_a_pair_drafted_by_its_own_heads_pulls_one_file_and_runs_with_them(
    hub: FakeHub,
    tmp_path: Path,
    hf_env: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
):
    """`draft = "mtp"`: `tandem pairs` says built-in, `pull` fetches the target alone, and the
    runs draft with its heads (the model drafter, which needs a draft file, is refused)."""
    hub.add(MTP_REPO, MTP_FILE, mtp_target())
    install_catalog(tmp_path, MTP_CATALOG, monkeypatch)
    assert main(["pairs"]) == 0
    (row,) = [line for line in capsys.readouterr().out.splitlines() if line.startswith("tiny-mtp ")]
    assert "  built-in (MTP)  " in row and "  no  " in row

    assert main(["pull", "tiny-mtp"]) == 0
    out, err = capsys.readouterr()
    assert "drafted by its own heads (MTP: no draft file)" in err
    (line,) = out.splitlines()  # the target, and no draft line
    target = Path(line.removeprefix("target: "))
    assert target.name == MTP_FILE and hub.gets(MTP_FILE)

    assert main(["pairs", "--json"]) == 0
    (entry,) = [p for p in json.loads(capsys.readouterr().out)["pairs"] if p["name"] == "tiny-mtp"]
    assert entry["draft"] == "mtp" and entry["downloaded"] is True
    assert entry["total_bytes"] == 0 and entry["fit"]["need_bytes"] > target.stat().st_size  # + KV

    args = ["run", "--pair", "tiny-mtp", "--json", "-n", "24", "--threads", "1", "Tell me about the sea"]
    assert main([*args, "--drafter", "mtp"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["config"]["drafter"] == "mtp" and result["stats"]["drafter"] == "mtp"
    assert result["config"]["draft_max"] == 4  # the pair's
    assert result["stats"]["drafted"] > 0 and result["memory"]["model_file_bytes"] == target.stat().st_size
    assert "draft" in {t["origin"] for t in result["tokens"]}

    assert main([*args, "--drafter", "model"]) == 1
    err = capsys.readouterr().err.strip()
    assert err == (
        "tandem: error: pair tiny-mtp has no draft model (its target drafts with its own heads): "
        "use --drafter mtp, lookup or auto"
    )


@pytest.mark.fast
def test_a_terminal_gets_bars_that_end_as_summary_lines() -> None:
    out = io.StringIO()
    printer = ProgressPrinter(out, tty=True)
    mb = 1_000_000
    printer(DownloadProgress("org/repo/cached.gguf", 3 * mb, 3 * mb, 0.0, None, True))  # in the cache
    for got in (0, 4 * mb, 8 * mb):
        printer(DownloadProgress("org/repo/model.gguf", got, 8 * mb, 2e6, (8 * mb - got) / 2e6, False))
    printer(DownloadProgress("org/repo/model.gguf", 8 * mb, 8 * mb, 2e6, 0.0, True))
    printer.close()
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", out.getvalue())  # (the bars' cursor moves, colours)
    assert "✓ cached.gguf  3.0 MB (already downloaded)" in text
    assert "model.gguf" in text and "ETA" in text  # a bar was drawn
    assert re.search(r"✓ model\.gguf  8\.0 MB in \d+:\d\d, .*checksum verified", text), text
    assert printer.bars is None  # nothing left holding the terminal
