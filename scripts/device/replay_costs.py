#!/usr/bin/env python3
"""The GPU's measured costs (measure.py's `costs` step) as scripts/replay_policies.py reads them,
so that recorded acceptance traces predict what each policy gives on that GPU.

    python3 scripts/device/replay_costs.py gpu-measure.json --device "NVIDIA H200" > costs.json
    .venv/bin/python scripts/replay_policies.py --costs costs.json \
        --traces docs/results/qwen-coder-cpu-traces.json

The rows-copied path is taken (what the engine does on a GPU: model.LoadedModel.decode_greedy);
every cost is in units of one plain target step, as the replay wants them.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any


def convert(report: dict[str, Any], device: str, source: str) -> dict[str, Any]:
    # (one measure.py report, or several under "runs" as docs/results keeps them)
    reports = [report] if "steps" in report else list(report["runs"].values())
    steps = next(r["steps"] for r in reports if any(k.startswith("costs") for k in r["steps"]))
    costs = steps.get("costs") or next(v for k, v in steps.items() if k.startswith("costs"))
    m = costs["result"]["logits_copied"]
    step_ms = float(m["target_step_ms"])
    return {
        "machine": f"{device}, the measured shapes' target and draft, random weights, rows copied back",
        "source": f"{source}: steps.costs.result.logits_copied",
        "costs": {
            "c": float(m["c"]),
            "c_lookup": float(m["lookup_ms"]) / step_ms,
            "v": {str(n): float(v) for n, v in m["v"].items() if int(n) >= 2},
            "catchup": {str(n): float(ms) / step_ms for n, ms in m["draft_batch_ms"].items()},
        },
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("report", type=Path, help="measure.py's JSON")
    ap.add_argument("--device", default="a lent GPU", help="the device's name, for the record")
    args = ap.parse_args()
    try:
        report = json.loads(args.report.read_text())
        out = convert(report, args.device, str(args.report))
    except (OSError, ValueError, KeyError, StopIteration, TypeError) as exc:
        print(f"no costs in {args.report}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    json.dump(out, sys.stdout, indent=1)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
