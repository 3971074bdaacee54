"""Tandem's speculative decoding engine on llama.cpp: its face, the one import of the front-ends
(cli, server, ui, bench; tests/test_layers.py holds them to it). No UI code lives here (no
Textual).

What needs llama.cpp's bindings (a loaded model, a pair) is imported when first asked for, so
the rest (configs, events, statistics, the drafter choices) imports without llama-cpp-python.
"""

from typing import TYPE_CHECKING, Any

from .config import (
    ADAPTIVE_K_MAX,
    DRAFT_MAX_LIMIT,
    FIXED_K,
    MAX_SEQUENCES,
    MAX_STOPS,
    MIN_CONTEXT,
    RPC_PORT_DEFAULT,
    DrafterChoice,
    GenerationConfig,
    LoadOptions,
    check_stops,
)
from .decoding.batch_costs import BatchCosts, batch_costs_from_json, batch_costs_to_json
from .decoding.costs import MeasuredCosts, mean_costs, measure_costs
from .decoding.speedup import SpeedupMeter, with_speedup
from .drafters.policy import AdaptivePolicy, CostModel, FixedPolicy, costs_from_json, costs_to_json
from .drafters.registry import AUTO as AUTO_DRAFTER
from .drafters.registry import across_tokenizers as drafter_across_tokenizers
from .drafters.registry import choices as drafter_choices
from .drafters.registry import label as drafter_label
from .drafters.registry import names as drafter_kinds
from .drafters.registry import own_heads as drafter_of_own_heads
from .drafters.registry import uses_draft_model
from .errors import (
    ContextOverflowError,
    GenerationError,
    IncompatiblePairError,
    ModelFileError,
    ModelLoadError,
    PromptCancelled,
    TandemError,
)
from .events import (
    DoneEvent,
    Event,
    GenerationStats,
    Origin,
    Part,
    PartStats,
    PrefillEvent,
    RoundEvent,
    StartEvent,
    StopReason,
    TokenEvent,
)
from .files.compat import check_pair, compatibility_problems
from .files.gguf_file import GGUFInfo, read_gguf
from .files.recurrence import describe as describe_state
from .files.recurrence import rollback_of, state_kind
from .files.small_files import UnusableFile, read_small_bytes, read_small_text
from .reasoning import REASONING, ReasoningFormat, ReasoningSplit, Thinking, think_from_variables
from .sampling import SamplerSettings
from .stats import DrafterStats, KindRounds, Tally
from .text.chat_template import RESERVED_VARIABLES, ChatMessage, ChatTemplateError
from .text.prompting import ChatPrompt

if TYPE_CHECKING:
    from .decoding.batch import BatchEngine
    from .decoding.inbox import SeqRequest
    from .llama.model import LoadedModel
    from .pair import ModelPair

# Names whose modules load llama.cpp's bindings: imported on first use (PEP 562).
_LAZY = {
    "LoadedModel": ".llama.model",
    "ModelPair": ".pair",
    "BatchEngine": ".decoding.batch",
    "SeqRequest": ".decoding.inbox",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value  # (found directly from now on)
    return value


__all__ = [
    "ADAPTIVE_K_MAX",
    "AUTO_DRAFTER",
    "DRAFT_MAX_LIMIT",
    "FIXED_K",
    "MAX_SEQUENCES",
    "MAX_STOPS",
    "MIN_CONTEXT",
    "REASONING",
    "RESERVED_VARIABLES",
    "RPC_PORT_DEFAULT",
    "AdaptivePolicy",
    "BatchCosts",
    "BatchEngine",
    "ChatMessage",
    "ChatPrompt",
    "ChatTemplateError",
    "ContextOverflowError",
    "CostModel",
    "DoneEvent",
    "DrafterChoice",
    "DrafterStats",
    "Event",
    "FixedPolicy",
    "GGUFInfo",
    "GenerationConfig",
    "GenerationError",
    "GenerationStats",
    "IncompatiblePairError",
    "KindRounds",
    "LoadOptions",
    "LoadedModel",
    "MeasuredCosts",
    "ModelFileError",
    "ModelLoadError",
    "ModelPair",
    "Origin",
    "Part",
    "PartStats",
    "PrefillEvent",
    "PromptCancelled",
    "ReasoningFormat",
    "ReasoningSplit",
    "RoundEvent",
    "SamplerSettings",
    "SeqRequest",
    "SpeedupMeter",
    "StartEvent",
    "StopReason",
    "Tally",
    "TandemError",
    "Thinking",
    "TokenEvent",
    "UnusableFile",
    "batch_costs_from_json",
    "batch_costs_to_json",
    "check_pair",
    "check_stops",
    "compatibility_problems",
    "costs_from_json",
    "costs_to_json",
    "describe_state",
    "drafter_across_tokenizers",
    "drafter_choices",
    "drafter_kinds",
    "drafter_label",
    "drafter_of_own_heads",
    "mean_costs",
    "measure_costs",
    "read_gguf",
    "read_small_bytes",
    "read_small_text",
    "rollback_of",
    "state_kind",
    "think_from_variables",
    "uses_draft_model",
    "with_speedup",
]
