"""Tandem installed the way terminal tools are (a built wheel: `pip install .`, `pipx install .`,
`uv tool install .`) has its catalog and its benchmark prompts, and runs: the wheel is built
from this checkout, installed into a fresh venv beside the llama-cpp-python already built here,
and asked from outside the checkout."""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from tandem.catalog.spec import load_catalog

ROOT = Path(__file__).resolve().parent.parent
UNREACHABLE = ("No matching distribution found", "Could not fetch", "NewConnectionError", "Temporary failure")


def _run(*cmd: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return subprocess.run(
        [str(c) for c in cmd], cwd=cwd, env=env, capture_output=True, text=True, timeout=600
    )


def test_a_wheel_in_a_fresh_venv_lists_the_pairs_and_runs(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    # (pip builds in an isolated environment, with setuptools from the package registry)
    built = _run(sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", wheels, ROOT, cwd=tmp_path)
    if built.returncode != 0 and any(s in built.stderr for s in UNREACHABLE):
        pytest.skip("the package registry cannot be reached to build the wheel")
    assert built.returncode == 0, built.stderr
    (wheel,) = wheels.glob("tandem-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "tandem/shipped/models.toml" in names
    assert "tandem/shipped/assets/bench/chat.jsonl" in names
    assert "tandem/ui/tandem.tcss" in names  # (the app's stylesheet)
    assert not (ROOT / "app" / "tandem" / "shipped").exists()  # (the build's copies are gone)

    venv = tmp_path / "venv"
    assert _run(sys.executable, "-m", "venv", "--without-pip", venv, cwd=tmp_path).returncode == 0
    py = venv / "bin" / "python"
    installed = _run(
        sys.executable, "-m", "pip", "--python", py, "install", "-q", "--no-deps", wheel, cwd=tmp_path
    )
    assert installed.returncode == 0, installed.stderr
    # Its dependencies, llama-cpp-python as built for this machine among them, come from this
    # venv's site-packages, named in a .pth file: a folder named there is searched after the
    # fresh venv's own, and its .pth files (this checkout's editable install) are not read.
    fresh_site = _run(py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])", cwd=tmp_path)
    (Path(fresh_site.stdout.strip()) / "deps_built_here.pth").write_text(
        sysconfig.get_paths()["purelib"] + "\n"
    )

    where = _run(py, "-c", "import tandem, llama_cpp; print(tandem.__file__)", cwd=tmp_path)
    assert where.returncode == 0, where.stderr
    assert Path(where.stdout.strip()).is_relative_to(venv)  # the wheel's, not this checkout's

    pairs = _run(venv / "bin" / "tandem", "pairs", cwd=tmp_path)
    assert pairs.returncode == 0, pairs.stderr
    for pair in load_catalog().pairs:
        assert pair.name in pairs.stdout
    helped = _run(venv / "bin" / "tandem", "run", "--help", cwd=tmp_path)
    assert helped.returncode == 0 and "--draft" in helped.stdout, helped.stderr
    prompts = (
        "from tandem.bench.prompts import DEFAULT_PROMPTS, load_prompts; "
        "print(len(load_prompts([DEFAULT_PROMPTS])))"
    )
    counted = _run(py, "-c", prompts, cwd=tmp_path)
    assert counted.returncode == 0 and int(counted.stdout) > 0, counted.stderr
