#!/usr/bin/env python3
"""The GPU measurements: what the speedup depends on, on the machine Tandem is for.

On real-shaped random-weight models (tests/model_files.shaped_llama: Llama-3.1-8B and -3.2-1B
shapes, Q4_K_M-like blocks written directly, so writing 5 GiB takes seconds). Random weights
make the draft model's guesses coin tosses, so every speed here is a COST measurement: the
acceptance of a real pair is not in it (a model drafting for itself is accepted every time,
which is what the mechanics check uses).

    costs     c (draft step / target step), v(n) (a verify batch of n / one step) for n = 1..17,
              each with the greedy token picked on the device and with the logits copied back
    plain     Tandem's target alone against llama.cpp's `llama-bench` (tg, every layer on the
              GPU) on the same file, alternated, for the 8B and a 1.5B shape; Tandem's time
              outside llama_decode per token, which matters most at the 1.5B's speed
    overhead  Tandem's time outside llama_decode per token (a self-drafted run: every draft
              accepted), and its decode speed against the target alone
    versus    Tandem against llama.cpp's own `llama-speculative-simple`, built from the same
              vendored llama.cpp, same files, prompt, K and greedy, alternated: the 8B drafting
              for itself (the mechanics check), then 8B + 1B at K = 4, 8, 16
    serve     `tandem serve --parallel N` against llama-server -np N, with and without -md, at
              1, 2, 4 and 8 clients (scripts/serve_bench.py clients, 8B + 1B)
    memory    the fit estimate (catalog/fit.py) for 8B + 1B at 8k context against what the
              GPU's memory shows once the pair is loaded (nvidia-smi where there is one)

Every step writes the JSON again, so a call stopped at its time limit keeps what it measured.

    python3 scripts/device/measure.py --out $OUT/gpu-measure.json --llama-bin .device/bin
    python3 scripts/device/measure.py --out /tmp/m.json --target tiny-q4k --draft tiny-q4k  # a CPU dry run
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "app"), str(ROOT / "tests")]

PROMPT = (
    "Write a detailed story about a lighthouse keeper on a remote island who finds a message in a "
    "bottle, and what happens when she decides to answer it."
)


class Recorder:
    def __init__(self, out: Path, budget_s: float) -> None:
        self.out = out
        self.deadline = time.monotonic() + budget_s
        self.data: dict[str, Any] = {"started": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "steps": {}}

    def save(self) -> None:
        part = self.out.with_suffix(".part")
        part.write_text(json.dumps(self.data, indent=1, default=str))
        part.replace(self.out)

    def step(self, name: str, fn: Callable[[], Any], *, needs_s: float = 0.0) -> Any:
        left = self.deadline - time.monotonic()
        if left < needs_s:
            self.data["steps"][name] = {"skipped": f"{left:.0f} s left of the budget, needs ~{needs_s:.0f}"}
            self.save()
            print(f"[measure] {name}: skipped (budget)", flush=True)
            return None
        t0 = time.monotonic()
        print(f"[measure] {name}...", flush=True)
        try:
            result = fn()
            self.data["steps"][name] = {"seconds": round(time.monotonic() - t0, 1), "result": result}
        except Exception as exc:  # a failed step is recorded and the next one runs
            self.data["steps"][name] = {
                "error": f"{type(exc).__name__}: {exc}",
                "trace": traceback.format_exc(),
            }
            result = None
        self.save()
        print(f"[measure] {name}: {time.monotonic() - t0:.1f} s", flush=True)
        return result


def gpu_memory_used() -> int | None:
    """MiB in use on the GPU, as nvidia-smi reports it (None without nvidia-smi)."""
    if not shutil.which("nvidia-smi"):
        return None
    out = subprocess.run(
        ["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.split()
    return int(out[0]) if out else None


def costs(target: Path, draft: Path, ctx: int) -> dict[str, Any]:
    from tandem.engine import LoadOptions, ModelPair
    from tandem.engine.decoding.costs import measure_costs

    sizes = list(range(2, 18))
    out: dict[str, Any] = {}
    with ModelPair.load(target, draft, LoadOptions(n_ctx=ctx)) as pair:
        out["target_device"] = pair.target.device_label
        context = pair.target.tokenize(PROMPT * 4)
        # The device's greedy first: a decode that reads logits turns it off for good.
        for name, greedy in (("greedy_on_device", True), ("logits_copied", False)):
            m = measure_costs(pair.target, pair.draft, context, sizes, reps=7, greedy=greedy)
            out[name] = {
                "target_step_ms": 1000 * m.target_step_s,
                "draft_step_ms": 1000 * (m.draft_step_s or 0.0),
                "c": m.c,
                "v": {n: m.v(n) for n in [1, *sizes]},
                "verify_ms": {n: 1000 * s for n, s in m.verify_s.items()},
                "draft_batch_ms": {n: 1000 * s for n, s in m.draft_batch_s.items()},
                "lookup_ms": 1000 * m.lookup_s,
            }
    return out


def tandem_runs(pair: Any, k_values: list[int], tokens: int, reps: int) -> dict[str, Any]:
    """In-process generations: the target alone and fixed-K drafting, greedy."""
    from tandem.engine import GenerationConfig, SamplerSettings
    from tandem.session.collect import collect

    prompt = pair.target.tokenize(PROMPT)
    greedy = SamplerSettings(temperature=0.0)
    out: dict[str, Any] = {}

    def one(k: int) -> dict[str, Any]:
        cfg = GenerationConfig(
            max_tokens=tokens, draft_max=max(k, 1), adaptive=False, drafter="model", sampler=greedy
        )
        s = collect(pair.generate(prompt, cfg, speculative=k > 0)).stats
        return {
            "tok_s": s.decode_tokens_per_s,
            "generated": s.generated,
            "acceptance": s.acceptance_rate,
            "tokens_per_pass": s.tokens_per_round,
            "outside_llama_share": s.python_overhead,
            "outside_llama_us_per_token": 1e6 * s.python_overhead * s.decode_s / max(1, s.generated),
        }

    for k in [0, *k_values]:
        out[f"K{k}" if k else "alone"] = [one(k) for _ in range(reps)]
    return out


def plain(shapes: list[str], llama_bin: Path | None, tokens: int, reps: int, ctx: int) -> dict[str, Any]:
    """Tandem's target alone and llama-bench's tg on the same file, alternated, per shape."""
    import model_files
    from tandem.bench.versus import LlamaBench
    from tandem.engine import LoadOptions, ModelPair

    out: dict[str, Any] = {}
    for name in shapes:
        path = model_files.shaped_llama(name, model_files.LLAMA_SHAPES[name])
        bench = (
            LlamaBench(llama_bin / "llama-bench", tokens, threads=os.cpu_count() or 1, gpu_layers=99)
            if llama_bin is not None and (llama_bin / "llama-bench").exists()
            else None
        )
        runs: list[dict[str, Any]] = []
        with ModelPair.load(path, None, LoadOptions(n_ctx=ctx)) as pair:
            tandem_runs(pair, [], 16, 1)  # warm-up: the first generation's kernels load
            for _ in range(reps):
                runs += tandem_runs(pair, [], tokens, 1)["alone"]
                if bench is not None:
                    bench.measure(path)
        row: dict[str, Any] = {"file_bytes": path.stat().st_size, "tandem": runs}
        tandem = statistics.median(r["tok_s"] for r in runs)
        row["tandem_tok_s"] = tandem
        row["outside_llama_us_per_token"] = statistics.median(r["outside_llama_us_per_token"] for r in runs)
        if bench is not None:
            row["llama_bench"] = {"runs": bench.runs, "error": bench.error, "tokens": tokens}
            if bench.runs:
                row["llama_bench_tok_s"] = statistics.median(bench.runs)
                row["tandem_over_llama_bench"] = tandem / statistics.median(bench.runs)
        out[name] = row
        print(
            f"[measure] plain {name}: {json.dumps({k: v for k, v in row.items() if k != 'tandem'})}",
            flush=True,
        )
    return out


def serve(
    target: Path,
    draft: Path,
    llama_bin: Path | None,
    clients: str,
    tokens: int,
    json_out: Path,
    runs: int = 1,
    timeout_s: float = 240.0,
) -> dict[str, Any]:
    """scripts/serve_bench.py clients on these files, every layer on the GPU; its JSON kept."""
    cmd = [sys.executable, str(ROOT / "scripts" / "serve_bench.py"), "clients", "--target", str(target)]
    cmd += ["--draft", str(draft), "--clients", clients, "--runs", str(runs), "-n", str(tokens)]
    cmd += ["--requests", "2"]
    cmd += ["--tandem-parallel", "n", "--gpu-layers", "99", "--json", str(json_out)]
    if llama_bin is not None and (llama_bin / "llama-server").exists():
        cmd += ["--llama-server", str(llama_bin / "llama-server")]
    # (its own process group: stopped at the time limit, the servers it started go with it)
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        stdout, stderr = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:  # what it measured so far is in its JSON
        os.killpg(proc.pid, signal.SIGKILL)
        stdout, stderr = proc.communicate()
        stderr += f"\nstopped after {timeout_s:.0f} s"
    print(stdout[-6000:], stderr[-2000:], flush=True)
    report: dict[str, Any] = json.loads(json_out.read_text()) if json_out.exists() else {}
    medians = report.get("pairs", {}).get("files", {}).get("medians")
    return {
        "returncode": proc.returncode,
        "json": str(json_out),
        "medians": medians,
        "tail": stdout[-3000:],
    }


def llama_spec(llama_bin: Path, target: Path, draft: Path, k: int, tokens: int, ctx: int) -> dict[str, Any]:
    """One run of llama.cpp's llama-speculative-simple, greedy, K fixed (p-min 0)."""
    cmd = [
        str(llama_bin / "llama-speculative-simple"),
        "-m", str(target), "-md", str(draft), "--spec-type", "draft-simple",
        "-ngl", "99", "-ngld", "99", "-c", str(ctx), "-n", str(tokens),
        "--temp", "0", "--spec-draft-n-max", str(k), "--spec-draft-n-min", "0", "--spec-draft-p-min", "0",
        "-p", PROMPT,
    ]  # fmt: skip
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False)
    text = res.stdout + res.stderr
    found = re.search(r"decoded\s+(\d+) tokens in\s+([\d.]+) seconds, speed:\s+([\d.]+) t/s", text)
    drafted = re.search(r"n_drafted\s*=\s*(\d+)", text)
    accepted = re.search(r"n_accept\s*=\s*(\d+)", text)
    if res.returncode != 0 or not found:
        raise RuntimeError(f"llama-speculative-simple failed ({res.returncode}): {text[-1500:]}")
    return {
        "tok_s": float(found.group(3)),
        "generated": int(found.group(1)),
        "acceptance": int(accepted.group(1)) / max(1, int(drafted.group(1)))
        if drafted and accepted
        else None,
    }


