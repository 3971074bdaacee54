#!/usr/bin/env python3
"""Decode speed through `tandem serve` (streaming, as a client receives it) against `tandem run`
on the same pair, prompts and settings, alternated in one invocation.

For each prompt and run, in alternating order:

* `tandem run --json` in a fresh process: its decode tokens/s (first round to last);
* one streaming request to a `tandem serve` started once: tokens/s as the client receives them,
  from the arrival of the first chunk with tokens to the last (the first chunk's tokens not
  counted), so the server's own costs (the event loop, JSON, SSE, the socket) are included.
  The server's own engine-side figure (usage.tandem.decode_tokens_per_s) is printed beside it.

Both run greedy with a fixed K (adaptive drafting follows measured timings, and the server's pair
keeps what it learnt across requests while each `tandem run` starts afresh), --threads 1.

    .venv/bin/python scripts/serve_bench.py                     # SmolLM2 F16 drafted by Q4_1
    .venv/bin/python scripts/serve_bench.py --runs 5 -n 256 -k 4
    .venv/bin/python scripts/serve_bench.py --target T.gguf --draft D.gguf
    .venv/bin/python scripts/serve_bench.py vs-run --runs 5     # the same, by its name

`clients`: throughput under concurrent clients, Tandem against llama.cpp's own llama-server.

    .venv/bin/python scripts/serve_bench.py clients [--pair smollm2|qwen|smollm2,qwen]
        [--clients 1,2,4,8] [--runs 2] [-n 64] [--requests 2]
        [--servers tandem,tandem-baseline,llama,llama-md] [--threads 2] [--slot-ctx 2048]
        [--llama-draft-max 8] [--tandem-drafter KIND] [--tandem-arg=ARG ...] [--spin S] [--json OUT]
        [--target T --draft D] [--llama-server PATH] [--gpu-layers N]

Pairs: smollm2 (SmolLM2-135M F16 drafted by its Q4_1), qwen (Qwen2.5-Coder 1.5B drafted by
0.5B, both Q4_K_M); or any two files, --target and --draft (the pair "files"). On a GPU,
--gpu-layers N goes to every server (tandem's --gpu-layers, llama-server's -ngl and -ngld), and
--llama-server names a llama-server built for it (scripts/device/: no build there).

For each pair, each N in --clients and each run, every server in turn (the
order reversed on odd runs, so drift hits all alike) is started alone for its N (one server
process at a time), warmed up with one short request (not counted), measured, then stopped:

* tandem: `tandem serve --target T --draft D --threads 2 --ctx 2048` as a user starts it (up to
  8 requests at once, each with a 2048-token context; `--tandem-parallel n` adds --parallel N;
  a tandem that predates --parallel is run without it, with a warning);
* tandem-baseline: the same with --baseline (the target alone);
* llama: llama.cpp's llama-server (scripts/llama_tools.py builds it), -np N slots of --slot-ctx
  tokens each (-c N * 2048 --no-kv-unified), -t 2 -tb 2, --no-webui;
* llama-md: the same drafted by D: -md D --spec-type draft-simple --spec-draft-n-max 8 -td 2
  -tbd 2 (this build loads -md but drafts only with a --spec-type).

A measurement: N client threads start together (a barrier), each sends --requests streaming
greedy chat requests one after another (max_tokens -n, prompts rotated by client and request).
Aggregate tok/s = all completion tokens (the final usage) / seconds from the barrier to the last
answer's end; per request, the time to the first content chunk (TTFT) and the time per token after
it ((last chunk - first chunk) / (tokens - 1)), their p50 and p95 over the measurement's requests.
Printed per pair: the median aggregate tok/s over runs per server and N, the ratios
tandem/tandem-baseline and tandem/max(llama, llama-md), then TTFT and per-token ms (the medians
over runs of each measurement's p50 and p95). A server that does not start, or a request that
fails, is one line and an error in the JSON; a measurement with errors stays out of the medians.
--json writes every measurement, the medians, the machine and the command line (rewritten after
each measurement). Wrap it in `flock` where other model work may share the machine.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import os
import platform
import queue
import re
import shlex
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

PROMPTS = [
    "Write a long story about a dragon who learns to write computer programs.",
    "Explain in detail how a refrigerator works.",
    "Write a Python function that parses a CSV file and sums each column, with comments.",
    "Describe the history of the printing press.",
]


def run_cli(models: list[str], settings: list[str], prompt: str) -> float:
    cmd = [sys.executable, "-m", "tandem.cli.main", "run", *models, *settings, "--json", prompt]
    stats = json.loads(subprocess.run(cmd, check=True, capture_output=True, cwd=ROOT).stdout)["stats"]
    return float(stats["decode_tokens_per_s"])


def start_server(models: list[str], settings: list[str]) -> tuple[subprocess.Popen[str], int]:
    cmd = [sys.executable, "-m", "tandem.cli.main", "serve", *models, *settings, "--port", "0"]
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    assert proc.stderr is not None
    for line in proc.stderr:
        m = re.search(r"http://127\.0\.0\.1:(\d+)/v1", line)
        if m:
            return proc, int(m.group(1))
    raise SystemExit("tandem serve did not start")


def stream_once(port: int, prompt: str, n: int) -> tuple[float, float]:
    """One streaming chat request: (client-side decode tokens/s, the server's own figure)."""
    body = {"messages": [{"role": "user", "content": prompt}], "max_tokens": n, "stream": True}
    body["stream_options"] = {"include_usage": True}
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    conn.request("POST", "/v1/chat/completions", json.dumps(body), {"Content-Type": "application/json"})
    resp = conn.getresponse()
    first_t = last_t = 0.0
    first_n = total = 0
    usage: dict[str, Any] = {}
    for raw in resp:
        line = raw.strip()
        if not line.startswith(b"data: ") or line == b"data: [DONE]":
            continue
        chunk = json.loads(line[6:])
        tokens = len(chunk.get("tandem", {}).get("tokens", []))
        if tokens:
            now = time.perf_counter()
            if not first_t:
                first_t, first_n = now, tokens
            last_t = now
            total += tokens
        if chunk.get("usage"):
            usage = chunk["usage"]
    conn.close()
    client = (total - first_n) / (last_t - first_t) if last_t > first_t else 0.0
    return client, float(usage["tandem"]["decode_tokens_per_s"])


def vs_run(argv: list[str]) -> None:
    """The `vs-run` mode (the default): `tandem serve` as received against `tandem run`."""
    parser = argparse.ArgumentParser(
        prog="serve_bench.py [vs-run]",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--target", type=Path)
    parser.add_argument("--draft", type=Path)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("-n", type=int, default=256)
    parser.add_argument("-k", type=int, default=4)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    if args.target is None:
        import model_files

        args.target, args.draft = model_files.smollm2("F16"), model_files.smollm2_q4_1()
    models = ["--target", str(args.target), *(["--draft", str(args.draft)] if args.draft else [])]
    settings = [
        "--threads",
        str(args.threads),
        "--no-adaptive",
        "--draft-max",
        str(args.k),
        "-n",
        str(args.n),
    ]

    proc, port = start_server(models, settings)
    cli: list[float] = []
    served: list[float] = []
    engine: list[float] = []
    try:
        stream_once(port, "Hello", 8)  # warm-up: first-use costs are not the server's steady state
        for r in range(args.runs):
            for i, prompt in enumerate(PROMPTS):
                order = ("cli", "serve") if (r + i) % 2 == 0 else ("serve", "cli")
                for who in order:
                    if who == "cli":
                        cli.append(run_cli(models, settings, prompt))
                    else:
                        c, e = stream_once(port, prompt, args.n)
                        served.append(c)
                        engine.append(e)
                print(
                    f"run {r + 1} prompt {i + 1}: tandem run {cli[-1]:6.1f} tok/s   "
                    f"serve (client) {served[-1]:6.1f}   (engine) {engine[-1]:6.1f}",
                    flush=True,
                )
    finally:
        proc.terminate()
        proc.wait(10)
    ratios = [s / c for s, c in zip(served, cli, strict=True)]
    print()
    print(
        f"median decode tok/s: tandem run {statistics.median(cli):.1f}, tandem serve as received "
        f"{statistics.median(served):.1f} (engine inside the server {statistics.median(engine):.1f})"
    )
    print(
        f"serve / run: median of pairwise ratios {statistics.median(ratios):.3f}, "
        f"ratio of medians {statistics.median(served) / statistics.median(cli):.3f} "
        f"({len(ratios)} pairs, goal >= 0.97)"
    )


# --- `clients`: throughput under concurrent clients -------------------------------------------

SERVERS = ("tandem", "tandem-baseline", "llama", "llama-md")
PAIRS = ("smollm2", "qwen")
START_TIMEOUT_S = 300.0
REQUEST_TIMEOUT_S = 600.0
# Whether this tandem knows `serve --parallel`: None until a server has been started with it.
_tandem_parallel: bool | None = None


class ServerFailed(RuntimeError):
    """A server did not start (its message is one line)."""


@dataclass
class Running:
    """A server process started for one measurement."""

    name: str
    proc: subprocess.Popen[str]
    port: int
    cmd: list[str]
    parallel: bool  # told to serve N requests at once (False: a tandem without --parallel)
    log: deque[str] = field(default_factory=lambda: deque(maxlen=40))
    log_file: Path | None = None

    def tail(self) -> str:
        lines = list(self.log)
        if self.log_file is not None and self.log_file.exists():
            lines = self.log_file.read_text(errors="replace").splitlines()[-40:]
        last = [ln.strip() for ln in lines if ln.strip()]
        return last[-1] if last else "(no output)"


def _stop(server: Running) -> None:
    """Terminate, then kill: never leave a server behind."""
    proc = server.proc
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(15)
    if server.log_file is not None:
        server.log_file.unlink(missing_ok=True)


def _start_tandem(
    name: str,
    target: Path,
    draft: Path | None,
    clients: int | None,
    threads: int,
    ctx: int,
    gpu_layers: int | None = None,
    drafter: str | None = None,
    extra: Sequence[str] = (),
) -> Running:
    """`tandem serve` on a free port (printed on its stderr, which a thread keeps draining)."""
    global _tandem_parallel
    # (The baseline server is "tandem-baseline"; "tandem" without a draft drafts alone.)
    models = ["--target", str(target), *(["--draft", str(draft)] if draft else [])]
    models += ["--baseline"] if name != "tandem" else ["--drafter", drafter] if drafter else []
    models += list(extra)
    base = [sys.executable, "-m", "tandem.cli.main", "serve", *models]
    base += ["--threads", str(threads), "--ctx", str(ctx), "--port", "0"]
    base += ["--gpu-layers", str(gpu_layers)] if gpu_layers is not None else []
    while True:
        parallel = _tandem_parallel is not False
        # clients None: tandem's own default (as many at once as memory holds, at most 8).
        cmd = [*base, *(["--parallel", str(clients)] if parallel and clients is not None else [])]
        proc = subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            cwd=ROOT,
        )
        server = Running(name, proc, 0, cmd, parallel)
        lines: queue.Queue[str | None] = queue.Queue()

        def drain(
            proc: subprocess.Popen[str] = proc,
            server: Running = server,
            lines: queue.Queue[str | None] = lines,
        ) -> None:
            assert proc.stderr is not None
            for line in proc.stderr:
                server.log.append(line)
                lines.put(line)
            lines.put(None)

        threading.Thread(target=drain, daemon=True).start()
        deadline = time.monotonic() + START_TIMEOUT_S
        try:
            while True:
                try:
                    line = lines.get(timeout=max(0.1, deadline - time.monotonic()))
                except queue.Empty:
                    raise ServerFailed(f"no port after {START_TIMEOUT_S:.0f} s") from None
                if line is None:
                    proc.wait(15)
                    text = "".join(server.log)
                    if parallel and "unrecognized arguments" in text and "--parallel" in text:
                        break  # this tandem predates --parallel: once more without it
                    raise ServerFailed(f"exited with {proc.returncode}: {server.tail()}")
                m = re.search(r"http://127\.0\.0\.1:(\d+)/v1", line)
                if m:
                    server.port = int(m.group(1))
                    _tandem_parallel = parallel
                    return server
        except BaseException:
            _stop(server)
            raise
        _tandem_parallel = False
        print(
            "warning: `tandem serve` has no --parallel here: the tandem servers run without it "
            "(one request at a time)",
            flush=True,
        )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _llama_server() -> Path:
    """llama.cpp's llama-server, from tandem.bench.llama_tools (built once, then cached)."""
    from tandem.bench.llama_tools import build

    return build("llama-server")["llama-server"]


def _llama_args(
    target: Path,
    draft: Path | None,
    clients: int,
    threads: int,
    slot_ctx: int,
    draft_max: int,
    gpu_layers: int | None = None,
) -> list[str]:
    """llama-server's flags: N slots of slot_ctx tokens each (-c is the total, split over the
    slots, the KV cache not unified as it is by default only with -np auto), no web UI; with a
    draft, plain draft-model speculation (this build loads -md but drafts only with
    --spec-type draft-simple) with the draft on the same threads."""
    args = ["-m", str(target), "-np", str(clients), "-c", str(clients * slot_ctx), "--no-kv-unified"]
    args += ["-t", str(threads), "-tb", str(threads), "--no-webui", "--host", "127.0.0.1"]
    args += ["-ngl", str(gpu_layers)] if gpu_layers is not None else []
    if draft is not None:
        args += ["-md", str(draft), "--spec-type", "draft-simple", "--spec-draft-n-max", str(draft_max)]
        args += ["-td", str(threads), "-tbd", str(threads)]
        args += ["-ngld", str(gpu_layers)] if gpu_layers is not None else []
    return args


def _start_llama(name: str, binary: Path, args: list[str]) -> Running:
    """llama-server on a free port, its log in a temporary file, ready once /health says 200."""
    port = _free_port()
    cmd = [str(binary), *args, "--port", str(port)]
    fd, log_name = tempfile.mkstemp(prefix=f"serve-bench-{name}-", suffix=".log")
    with os.fdopen(fd, "w") as log:
        proc = subprocess.Popen(
            cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, text=True
        )
    server = Running(name, proc, port, cmd, True, log_file=Path(log_name))
    deadline = time.monotonic() + START_TIMEOUT_S
    try:
        while True:
            if proc.poll() is not None:
                raise ServerFailed(f"exited with {proc.returncode}: {server.tail()}")
            if time.monotonic() > deadline:
                raise ServerFailed(f"/health not ready after {START_TIMEOUT_S:.0f} s")
            try:
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
                conn.request("GET", "/health")
                status = conn.getresponse().status
                conn.close()
                if status == 200:
                    return server
            except OSError:
                pass
            time.sleep(0.25)
    except BaseException:
        _stop(server)
        raise


# The figures a final usage chunk may carry about drafting, kept with each request: tandem's
# (usage.tandem) and llama-server's (timings).
_SERVER_STATS = {
    "tandem": ("mode", "drafter", "drafted", "accepted", "acceptance_rate", "decode_tokens_per_s"),
    "timings": ("predicted_per_second", "draft_n", "draft_n_accepted"),
}


def _request(port: int, prompt: str, n: int) -> dict[str, Any]:
    """One streaming greedy chat request, timed from the client: when it was sent, its first
    content chunk and last chunk arrived, it ended; its tokens from the final usage (content
    chunks counted where a server sends none)."""
    body: dict[str, Any] = {
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": n,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    sent = time.perf_counter()
    first = last = 0.0
    chunks = 0
    usage: dict[str, Any] = {}
    stats: dict[str, Any] = {}
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=REQUEST_TIMEOUT_S)
    try:
        conn.request("POST", "/v1/chat/completions", json.dumps(body), {"Content-Type": "application/json"})
        resp = conn.getresponse()
        if resp.status != 200:
            raise RuntimeError(f"HTTP {resp.status}: {resp.read(300).decode(errors='replace').strip()}")
        for raw in resp:
            line = raw.strip()
            if not line.startswith(b"data: ") or line == b"data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if "error" in chunk:
                raise RuntimeError(f"error in the stream: {json.dumps(chunk['error'])[:300]}")
            for choice in chunk.get("choices") or []:
                delta = choice.get("delta") or {}
                if delta.get("content") or delta.get("reasoning_content"):
                    now = time.perf_counter()
                    first = first or now
                    last = now
                    chunks += 1
            if chunk.get("usage"):
                usage = chunk["usage"]
            for key, names in _SERVER_STATS.items():
                source = (usage.get(key) if key == "tandem" else chunk.get(key)) or {}
                stats.update({k: source[k] for k in names if k in source})
    finally:
        conn.close()
    end = time.perf_counter()
    if not first:
        raise RuntimeError("no content in the answer")
    tokens = int(usage.get("completion_tokens", chunks))
    return {
        "tokens": tokens,
        "tokens_from": "usage" if "completion_tokens" in usage else "chunks",
        "sent": sent,
        "end": end,
        "total_s": end - sent,
        "ttft_s": first - sent,
        "per_token_s": (last - first) / (tokens - 1) if tokens > 1 else None,
        "server_stats": stats,
    }


def _percentile(values: list[float], q: float) -> float | None:
    """The q-th percentile (0..100), linearly interpolated between the closest ranks."""
    if not values:
        return None
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100
    lo = int(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def bench_prompts() -> list[str]:
    """The benchmark's standard set (assets/bench: chat, code, maths, qa, summarization,
    translation; five each), interleaved by category so that consecutive requests differ."""
    from tandem.bench.prompts import DEFAULT_PROMPTS, load_prompts

    found = load_prompts(sorted(DEFAULT_PROMPTS.glob("*.jsonl")))
    by: dict[str, list[str]] = {}
    for p in found:
        by.setdefault(p.category, []).append(p.text)
    rows = zip(*by.values(), strict=False)
    return [text for row in rows for text in row]


def _measure(port: int, clients: int, requests: int, n: int, prompts: list[str]) -> dict[str, Any]:
    """N client threads released together by a barrier, each sending its requests in turn."""
    results: list[list[dict[str, Any]]] = [[] for _ in range(clients)]
    released: list[float] = []
    barrier = threading.Barrier(clients, action=lambda: released.append(time.perf_counter()))

    def client(c: int) -> None:
        barrier.wait()
        for r in range(requests):
            index = (c * requests + r) % len(prompts)
            record: dict[str, Any] = {"client": c, "request": r, "prompt": index}
            try:
                record.update(_request(port, prompts[index], n))
            except Exception as e:
                record["error"] = f"{type(e).__name__}: {e}"
                record["end"] = time.perf_counter()
            results[c].append(record)

    threads = [threading.Thread(target=client, args=(c,), daemon=True) for c in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    t0 = released[0]
    done = [rec for recs in results for rec in recs]
    ok = [rec for rec in done if "error" not in rec]
    wall = max(rec["end"] for rec in done) - t0
    tokens = sum(rec["tokens"] for rec in ok)
    ttft = [rec["ttft_s"] for rec in ok]
    per_token = [rec["per_token_s"] for rec in ok if rec["per_token_s"] is not None]
    for rec in done:  # times from the barrier, not the process clock
        for key in ("sent", "end"):
            if key in rec:
                rec[key] = round(rec[key] - t0, 6)
    return {
        "wall_s": wall,
        "tokens": tokens,
        "tok_s": tokens / wall if wall > 0 else 0.0,
        "ttft_p50_s": _percentile(ttft, 50),
        "ttft_p95_s": _percentile(ttft, 95),
        "per_token_p50_s": _percentile(per_token, 50),
        "per_token_p95_s": _percentile(per_token, 95),
        "requests": done,
        "errors": [
            f"client {r['client']} request {r['request']}: {r['error']}" for r in done if "error" in r
        ],
    }


def pair_models(pair: str) -> tuple[Path, Path]:
    import model_files

    if pair == "smollm2":
        return Path(model_files.smollm2("F16")), Path(model_files.smollm2_q4_1())
    return Path(model_files.qwen_coder_1_5b()), Path(model_files.qwen_coder_0_5b())


def machine() -> dict[str, Any]:
    cpu = ""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    return {
        "platform": platform.platform(),
        "cpu": cpu or platform.processor(),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
    }


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1000:.1f}"


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def _medians(measurements: list[dict[str, Any]]) -> dict[str, dict[str, dict[str, Any]]]:
    """Per server and N: the medians over runs (measurements with errors left out)."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for m in measurements:
        if not m.get("errors") and "tok_s" in m:
            groups.setdefault((m["server"], str(m["clients"])), []).append(m)
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for (server, n), ok in groups.items():
        cell: dict[str, Any] = {"runs": len(ok)}
        for key in ("tok_s", "ttft_p50_s", "ttft_p95_s", "per_token_p50_s", "per_token_p95_s"):
            cell[key] = _median([m[key] for m in ok if m[key] is not None])
        out.setdefault(server, {})[n] = cell
    return out


def _print_table(pair: str, servers: list[str], ns: list[int], medians: dict[str, Any]) -> None:
    def cell(server: str, n: int, key: str) -> float | None:
        value: float | None = medians.get(server, {}).get(str(n), {}).get(key)
        return value

    width = max(len(s) for s in [*servers, "tandem/max(llama,llama-md)"]) + 2
    col = 14
    head = "".join(f"{f'N={n}':>{col}}" for n in ns)
    print(f"\n{pair}: aggregate tok/s (median over runs)")
    print(f"{'':<{width}}{head}")
    for s in servers:
        row = "".join(f"{'-' if (v := cell(s, n, 'tok_s')) is None else f'{v:.1f}':>{col}}" for n in ns)
        print(f"{s:<{width}}{row}")

    def ratio(n: int, others: list[str]) -> str:
        mine = cell("tandem", n, "tok_s")
        theirs = [v for o in others if (v := cell(o, n, "tok_s")) is not None]
        return "-" if mine is None or not theirs or max(theirs) <= 0 else f"{mine / max(theirs):.3f}"

    print(
        f"{'tandem/tandem-baseline':<{width}}"
        + "".join(f"{ratio(n, ['tandem-baseline']):>{col}}" for n in ns)
    )
    print(
        f"{'tandem/max(llama,llama-md)':<{width}}"
        + "".join(f"{ratio(n, ['llama', 'llama-md']):>{col}}" for n in ns)
    )
    for label, key in (("TTFT", "ttft"), ("per-token", "per_token")):
        print(f"\n{pair}: {label} ms, p50/p95 (medians over runs)")
        print(f"{'':<{width}}{head}")
        for s in servers:
            row = "".join(
                f"{_ms(cell(s, n, f'{key}_p50_s')) + '/' + _ms(cell(s, n, f'{key}_p95_s')):>{col}}"
                for n in ns
            )
            print(f"{s:<{width}}{row}")


def _write_json(path: Path | None, report: dict[str, Any]) -> None:
    if path is None:
        return
    part = path.with_name(path.name + ".part")
    part.write_text(json.dumps(report, indent=1) + "\n")
    part.replace(path)


def _int_list(text: str) -> list[int]:
    values = [int(v) for v in text.split(",") if v.strip()]
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError("a comma-separated list of positive integers")
    return values


def _name_list(choices: tuple[str, ...]) -> Any:
    def parse(text: str) -> list[str]:
        names = [v.strip() for v in text.split(",") if v.strip()]
        unknown = [v for v in names if v not in choices]
        if not names or unknown:
            raise argparse.ArgumentTypeError(f"a comma-separated list of {', '.join(choices)}")
        return names

    return parse


def clients_main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(
        prog="serve_bench.py clients",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--pair", type=_name_list(PAIRS), default=["smollm2"], help="smollm2, qwen or both")
    parser.add_argument("--clients", type=_int_list, default=[1, 2, 4, 8], help="the N to measure")
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("-n", type=int, default=64, help="max_tokens of each request")
    parser.add_argument("--requests", type=int, default=2, help="requests per client, one after another")
    parser.add_argument("--servers", type=_name_list(SERVERS), default=list(SERVERS))
    parser.add_argument("--threads", type=int, default=2, help="CPU threads of every server")
    parser.add_argument(
        "--prompts",
        choices=("four", "bench"),
        default="four",
        help="four: the four long-answer prompts above; bench: the benchmark's 30 (six categories)",
    )
    parser.add_argument(
        "--tandem-parallel",
        choices=("default", "n"),
        default="default",
        help="default: tandem serve as started without --parallel (up to 8 at once); n: --parallel N",
    )
    parser.add_argument("--slot-ctx", type=int, default=2048, help="context per client (llama-server's slot)")
    parser.add_argument("--tandem-drafter", help="tandem serve's --drafter (default: its own, auto)")
    parser.add_argument(
        "--tandem-arg", action="append", default=[], help="one more argument to tandem serve (repeatable)"
    )
    parser.add_argument("--llama-draft-max", type=int, default=8, help="llama-md's --spec-draft-n-max")
    parser.add_argument(
        "--spin",
        type=int,
        help="GOMP_SPINCOUNT for every server (default: libgomp's own, 300,000 pauses, as both "
        "Tandem and llama.cpp leave it); a spin given shows what the wait costs",
    )
    parser.add_argument("--json", type=Path, help="write every measurement and the medians here")
    parser.add_argument("--target", type=Path, help="a target file instead of --pair")
    parser.add_argument("--draft", type=Path, help="the draft file beside --target (none: it drafts alone)")
    parser.add_argument("--llama-server", type=Path, help="this llama-server instead of building one")
    parser.add_argument("--gpu-layers", type=int, help="layers on the GPU, for every server")
    args = parser.parse_args(argv)
    if args.draft is not None and args.target is None:
        parser.error("--draft goes with --target (alone: the target drafts with its heads or lookup)")
    if args.spin is not None:
        os.environ["GOMP_SPINCOUNT"] = str(args.spin)  # (every server started below inherits it)
    if args.runs < 1 or args.requests < 1 or args.n < 1:
        parser.error("--runs, --requests and -n must be at least 1")

    report: dict[str, Any] = {
        "command": shlex.join([sys.executable, *sys.argv]),
        "machine": machine(),
        "settings": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "pairs": {},
    }
    llama_binary: Path | None = None
    llama_error = ""
    if args.llama_server is not None:
        llama_binary = args.llama_server
    elif any(s.startswith("llama") for s in args.servers):
        try:
            llama_binary = _llama_server()
        except Exception as e:
            llama_error = f"llama-server could not be built: {type(e).__name__}: {e}"
            print(llama_error, flush=True)
    prompts = PROMPTS if args.prompts == "four" else bench_prompts()
    report["prompts"] = prompts
    pairs = ["files"] if args.target is not None else args.pair
    for pair in pairs:
        target, draft = (args.target, args.draft) if pair == "files" else pair_models(pair)
        entry: dict[str, Any] = {"target": str(target), "draft": str(draft), "measurements": []}
        report["pairs"][pair] = entry
        print(f"{pair}: target {target.name}, draft {draft.name if draft else 'none'}", flush=True)
        for n in args.clients:
            for run in range(args.runs):
                order = args.servers if run % 2 == 0 else args.servers[::-1]
                for name in order:
                    m: dict[str, Any] = {"server": name, "clients": n, "run": run}
                    entry["measurements"].append(m)
                    where = f"{pair} N={n} run {run + 1} {name}"
                    try:
                        if name.startswith("tandem"):
                            # --ctx is each sequence's with --parallel (the whole with one).
                            ctx = (
                                args.slot_ctx
                                if _tandem_parallel is not False
                                else max(4096, n * args.slot_ctx)
                            )
                            dr = draft if name == "tandem" else None
                            asked = n if args.tandem_parallel == "n" else None
                            server = _start_tandem(
                                name,
                                target,
                                dr,
                                asked,
                                args.threads,
                                ctx,
                                args.gpu_layers,
                                args.tandem_drafter,
                                args.tandem_arg,
                            )
                        else:
                            if llama_binary is None:
                                raise ServerFailed(llama_error)
                            dr = draft if name == "llama-md" else None
                            flags = _llama_args(
                                target,
                                dr,
                                n,
                                args.threads,
                                args.slot_ctx,
                                args.llama_draft_max,
                                args.gpu_layers,
                            )
                            server = _start_llama(name, llama_binary, flags)
                    except ServerFailed as e:
                        m["errors"] = [f"did not start: {e}"]
                        print(f"{where}: did not start: {e}", flush=True)
                        _write_json(args.json, report)
                        continue
                    m["server_cmd"] = shlex.join(server.cmd)
                    m["parallel"] = server.parallel
                    try:
                        try:
                            _request(server.port, "Hello", 8)  # warm-up: not counted
                        except Exception as e:
                            print(f"{where}: the warm-up request failed: {e}", flush=True)
                        m.update(_measure(server.port, n, args.requests, args.n, prompts))
                    except Exception as e:
                        m["errors"] = [f"the measurement failed: {type(e).__name__}: {e}"]
                    finally:
                        if server.proc.poll() is not None:
                            m.setdefault("errors", []).append(
                                f"the server exited with {server.proc.returncode}"
                            )
                        _stop(server)
                    for error in m.get("errors", []):
                        print(f"{where}: {error}", flush=True)
                    _write_json(args.json, report)
                    if "tok_s" not in m:
                        continue
                    print(
                        f"{where}: {m['tok_s']:7.1f} tok/s ({m['tokens']} tokens in {m['wall_s']:.2f} s)  "
                        f"TTFT p50/p95 {_ms(m['ttft_p50_s'])}/{_ms(m['ttft_p95_s'])} ms  "
                        f"per token p50/p95 {_ms(m['per_token_p50_s'])}/{_ms(m['per_token_p95_s'])} ms",
                        flush=True,
                    )
        entry["medians"] = _medians(entry["measurements"])
        _print_table(pair, args.servers, args.clients, entry["medians"])
        if any(m.get("parallel") is False for m in entry["measurements"]):
            print("(the tandem servers ran without --parallel: one request at a time)")
        report["tandem_parallel"] = _tandem_parallel
        _write_json(args.json, report)
    if args.json is not None:
        print(f"\nwrote {args.json}")


def main() -> None:
    argv = sys.argv[1:]
    if argv[:1] == ["clients"]:
        clients_main(argv[1:])
    elif argv[:1] == ["vs-run"]:
        vs_run(argv[1:])
    else:
        vs_run(argv)


if __name__ == "__main__":
    main()
