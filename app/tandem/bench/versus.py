"""llama.cpp's own plain decode of the target, timed by `tandem bench` beside Tandem's.

Users compare Tandem with llama.cpp (llama-cli, llama-server, LM Studio, Ollama), not with
Tandem's own target alone, so the bench also runs llama.cpp's `llama-bench` (tg: one token a
step, the same file, threads and offload) between its prompts, and prints Tandem's target alone
and every setting against it. The program is llama.cpp's, built from the llama.cpp the bindings
vendor with their flags (llama_tools.py): `auto` uses that build where it exists, `build` makes
it first (minutes, once), a path names another llama-bench, `off` skips it.
"""

from __future__ import annotations

import json
import statistics
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from tandem.bench import llama_tools
from tandem.engine import TandemError

TIMEOUT_S = 900


@dataclass
class LlamaBench:
    path: Path
    tokens: int  # tg length: the bench's max tokens
    threads: int
    gpu_layers: int
    runs: list[float] = field(default_factory=list)  # tok/s, one per call
    error: str | None = None

    def measure(self, model: Path) -> None:
        """One `llama-bench -p 0 -n tokens -r 1` of the target; a failure is kept as a note and
        ends the comparison (the bench goes on)."""
        if self.error is not None:
            return
        cmd = [str(self.path), "-m", str(model), "-p", "0", "-n", str(self.tokens), "-r", "1"]
        cmd += ["-t", str(self.threads), "-ngl", str(self.gpu_layers), "-o", "json"]
        try:
            out = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT_S, check=True).stdout
            self.runs.append(float(json.loads(out)[0]["avg_ts"]))
        except subprocess.CalledProcessError as exc:
            last = (exc.stderr or "").strip().splitlines()[-1:] or [f"exit status {exc.returncode}"]
            self.error = f"llama-bench failed: {last[0]}"
        except (OSError, subprocess.SubprocessError, ValueError, LookupError, TypeError) as exc:
            self.error = f"llama-bench could not be run: {exc}"

    def summary(self, baseline_tps: float, settings: dict[str, float]) -> dict[str, object] | None:
        """The median of its runs and each of Tandem's speeds over it; None if nothing ran."""
        if not self.runs:
            return None
        median = statistics.median(self.runs)
        return {
            "path": str(self.path),
            "tokens": self.tokens,
            "threads": self.threads,
            "gpu_layers": self.gpu_layers,
            "tokens_per_s": median,
            "runs": self.runs,
            "target_alone_vs_llama": baseline_tps / median,
            "settings_vs_llama": {name: tps / median for name, tps in settings.items()},
        }


def find(which: str, on_gpu: bool) -> tuple[Path | None, str | None]:
    """(llama-bench, None), or (None, a note saying why not and how to get one)."""
    if which == "off":
        return None, None
    flavour = "bindings" if on_gpu else "cpu"
    if which == "auto":
        path = llama_tools.cached("llama-bench", flavour)
        if path is None:
            return None, (
                "llama.cpp's own speed was not measured: its llama-bench is not built here "
                "(--llama-bench build builds it from the vendored llama.cpp: minutes, once)"
            )
        return path, None
    if which == "build":
        try:
            return llama_tools.build("llama-bench", flavour=flavour)["llama-bench"], None
        except TandemError as exc:
            return None, f"llama.cpp's own speed was not measured: {exc}"
    path = Path(which).expanduser()
    if not path.is_file():
        raise TandemError(f"--llama-bench: no such program: {path} (or: auto, build, off)")
    return path, None