def versus(
    target: Path, draft: Path, k_values: list[int], tokens: int, reps: int, ctx: int, llama_bin: Path | None
) -> dict[str, Any]:
    """Tandem and llama.cpp alternated: for each K, Tandem, llama.cpp, Tandem, llama.cpp..."""
    from tandem.engine import LoadOptions, ModelPair

    out: dict[str, Any] = {"tandem": {}, "llama.cpp": {}}
    with ModelPair.load(target, draft, LoadOptions(n_ctx=ctx)) as pair:
        out["tandem"]["alone"] = tandem_runs(pair, [], tokens, reps)["alone"]
        for k in k_values:
            tandem, llama = [], []
            for _ in range(reps):
                tandem += tandem_runs(pair, [k], tokens, 1)[f"K{k}"]
                if llama_bin is not None and (llama_bin / "llama-speculative-simple").exists():
                    try:
                        llama.append(llama_spec(llama_bin, target, draft, k, tokens, ctx))
                    except RuntimeError as exc:  # recorded; Tandem's rows stay
                        out.setdefault("llama.cpp errors", []).append(str(exc)[-600:])
            out["tandem"][f"K{k}"] = tandem
            if llama:
                out["llama.cpp"][f"K{k}"] = llama
                ratio = statistics.median(r["tok_s"] for r in tandem) / statistics.median(
                    r["tok_s"] for r in llama
                )
                out[f"K{k}_tandem_over_llama"] = ratio
    return out


