"""The fast lane (`pytest -m fast`: pure logic, seconds) needs no llama-cpp-python: a checkout
without the llama.cpp build can run it. Collected here in a child process where importing
llama_cpp fails, so a fast test module (or what it imports: the engine's face, the registry, the
catalog, the command line) that loads the bindings at import fails this test."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.fast

ROOT = Path(__file__).resolve().parents[1]

CHILD = """
import sys

class NoLlama:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "llama_cpp":
            raise ImportError("llama-cpp-python is not installed here")
        return None

sys.meta_path.insert(0, NoLlama())
import pytest

sys.exit(pytest.main(["-m", "fast", "--collect-only", "-q", "-p", "no:cacheprovider", "tests"]))
"""


def test_the_fast_lane_collects_without_llama_cpp_python() -> None:
    out = subprocess.run(
        [sys.executable, "-c", CHILD], cwd=ROOT, capture_output=True, text=True, timeout=300, check=False
    )
    assert out.returncode == 0, (out.stdout + out.stderr)[-3000:]
    found = re.search(r"(\d+)/\d+ tests collected", out.stdout)
    assert found is not None and int(found.group(1)) > 200, out.stdout[-1000:]
    assert "test_layers.py::" in out.stdout and "test_fast_lane.py::" in out.stdout
