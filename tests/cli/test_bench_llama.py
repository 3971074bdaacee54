"""`tandem bench` against llama.cpp's own plain decode (bench/versus.py): llama-bench found or
explained in one line, its figure read, a failing one noted while the bench goes on, and the
real program (built from the vendored llama.cpp) timed beside Tandem in one run."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

import rpc_server
from tandem.bench import llama_tools, versus
from tandem.cli.main import main
from tandem.engine import TandemError


def _program(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "llama-bench"
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


@pytest.mark.fast
def test_llama_bench_is_found_or_its_absence_explained(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TANDEM_LLAMA_TOOLS", str(tmp_path / "empty"))
    assert versus.find("off", on_gpu=False) == (None, None)
    path, note = versus.find("auto", on_gpu=False)
    assert path is None and note is not None and "--llama-bench build" in note
    program = _program(tmp_path, "exit 0\n")
    assert versus.find(str(program), on_gpu=True) == (program, None)
    with pytest.raises(TandemError, match="no such program"):
        versus.find(str(tmp_path / "missing"), on_gpu=False)


@pytest.mark.fast
def test_a_run_is_read_and_a_failure_is_one_note(tmp_path: Path) -> None:
    ok = _program(tmp_path, """echo '[{"avg_ts": 61.5, "n_gen": 64}]'\n""")
    bench = versus.LlamaBench(ok, tokens=64, threads=2, gpu_layers=0)
    bench.measure(tmp_path / "model.gguf")
    bench.measure(tmp_path / "model.gguf")
    assert bench.runs == [61.5, 61.5] and bench.error is None
    summary = bench.summary(60.0, {"auto": 92.25})
    assert summary is not None
    assert summary["target_alone_vs_llama"] == pytest.approx(60.0 / 61.5)
    assert summary["settings_vs_llama"] == {"auto": pytest.approx(1.5)}

    (tmp_path / "bad").mkdir()
    failing = _program(tmp_path / "bad", "echo 'error: failed to load model' >&2\nexit 1\n")
    bad = versus.LlamaBench(failing, tokens=64, threads=2, gpu_layers=0)
    bad.measure(tmp_path / "model.gguf")
    assert bad.error == "llama-bench failed: error: failed to load model"
    assert bad.summary(60.0, {}) is None
    garbage = versus.LlamaBench(_program(tmp_path, "echo 'not json'\n"), 64, 2, 0)
    garbage.measure(tmp_path / "model.gguf")
    assert garbage.error is not None and garbage.error.startswith("llama-bench could not be run")


@pytest.mark.fast
def test_the_programs_are_built_with_the_bindings_flags(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The CPU flavour takes the bindings' instruction sets only; a GPU flavour every flag."""
    marker = tmp_path / llama_tools.MARKER
    marker.write_text(
        json.dumps(
            {
                "cmake_args": [
                    "-DGGML_CUDA=on",
                    "-DLLAVA_BUILD=OFF",
                    "-DGGML_RPC=ON",
                    "-DGGML_NATIVE=OFF",
                    "-DGGML_AVX2=ON",
                    "-DGGML_AVX512=OFF",
                ]
            }
        )
    )
    monkeypatch.setattr(llama_tools.sys, "prefix", str(tmp_path))
    assert llama_tools.flavour_args("cpu") == ["-DGGML_NATIVE=OFF", "-DGGML_AVX2=ON", "-DGGML_AVX512=OFF"]
    assert llama_tools.flavour_args("bindings")[0] == "-DGGML_CUDA=on"
    marker.unlink()
    with pytest.raises(llama_tools.LlamaToolsError, match=r"scripts/install\.py"):
        llama_tools.flavour_args("cpu")


@pytest.mark.slow
def test_bench_times_llama_cpp_beside_tandem(
    tiny_target: Path, tiny_draft: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    program = rpc_server.build("llama-bench")
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("chat: Once upon a time\ncode: def main():\n")
    out_json = tmp_path / "bench.json"
    args = ["bench", "--target", str(tiny_target), "--draft", str(tiny_draft), "--prompts", str(prompts)]
    args += ["-n", "16", "--runs", "1", "--raw", "--llama-bench", str(program), "--json", str(out_json)]
    assert main(args) == 0
    table = capsys.readouterr().out
    assert "against llama.cpp's own plain decode (llama-bench tg16" in table
    llama = json.loads(out_json.read_text())["llama_bench"]
    assert len(llama["runs"]) == 3  # at the start and after each of the two prompts
    assert llama["tokens_per_s"] > 0 and llama["target_alone_vs_llama"] > 0
    assert set(llama["settings_vs_llama"]) == {"auto"}
