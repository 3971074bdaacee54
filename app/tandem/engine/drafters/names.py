"""The drafter kinds' names, in one place (events, statistics and the cost model use them).

Each kind is described by its module's `SPEC` (registry.py lists them); this module holds only
the names, so that the cost model's defaults can name a kind without importing any drafter."""

from __future__ import annotations

MODEL = "model"  # a small draft model (model.py); the hybrid's rounds are its rounds too
LOOKUP = "lookup"  # prompt lookup (lookup.py)
MTP = "mtp"  # the target's own multi-token-prediction heads (mtp.py)
CROSS = "cross"  # a draft model of another tokenizer, its text re-encoded (cross.py)
EAGLE3 = "eagle3"  # an EAGLE-3 drafter beside the target (eagle3.py)
DFLASH = "dflash"  # a DFlash or DSpark block drafter beside the target (dflash.py)