def memory(target: Path, draft: Path, ctx: int) -> dict[str, Any]:
    from tandem.catalog.fit import files_fit
    from tandem.engine import LoadOptions, ModelPair
    from tandem.engine.llama.devices import gpu_memory

    before_smi, before_ggml = gpu_memory_used(), gpu_memory()
    estimate = files_fit(target, draft, ctx)
    with ModelPair.load(target, draft, LoadOptions(n_ctx=ctx)) as pair:
        prompt = pair.target.tokenize(PROMPT)
        pair.target.decode(prompt, "none")  # buffers sized by a real batch
        after_smi, after_ggml = gpu_memory_used(), gpu_memory()
    out: dict[str, Any] = {"context": ctx, "estimate_bytes": estimate.need_bytes, "fit": estimate.summary()}
    if before_smi is not None and after_smi is not None:
        used = (after_smi - before_smi) * 2**20
        out.update(nvidia_smi_used_bytes=used, estimate_over_used=estimate.need_bytes / max(1, used))
    if before_ggml is not None and after_ggml is not None:
        used = before_ggml[0] - after_ggml[0]
        out.update(backend_free_drop_bytes=used, estimate_over_free_drop=estimate.need_bytes / max(1, used))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--target", default="llama3.1-8b", help="a shape of model_files.LLAMA_SHAPES")
    ap.add_argument("--draft", default="llama3.2-1b")
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--ctx", type=int, default=4096)
    ap.add_argument("--budget-s", type=float, default=420.0, help="stop starting steps after this")
    ap.add_argument("--llama-bin", type=Path, help="llama.cpp's tools (llama-speculative-simple)")
    ap.add_argument(
        "--skip", default="", help="steps to leave out: plain, mechanics, serve, costs, versus, memory"
    )
    ap.add_argument("--plain-shapes", default="llama3.1-8b,qwen2.5-1.5b", help="shapes of the plain step")
    ap.add_argument("--clients", default="1,2,4,8", help="the serve step's client counts")
    ap.add_argument("--serve-runs", type=int, default=1, help="the serve step's runs (A/B alternated)")
    ap.add_argument("--serve-timeout-s", type=float, default=240.0, help="the serve step's time limit")
    args = ap.parse_args()

    import model_files
    from tandem.engine.llama.devices import local_gpus
    from tandem.engine.llama.model import ensure_backend

    rec = Recorder(args.out, args.budget_s)
    ensure_backend()
    rec.data["gpus"] = [d.label for d in local_gpus()]
    if shutil.which("nvidia-smi"):
        rec.data["nvidia_smi"] = subprocess.run(["nvidia-smi"], capture_output=True, text=True).stdout
    llama_bin = args.llama_bin if args.llama_bin and args.llama_bin.is_dir() else None
    rec.data["llama_bin"] = str(llama_bin) if llama_bin else "none: llama.cpp rows skipped"

    def write() -> dict[str, Any]:
        paths = {}
        for role, name in (("target", args.target), ("draft", args.draft)):
            path = model_files.shaped_llama(name, model_files.LLAMA_SHAPES[name])
            paths[role] = {"path": str(path), "bytes": path.stat().st_size}
        return paths

    files = rec.step("write models", write)
    if files is None:
        return 1
    target, draft = Path(files["target"]["path"]), Path(files["draft"]["path"])
    skip = set(args.skip.split(",")) if args.skip else set()
    shapes = [s for s in args.plain_shapes.split(",") if s]
    serve_json = args.out.with_name("serve-clients.json")
    # (in the order of what matters most, should the budget end first)
    steps: list[tuple[str, str, Callable[[], Any], float]] = [
        (
            "plain",
            "plain: target alone against llama-bench",
            lambda: plain(shapes, llama_bin, args.tokens, 3, args.ctx),
            30,
        ),
        (
            "mechanics",
            "mechanics: target drafting for itself",
            lambda: versus(target, target, [8], args.tokens, args.reps, args.ctx, llama_bin),
            60,
        ),
        (
            "serve",
            "serve: several clients",
            lambda: serve(
                target, draft, llama_bin, args.clients, 64, serve_json, args.serve_runs, args.serve_timeout_s
            ),
            90,
        ),
        ("costs", "costs", lambda: costs(target, draft, args.ctx), 30),
        (
            "versus",
            "target + draft",
            lambda: versus(target, draft, [4, 8, 16], args.tokens, 1, args.ctx, llama_bin),
            60,
        ),
        ("memory", "memory at 8k", lambda: memory(target, draft, 8192), 20),
    ]
    for key, name, fn, needs in steps:
        if key not in skip:
            rec.step(name, fn, needs_s=needs)
    rec.data["finished"] = time.strftime("%Y-%m-%d %H:%M:%S %Z")
    rec.save()
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
