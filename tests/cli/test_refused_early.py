"""What cannot work is refused before the work, in one line and without a traceback: a prompt
longer than the context can hold (before it is tokenized), a benchmark's output path that
cannot be written (before the benchmark runs; a write that fails anyway at the end still shows
the results and leaves no empty file), more threads than CPUs, an empty stop string. And a
temperature too small to divide by samples as greedy decoding does."""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cli_child import ROOT, tandem
from tandem.engine import MAX_STOPS, TandemError, check_stops
from tandem.engine.llama.threads import usable_cpus
from tandem.engine.sampling import SamplerSettings

FAST = ["--threads", "1", "--ctx", "512"]


# Runs argv[2:] and writes its peak resident memory (KiB) to argv[1]; exits with its code.
PEAK_OF_CHILD = (
    "import os, subprocess, sys\n"
    "p = subprocess.Popen(sys.argv[2:])\n"
    "_, status, usage = os.wait4(p.pid, 0)\n"
    "open(sys.argv[1], 'w').write(str(usage.ru_maxrss))\n"
    "sys.exit(os.waitstatus_to_exitcode(status))\n"
)


def one_line(res: subprocess.CompletedProcess[str]) -> str:
    assert res.returncode == 1 and "Traceback" not in res.stderr, res.stderr
    lines = [line for line in res.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("tandem: error: "), res.stderr
    return lines[0]


def the_error(res: subprocess.CompletedProcess[str]) -> str:
    """The one error line of a run that printed its progress too (a benchmark)."""
    assert res.returncode == 1 and "Traceback" not in res.stderr, res.stderr
    [line] = [line for line in res.stderr.splitlines() if "error" in line.lower()]
    assert line.startswith("tandem: error: "), res.stderr
    return line


# ------------------------------------------------------------------------ a prompt too long
@pytest.mark.parametrize("raw", [False, True], ids=["chat", "raw"])
def test_a_prompt_too_long_for_the_context_is_refused_before_it_is_tokenized(
    tiny_target: Path, tmp_path: Path, raw: bool
) -> None:
    """8 MB of prompt (10 MB took 15 s and 2.1 GB, tokenized only to be refused): refused from
    its length, in about the time and memory of loading the model."""
    prompt = tmp_path / "prompt.txt"
    prompt.write_text("hello world " * 700_000)  # 8.4 million characters
    args = ["run", "--target", str(tiny_target), "--baseline", *FAST, *(["--raw"] if raw else []), "-"]
    peak = tmp_path / "peak"
    t0 = time.monotonic()
    with prompt.open("rb") as stdin:
        # Started by a small parent that writes its child's peak memory: a child forked by this
        # test's process (models loaded by earlier tests) reports this process's peak as its own.
        res = subprocess.run(
            [sys.executable, "-c", PEAK_OF_CHILD, str(peak), sys.executable, "-m", "tandem.cli.main", *args],
            stdin=stdin,
            capture_output=True,
            text=True,
            cwd=ROOT,
        )
    elapsed = time.monotonic() - t0
    line = one_line(res)
    assert "characters, more than the context of 512 tokens can hold" in line
    assert "8,4" in line and "--ctx" in line  # its size, the context and what to do
    assert elapsed < 5.0, f"{elapsed:.1f} s"
    peak_mib = int(peak.read_text()) / 1024  # (KiB on Linux)
    assert peak_mib < 200, f"{peak_mib:.0f} MiB"  # (tokenizing it first: 400+ MiB)


# ------------------------------------------------------------------------ bench's outputs
def _bench(target: Path, tmp_path: Path, *more: str, **kw: object) -> subprocess.CompletedProcess[str]:
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("chat: Once upon a time\n")
    args = ["bench", "--target", str(target), "--drafter", "lookup", "--prompts", str(prompts)]
    args += [*FAST, "-n", "8", "--runs", "1", "--raw", "--llama-bench", "off", *more]
    return tandem(*args, timeout=300, **kw)


@pytest.mark.parametrize("flag", ["--json", "--chart"])
def test_a_bench_output_that_cannot_be_written_is_refused_before_the_benchmark(
    tiny_target: Path, tmp_path: Path, flag: str
) -> None:
    a_file = tmp_path / "a-file"
    a_file.write_text("")
    cases = {
        tmp_path / "missing" / "out": "the folder",  # (a traceback after the whole run, and no file)
        a_file / "out": "is not a folder",
        tmp_path: "is a folder",
    }
    for path, said in cases.items():
        t0 = time.monotonic()
        line = one_line(_bench(tiny_target, tmp_path, flag, str(path)))
        assert f"{flag} {path}" in line and said in line, line
        assert time.monotonic() - t0 < 10  # refused before the models load and the runs
    assert not (tmp_path / "missing").exists() and sorted(p.name for p in tmp_path.iterdir()) == [
        "a-file",
        "prompts.txt",
    ]


def test_a_chart_without_matplotlib_is_refused_before_the_benchmark_with_how_to_get_it(
    tiny_target: Path, tmp_path: Path
) -> None:
    hidden = tmp_path / "hidden"  # (first on the child's path: `import matplotlib` fails there)
    hidden.mkdir()
    (hidden / "matplotlib.py").write_text("raise ImportError('not installed')\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(hidden), *sys.path])}
    res = _bench(tiny_target, tmp_path, "--chart", str(tmp_path / "c.png"), env=env)
    line = one_line(res)
    assert "--chart needs matplotlib" in line and "pip install matplotlib" in line, line
    assert res.stdout == "" and not (tmp_path / "c.png").exists()  # before any run, not after


def test_a_bench_output_write_that_fails_at_the_end_shows_the_results_and_leaves_no_file(
    tiny_target: Path, tmp_path: Path
) -> None:
    """A full disk at the end (here: RLIMIT_FSIZE, EFBIG): one line, the tables on standard
    output, and no empty or partial file where the report was to go (a 0-byte one was left)."""

    def small_files() -> None:  # the figure kept in measured.json fits; the report does not
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a failed write, not a dead process
        resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))

    out = tmp_path / "out.json"
    res = _bench(tiny_target, tmp_path, "--json", str(out), preexec_fn=small_files)
    line = the_error(res)
    assert f"the results could not be written to {out}: File too large" in line
    assert "per prompt" in res.stdout and "speedup" in res.stdout  # the results, shown
    assert sorted(p.name for p in tmp_path.iterdir()) == ["prompts.txt"]  # no 0-byte file, no temp

    # An older report in its place stays whole; a write that fits replaces it.
    out.write_text('{"old": true}\n')
    assert the_error(_bench(tiny_target, tmp_path, "--json", str(out), preexec_fn=small_files))
    assert json.loads(out.read_text()) == {"old": True}
    chart = tmp_path / "chart.png"
    ok = _bench(tiny_target, tmp_path, "--json", str(out), "--chart", str(chart))
    assert ok.returncode == 0, ok.stderr
    assert "prompts" in json.loads(out.read_text()) and chart.read_bytes().startswith(b"\x89PNG")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["chart.png", "out.json", "prompts.txt"]


