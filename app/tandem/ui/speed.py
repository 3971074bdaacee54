"""The target-alone speed each pair is compared against, per pair, on this machine.

The speedup on screen is speculative tokens/s over the target's tokens/s alone. The reference
comes from one of two places, and the screen always says which:

* an estimate right after loading: `measure_costs` times single target steps (a ~1 s
  calibration, 9 timed steps); one step = one token when the target decodes alone, so
  1 / step time is its speed (it slightly flatters the target: the sampling between steps is
  not timed, so the speedup shown is, if anything, a little low);
* a measurement: the demo screen runs the target alone on a real prompt; its decode
  tokens/s replaces the estimate and is kept.

Both are saved per pair in the user data directory, so a measured figure survives restarts.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

from tandem.engine import ModelPair
from tandem.engine.costs import measure_costs
from tandem.ui.storage import read_json, update_json

CALIBRATION_REPS = 9
# Timing happens after a prompt of this many tokens: a typical chat turn's position.
CALIBRATION_CONTEXT = 160
_CALIBRATION_TEXT = (
    "Speculative decoding lets a small draft model propose several tokens that a larger "
    "target model then checks in a single batched forward pass; every accepted guess saves "
    "one full step of the large model, and the output stays exactly the target's own. "
)


@dataclass(frozen=True)
class SpeedReference:
    tokens_per_s: float
    source: Literal["estimate", "measured"]
    how: str  # shown next to the speedup, e.g. "estimate: 9 timed target steps"
    when: float

    @classmethod
    def from_json(cls, d: object) -> SpeedReference | None:
        if not isinstance(d, dict):
            return None
        try:
            tps = float(d["tokens_per_s"])
            source = d["source"]
            when = float(d.get("when") or 0.0)
            # A hand edit or another tool can write Infinity, NaN or 1e999: not a speed.
            if not (0 < tps < math.inf and math.isfinite(when)) or source not in ("estimate", "measured"):
                return None
            return cls(tps, source, str(d.get("how") or source), when)
        except (KeyError, TypeError, ValueError, OverflowError):
            return None


class SpeedStore:
    """speeds.json: pair key -> SpeedReference."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def _all(self) -> dict[str, object]:
        data = read_json(self.path)
        return data if isinstance(data, dict) else {}

    def get(self, key: str) -> SpeedReference | None:
        return SpeedReference.from_json(self._all().get(key))

    def put(self, key: str, ref: SpeedReference) -> None:
        """Save `ref` for `key`, keeping the other pairs' figures, also those another instance
        of the app saves at the same moment. Raises OSError when speeds.json cannot be read or
        written (it is then left as it was)."""

        def change(data: Any) -> dict[str, Any]:
            new: dict[str, Any] = dict(data) if isinstance(data, dict) else {}
            new[key] = asdict(ref)
            return new

        update_json(self.path, change)


def calibrate(pair: ModelPair, reps: int = CALIBRATION_REPS, *, greedy: bool = True) -> SpeedReference:
    """Estimate the target's speed alone from timed single steps, taken as the chat will take
    them (`greedy`: the argmax in llama.cpp's graph). Call with the pair's lock held: it decodes
    on both models (their caches are left consistent; a pair without a draft model: the target)."""
    tokens = pair.raw_prompt(_CALIBRATION_TEXT)
    context = (tokens * (1 + CALIBRATION_CONTEXT // max(1, len(tokens))))[:CALIBRATION_CONTEXT]
    costs = measure_costs(pair.target, pair.draft, context, [2], reps=reps, greedy=greedy)
    return SpeedReference(
        1.0 / costs.target_step_s, "estimate", f"estimate: {reps} timed target steps", time.time()
    )


def measured(tokens_per_s: float, generated: int) -> SpeedReference:
    return SpeedReference(
        tokens_per_s, "measured", f"measured: target alone, {generated} tokens in the demo", time.time()
    )
