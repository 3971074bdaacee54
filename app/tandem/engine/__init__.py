"""Tandem's speculative decoding engine on llama.cpp. No UI code lives here (no Textual)."""

from .chat_template import ChatMessage
from .compat import check_pair, compatibility_problems
from .config import DRAFT_MAX_LIMIT, DrafterChoice, GenerationConfig, LoadOptions
from .drafters.registry import AUTO as AUTO_DRAFTER
from .drafters.registry import choices as drafter_choices
from .drafters.registry import help_text as drafter_help
from .drafters.registry import label as drafter_label
from .errors import (
    ContextOverflowError,
    GenerationError,
    IncompatiblePairError,
    ModelFileError,
    ModelLoadError,
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
    TokenEvent,
)
from .gguf_file import GGUFInfo, read_gguf
from .model import LoadedModel
from .pair import ChatPrompt, ModelPair
from .reasoning import ReasoningFormat, ReasoningSplit, Thinking
from .sampling import SamplerSettings

__all__ = [
    "AUTO_DRAFTER",
    "DRAFT_MAX_LIMIT",
    "ChatMessage",
    "ChatPrompt",
    "ContextOverflowError",
    "DoneEvent",
    "DrafterChoice",
    "Event",
    "GGUFInfo",
    "GenerationConfig",
    "GenerationError",
    "GenerationStats",
    "IncompatiblePairError",
    "LoadOptions",
    "LoadedModel",
    "ModelFileError",
    "ModelLoadError",
    "ModelPair",
    "Origin",
    "Part",
    "PartStats",
    "PrefillEvent",
    "ReasoningFormat",
    "ReasoningSplit",
    "RoundEvent",
    "SamplerSettings",
    "StartEvent",
    "TandemError",
    "Thinking",
    "TokenEvent",
    "check_pair",
    "compatibility_problems",
    "drafter_choices",
    "drafter_help",
    "drafter_label",
    "read_gguf",
]