# ------------------------------------------------------------------------ threads, stop, temp
def test_more_threads_than_cpus_is_refused_naming_the_cpu_count(tiny_target: Path) -> None:
    """--threads 1000 was accepted (and decoded at 0.4 tok/s); the app's flag is the same."""
    cpus = usable_cpus()
    line = one_line(tandem("run", "--target", str(tiny_target), "--threads", "1000", "hi"))
    assert f"CPU threads must be from 1 to {cpus}" in line and "not 1000" in line
    line = one_line(
        tandem("chat", "--target", str(tiny_target), "--draft", str(tiny_target), "--threads", "1000")
    )
    assert f"from 1 to {cpus}" in line


def test_an_empty_stop_string_is_refused_as_the_server_refuses_it(tiny_target: Path) -> None:
    line = one_line(tandem("run", "--target", str(tiny_target), "--baseline", "--stop", "", "hi"))
    assert "a stop string must not be empty" in line  # (the CLI used to ignore it)
    # The rule the CLI applies, for the server's request schema too.
    with pytest.raises(ValueError, match="must not be empty"):
        check_stops(["end", ""])
    with pytest.raises(ValueError, match=f"at most {MAX_STOPS}"):
        check_stops(["x"] * (MAX_STOPS + 1))
    check_stops(["x"] * MAX_STOPS)
    with pytest.raises(TandemError):
        from tandem.session.options import Options

        Options.parse({"stop": ("",)})


def test_a_temperature_too_small_to_divide_by_is_greedy(tiny_target: Path, tiny_draft: Path) -> None:
    """--temp 1e-320 overflowed (logits / temperature = inf): NaN probabilities, numpy's
    warnings, every draft rejected. Now it decodes as --temp 0 does, token for token."""
    assert SamplerSettings(temperature=1e-320).greedy and SamplerSettings(temperature=1e-7).greedy
    assert not SamplerSettings(temperature=1e-6).greedy
    runs = {}
    for temp in ("0", "1e-320"):
        res = tandem(
            "run", "--target", str(tiny_target), "--draft", str(tiny_draft), "--drafter", "model",
            *FAST, "-n", "24", "--raw", "--json", "--temp", temp, "--no-adaptive", "--draft-max", "3",
            "Once upon a time",
        )  # fmt: skip
        assert res.returncode == 0 and "Warning" not in res.stderr, res.stderr
        runs[temp] = json.loads(res.stdout)
    assert runs["1e-320"]["text"] == runs["0"]["text"]
    assert runs["1e-320"]["stats"]["acceptance_rate"] > 0  # (every draft was rejected)
